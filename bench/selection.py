"""Bytes wlock locks by default against `snapshot_download`'s, over real repos' layouts
(bench/layouts.toml: file names and sizes from the Hub's listings, 13 repos across the
loaders), per repo and overall.

    python bench/selection.py [--scale 2000]

Two measurements, printed together:
  1. at full size, from the layouts: what each loader's rule takes (wlock.lock.loaders, the
     code `wlock lock` runs) against every file of the repo, as snapshot_download fetches;
  2. at 1/scale size in the emulator, end to end: `wlock add` of each repo (the loader picked
     from library_name, as a user gets it; `--variant` for the diffusers and GGUF repos),
     `wlock sync`, and `snapshot_download` of the same repos (the adapter's base too, which
     its load fetches), each into a fresh cache; bytes on disk compared.
Whether each selection loads is judged by tests/integration/test_loaders_real.py, which
builds repos of these shapes with the libraries' own save_pretrained and loads them offline.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from _common import WLOCK, machine, snapshot_download

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder
from wlock.lock.loaders import Options, detect_loader, select
from wlock.models import LockedFile
from wlock.units import human_size

LAYOUTS = Path(__file__).with_name("layouts.toml")


def small_files(repo: dict) -> dict[str, bytes]:
    """The contents a loader reads: index, modules.json, model_index.json, adapter config."""
    out: dict[str, bytes] = {}
    files = repo["files"]
    for path in files:
        if path.endswith(".index.json"):
            shards = sorted(p for p in files if fnmatch.fnmatch(p, repo["shards"]))
            out[path] = json.dumps({"metadata": {}, "weight_map": {
                f"layers.{i}.weight": s for i, s in enumerate(shards)}}).encode()
    if "modules" in repo:
        out["modules.json"] = json.dumps([
            {"idx": i, "name": str(i), "path": p, "type": "sentence_transformers.models."
             + ("Transformer" if not p else p.split("_", 1)[1])}
            for i, p in enumerate(repo["modules"])]).encode()
    if "components" in repo:
        out["model_index.json"] = json.dumps({
            "_class_name": "StableDiffusionPipeline",
            **{c: ["diffusers" if c in ("unet", "vae", "scheduler") else "transformers", "X"]
               for c in repo["components"]}}).encode()
    if "base" in repo:
        out["adapter_config.json"] = json.dumps({
            "base_model_name_or_path": repo["base"], "revision": None,
            "peft_type": "LORA"}).encode()
    return out


def full_size(repos: list[dict]) -> list[tuple[str, str, int, int, int, int]]:
    """Per added repo: (id, loader, files locked, files, bytes locked, bytes), its
    requirements' bytes counted with it (snapshot_download must fetch the base too)."""
    by_id = {r["id"]: r for r in repos}
    rows = []

    def pick(repo: dict) -> tuple[str, list[LockedFile], list[LockedFile], list[str]]:
        listing = [LockedFile(p, s, git_sha1="0" * 40) for p, s in repo["files"].items()]
        contents = small_files(repo)
        loader = detect_loader(repo.get("library"), repo["files"])
        choice = select(loader, listing, lambda p: contents.get(p, b"{}"),
                        Options(variant=repo.get("variant")))
        return loader, listing, [f for f in listing if f.path in choice.paths], \
            [r.id for r in choice.requires]

    for repo in repos:
        if repo.get("required"):
            continue
        loader, listing, chosen, requires = pick(repo)
        for name in requires:
            _, more, more_chosen, _ = pick(by_id[name])
            listing, chosen = listing + more, chosen + more_chosen
        rows.append((repo["id"] + (" + base" if requires else ""), loader, len(chosen),
                     len(listing), sum(f.size for f in chosen), sum(f.size for f in listing)))
    return rows


# Multi-config datasets, reconstructed from the Hub's listings and cards (file counts and
# typical sizes as listed there; this machine has no network, so approximate, and stated so):
# (id, the config a project loads, the card's configs as YAML, {folder/pattern: (count, size)}).
GB, MB = 1000**3, 1000**2
DATASETS = [
    ("HuggingFaceFW/fineweb-edu", "sample-10BT", """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/*/*
- config_name: sample-10BT
  data_files:
  - split: train
    path: sample/10BT/*
- config_name: sample-100BT
  data_files:
  - split: train
    path: sample/100BT/*
- config_name: sample-350BT
  data_files:
  - split: train
    path: sample/350BT/*
- config_name: CC-MAIN-2024-10
  data_files:
  - split: train
    path: data/CC-MAIN-2024-10/*
---
""", {"data/CC-MAIN-2024-10/{:03d}_00000.parquet": (20, 2.1 * GB),
      **{f"data/CC-MAIN-20{y}-{w:02d}/{{:03d}}_00000.parquet": (20, 2.1 * GB)
         for y, w in ((23, 50), (23, 40), (23, 23), (23, 14), (23, 6), (22, 49), (22, 40),
                      (22, 33), (22, 27), (22, 21), (22, 5), (21, 49), (21, 43), (21, 39),
                      (21, 31), (21, 25), (21, 21), (21, 17), (21, 10), (21, 4), (20, 50),
                      (20, 45), (20, 40), (20, 34), (20, 29), (20, 24), (20, 16), (20, 10),
                      (20, 5), (19, 51), (19, 47), (19, 43), (19, 39), (19, 35), (19, 30),
                      (19, 26), (19, 22), (19, 18), (19, 13), (19, 9), (19, 4), (18, 51),
                      (18, 47), (18, 43), (18, 39), (18, 34), (18, 30), (18, 26), (18, 22),
                      (18, 17), (18, 13), (18, 9), (18, 5), (17, 51), (17, 47), (17, 43),
                      (17, 39), (17, 34), (17, 30), (17, 26), (17, 22), (17, 17), (17, 13),
                      (17, 9), (17, 4), (16, 50), (16, 44), (16, 40), (16, 36), (16, 30),
                      (16, 26), (16, 22), (16, 18), (16, 7), (15, 48), (15, 40), (15, 35),
                      (15, 32), (15, 27), (15, 22), (15, 18), (15, 14), (15, 11), (15, 6),
                      (14, 52), (14, 49), (14, 42), (14, 41), (14, 35), (14, 23), (14, 15),
                      (14, 10), (13, 48), (13, 20))},
      "sample/10BT/{:03d}_00000.parquet": (14, 2.1 * GB),
      "sample/100BT/{:03d}_00000.parquet": (100, 2.1 * GB),
      "sample/350BT/{:03d}_00000.parquet": (310, 2.1 * GB)}),
    ("allenai/c4", "en", """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/c4-train.*.json.gz
  - split: validation
    path: en/c4-validation.*.json.gz
- config_name: en.noblocklist
  data_files:
  - split: train
    path: en.noblocklist/c4-train.*.json.gz
  - split: validation
    path: en.noblocklist/c4-validation.*.json.gz
- config_name: en.noclean
  data_files:
  - split: train
    path: en.noclean/c4-train.*.json.gz
  - split: validation
    path: en.noclean/c4-validation.*.json.gz
- config_name: realnewslike
  data_files:
  - split: train
    path: realnewslike/c4-train.*.json.gz
  - split: validation
    path: realnewslike/c4-validation.*.json.gz
- config_name: multilingual
  data_files:
  - split: train
    path: multilingual/c4-*.tfrecord-*.json.gz
---
""", {"en/c4-train.{:05d}-of-01024.json.gz": (1024, 319 * MB),
      "en/c4-validation.{:05d}-of-00008.json.gz": (8, 40 * MB),
      "en.noblocklist/c4-train.{:05d}-of-01024.json.gz": (1024, 370 * MB),
      "en.noblocklist/c4-validation.{:05d}-of-00008.json.gz": (8, 46 * MB),
      "en.noclean/c4-train.{:05d}-of-07168.json.gz": (7168, 320 * MB),
      "en.noclean/c4-validation.{:05d}-of-00064.json.gz": (64, 40 * MB),
      "realnewslike/c4-train.{:05d}-of-00512.json.gz": (512, 76 * MB),
      "realnewslike/c4-validation.{:05d}-of-00016.json.gz": (16, 20 * MB),
      "multilingual/c4-en.tfrecord-{:05d}-of-11264.json.gz": (11264, 340 * MB)}),
    ("wikimedia/wikipedia", "20231101.en", """---
configs:
- config_name: 20231101.en
  data_files:
  - split: train
    path: 20231101.en/train-*
- config_name: 20231101.de
  data_files:
  - split: train
    path: 20231101.de/train-*
- config_name: 20231101.fr
  data_files:
  - split: train
    path: 20231101.fr/train-*
- config_name: 20231101.ja
  data_files:
  - split: train
    path: 20231101.ja/train-*
- config_name: 20231101.ab
  data_files:
  - split: train
    path: 20231101.ab/train-*
---
""", {"20231101.en/train-{:05d}-of-00041.parquet": (41, 280 * MB),
      "20231101.de/train-{:05d}-of-00020.parquet": (20, 280 * MB),
      "20231101.fr/train-{:05d}-of-00017.parquet": (17, 280 * MB),
      "20231101.ja/train-{:05d}-of-00015.parquet": (15, 260 * MB),
      "20231101.ab/train-00000-of-00001.parquet": (1, 2 * MB)}),
]


def dataset_rows() -> list[tuple[str, str, int, int, int, int]]:
    """Per dataset: (id and config, loader, files locked, files, bytes locked, bytes)."""
    rows = []
    for repo_id, config, card, layout in DATASETS:
        listing = [LockedFile("README.md", len(card), git_sha1="0" * 40)]
        for pattern, (count, size) in layout.items():
            listing += [LockedFile(pattern.format(i), int(size), sha256="0" * 64)
                        for i in range(count)]
        choice = select("datasets", listing, lambda p, card=card: card.encode(),
                        Options(config=config))
        chosen = [f for f in listing if f.path in choice.paths]
        rows.append((f"{repo_id} ({config})", "datasets", len(chosen), len(listing),
                     sum(f.size for f in chosen), sum(f.size for f in listing)))
    return rows


def blob_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.glob("*/blobs/*") if p.is_file())


def at_scale(repos: list[dict], scale: int) -> tuple[int, int, float, float]:
    with tempfile.TemporaryDirectory(prefix="wlock-bench-") as tmp:
        root = Path(tmp)
        builder = StoreBuilder(root / "store")
        for repo in repos:
            contents = small_files(repo)
            files = {p: contents.get(p) or (b"{}" if p.endswith("config.json") else
                                            os.urandom(max(1, s // scale)))
                     for p, s in repo["files"].items()}
            builder.commit("model", repo["id"], files)
            builder.configure("model", repo["id"], extra={"library_name": repo["library"]})
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text("")
        with HubProcess(root / "store") as hub:
            env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1"}
            for repo in repos:
                if repo.get("required"):
                    continue
                variant = ["--variant", repo["variant"]] if "variant" in repo else []
                subprocess.run([*WLOCK, "-q", "add", repo["id"], *variant, "--endpoint",
                                hub.endpoint], cwd=project, check=True, env=env)
            ours = root / "ours"
            started = time.monotonic()
            subprocess.run([*WLOCK, "-q", "sync", "--endpoint", hub.endpoint, "--cache-dir",
                            str(ours)], cwd=project, check=True, env=env)
            ours_s = time.monotonic() - started
            theirs = root / "theirs"
            started = time.monotonic()
            for repo in repos:
                subprocess.run(snapshot_download(repo["id"], theirs, hub.endpoint),
                               check=True, env=env, capture_output=True)
            theirs_s = time.monotonic() - started
            return blob_bytes(ours), blob_bytes(theirs), ours_s, theirs_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=2000,
                        help="Divide every file's size by this in the emulator.")
    args = parser.parse_args()
    repos = tomllib.loads(LAYOUTS.read_text())["repo"]
    print(f"machine: {machine()}")
    print(f"{'repo':<52} {'loader':<22} {'files':>9} {'locked':>9} {'all':>9} {'ratio':>6}")
    rows = full_size(repos)
    for name, loader, n, total, size, whole in rows:
        print(f"{name:<52} {loader:<22} {n:>4}/{total:<4} {human_size(size):>9} "
              f"{human_size(whole):>9} {size / whole:>6.2f}")
    locked, everything = sum(r[4] for r in rows), sum(r[5] for r in rows)
    print(f"{'overall (bytes)':<52} {'':<22} {'':>9} {human_size(locked):>9} "
          f"{human_size(everything):>9} {locked / everything:>6.2f}")
    mean = sum(r[4] / r[5] for r in rows) / len(rows)
    print(f"mean of the per-repo ratios: {mean:.2f}")
    print("\ndatasets, one config against every file of the repo (snapshot_download):")
    for name, loader, n, total, size, whole in dataset_rows():
        print(f"{name:<52} {loader:<22} {n:>4}/{total:<5} {human_size(size):>9} "
              f"{human_size(whole):>9} {size / whole:>6.3f}")
    ours, theirs, ours_s, theirs_s = at_scale(repos, args.scale)
    print(f"in the emulator at 1/{args.scale}: wlock add + sync {human_size(ours)} in "
          f"{ours_s:.1f}s, snapshot_download {human_size(theirs)} in {theirs_s:.1f}s: "
          f"{ours / theirs:.2f} of the bytes")


if __name__ == "__main__":
    sys.exit(main())
