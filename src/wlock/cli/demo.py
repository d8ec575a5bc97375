"""`wlock demo`: the main job, end to end (lock, sync, check), on the bundled example Hub."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import click

from wlock.cli.output import info


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
