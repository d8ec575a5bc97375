"""wlock's judgement against the field's two model scanners, ModelScan and ModelAudit, on every
corpus of the tests: pickles (tests/pickle_corpus.py), GGUF chat templates
(tests/template_corpus.py, and the 97 real models' templates of tests/real_templates.py as
benign files), Keras files and ONNX external data (tests/format_corpus.py).

    pip install -e . --group dev --group bench && bash .ci/corpora
    KERAS_BACKEND=torch python bench/format_scanners.py

Per corpus and judge:
- caught: malicious files refused (each case cites its source);
- false alarms: benign files refused, over the benign twins (each read by the real loader in
  the tests) and, for pickles, real files written by torch.save, numpy and joblib; the Keras
  and ONNX twins are the libraries' own saves;
- time per file, judging a file already on disk (wlock judges at lock from HTTP ranges too).

Each file is judged in a folder of its own (an ONNX model with its external data beside it).
A file a scanner cannot read counts as refused, for every judge alike. Each scanner's own
verdict is taken: ModelScan's, any issue or error; ModelAudit's, its CLI's exit code (1 for a
warning or critical finding, 2 for a scan it could not conclude: a CI gate fails on both;
its warnings include torch's own tensor-rebuilding functions "without trusted loaded
implementation"). ModelAudit's telemetry is turned off (PROMPTFOO_DISABLE_TELEMETRY).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("KERAS_BACKEND", "torch")
os.environ["PROMPTFOO_DISABLE_TELEMETRY"] = "1"
logging.disable(logging.CRITICAL)
warnings.simplefilter("ignore")

Maker = Callable[[Path], Path]


def corpora(root: Path) -> dict[str, tuple[dict[str, Maker], dict[str, Maker]]]:
    """Each corpus: (malicious makers, benign makers), each writing its file into a folder."""
    from tests import format_corpus as fc
    from tests.pickle_corpus import CASES, benign_checkpoints
    from tests.template_corpus import BENIGN, MALICIOUS, gguf_with_template

    def data(name: str, blob: bytes) -> Maker:
        def make(folder: Path) -> Path:
            (folder / name).write_bytes(blob)
            return folder / name
        return make

    def gguf(template: str) -> Maker:
        return lambda folder: gguf_with_template(folder / "model.gguf", template)

    real = benign_checkpoints(root / "real")
    from tests.real_templates import TARBALL, real_chat_templates

    # The real models' templates (`bash .ci/corpora` brings them), each in a GGUF as shipped.
    (root / "templates").mkdir()
    shipped = real_chat_templates(root / "templates") if TARBALL.exists() else {}
    return {
        "pickle": ({c.name: data(c.name, c.malicious()) for c in CASES},
                   {**{f"twin:{c.name}": data(c.name, c.benign()) for c in CASES},
                    **{f"real:{n}": data(n, p.read_bytes()) for n, p in real.items()}}),
        "chat template": ({n: gguf(t) for n, t in MALICIOUS.items()},
                          {**{n: gguf(t) for n, t in BENIGN.items()},
                           **{f"real:{n}": gguf(t) for n, t in shipped.items()}}),
        "keras": (fc.KERAS_MALICIOUS, fc.KERAS_BENIGN),
        "onnx": (fc.ONNX_MALICIOUS, fc.ONNX_BENIGN),
    }


def wlock_refuses(path: Path) -> bool:
    from wlock.policy import Policy, judge_format, judge_pickle
    from wlock.scan import is_format_judged, judge_file, judge_formats

    policy = Policy()
    with open(path, "rb") as f:
        bad = bool(judge_pickle("bench/x", judge_file(f, path.name), policy))
        if is_format_judged(path.name):
            bad |= any(judge_format("bench/x", t, policy) for t in judge_formats(f, path.name))
    return bad


def modelscan_refuses(path: Path) -> bool:
    from modelscan.modelscan import ModelScan

    result = ModelScan().scan(str(path))
    return bool(result.get("issues")) or bool(result.get("errors"))


def modelaudit_refuses(path: Path) -> bool:
    from modelaudit.core import scan_model_directory_or_file
    from modelaudit.core_results import determine_exit_code

    # Its CLI's own verdict: 1, a warning or critical finding; 2, a scan it could not
    # conclude (a CI gate fails on either).
    return determine_exit_code(scan_model_directory_or_file(str(path))) != 0


JUDGES: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "wlock": ("wlock", wlock_refuses),
    "modelscan": ("modelscan", modelscan_refuses),
    "modelaudit": ("modelaudit", modelaudit_refuses),
}


def verdict(judge: Callable[[Path], bool], path: Path) -> bool:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return judge(path)
        except Exception:  # noqa: BLE001 - a file a judge cannot read counts as refused
            return True


def main() -> None:
    judges = {}
    for label, (module, fn) in JUDGES.items():
        try:
            __import__(module)
        except ImportError:
            print(f"{label}: not installed (pip install {module}), left out")
            continue
        judges[label] = fn
    with tempfile.TemporaryDirectory(prefix="wlock-formats-") as tmp:
        root = Path(tmp)
        files: dict[str, tuple[list[Path], list[tuple[str, Path]]]] = {}
        for corpus, (bad, good) in corpora(root).items():
            made_bad, made_good = [], []
            for kind, makers, out in (("bad", bad, made_bad), ("good", good, made_good)):
                for name, make in makers.items():
                    folder = root / corpus.replace(" ", "-") / kind / name.replace(":", "-")
                    folder.mkdir(parents=True)
                    with contextlib.redirect_stdout(io.StringIO()):
                        path = make(folder)
                    out.append((name, path) if kind == "good" else path)  # type: ignore[arg-type]
            files[corpus] = (made_bad, made_good)  # type: ignore[assignment]
        print(f"{'corpus':<14} {'judge':<11} {'caught':>8} {'false alarms':>13} "
              f"{'ms/file':>8}")
        for corpus, (bad_paths, good_paths) in files.items():
            for label, judge in judges.items():
                started = time.perf_counter()
                missed = [p for p in bad_paths if not verdict(judge, p)]
                alarms = [n for n, p in good_paths if verdict(judge, p)]
                per_file = (time.perf_counter() - started) / (len(bad_paths) + len(good_paths))
                caught = len(bad_paths) - len(missed)
                print(f"{corpus:<14} {label:<11} {caught:>4}/{len(bad_paths):<3} "
                      f"{len(alarms):>6}/{len(good_paths):<6} {per_file * 1000:>8.1f}")
                if missed:
                    print(f"{'':<26} missed: "
                          + ", ".join(sorted(p.parent.name for p in missed)))
                if alarms:
                    print(f"{'':<26} false alarms: " + ", ".join(sorted(alarms)))
    marker = Path("/tmp/wlock-keras-ran")
    print(f"marker left by a payload that ran: {marker.exists()}")


if __name__ == "__main__":
    main()
