"""`wlock demo`: the main job, end to end, on the bundled example Hub: lock, sync, check, then
the example's real tiny model loaded offline at its locked commit, answering the prompts of
the example's dataset (fixtures/make_tiny_lm.py wrote both)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from wlock.cli.output import info

MODEL, PROMPTS = "acme/tiny-lm", "acme/tiny-prompts"
# The libraries the last step loads with; without them, the demo says how to get them.
ML_STACK = ("transformers", "torch", "datasets")

# Run by this Python in a process of its own, offline, with the demo's HF_HOME: the model by
# its id and locked commit (as the README's Python snippet loads one), the prompts from the
# dataset's locked snapshot.
_ANSWER = """
import sys, torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
model_id, revision, prompts = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(model_id, revision=revision)
model = AutoModelForCausalLM.from_pretrained(model_id, revision=revision)
for row in load_dataset(prompts, split="train"):
    ids = torch.cat([torch.tensor([[tok.eos_token_id]]),
                     tok(row["prompt"], return_tensors="pt").input_ids], 1)
    out = model.generate(ids, max_new_tokens=12, do_sample=False,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    print(f"  {row['prompt']!r} -> {tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)!r}")
"""


def run_demo() -> None:
    from wlock.cli import main as wlock_main
    from wlock.hubserver.fixtures import example_manifest
    from wlock.hubserver.process import HubProcess

    with tempfile.TemporaryDirectory(prefix="wlock-demo-") as tmp:
        root = Path(tmp)
        project, store = root / "project", root / "hub-store"
        project.mkdir()
        info(f"Starting the example Hub (store: {store}) ...")
        with HubProcess(store, fixtures=True) as hub:
            info(f"Example Hub at {hub.endpoint} (CDN at {hub.cdn}).")
            shutil.copyfile(example_manifest(), project / "weights.toml")
            os.environ["HF_HOME"] = str(root / "hf-home")
            # The demo's Hub is its own, on loopback: HF_HUB_OFFLINE (a CI default) keeps
            # wlock off the network, not off it (issue 59). The last step loads offline.
            for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
                os.environ.pop(name, None)
            steps = [
                ["lock", "--project", str(project), "--endpoint", hub.endpoint],
                ["lock", "--check", "--project", str(project)],
                ["sync", "--project", str(project), "--endpoint", hub.endpoint],
                ["sync", "--project", str(project)],
                ["check", "--project", str(project)],
            ]
            for step in steps:
                info(f"\n$ wlock {' '.join(step)}")
                try:
                    wlock_main(step)
                except SystemExit as e:
                    if e.code:
                        raise
        info(f"\n$ cat {project / 'weights.lock'}")
        click.echo((project / "weights.lock").read_text(encoding="utf-8"))
        answer(project, root / "hf-home")


def install_hint(packages: tuple[str, ...]) -> str:
    """The command that adds `packages` to the environment this wlock runs in, as it was
    installed: a uv tool again from the source its receipt names (wlock is not on PyPI, so
    `uv tool install wlock` would not resolve), a pipx venv by `pipx inject`, else this
    interpreter's pip (or uv's, for a venv made without pip)."""
    import shlex
    import tomllib

    prefix = Path(sys.prefix)
    receipt = prefix / "uv-receipt.toml"
    if receipt.is_file():
        try:
            wanted = tomllib.loads(receipt.read_text(encoding="utf-8"))["tool"]["requirements"]
            spec = next(r for r in wanted if r.get("name") == "wlock")
            source = spec.get("path") or spec.get("directory") or spec.get("editable") or (
                f"git+{spec['git']}" if spec.get("git") else spec.get("url")) or "wlock"
        except (OSError, ValueError, KeyError, StopIteration, TypeError):
            source = "wlock"
        return (f"uv tool install --force {shlex.quote(str(source))} "
                + " ".join(f"--with {p}" for p in packages))
    if (prefix / "pipx_metadata.json").is_file():
        return f"pipx inject {prefix.name} {' '.join(packages)}"
    python = shlex.quote(sys.executable)
    if importlib.util.find_spec("pip") is None:
        return f"uv pip install --python {python} {' '.join(packages)}"
    return f"{python} -m pip install {' '.join(packages)}"


def answer(project: Path, hf_home: Path) -> None:
    """The example model, loaded offline (the Hub is gone) at its locked commit, completing
    each prompt of the example dataset; or the one command that installs what it needs."""
    from wlock.cache.layout import RepoPaths
    from wlock.lock.lockfile import read_lock

    lock = read_lock(project / "weights.lock")
    model, prompts = lock.find("model", MODEL), lock.find("dataset", PROMPTS)
    if model is None or prompts is None:
        return
    missing = [name for name in ML_STACK if importlib.util.find_spec(name) is None]
    if missing:
        info(f"\nTo see {MODEL} answer offline, install {', '.join(missing)} beside wlock: "
             f"`{install_hint(ML_STACK)}`, then run `wlock demo` again.")
        return
    folder = RepoPaths.of(hf_home / "hub", prompts).snapshot(prompts.revision)
    info(f"\n$ python  # offline: from_pretrained({MODEL!r}, revision={model.revision[:12]!r}"
         f"...), prompts from {PROMPTS} at {prompts.revision[:12]}")
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", _ANSWER, MODEL, model.revision, str(folder)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise click.ClickException(f"the example model did not load offline:\n{done.stderr}")
    click.echo(f"{MODEL} @ {model.revision[:12]}, offline, completes each prompt:")
    click.echo(done.stdout.rstrip())
