"""torch.export's PT2 archive (what transformers 5's dynamo exporter saves as `model.pt2`):
`torch.export.load` unpickles its sample inputs (weights_only=True, then False when that
fails), every weight or constant its config marks `use_pickle`, and its opaque constants.
A payload in any of them runs on load, confirmed here with torch's own loader; wlock judges
each member as torch reads it and refuses the payload at `add`. The archive torch itself
writes is locked, synced, and loaded offline from the cache by torch.export.load."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import Hub, added, needs, run_wlock, write_project

pytestmark = needs("torch")


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def exported() -> bytes:
    """A tiny module, as torch.export.save writes it."""
    import torch

    module = torch.nn.Linear(2, 2)
    program = torch.export.export(module, (torch.ones(1, 2),))
    out = io.BytesIO()
    torch.export.save(program, out)
    return out.getvalue()


def rewritten(archive: bytes, change: dict[str, bytes]) -> bytes:
    """`archive` with the members named in `change` given new bytes (the rest as written)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            tail = info.filename.split("/", 1)[1]
            dst.writestr(info, change.get(tail, src.read(info)))
    return out.getvalue()


def malicious(archive: bytes, where: str, marker: Path) -> bytes:
    import torch

    payload = io.BytesIO()
    torch.save(_Payload(marker), payload)
    if where == "sample-inputs":
        return rewritten(archive, {"data/sample_inputs/model.pt": payload.getvalue()})
    # A weight the config marks use_pickle: torch.load(weights_only=False) reads it.
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        root = z.namelist()[0].split("/")[0]
        config = json.loads(z.read(f"{root}/data/weights/model_weights_config.json"))
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    return rewritten(archive, {
        f"data/weights/{first['path_name']}": payload.getvalue(),
        "data/weights/model_weights_config.json": json.dumps(config).encode()})


def torch_loads(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", (
        "import sys, torch\nprogram = torch.export.load(sys.argv[1])\n"
        "print(program.module()(torch.ones(1, 2)).shape)\n"), str(path)],
        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("where", ["sample-inputs", "pickled-weight"])
def test_a_payload_in_a_pt2_archive_is_refused_and_torch_runs_it(
        hub: Hub, tmp_path: Path, where: str) -> None:
    marker = tmp_path / "ran"
    evil = malicious(exported(), where, marker)
    (tmp_path / "evil.pt2").write_bytes(evil)
    torch_loads(tmp_path / "evil.pt2")
    assert marker.exists()  # torch's own loader runs it
    marker.unlink()
    repo_id = hub.unique_id(f"pt2-{where}")
    hub.builder.commit("model", repo_id, {"model.pt2": evil, "config.json": b"{}"}, lfs=True)
    project = write_project(tmp_path / "p", "")
    refused = run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                      cwd=project)
    assert refused.code == 7, refused.stderr
    assert f"{repo_id}: model.pt2 imports posix.system" in refused.stderr, refused.stderr
    assert not marker.exists()


def test_the_archive_torch_writes_locks_syncs_and_loads_offline(hub: Hub, tmp_path: Path
                                                                 ) -> None:
    repo_id = hub.unique_id("pt2-good")
    hub.builder.commit("model", repo_id, {"model.pt2": exported(), "config.json": b"{}"},
                       lfs=True)
    _, cache = added(hub, tmp_path, (repo_id, "--loader", "all"))
    [local] = cache.glob("models--*/snapshots/*/model.pt2")
    loaded = torch_loads(local)
    assert loaded.returncode == 0 and "torch.Size([1, 2])" in loaded.stdout, loaded.stderr
