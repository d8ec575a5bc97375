"""The Hub's rate limits as it states them, shared by every request a command makes.

The live Hub answers every API and resolve request with the IETF draft's headers
(`RateLimit: "api";r=<left>;t=<seconds to reset>`, `RateLimit-Policy: "fixed window";"api";
q=<n>;w=<seconds>`), one budget per kind of request (`api`, `resolvers`, ...), and a 429 with
`r=0` and the reset in `t=`, often without `Retry-After`
(../shared/hub-recordings/transcribed_errors_and_ratelimit.json). A short backoff of our own
gives up seconds into a window of 300; so every request here first asks its budget, which
holds it while the Hub has said zero, and every answer tells the budget what is left. The
waits add up against one bound (`--rate-limit-wait`), past which the command ends with exit 5
naming the limit and when it resets.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from wlock.cancel import sleep as cancellable_sleep
from wlock.errors import RateLimitedError
from wlock.units import count

# The total a command may wait on the Hub's rate limits before giving up: a whole window of
# the Hub's anonymous API limit (300 s) twice over, so a lock or a sync that meets the limit
# once finishes, and one that would wait for an hour says so instead.
DEFAULT_MAX_WAIT = 900.0

# huggingface_hub's own patterns (utils/_http.py, parse_ratelimit_headers), for the releases
# before 1.2 that do not have the function.
_RATELIMIT = re.compile(r"\"(?P<kind>\w+)\"\s*;\s*r\s*=\s*(?P<r>\d+)\s*;\s*t\s*=\s*(?P<t>\d+)")
_POLICY = re.compile(r"q\s*=\s*(?P<q>\d+).*?w\s*=\s*(?P<w>\d+)")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """What one answer says of its budget."""

    kind: str  # "api", "resolvers", ...
    remaining: int
    reset_in: float  # seconds until the window starts again
    limit: int | None = None
    window: float | None = None


class HeaderFields(Protocol):
    """An answer's header fields looked up by name in any case (httpx's, or
    wlock.cache.engines.curl's)."""

    def get(self, key: str, /) -> str | None: ...


def parse_rate_limit(headers: HeaderFields) -> RateLimit | None:
    """The `RateLimit`/`RateLimit-Policy` headers of an answer, or None when it has none;
    through huggingface_hub's parser where the installed release has it (1.2 and later)."""
    fields = {"ratelimit": headers.get("RateLimit") or "",
              "ratelimit-policy": headers.get("RateLimit-Policy") or ""}
    if not fields["ratelimit"]:
        return None
    parse_ratelimit_headers = _library_parser()
    if parse_ratelimit_headers is None:  # huggingface_hub < 1.2: its own patterns, here
        match = _RATELIMIT.search(fields["ratelimit"])
        if match is None:
            return None
        policy = _POLICY.search(fields["ratelimit-policy"])
        return RateLimit(match["kind"], int(match["r"]), float(match["t"]),
                         int(policy["q"]) if policy else None,
                         float(policy["w"]) if policy else None)
    info = parse_ratelimit_headers(fields)
    if info is None:
        return None
    return RateLimit(info.resource_type, info.remaining, float(info.reset_in_seconds),
                     info.limit, None if info.window_seconds is None
                     else float(info.window_seconds))


@functools.cache
def _library_parser() -> Callable[..., Any] | None:
    """huggingface_hub's parse_ratelimit_headers, or None before 1.2 (looked up once: a sync
    asks for it at every answer)."""
    try:
        from huggingface_hub.utils._http import parse_ratelimit_headers
    except ImportError:
        return None
    return parse_ratelimit_headers


def route_of(url: str) -> str:
    """The Hub's name for the budget a request to `url` draws on before it has answered:
    file downloads are `resolvers`, the rest `api` (the kinds its headers name)."""
    return "resolvers" if "/resolve/" in urlsplit(url).path else "api"


class RateBudget:
    """One per command: what the Hub said is left of each budget, shared by its threads.

    `before(url)` holds a request while its budget is known to be empty; `after(url,
    status, headers)` learns from the answer, and for a 429 that states its budget spent says
    how long to wait. Waits are summed against `max_wait`; one that would pass it raises
    RateLimitedError (exit 5) at once, naming the limit and when it resets, rather than
    sleeping to fail. `on_wait(message)` shows each wait (the progress line)."""

    def __init__(self, max_wait: float = DEFAULT_MAX_WAIT, *,
                 on_wait: Callable[[str], None] | None = None,
                 sleep: Callable[[float], object] | None = None,
                 clock: Callable[[], float] = time.monotonic, authenticated: bool = False
                 ) -> None:
        self.max_wait = max_wait
        self.waited = 0.0
        self._on_wait = on_wait or (lambda message: None)
        # A wait the user's Ctrl-C or SIGTERM ends at once, in every thread (wlock.cancel).
        self._sleep = sleep or cancellable_sleep
        self._clock = clock
        self._authenticated = authenticated
        self._lock = threading.Lock()
        # kind -> (requests left, when the window resets (clock), its size)
        self._left: dict[str, tuple[int, float, int | None]] = {}
        self._blocked: dict[str, float] = {}  # kind -> until when nothing may be sent
        self._counted: dict[str, float] = {}  # kind -> until when the waits are counted
        self._kind_of: dict[str, str] = {}  # route_of(url) -> the kind the Hub names

    def kind_for(self, url: str) -> str:
        route = route_of(url)
        return self._kind_of.get(route, route)

    def before(self, url: str, what: str) -> None:
        """Hold a request while the budget of `url`'s kind is spent: the Hub said zero (or
        our own count of the requests sent since its last answer reached zero), until the
        window resets. So the Hub is not asked while it has said no, and a burst of threads
        stops at the limit instead of collecting 429s. Raises RateLimitedError when the wait
        would pass the bound."""
        kind = self.kind_for(url)
        while True:
            with self._lock:
                now = self._clock()
                delay = self._blocked.get(kind, 0.0) - now
                if delay <= 0:
                    left = self._left.get(kind)
                    if left is None or left[1] <= now:
                        return
                    remaining, reset, quota = left
                    if remaining > 0:
                        self._left[kind] = (remaining - 1, reset, quota)
                        return
                    self._blocked[kind] = reset
                    continue
            self._wait(kind, delay, what)

    def after(self, url: str, status: int, headers: HeaderFields, what: str
              ) -> float | None:
        """Learn from an answer. For a 429 that states its budget spent (`r=0`): the
        seconds until the Hub takes requests again (every thread of this budget waits them
        out in `before`, and the retry costs no attempt); else None."""
        stated = parse_rate_limit(headers)
        kind = self.kind_for(url)
        with self._lock:
            now = self._clock()
            if stated is not None:
                self._kind_of[route_of(url)] = stated.kind
                kind = stated.kind
                self._left[kind] = (stated.remaining, now + stated.reset_in, stated.limit)
            if status != 429:
                if stated is not None and stated.remaining <= 0:
                    self._blocked[kind] = max(self._blocked.get(kind, 0.0),
                                              now + stated.reset_in)
                return None
            if stated is None or stated.remaining > 0:
                # A 429 that states no spent budget is not this kind of limit: the caller
                # retries it as any transient failure, a bounded number of times.
                return None
            # A window that resets "now" still needs a moment: the next second.
            retry_after = _seconds(headers.get("Retry-After"))
            wait = max(stated.reset_in, retry_after or 0.0, 1.0)
            self._blocked[kind] = max(self._blocked.get(kind, 0.0), now + wait)
            return wait

    def _wait(self, kind: str, delay: float, what: str) -> None:
        """Sleep `delay` for `kind`'s budget. The bound counts the time the command waits,
        not each thread's: threads held together for one reset count (and show) it once."""
        with self._lock:
            until = self._clock() + delay
            fresh = until > self._counted.get(kind, 0.0) + 0.5
            if fresh:
                counted = until - max(self._clock(), self._counted.get(kind, 0.0))
                if self.waited + counted > self.max_wait:
                    raise self.exhausted(kind, delay, what)
                self.waited += counted
                self._counted[kind] = until
        if fresh and delay >= 1:
            self._on_wait(f"rate limited by the Hub ({kind}): resuming in {delay:.0f} s")
        self._sleep(delay)

    def exhausted(self, kind: str, delay: float, what: str) -> RateLimitedError:
        limit = self._left.get(kind)
        quota = f" ({count(limit[2], 'request')} a window)" if limit and limit[2] else ""
        token = ("" if self._authenticated else
                 "; an authenticated token gets higher limits (set HF_TOKEN or pass --token)")
        return RateLimitedError(
            f"{what}: the Hub's {kind!r} rate limit{quota} is spent and resets in "
            f"{delay:.0f} s, past the wait allowed (--rate-limit-wait {self.max_wait:g}, "
            f"{self.waited:.0f} s waited already)",
            hint=f"Raise --rate-limit-wait (or WLOCK_RATE_LIMIT_WAIT), or retry after "
            f"the reset{token}.")


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None  # an HTTP-date: the RateLimit header or our own pause decides
