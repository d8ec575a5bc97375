"""Every failure a user can cause, each with the exit code of the command-line contract.

Only the CLI's ``main`` catches these; library callers get the typed exception with its fields.
"""

from __future__ import annotations

import re
from enum import IntEnum

_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#'\"<>]*)\?[^\s'\"<>)]*")


def redact(text: str) -> str:
    """`text` with the query string of every URL replaced by `?…`: a CDN's signed URL carries
    its credentials there, and no message, log or report of ours may show them."""
    return _QUERY.sub(r"\1?…", text)


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1
    USAGE = 2
    LOCK_STALE = 3
    INVALID_FILE = 4
    HUB = 5
    LOCAL = 6
    POLICY = 7


class WlockError(Exception):
    """Root of every expected failure: a message, a hint on what to do next, an exit code."""

    exit_code: ExitCode = ExitCode.CHECK_FAILED
    # The kind of failure in a --json error report; None: the kind of its exit code (so an
    # error that stands for several, as a sync's failed files, is the kind of its code).
    label: str | None = None
    # Given by code that fails many files for one reason (a dead endpoint, a stalled
    # server), so a report can say the reason once and list the files under it.
    cause: str | None
    subject: str | None  # the file or repo the failure is about

    def __init__(
        self, message: str, *, hint: str | None = None, cause: str | None = None,
        subject: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.cause = cause
        self.subject = subject

    def __str__(self) -> str:
        return self.message

    @property
    def kind(self) -> str:
        """What a script branches on: agrees with the exit code, as `hub` with 5."""
        return self.label or _KINDS[self.exit_code]


class CheckFailedError(WlockError):
    """Bytes missing or wrong: the cache is not what the lock says."""

    exit_code = ExitCode.CHECK_FAILED
    label = "check failed"


class UsageError(WlockError):
    exit_code = ExitCode.USAGE
    label = "usage"


class LockStaleError(WlockError):
    """The lock does not describe the manifest any more."""

    exit_code = ExitCode.LOCK_STALE
    label = "stale lock"


class InvalidFileError(WlockError):
    """A manifest or lock that cannot be used, located by file, line and key."""

    exit_code = ExitCode.INVALID_FILE
    label = "invalid file"

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        line: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = path if line is None else f"{path}:{line}"
        what = f"{where}: {problem}" if key is None else f"{where}: `{key}`: {problem}"
        super().__init__(what, hint=hint)
        self.path = path
        self.line = line
        self.key = key
        self.problem = problem


class HubError(WlockError):
    """The Hub could not serve a request."""

    exit_code = ExitCode.HUB
    label = "hub"

    def __init__(
        self, message: str, *, repo: str | None = None, hint: str | None = None,
        cause: str | None = None, subject: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint, cause=cause, subject=subject)
        self.repo = repo


class RepoNotFoundError(HubError):
    pass


class RevisionNotFoundError(HubError):
    pass


class GatedRepoError(HubError):
    pass


class RateLimitedError(HubError):
    pass


class HubUnreachableError(HubError):
    pass


class OfflineError(HubError):
    """The work needs the Hub and offline mode is on (--offline, HF_HUB_OFFLINE=1)."""


class UnsafePathError(HubError):
    """The Hub listed a file path that would escape the snapshot folder."""

    def __init__(self, repo: str, path: str, problem: str | None = None) -> None:
        """`problem`: what is wrong with it, in words (wlock.lock.names.file_path_problem)."""
        detail = problem or f"unsafe file path {path!r} (absolute, `..`, backslash or NUL)"
        super().__init__(
            f"{repo}: the Hub listed {'an' if detail.startswith('unsafe') else 'a'} {detail}; "
            "refusing to lock it",
            repo=repo,
            hint="Check the endpoint you are talking to; a real Hub never lists such a path.",
        )
        self.path = path


class ArchiveError(WlockError):
    """The archive (an object store) refused or could not be reached."""

    exit_code = ExitCode.HUB
    label = "archive"


class LocalError(WlockError):
    """This machine cannot do it: space, permissions, a read-only cache."""

    exit_code = ExitCode.LOCAL
    label = "local"


class UnsafeCacheError(LocalError):
    """A link or file sits where the cache needs a folder: writing there would leave the
    cache (a planted `snapshots/<commit>/onnx -> /etc`), so we stop instead."""

    def __init__(self, path: object, what: str, needs: str = "a folder of its own") -> None:
        why = ("nothing in a Hugging Face cache is a link to a folder"
               if needs == "a folder of its own" else f"the cache keeps {needs} there")
        super().__init__(
            f"{path} is {what} where the cache needs {needs}; wlock does not write through it",
            hint=f"Remove {path} ({why}), then run the command again.",
        )
        self.path = str(path)


class PolicyError(WlockError):
    """The project's policy ([tool.wlock.policy]) refuses what the lock holds: a pickle that
    imports what the policy does not allow, a licence outside its list, remote code that
    is not locked. Each violation is named (repo, file, import or licence)."""

    exit_code = ExitCode.POLICY
    label = "policy"


_KINDS = {
    ExitCode.CHECK_FAILED: CheckFailedError.label, ExitCode.USAGE: UsageError.label,
    ExitCode.LOCK_STALE: LockStaleError.label, ExitCode.INVALID_FILE: InvalidFileError.label,
    ExitCode.HUB: HubError.label, ExitCode.LOCAL: LocalError.label,
    ExitCode.POLICY: PolicyError.label,
}
