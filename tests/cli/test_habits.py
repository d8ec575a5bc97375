"""The command line's habits: shell completion of subcommands, flags and locked ids;
--no-progress; colour only where asked or on a terminal, never with NO_COLOR."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Hub, default_signals, random_weights, run_wlock, write_project
from wlock.cli.progress import BIG_FILE

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "weights.lock.example"


def complete(words: str, cwd: Path) -> list[str]:
    """What bash completion offers after `words` (the last word being typed)."""
    parts = words.split(" ")
    env = {**os.environ, "_WLOCK_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(parts) - 1)}
    done = subprocess.run([sys.executable, "-m", "wlock"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines() if "," in line]


def test_completion_offers_subcommands_flags_and_locked_ids(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "weights.lock").write_bytes(LOCK.read_bytes())
    assert {"sync", "status"} <= set(complete("wlock s", project))
    assert "--dry-run" in complete("wlock sync --d", project)
    assert complete("wlock revision acme/t", project) == [
        "acme/tiny-bert", "acme/tiny-lm", "acme/tiny-prompts", "acme/tiny-squad"]
    assert complete("wlock path ACME/TINY-B", project) == ["acme/tiny-bert"]
    bare = tmp_path / "no-lock"
    bare.mkdir()
    assert complete("wlock revision acme/", bare) == []  # no lock: no suggestion, no crash


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    done = run_wlock("completion", shell)
    assert done.code == 0 and "_WLOCK_COMPLETE" in done.stdout


def test_help_lists_every_command_and_a_command_imports_only_its_own() -> None:
    listed = run_wlock("--help").stdout.split("Commands:")[1].split("Start a project:")[0]
    names = re.findall(r"^  (\S+)  ", listed, re.MULTILINE)
    assert names == sorted(names) and {
        "init", "add", "remove", "lock", "sync", "check", "list", "revision", "path",
        "status", "archive", "export", "gc", "record", "checkpoints", "lint", "run", "serve",
        "completion", "tree", "audit", "sbom", "demo", "outdated"} == set(names)
    # A command line pays for its own command: `sync` does not import the lint command's
    # module (nor the scanner behind it) or any other command's.
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print(sorted(m for m in sys.modules\n"
             "    if m.startswith('wlock.cli.') and m.endswith(('_cmd', '_cmds')))))\n"
             "from wlock.cli import main\n"
             "main(['sync', '--help'])\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "['wlock.cli.sync_cmd']"
    # and a usage error names the command it was for, loaded or not
    bad = run_wlock("checkpoints", "keep", "--json", "--no-such-flag")
    assert bad.code == 2 and json.loads(bad.stdout)["command"] == "checkpoints keep"


def test_errors_in_colour_only_when_asked(tmp_path: Path) -> None:
    plain = run_wlock("check", "--lock", str(tmp_path / "none.lock"))
    assert plain.code == 4 and plain.stderr.startswith("error: ")  # a pipe: no colour
    always = run_wlock("--color", "always", "check", "--lock", str(tmp_path / "none.lock"))
    assert "\x1b[" in always.stderr and "error:" in always.stderr
    never = run_wlock("--color", "never", "check", "--lock", str(tmp_path / "none.lock"))
    assert "\x1b[" not in never.stderr


def test_no_progress_silences_progress(hub: Hub, tmp_path: Path) -> None:
    repo_id = hub.unique_id("quiet")
    hub.builder.commit("model", repo_id, {"big.bin": random_weights(BIG_FILE + 1)})
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    env = {"HF_HUB_DISABLE_PROGRESS_BARS": ""}
    loud = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(tmp_path / "a"),
                     cwd=project, env=env)
    quiet = run_wlock("--no-progress", "sync", "--endpoint", hub.endpoint, "--cache-dir",
                      str(tmp_path / "b"), cwd=project, env=env)
    assert loud.code == quiet.code == 0
    assert "big.bin (" in loud.stderr and "big.bin" not in quiet.stderr
    assert "Synced 1 repo (1 file)" in quiet.stderr  # the summary stays


def run_in_terminal(args: list[str], cwd: Path, env: dict[str, str], *, columns: int = 120,
                    rows: int = 40, timeout: float = 120) -> tuple[int, list[list[str]]]:
    """`wlock ARGS` on a real pseudo-terminal, its output rendered by a terminal emulator
    (pyte) as a user would see it: returns the exit code and every screen it showed."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    import pyte

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    child_env = {k: v for k, v in os.environ.items()
                 if k not in ("CI", "NO_COLOR", "HF_HUB_DISABLE_PROGRESS_BARS")}
    proc = subprocess.Popen([sys.executable, "-m", "wlock", *args], cwd=cwd,
                            env={**child_env, "TERM": "xterm-256color", **env},
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                            preexec_fn=default_signals)
    os.close(slave)
    screens: list[list[str]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            stream.feed(data)
            screens.append(list(screen.display))
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, screens


def test_progress_on_a_terminal_shows_only_transfers_in_flight(
    hub: Hub, tmp_path: Path
) -> None:
    """Five large files, --jobs 2: the terminal shows the total and at most two file bars at
    any moment (queued files get none), each file's bar once it starts, and then a summary
    that counts each file once."""
    from wlock.cache.engines import LARGE_FILE

    repo_id = hub.unique_id("bars")
    files = {f"shard-{i}.bin": random_weights(LARGE_FILE + 1_000_000) for i in range(5)}
    hub.builder.commit("model", repo_id, files)
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    # Every range request waits: each file is in flight long enough to be drawn many times.
    hub.process.faults({"action": "delay", "match": "/objects/", "delay_ms": 700})
    code, screens = run_in_terminal(
        ["sync", "--jobs", "2", "--endpoint", hub.endpoint, "--cache-dir",
         str(tmp_path / "cache")], project, {})
    assert code == 0, "\n".join(screens[-1] if screens else [])
    bars = [[line for line in screen if "shard-" in line and "MB" in line] for screen in screens]
    drawn = {name for screen in bars for line in screen for name in files if name in line}
    assert drawn == set(files), f"each file gets a bar while it transfers: {drawn}"
    busiest = max(bars, key=len)
    assert len(busiest) <= 2, "bars for files not in flight:\n" + "\n".join(busiest)
    assert any("Syncing" in line for screen in screens for line in screen)
    summary = [line for line in screens[-1] if line.startswith("Synced")]
    assert summary and summary[0].startswith("Synced 1 repo (5 files) in "), screens[-1]


def test_quiet_and_verbose(hub: Hub, tmp_path: Path) -> None:
    """-q: warnings and errors only; -qq: errors only; -v: a line per file; data asked for
    (--json) is printed whatever the level."""
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("-q", "lock", "--endpoint", hub.endpoint, cwd=project).stderr == ""
    sync = ["sync", "--endpoint", hub.endpoint, "--cache-dir"]
    loud = run_wlock(*sync, str(tmp_path / "a"), cwd=project)
    assert loud.code == 0 and loud.stderr.startswith("Synced 1 repo (")
    assert "config.json" not in loud.stderr  # small files: no line of their own
    quiet = run_wlock("-q", *sync, str(tmp_path / "b"), cwd=project)
    assert quiet.code == 0 and quiet.stderr == ""
    verbose = run_wlock("-v", *sync, str(tmp_path / "c"), cwd=project)
    assert verbose.code == 0 and "  acme/tiny-bert/config.json (" in verbose.stderr
    as_json = run_wlock("-qq", *sync, str(tmp_path / "d"), "--json", cwd=project)
    assert as_json.stderr == "" and json.loads(as_json.stdout)["ok"] is True

    # A stale lock, offline (no re-lock): the warning shows with -q, not with -qq; an error
    # shows with both.
    (project / "weights.toml").write_text('[[model]]\nid = "acme/tiny-bert"\n'
                                          'include = ["*.json"]\n', encoding="utf-8")
    warned = run_wlock("-q", *sync, str(tmp_path / "a"), "--offline", cwd=project)
    assert warned.code == 0 and warned.stderr.startswith("warning: weights.lock is out of date")
    assert run_wlock("-qq", *sync, str(tmp_path / "a"), "--offline", cwd=project).stderr == ""
    failed = run_wlock("-qq", *sync, str(tmp_path / "a"), "--locked", cwd=project)
    assert failed.code == 3 and failed.stderr.startswith("error: ")


def test_debug_logging_never_shows_the_token(hub: Hub, tmp_path: Path) -> None:
    """-vv turns on huggingface_hub's debug logging (each request, with HF_DEBUG a curl
    line): the token is redacted there too."""
    secret = "hf_" + "q" * 34
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n')
    done = run_wlock("-vv", "lock", "--endpoint", hub.endpoint, "--token", secret,
                     cwd=project, env={"HF_DEBUG": "1"})
    assert done.code == 0, done.stderr
    assert "authenticated: True" in done.stderr  # the Hub client's own request log
    assert secret not in done.stderr + done.stdout


def test_global_options_anywhere_on_the_line(hub: Hub, tmp_path: Path) -> None:
    """As uv takes them: `wlock sync -q` is `wlock -q sync`, `-v`, `--no-progress` and
    `--color` after the command too; what follows `--`, or the command line `wlock run`
    passes on, is left as written (a guard: `wlock sync -q` was 'No such option')."""
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "-q", "--endpoint", hub.endpoint, cwd=project).stderr == ""
    sync = ["sync", "--endpoint", hub.endpoint, "--cache-dir"]
    after = run_wlock(*sync, str(tmp_path / "a"), "-q", cwd=project)
    before = run_wlock("-q", *sync, str(tmp_path / "b"), cwd=project)
    assert (after.code, after.stderr) == (before.code, before.stderr) == (0, "")
    verbose = run_wlock(*sync, str(tmp_path / "c"), "-v", "--no-progress", "--color", "never",
                        cwd=project)
    assert verbose.code == 0 and "  acme/tiny-bert/config.json (" in verbose.stderr
    as_json = run_wlock("check", "--json", "-qq", "--cache-dir", str(tmp_path / "a"),
                        cwd=project)
    assert as_json.stderr == "" and json.loads(as_json.stdout)["ok"] is True
    script = "import sys; print(sys.argv[1:])"
    ran = run_wlock("run", "--cache-dir", str(tmp_path / "a"), "--", sys.executable, "-c",
                    script, "-q", "-v", cwd=project)
    assert ran.code == 0 and ran.stdout.strip() == "['-q', '-v']", ran.stderr
    ran = run_wlock("run", "--cache-dir", str(tmp_path / "a"), sys.executable, "-c", script,
                    "-q", cwd=project)
    assert ran.code == 0 and ran.stdout.strip() == "['-q']", ran.stderr


def test_sync_locks_again_when_weights_toml_changed(hub: Hub, tmp_path: Path) -> None:
    """As `uv sync`: an edit of weights.toml is locked before the sync (online), --locked
    fails instead (exit 3), --frozen syncs the lock as it is, --dry-run writes nothing."""
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    (project / "weights.toml").write_text('[[model]]\nid = "acme/tiny-bert"\n'
                                          'include = ["*.json"]\n', encoding="utf-8")
    before = (project / "weights.lock").read_bytes()
    sync = ["sync", "--endpoint", hub.endpoint, "--cache-dir"]
    failed = run_wlock(*sync, str(tmp_path / "a"), "--locked", cwd=project)
    assert failed.code == 3 and (project / "weights.lock").read_bytes() == before
    dry = run_wlock(*sync, str(tmp_path / "a"), "--dry-run", cwd=project)
    assert dry.code == 0 and "locking first" in dry.stderr, dry.stderr
    assert (project / "weights.lock").read_bytes() == before
    frozen = run_wlock(*sync, str(tmp_path / "f"), "--frozen", "--json", cwd=project)
    assert frozen.code == 0 and (project / "weights.lock").read_bytes() == before
    assert json.loads(frozen.stdout)["files_to_fetch"] > 3
    synced = run_wlock(*sync, str(tmp_path / "a"), "--json", cwd=project)
    assert synced.code == 0 and "locking first" in synced.stderr, synced.stderr
    assert run_wlock("lock", "--check", cwd=project).code == 0
    from wlock.lock.lockfile import read_lock

    locked = [f.path for f in read_lock(project / "weights.lock").repos[0].files]
    assert locked and all(p.endswith(".json") for p in locked), locked
    assert json.loads(synced.stdout)["files_to_fetch"] == len(locked)


@pytest.mark.parametrize("flags", [["-q"], ["--no-progress"], []])
def test_no_progress_bar_of_huggingface_hubs_own_on_a_terminal(
        hub: Hub, tmp_path: Path, flags: list[str]) -> None:
    """`add` and `lock` read small files through huggingface_hub's hf_hub_download, which draws
    its own tqdm bars on a terminal (named after the URL's tail, `(…)5b1c…%22`): wlock draws
    no bar of huggingface_hub's, with -q and --no-progress after the command as before it,
    and without them either (its own progress is sync's). On a real pseudo-terminal."""
    project = write_project(tmp_path / "p", "")
    code, screens = run_in_terminal(["add", "acme/tiny-bert", *flags, "--endpoint",
                                     hub.endpoint], project, {})
    shown = "\n".join(line for screen in screens for line in screen if line.strip())
    assert code == 0, shown
    assert not any(mark in shown for mark in ("it/s", "B/s", "%|", "(…)")), shown
    if flags == ["-q"]:
        assert shown == "", shown
    code, screens = run_in_terminal(["lock", "--upgrade", *flags, "--endpoint", hub.endpoint],
                                    project, {})
    shown = "\n".join(line for screen in screens for line in screen if line.strip())
    assert code == 0 and not any(mark in shown for mark in ("it/s", "B/s", "%|", "(…)")), shown


def test_rates_and_etas_show_only_once_they_mean_something() -> None:
    """The bars' rate and time-remaining columns stay blank until a transfer has run three
    seconds and moved 256 kB (a first fast chunk showed `20.2 kB/s 1:19:20`), then show
    rich's own figures. On rich's Progress with a clock of the test's."""
    from rich.progress import Progress

    from wlock.cli.progress import settled_columns

    now = [100.0]
    speed, remaining = settled_columns()
    bars = Progress(speed, remaining, get_time=lambda: now[0], auto_refresh=False)
    task = bars.add_task("x", total=100 * 1024 * 1024)
    bars.start_task(task)
    now[0] += 0.5
    bars.update(task, advance=20_000)  # a first chunk, half a second in
    shown = lambda column: str(column.render(bars.tasks[0]))  # noqa: E731
    assert shown(speed) == "" and shown(remaining) == "-:--:--"
    for _ in range(8):  # four seconds at 1 MB a second
        now[0] += 0.5
        bars.update(task, advance=500_000)
    assert shown(speed).endswith("/s") and "MB" in shown(speed), shown(speed)
    assert shown(remaining) not in ("-:--:--", ""), shown(remaining)
