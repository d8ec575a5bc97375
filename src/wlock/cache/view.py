"""A per-project view of a shared cache, as a `.venv` is a view of uv's global cache.

`~/.cache/huggingface/hub` is shared by every project of a user, and `refs/main` there says
whatever the last sync of any project wrote. Under `wlock run`, HF_HUB_CACHE points at this
view instead: one folder per *locked* repo holding its own `refs/<ref>` (this project's
commit) and links to the shared cache's `snapshots/` and `blobs/`. So a bare-name
`from_pretrained("org/name")` loads this project's commit whatever the shared refs say, and
a repo that is in the shared cache but not in the lock is not there to load.

    <view>/models--org--name/
        refs/main          this project's commit
        snapshots -> <cache>/models--org--name/snapshots
        blobs     -> <cache>/models--org--name/blobs

huggingface_hub resolves `refs/main`, then `snapshots/<commit>/<path>`, whose relative link
`../../blobs/<etag>` the kernel follows from the snapshot's real folder, in the shared cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from wlock.atomic import temp_path_for
from wlock.cache.layout import follows_ref, repo_folder_name, swap_link
from wlock.models import Lock

VIEW_FOLDER = ".wlock"


def view_location(lock_path: Path, cache_dir: Path) -> Path:
    """Where the view of `lock_path` over `cache_dir` lives: `.wlock/hub-<hash>` beside the
    lock (git-ignored by its own .gitignore, as uv's .venv), or a folder of this user's in
    the temp directory when the project is read-only (a deploy image)."""
    project = lock_path.parent / VIEW_FOLDER
    key = hashlib.sha256(f"{lock_path.resolve()}\0{cache_dir.resolve()}".encode()).hexdigest()
    if os.access(lock_path.parent, os.W_OK) or os.access(project, os.W_OK):
        # One view per cache: a project synced into two caches gets two views.
        return project / f"hub-{key[:12]}"
    return Path(tempfile.gettempdir()) / f"wlock-{os.getuid()}" / "views" / key[:16]


def build_view(lock: Lock, cache_dir: Path, view: Path) -> Path:
    """Make `view` show exactly the locked repos of `cache_dir`, each at its locked commit.

    Idempotent and safe to run concurrently: each link and ref is replaced by a rename.
    Raises OSError when the view's folder cannot be written.
    """
    view.mkdir(parents=True, exist_ok=True)
    if view.parent.name == VIEW_FOLDER:
        ignore = view.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# made by wlock: a per-project view of the HF cache\n*\n")
    wanted = {repo_folder_name(r.kind, r.id): r for r in lock.repos}
    for name, repo in wanted.items():
        folder = view / name
        folder.mkdir(exist_ok=True)
        shared = cache_dir.resolve() / name
        for part in ("snapshots", "blobs"):
            _replace_link(folder / part, str(shared / part))
        refs = folder / "refs"
        keep = refs / repo.requested if follows_ref(repo) else None
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_path_for(keep)
            tmp.write_text(repo.revision, encoding="utf-8")
            os.replace(tmp, keep)
        for dirpath, _, names in os.walk(refs):  # an older lock's refs: only this one's stay
            for ref_name in names:
                # Dot names are a concurrent `wlock run`'s ref caught before its rename.
                if Path(dirpath, ref_name) != keep and not ref_name.startswith("."):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(Path(dirpath, ref_name))
    for entry in view.iterdir():
        if entry.name not in wanted and not entry.name.startswith("."):
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(entry)
    return view


def _replace_link(link: Path, target: str) -> None:
    with contextlib.suppress(OSError):
        if os.readlink(link) == target:
            return
    swap_link(link, target)
