"""Fault injection for the emulator, set by tests over `POST /_emulator/faults`.

    {"latency_ms": 50,                       # added before every request on both listeners
     "tree_page_size": 100,                  # smaller pages to exercise Link pagination
     "siblings_cap": 1000,                   # repo info lists at most this many siblings
     "siblings_sizes": false,                # ... each blobId without its size (a mirror)
     "tree_paging": "ignore_cursor",         # a mirror's broken pager: "ignore_cursor" (the
                                             # first page again), "foreign_link" (its next
                                             # page named on another host), "loop" (its
                                             # next page the first again: a Link loop)
     "tree_hide": ["data/x.parquet"],        # paths the tree listing leaves out (a stale one)
     "rate_limits": {"api": {"q": 500, "w": 300}, "resolvers": {"q": 3000, "w": 300}},
     "bridge_limit": 400 * 10**9,            # the bridge answers 400 above this size
     "xet_token": {"origin": "cdn", "seconds": 3},  # the xet-auth link on another origin
                                             # (the CDN's), and read tokens that expire soon
     "lfs_served": "hub",                    # LFS files' bytes answered on /resolve/ itself,
                                             # no redirect to the CDN (a mirror's or a proxy's way)
     "link": {"mb_per_s": 20, "delay_ms": 20, "reset_every": 0, "listener": "cdn",
              "burst_kb": 0, "ramp_ms": 0, "total_mb_per_s": 0},  # see Link
     "rules": [{"match": "/resolve/", "method": "GET", "listener": "hub", "times": 2,
                "action": "status", "status": 429, "retry_after": 1}]}

Actions: `status` (with `status`, optional `error_code`, `retry_after`, `location`: a
redirect's Location header, sent as given, so "?moved=1" points at the same path, and
`body_bytes`: a body of that many bytes, 10**15 for an endless one), `truncate` (send
`bytes` of the body, then drop the connection), `stall` (send `bytes`, then hold the
connection silent for `seconds`, default 600), `corrupt` (flip one byte of the body),
`drop` (close the connection without answering), `delay` (`delay_ms`), `trickle` (the body a
byte every `interval` seconds, default 0.5), `range` (a request
with a Range header answered wrongly, by `mode`: `short`, `wrong`, `total`, `bare`, `ignore`
or `decoy` with
`data_b64`; see _Handler._send_bad_range in server.py),
`inject_file` (add `name` to every file listing of the matched repo: a malicious listing), and
`raw` (`data_b64` sent as the whole answer, byte for byte; `repeat_every` seconds apart for
`seconds`; the connection closed after, unless `keep_open`: hostile framing).
A rule with `times` fires that many times, then stops; without it, it fires forever. With
`every: N` it fires on every N-th matching request only (2: a flaky link failing one in two).
`match` is searched in the URL's path; `query`, when given, must also be found in its query
string (`"query": "^$"`: only requests without one).
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

ACTIONS = frozenset(
    {"status", "truncate", "stall", "corrupt", "drop", "delay", "inject_file", "range",
     "trickle", "raw"}
)


@dataclass
class Rule:
    action: str
    match: re.Pattern[str]
    method: str | None = None
    listener: str | None = None
    times: int | None = None
    query: re.Pattern[str] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    every: int = 1  # fire on every `every`-th matching request (2: one in two)
    seen: int = 0

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Rule:
        action = raw["action"]
        if action not in ACTIONS:
            raise ValueError(f"unknown fault action {action!r}")
        known = {"action", "match", "method", "listener", "times", "query", "every"}
        return cls(
            action=action,
            match=re.compile(raw.get("match", "")),
            method=raw.get("method"),
            listener=raw.get("listener"),
            times=raw.get("times"),
            query=re.compile(raw["query"]) if "query" in raw else None,
            params={k: v for k, v in raw.items() if k not in known},
            every=max(1, int(raw.get("every", 1))),
        )


@dataclass
class Link:
    """A shaped link (off by default), as a CDN and a long path shape one. Each of its models
    alone or together (1 MB = 10^6 bytes):

    - per connection: every response's body paced to `mb_per_s` (many connections together
      get many times that, as from a CDN that shapes each);
    - burst then pace: the first `burst_kb` of each body unpaced, the rest at `mb_per_s`;
    - slow start: each body's rate ramps from a tenth of `mb_per_s` to all of it over its
      first `ramp_ms` (a new connection's congestion window growing);
    - aggregate: all the listener's bodies in flight share `total_mb_per_s` (a host's cap:
      more connections get no more);
    - every request waits `delay_ms` before it is answered (a round trip), and every
      `reset_every`-th body is cut mid-way (a reset). `listener`: "hub" or "cdn" only."""

    mb_per_s: float = 0.0
    delay_ms: float = 0.0
    reset_every: int = 0
    listener: str | None = None
    burst_kb: float = 0.0
    ramp_ms: float = 0.0
    total_mb_per_s: float = 0.0
    _bodies: int = 0
    _free_at: float = 0.0  # when the aggregate cap has sent what was asked of it

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Link:
        unknown = set(raw) - {"mb_per_s", "delay_ms", "reset_every", "listener", "burst_kb",
                              "ramp_ms", "total_mb_per_s"}
        if unknown:
            raise ValueError(f"unknown link settings {sorted(unknown)}")
        return cls(mb_per_s=float(raw.get("mb_per_s", 0)), delay_ms=float(
            raw.get("delay_ms", 0)), reset_every=int(raw.get("reset_every", 0)),
            listener=raw.get("listener"), burst_kb=float(raw.get("burst_kb", 0)),
            ramp_ms=float(raw.get("ramp_ms", 0)),
            total_mb_per_s=float(raw.get("total_mb_per_s", 0)))

    def shaped(self) -> bool:
        return bool(self.mb_per_s or self.total_mb_per_s)

    def stream_wait(self, sent: int, elapsed: float) -> float:
        """How long a body that has sent `sent` bytes in `elapsed` seconds waits before its
        next piece, for its own connection's cap (burst, then the ramp's rate)."""
        rate = self.mb_per_s * 1e6
        paced = sent - self.burst_kb * 1000
        if not rate or paced <= 0:
            return 0.0
        if self.ramp_ms:
            # Under a linear ramp from rate/10 over T, the bytes sent by t are
            # rate*(t/10 + 0.45 t^2/T) until T: the time that reaches `paced`, solved.
            ramp = self.ramp_ms / 1000
            in_ramp = rate * (0.1 * ramp + 0.45 * ramp)
            if paced <= in_ramp:
                a, b = 0.45 * rate / ramp, 0.1 * rate
                due = (-b + math.sqrt(b * b + 4 * a * paced)) / (2 * a)
            else:
                due = ramp + (paced - in_ramp) / rate
        else:
            due = paced / rate
        return max(0.0, due - elapsed)

    def take(self, n: int, now: float) -> float:
        """The aggregate cap's share: `n` bytes queued behind every other body's (the
        caller holds the lock); how long the sender waits before sending them."""
        if not self.total_mb_per_s:
            return 0.0
        start = max(now, self._free_at)
        self._free_at = start + n / (self.total_mb_per_s * 1e6)
        return start - now

    def applies(self, listener: str) -> bool:
        return self.listener in (None, listener)

    def reset_now(self) -> bool:
        """Whether this body is the one in `reset_every` to cut (counted across threads by
        the caller's lock)."""
        if not self.reset_every:
            return False
        self._bodies += 1
        return self._bodies % self.reset_every == 0


# The live Hub cuts `siblings` in repo info at 100,000 files (huggingface_hub #3059); under
# load it cuts earlier (#3565): tests set a lower cap to see both.
SIBLINGS_CAP = 100_000
# Budgets the emulator counts when a test sets none: the headers go out on every answer as
# the Hub's do, with windows large enough that a whole test session never meets them.
DEFAULT_RATE_LIMITS = {"api": (10**9, 300), "resolvers": (10**9, 300)}


class RateWindows:
    """The Hub's fixed-window budgets, one per kind (`api`, `resolvers`): each request takes
    one; past `q` in a window of `w` seconds it is refused until the window ends."""

    def __init__(self, limits: dict[str, tuple[int, int]]) -> None:
        self.limits = limits
        self._windows: dict[str, tuple[float, int]] = {}  # kind -> (window start, used)

    def take(self, kind: str, now: float) -> tuple[int, int, int, int, bool]:
        """(requests left, seconds to the reset, q, w, refused) for one more request."""
        q, w = self.limits.get(kind) or self.limits["api"]
        start, used = self._windows.get(kind, (now, 0))
        if now >= start + w:
            start, used = now, 0
        refused = used >= q
        if not refused:
            used += 1
        self._windows[kind] = (start, used)
        reset = max(0, math.ceil(start + w - now))
        return q - used, reset, q, w, refused


class Faults:
    """The fault configuration, shared by all request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.latency_ms = 0.0
        self.tree_page_size = 1000
        self.siblings_cap = SIBLINGS_CAP
        # False: repo info's siblings carry a blobId without its size (a mirror's way).
        self.siblings_sizes = True
        self.tree_paging: str | None = None
        self.tree_hide: frozenset[str] = frozenset()
        self.rates = RateWindows(DEFAULT_RATE_LIMITS)
        # The bridge (the plain-HTTP route to a Xet file: the CDN here) refuses files above
        # this many bytes, as the Hub's answers 400 above ~400 GB (huggingface_hub #4330);
        # the CAS serves them. None: no limit.
        self.bridge_limit: int | None = None
        # Where the resolve answer's xet-auth link points ("hub", or "cdn": another origin,
        # which must never see the Hub's token), and read tokens' lifetime (None: an hour).
        self.xet_auth_listener = "hub"
        self.xet_token_seconds: int | None = None
        # Where an LFS file's /resolve/ answer comes from: "cdn" (a redirect there, the Hub's
        # way) or "hub" (its bytes, on the Hub's own listener: a mirror's or a proxy's way).
        self.lfs_served = "cdn"
        self._rules: list[Rule] = []
        self.link = Link()

    def configure(self, raw: dict[str, Any]) -> None:
        rules = [Rule.from_json(r) for r in raw.get("rules", [])]
        with self._lock:
            self.latency_ms = float(raw.get("latency_ms", 0))
            self.tree_page_size = int(raw.get("tree_page_size", 1000))
            self.siblings_cap = int(raw.get("siblings_cap", SIBLINGS_CAP))
            self.siblings_sizes = bool(raw.get("siblings_sizes", True))
            paging = raw.get("tree_paging")
            if paging not in (None, "ignore_cursor", "foreign_link", "loop"):
                raise ValueError(f"unknown tree_paging {paging!r}")
            self.tree_paging = paging
            self.tree_hide = frozenset(str(p) for p in raw.get("tree_hide", ()))
            limits = dict(DEFAULT_RATE_LIMITS)
            for kind, budget in (raw.get("rate_limits") or {}).items():
                limits[str(kind)] = (int(budget["q"]), int(budget["w"]))
            self.rates = RateWindows(limits)
            limit = raw.get("bridge_limit")
            self.bridge_limit = None if limit is None else int(limit)
            xet_token = raw.get("xet_token") or {}
            self.xet_auth_listener = str(xet_token.get("origin", "hub"))
            if self.xet_auth_listener not in ("hub", "cdn"):
                raise ValueError(f"unknown xet_token origin {self.xet_auth_listener!r}")
            seconds = xet_token.get("seconds")
            self.xet_token_seconds = None if seconds is None else int(seconds)
            self.lfs_served = str(raw.get("lfs_served", "cdn"))
            if self.lfs_served not in ("hub", "cdn"):
                raise ValueError(f"unknown lfs_served {self.lfs_served!r}")
            self._rules = rules
            self.link = Link.from_json(raw.get("link") or {})

    def take(self, listener: str, method: str, path: str, actions: frozenset[str],
             query: str = "") -> Rule | None:
        """The first live rule among `actions` matching this request; counts one firing."""
        with self._lock:
            for rule in self._rules:
                if rule.action not in actions or rule.times == 0:
                    continue
                if rule.listener and rule.listener != listener:
                    continue
                if rule.method and rule.method != method:
                    continue
                if not rule.match.search(path):
                    continue
                if rule.query is not None and not rule.query.search(query):
                    continue
                rule.seen += 1
                if rule.seen % rule.every:
                    continue
                if rule.times is not None:
                    rule.times -= 1
                return rule
        return None

    def rate_take(self, kind: str) -> tuple[int, int, int, int, bool]:
        with self._lock:
            return self.rates.take(kind, time.monotonic())

    def injected_files(self, path: str) -> list[str]:
        with self._lock:
            return [
                str(r.params["name"]) for r in self._rules
                if r.action == "inject_file" and r.match.search(path)
            ]
