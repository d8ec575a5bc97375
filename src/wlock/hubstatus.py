"""What the Hub's answers mean, shared by the metadata client (hub.py) and the transfers
(transfer.py): one table from status and `X-Error-Code` to a WlockError that says what to do,
and one backoff that honours `Retry-After`."""

from __future__ import annotations

import random

from wlock.errors import (
    GatedRepoError,
    HubError,
    RateLimitedError,
    RepoNotFoundError,
)
from wlock.models import RepoKind

MAX_RETRY_AFTER = 60.0
NEED_TOKEN = "set HF_TOKEN (or pass --token) with a token that has access"  # noqa: S105


def is_transient(status: int | None) -> bool:
    """429 and 5xx are worth retrying; every other answer is final."""
    return status is not None and (status == 429 or status >= 500)


def hub_error(
    status: int | None, code: str | None, *, kind: RepoKind, repo_id: str, endpoint: str,
    attempts: int, about: str | None = None, authenticated: bool = True,
) -> HubError:
    """The error for a final answer other than a missing revision or file (those depend on
    what the caller asked for, and the caller words them). `authenticated`: whether the
    request carried a token (a bare 401 means something else without one)."""
    where = f"{kind} {repo_id}"
    if status == 401 and code is None and not authenticated:
        # The live Hub's answer to an anonymous request for a repo that does not exist, is
        # private, or (for its files) gated: one bare 401 for all three.
        return RepoNotFoundError(
            f"{where} was not found on {endpoint}, or is private or gated: the Hub answers "
            "an anonymous request for any of these 401" + (f" (for {about!r})" if about else ""),
            repo=repo_id,
            hint=f"Check the id (its page on the Hub shows whether it exists, is private or is "
            f"gated); for a private or gated repo, {NEED_TOKEN}.")
    if code == "GatedRepo":
        return GatedRepoError(f"{where} is gated and the request was refused ({status})",
                              repo=repo_id, hint=f"Accept its terms on the Hub, then {NEED_TOKEN}.")
    if code == "RepoNotFound":
        return RepoNotFoundError(
            f"{where} was not found on {endpoint}", repo=repo_id,
            hint=f"Check the id in weights.toml; if the repo is private, {NEED_TOKEN}.",
        )
    if status == 429:
        return RateLimitedError(
            f"{where}: the Hub is rate limiting us (429) after {attempts} attempts",
            repo=repo_id,
            hint=f"Wait and retry; an authenticated token gets higher limits ({NEED_TOKEN}).",
        )
    suffix = f" for {about!r}" if about else ""
    if status in (401, 403):
        return HubError(f"{where}: unauthorized ({status}){suffix}", repo=repo_id,
                        hint=f"Your token may be invalid or expired: {NEED_TOKEN}.")
    return HubError(f"{where}: the Hub answered {status}{suffix}", repo=repo_id,
                    hint="Retry later; if it persists, check the endpoint's status.")


def retry_delay(attempt: int, retry_after: str | None) -> float:
    """Seconds to wait before attempt `attempt + 1`: Retry-After when the Hub gives seconds,
    else exponential backoff (0.25 s doubling, at most 8 s) with jitter."""
    if retry_after:
        try:
            return min(MAX_RETRY_AFTER, max(0.0, float(retry_after)))
        except ValueError:
            pass  # an HTTP-date: our own backoff is close enough
    base: float = min(8.0, 0.25 * 2 ** (attempt - 1))
    return base * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not security
