"""Seeded fuzzing of weights.toml and weights.lock (issue 7): hundreds of mutated files, each
either read cleanly or refused with InvalidFileError (exit 4) naming a line; never another
exception (a traceback for the user). A lock that is accepted must also be usable by sync's
planner and by check without raising.

A seeded mutator rather than a fuzzing library: the same cases run on every machine, and a
failure names its seed, so it can be replayed with `-k <seed>`.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from wlock.cache.check import check_cache
from wlock.cache.sync import plan_sync
from wlock.errors import InvalidFileError
from wlock.lock.lockfile import read_lock
from wlock.lock.manifest import read_manifest

pytestmark = pytest.mark.newest_only(
    "wlock's own readers of its files, on tomllib (the standard"
    " library)")

ROOT = Path(__file__).resolve().parents[2]
LOCK_SEED = (ROOT / "weights.lock.example").read_text(encoding="utf-8")
MANIFEST_SEED = """\
# a manifest with every key
[[model]]
id = "acme/tiny-bert"
ref = "main"
include = ["*.json", "onnx/"]
exclude = ["*.bin"]

[[dataset]]
id = "acme/tiny-squad"
ref = "v1.0"

[tool.wlock]
lint = { exclude = ["tests/"] }
"""

# Tokens that have broken TOML readers and path handling before: escapes, NUL, traversal,
# absolute paths, huge and negative numbers, floats, deep nesting, duplicate keys, Unicode.
TOKENS = [
    '"../../../x"', '"/etc/passwd"', '"a\\u0000b"', '"\\\\"', "18446744073709551616",
    "-1", "1e400", "nan", "inf", "true", "[]", "{}", "[" * 5000, "{a=" * 3000, '"' + "a" * 300 + '"',
    '"refs/pr/1"', '"ma..in"', '"@{u}"', '"x.lock"', '"a//b"', '"ü/é"', '"\\ud800"',
    "\n[[model]]\n", "\n[[dataset]]\n", "\nversion = 1\n", '\nid = "x/y"\n', "=", ",",
    "\n", "#", "'", '"""', "0x10", "1979-05-27", '{ path = "a", size = 1, sha256 = "0" }',
    # Bytes that are not UTF-8 (surrogate escapes, written as the raw byte; one of these in a
    # path crashed every reader of the lock, a regression) and a name no filesystem takes.
    "\udcff", "\udcc3", "\udced\udca0\udc80", "\udc80", '"' + "é" * 128 + '"', "b" * 256,
]


_PAIR = re.compile(r'([A-Za-z][\w-]*)\s*=\s*("(?:[^"\\\n]|\\.)*"|[^,}\n]+)')


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 3)):
        lines = text.split("\n")
        choice = rng.choice((0, 1, 1, 1, 2, 3, 4, 5))
        if choice == 0 and text:  # replace a span with a token
            start = rng.randrange(len(text))
            text = text[:start] + rng.choice(TOKENS) + text[start + rng.randint(0, 12):]
        elif choice == 1:  # replace the value of one `key = value`, in a table or inline
            pairs = list(_PAIR.finditer(text))
            if pairs:
                pair = rng.choice(pairs)
                text = text[:pair.start(2)] + rng.choice(TOKENS) + text[pair.end(2):]
        elif choice == 2:  # duplicate a line
            index = rng.randrange(len(lines))
            lines.insert(index, lines[index])
            text = "\n".join(lines)
        elif choice == 3:  # swap two lines
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        elif choice == 4 and text:  # delete a span
            start = rng.randrange(len(text))
            text = text[:start] + text[start + rng.randint(1, 40):]
        else:  # flip characters
            chars = list(text)
            for _ in range(rng.randint(1, 4)):
                if chars:
                    chars[rng.randrange(len(chars))] = chr(rng.choice(
                        [0, 9, 10, 34, 39, 46, 47, 61, 91, 92, 93, 123, 125, 0x7F, 0xE9]))
            text = "".join(chars)
    return text


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    return path


def decodes(path: Path) -> bool:
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    return True


def refused_or_read(path: Path, read):  # type: ignore[no-untyped-def]
    try:
        return read(path)
    except InvalidFileError as e:
        assert e.line is not None, f"no line number: {e}"
        assert e.exit_code == 4
        return None


@pytest.mark.parametrize("seed", range(300))
def test_fuzzed_locks_are_read_or_refused_with_a_line(seed: int, tmp_path: Path) -> None:
    path = write(tmp_path / "weights.lock", mutate(LOCK_SEED, random.Random(seed)))
    lock = refused_or_read(path, read_lock)
    if decodes(path):
        # The reader of rendered locks (columns, no TOML parser for the file lists) accepts
        # and refuses exactly what the full reader does.
        full = refused_or_read(path, lambda p: read_lock(p, text=p.read_text(encoding="utf-8")))
        assert lock == full
    else:
        assert lock is None
    if lock is not None:
        cache = tmp_path / "cache"
        plan_sync(lock, cache)
        check_cache(lock, cache, jobs=1)
        assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.parametrize("seed", range(300))
def test_fuzzed_manifests_are_read_or_refused_with_a_line(seed: int, tmp_path: Path) -> None:
    path = write(tmp_path / "weights.toml", mutate(MANIFEST_SEED, random.Random(1000 + seed)))
    refused_or_read(path, read_manifest)


def test_the_mutator_mostly_produces_refusals(tmp_path: Path) -> None:
    """Guard against a mutator that only makes harmless edits: most cases must be refused."""
    refused = 0
    for seed in range(100):
        path = write(tmp_path / "weights.lock", mutate(LOCK_SEED, random.Random(seed)))
        refused += refused_or_read(path, read_lock) is None
    assert refused > 50


@pytest.mark.parametrize("seed", range(12))
def test_fuzzed_locks_through_the_command_line_never_show_a_traceback(
    seed: int, tmp_path: Path
) -> None:
    from tests.conftest import run_wlock

    project = tmp_path / "p"
    project.mkdir()
    (project / "weights.toml").write_text(MANIFEST_SEED, encoding="utf-8")
    write(project / "weights.lock", mutate(LOCK_SEED, random.Random(seed)))
    # Two cases in three with the cache path through a regular file (HF_HUB_CACHE or HF_HOME
    # set to one: a regression of the torture run, a traceback and exit 1, "bytes wrong").
    cache = tmp_path / "cache"
    env = {"HF_HUB_CACHE": str(cache)}
    if seed % 3:
        cache.write_text("not a folder\n")
        env = env if seed % 3 == 1 else {"HF_HOME": str(cache), "HF_HUB_CACHE": ""}
    for argv in (["sync", "--frozen", "--dry-run"], ["check"], ["status"], ["lock", "--check"]):
        result = run_wlock(*argv, cwd=project, env=env)
        assert "Traceback" not in result.stderr, (argv, result.stderr)
        assert result.code in (0, 1, 3, 4, 6), (argv, result.code, result.stderr)
        if result.code == 4:
            assert result.stderr.startswith(f"error: {project}/weights.lock:"), result.stderr
        if seed % 3 and argv[0] != "lock":
            assert result.code in (3, 4, 6), (argv, result.code, result.stderr)
        if result.code == 6:
            assert seed % 3 and result.stderr.startswith(f"error: the cache {cache}"), \
                result.stderr
