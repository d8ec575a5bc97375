"""What a user installs: the wheel and the sdist, built offline by the project's own build
backend (hatchling, as pip would run it), carry the licence, a working entry point and the
example Hub, and publish no extra of the project's own tooling."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_and_the_sdist_carry_the_licence(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-t",
                           "sdist", "-d", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("wlock-*.whl")
    [sdist] = tmp_path.glob("wlock-*.tar.gz")
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0" in licence
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [inside] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(inside).decode() == licence
        [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(z.read(meta).decode())
        [entry] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "wlock = wlock.cli:main" in z.read(entry).decode()
        # The example Hub `wlock demo` serves travels in the wheel.
        assert any("hubserver/fixture_repos/" in n for n in names)
        # ... with the example's real tiny model, which the demo ends by loading.
        assert any(n.endswith("fixture_repos/models/acme/tiny-lm/1-initial/model.safetensors")
                   for n in names)
    # What a user can install: the s3 and oci extras only; the tests', docs' and benchmarks'
    # needs are dependency groups (PEP 735), not published.
    assert metadata.get_all("Provides-Extra") == ["oci", "s3"]
    assert not [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" in r
                and "'s3'" not in r and "'oci'" not in r]
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"
    with tarfile.open(sdist) as t:
        top = t.getnames()[0].split("/")[0]
        member = t.extractfile(f"{top}/LICENSE")
        assert member is not None and member.read().decode() == licence
