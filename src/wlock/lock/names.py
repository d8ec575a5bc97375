"""The one gate for every name that becomes a path: repo ids, refs, file paths.

A manifest, a lock and the Hub's listings are all input we do not control: a hand-edited lock
in a pull request must not make CI write or read outside the cache. Each name that turns into
a path (`models--org--name/`, `refs/<ref>`, `snapshots/<commit>/<path>`) passes one of these
functions first, in every reader. Each returns the problem in words, or None when the name is
safe, so that readers can report it with their own file, line and key.
"""

from __future__ import annotations

import re

# huggingface_hub's rule (utils/_validators.py, REPO_ID_REGEX): an optional namespace and a
# name of word characters, dots and dashes, each starting and ending with a word character,
# at most 96 characters; no "--" or "..", no ".git" at the end.
_REPO_ID = re.compile(r"^(?:\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b$")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
MAX_REF = 255
# NAME_MAX: the longest name of one file or folder ext4, XFS, btrfs, ZFS, APFS and NTFS take,
# in bytes (NTFS: UTF-16 units, never fewer than UTF-8's bytes for the same name).
MAX_NAME_BYTES = 255
# Linux's PATH_MAX: a path the kernel takes in one call. A file of a repo lives under
# `<cache>/datasets--org--name/snapshots/<commit>/`, which takes up to ~500 bytes of it.
PATH_MAX = 4096
MAX_PATH_BYTES = PATH_MAX - 512


def repo_id_problem(repo_id: str) -> str | None:
    """Why `repo_id` is not a Hub repo id (`org/name`), or None."""
    if not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id:
        return f"{repo_id!r} is not a Hub repo id (letters, digits, '-', '_', '.'; `org/name`)"
    if repo_id.endswith(".git"):
        return f"{repo_id!r} ends with .git"
    return None


def ref_problem(ref: str) -> str | None:
    """Why `ref` is not a name git accepts for a branch or tag (`git check-ref-format
    --allow-onelevel`), or None. A 40-hex commit passes too."""
    if not ref:
        return "empty ref"
    if len(ref) > MAX_REF:
        return f"ref longer than {MAX_REF} characters"
    if _CONTROL.search(ref):
        return f"{ref!r} holds a control character or a space"
    for bad in ("~", "^", ":", "?", "*", "[", "\\", "..", "@{", "//"):
        if bad in ref:
            return f"{ref!r} contains {bad!r}, which git does not allow in a ref"
    if ref == "@" or ref.startswith("/") or ref.endswith(("/", ".")):
        return f"{ref!r} is not a valid ref (git check-ref-format)"
    for part in ref.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return f"{ref!r}: a part of a ref cannot start with '.' or end with '.lock'"
    return None


def file_path_problem(path: str) -> str | None:
    """Why `path` would not stay inside a snapshot folder on every OS, or None."""
    if not path:
        return "empty file path"
    if "\x00" in path or "\\" in path or path.startswith("/"):
        return f"unsafe file path {path!r} (absolute, backslash or NUL)"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"unsafe file path {path!r} (empty, '.' or '..' part)"
    if len(path) > MAX_PATH_BYTES // 4 and len(path.encode()) > MAX_PATH_BYTES:
        return (f"file path {path[:60]!r}… is {len(path.encode())} bytes; a path in the cache "
                f"may have {MAX_PATH_BYTES} (PATH_MAX, {PATH_MAX}, less the cache's own "
                "folders)")
    for part in parts:
        if len(part) > MAX_NAME_BYTES // 4 and len(part.encode()) > MAX_NAME_BYTES:
            return (f"file path {path[:60]!r}… has a part of {len(part.encode())} bytes; no "
                    f"filesystem takes a name over {MAX_NAME_BYTES}")
    return None
