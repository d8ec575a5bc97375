"""`datasets.load_dataset(id, config, split=...)`: the data files of one config (and split).

Mirrors `datasets.load.HubDatasetModuleFactory` and `datasets.data_files` (5.x) over the
listing at the locked commit:

- the card: README.md's YAML (read as `DatasetCard.load` reads it), updated with
  `.huggingface.yaml`; its `configs` (`MetadataConfigs.from_dataset_card_data`) give each
  config's `data_files` (a glob, a list, or `{split, path}` items: `sanitize_patterns`) and
  `data_dir`; the default config is the only one, the one named `default`, or the one with
  `default: true` (`get_default_config_name`);
- without `data_files`, the packaged builders' default patterns under the config's
  `data_dir` (`get_data_patterns`): `data/{split}-00000-of-00001.*` shards first, then
  folders named for a split, then split names in file names, then everything as `train`;
- each pattern resolved as `resolve_pattern` globs it with fsspec (`glob_translate`): hidden
  files and `__special__` folders only when the pattern names them, the card and the
  `dataset_info(s).json` files never as data.

The lock holds the card, `.huggingface.yaml`, `dataset_infos.json` (all three read by the
factory) and the chosen config's data files, of the chosen splits when `split` is given
(`"train"`, `"train[:10%]+test"`). Every other file is another config's, or in no config: the
library never opens it for this one. A card it cannot read, a pattern naming files outside the
repo, or a config or split it does not have is a LoaderProblem, never a guess.

The parquet conversion branch (`ref = "refs/convert/parquet"`) has no card: its layout is a
folder per config (`{config}/{split}/0000.parquet`), which `load_dataset(..., data_dir=config)`
reads; `config` names that folder there.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from wlock.lock.loaders import Choice, LoaderProblem, Read

CARD = "README.md"
# Read by HubDatasetModuleFactory beside the data: the standalone YAML (config.REPOYAML_FILENAME)
# and the legacy infos (config.DATASETDICT_INFOS_FILENAME).
METADATA = (CARD, ".huggingface.yaml", "dataset_infos.json")
# datasets.data_files.FILES_TO_IGNORE: never data, unless a pattern names the file itself.
FILES_TO_IGNORE = ("README.md", "config.json", "dataset_info.json", "dataset_infos.json",
                   "dummy_data.zip", "dataset_dict.json")
# datasets.naming._split_re
_SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")

# datasets.data_files' default patterns, as written for fsspec >= 2023.12.
_SPLIT_SHARDED = "data/{split}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]*.*"
_KEYWORDS = {"train": ("train", "training"), "validation": ("validation", "valid", "dev", "val"),
             "test": ("test", "testing", "eval", "evaluation")}
_SEP = "-._ 0-9"
_IN_FILENAME = ("**/{keyword}[{sep}]*", "**/*[{sep}]{keyword}[{sep}]*")
_IN_DIR_NAME = ("**/{keyword}/**", "**/{keyword}[{sep}]*/**", "**/*[{sep}]{keyword}/**",
                "**/*[{sep}]{keyword}[{sep}]*/**")


# datasets.packaged_modules._EXTENSION_TO_MODULE (5.2), by module: the extensions whose count
# picks the builder (`infer_module_for_data_files_list`). tests/unit/test_datasets_loader.py
# compares it with the installed library's.
MODULE_EXTENSIONS = {
    "csv": "csv tsv", "json": "json jsonl ndjson", "parquet": "geoparquet gpq parquet",
    "arrow": "arrow", "text": "txt", "conll": "conll conllu", "webdataset": "tar",
    "xml": "xml", "hdf5": "h5 hdf5", "eval": "eval", "harbor": "md toml", "lance": "lance",
    "tsfile": "tsfile", "vortex": "vortex", "fasta": "afa fa faa fasta ffn fna frn",
    "genbank": "gb gbk genbank", "fastq": "fastq fq", "pdb": "ent pdb", "mmcif": "cif mmcif",
    "imagefolder": "apng blp bmp bufr bw cur dcx dds dib emf eps fit fits flc fli ftc ftu gbr "
                   "gif grib icb icns ico iim im j2c j2k jfif jp2 jpc jpe jpeg jpf jpg jpx msp "
                   "pbm pcd pcx pgm png pnm ppm ps psd pxr ras rgb rgba sgi tga tif tiff vda vst "
                   "webp wmf xbm xpm",
    "audiofolder": "3g2 3gp aiff asf au avr caf f4v flac flv htk ircam m4v mat4 mat5 mp3 mpc2k "
                   "mpg mxf nist nut ogg ogm opus paf pvf raw rf64 sd2 sds svx voc w64 wav "
                   "wavex webm wma wmv wve xi",
    "videofolder": "avi mkv mov mp4 mpeg", "meshfolder": "glb gltf ply stl",
    "pdffolder": "pdf", "niftifolder": "nii",
}
_MODULE_OF = {f".{ext}": module for module, exts in MODULE_EXTENSIONS.items()
              for ext in exts.split()}
# datasets.packaged_modules._ALL_METADATA_FILENAMES: counted last.
METADATA_FILENAMES = ("instruction.md", "latest_version_hint.json", "metadata.csv",
                      "metadata.jsonl", "metadata.parquet", "task.toml")


def builder_of(files: Iterable[str]) -> str | None:
    """`infer_module_for_data_files_list`: the builder the most common extension of `files`
    picks (metadata files last; parquet, lance, vortex, arrow, jsonl, json, csv first on a
    draw, then the extension's name); `zip` for archives, which it opens to look inside."""
    from collections import Counter

    counts = Counter(("." + suffix.lower(), posixpath.basename(f) in METADATA_FILENAMES)
                     for f in files for suffix in posixpath.basename(f).split(".")[1:])

    def key(item: tuple[tuple[str, bool], int]) -> tuple[Any, ...]:
        (ext, is_metadata), count = item
        return (not is_metadata, count, ext == ".parquet", ext == ".lance", ext == ".vortex",
                ext == ".arrow", ext == ".jsonl", ext == ".json", ext == ".csv", ext)

    for (ext, _), _ in sorted(counts.items(), key=key, reverse=True):
        if ext in _MODULE_OF:
            return _MODULE_OF[ext]
        if ext == ".zip":
            return "zip"
    return None


class ConfigNeeded(LoaderProblem):
    """Several configs, none the default: the entry must name one."""


def _patterns(bases: tuple[str, ...]) -> dict[str, list[str]]:
    return {split: [b.format(keyword=k, sep=_SEP) for k in keywords for b in bases]
            for split, keywords in _KEYWORDS.items()}


# ALL_DEFAULT_PATTERNS, in the order get_data_patterns tries them.
DEFAULT_PATTERNS: tuple[dict[str, list[str]], ...] = (
    {"logs": ["**/*.eval"]},
    {"test": ["**/task.toml", "**/instruction.md"]},
    _patterns(_IN_DIR_NAME),
    _patterns(_IN_FILENAME),
    {"train": ["**"]},
)


def _glob(pattern: str, base: str, paths: Iterable[str]) -> list[str]:
    """The repo's files `pattern` matches under `base`, as datasets' `resolve_pattern` finds
    them with fsspec's glob (`fs.glob`, then its own filters)."""
    from fsspec.utils import glob_translate

    if "://" in pattern or pattern.startswith(("/", "../")) or "/../" in pattern:
        raise LoaderProblem(
            f"the card's data_files names {pattern!r}, outside the repo",
            "Lock the files it names as entries of their own, or use `loader = \"all\"`.")
    full = posixpath.normpath(posixpath.join(base, pattern)) if base else \
        posixpath.normpath(pattern)
    if pattern.endswith("/"):
        full += "/"
    ignored = set(FILES_TO_IGNORE) - {posixpath.basename(full)}
    if not any(c in full for c in "*?["):
        found = [full] if full in paths else []
    else:
        regex = re.compile(glob_translate(full))
        found = sorted(p for p in paths if regex.match(p))
    return [p for p in found if posixpath.basename(p) not in ignored
            and not _unrequested(p, full, lambda part: part.startswith("__"), parent=True)
            and not _unrequested(p, full, lambda part: part.startswith(".")
                                 and set(part) != {"."})]


def _unrequested(path: str, pattern: str, special: Any, parent: bool = False) -> bool:
    """`_is_inside_unrequested_special_dir` (parent=True: folders only) and
    `_is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir`: the path has more
    such parts than the pattern names."""
    def parts(text: str) -> list[str]:
        names = text.rstrip("/").split("/")
        return [n for n in (names[:-1] if parent else names) if special(n)]
    return len(parts(path)) != len(parts(pattern))


def _default_patterns(base: str, paths: frozenset[str]) -> dict[str, list[str]]:
    """`get_data_patterns(base)`: the first of the default layouts that finds a file."""
    sharded = _glob(_SPLIT_SHARDED.replace("{split}", "*"), base, paths)
    if sharded:
        splits = set()
        for path in sharded:
            named = re.match(r"(?P<split>.+)-[0-9]{5}-of-[0-9]{5}", posixpath.basename(path))
            if named:
                splits.add(named["split"])
        bad = sorted(s for s in splits if not _SPLIT_NAME.match(s))
        if bad:
            raise LoaderProblem(f"split name(s) {', '.join(bad)} in data/ are not names the "
                                "datasets library accepts (letters, digits, _ and .)",
                                "Tell the dataset's authors, or use `loader = \"all\"`.")
        order = [s for s in _KEYWORDS if s in splits] + sorted(splits - set(_KEYWORDS))
        return {s: [_SPLIT_SHARDED.format(split=s)] for s in order}
    for patterns in DEFAULT_PATTERNS:
        found = {split: globs for split, globs in patterns.items()
                 if any(_glob(g, base, paths) for g in globs)}
        if found:
            return found
    raise LoaderProblem(f"no data files in {base or 'the repo'}/",
                        "The repo is empty at this ref for the datasets library: pin another "
                        "ref, or use `loader = \"all\"`.")


def _sanitize(data_files: Any, where: str) -> dict[str, list[str]]:
    """`sanitize_patterns`, validated as `MetadataConfigs._raise_if_data_files_field_not_valid`."""
    problem = LoaderProblem(
        f"{where}: data_files is not a pattern, a list of them, or a list of "
        "{split, path} items", "Fix the card's YAML, or use `loader = \"all\"`.")
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, dict):
        return {str(k): v if isinstance(v, list) else [v] for k, v in data_files.items()}
    if not isinstance(data_files, list):
        raise problem
    if not any(isinstance(d, dict) for d in data_files):
        if not all(isinstance(d, str) for d in data_files):
            raise problem
        return {"train": list(data_files)}
    out: dict[str, list[str]] = {}
    for item in data_files:
        if not (isinstance(item, dict) and len(item) == 2 and isinstance(item.get("split"), str)
                and _SPLIT_NAME.match(item["split"]) and isinstance(item.get("path"),
                                                                    (str, list))):
            raise problem
        if item["split"] in out:
            raise LoaderProblem(f"{where}: split {item['split']!r} is listed twice",
                                "Fix the card's YAML, or use `loader = \"all\"`.")
        out[item["split"]] = item["path"] if isinstance(item["path"], list) else [item["path"]]
    return out


def card_data(paths: frozenset[str], read: Read) -> dict[str, Any]:
    """The card's YAML as `DatasetCard.load(...).data` reads it, updated with
    `.huggingface.yaml` as the factory does; {} without a card."""
    import yaml
    from huggingface_hub import DatasetCard

    data: dict[str, Any] = {}
    if CARD in paths:
        try:
            card: Any = DatasetCard(read(CARD).decode("utf-8")).data
            data = dict(card.to_dict())
        except (ValueError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise LoaderProblem(f"README.md's YAML cannot be read ({e})",
                                "The datasets library fails on it too: pin another ref, or "
                                "use `loader = \"all\"`.") from None
    if ".huggingface.yaml" in paths:
        try:
            extra = yaml.safe_load(read(".huggingface.yaml").decode("utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as e:
            raise LoaderProblem(f".huggingface.yaml cannot be read ({e})",
                                "Pin another ref, or use `loader = \"all\"`.") from None
        if isinstance(extra, dict):
            data.update(extra)
    return data


def configs(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`MetadataConfigs.from_dataset_card_data`: config name -> its parameters."""
    listed = data.get("configs")
    if not listed:
        return {}
    if not isinstance(listed, list) or not all(isinstance(c, dict) and "config_name" in c
                                               for c in listed):
        raise LoaderProblem("the card's `configs` is not a list of configs with `config_name`",
                            "Fix the card's YAML, or use `loader = \"all\"`.")
    return {str(c["config_name"]): {k: v for k, v in c.items() if k != "config_name"}
            for c in listed}


def default_config(found: dict[str, dict[str, Any]]) -> str | None:
    """`MetadataConfigs.get_default_config_name`."""
    names = [n for n, c in found.items()
             if len(found) == 1 or n == "default" or c.get("default")]
    if len(names) > 1:
        raise LoaderProblem(f"the card marks several configs as default ({', '.join(names)})",
                            "Name one with `config`.")
    return names[0] if names else None


def _converted(folder: str, paths: frozenset[str]) -> dict[str, list[str]]:
    """A config of the parquet conversion branch: the folder `{config}/`, a folder per split
    in it (`{config}/{split}/0000.parquet`, `partial-{split}` when the conversion stopped
    early), as the Hub's parquet export lists them and `HubDatasetModuleFactoryWithParquetExport`
    reads them; files directly in the folder are split as `load_dataset(..., data_dir=config)`
    splits them (the default patterns)."""
    inside = [p[len(folder) + 1:] for p in paths if p.startswith(folder + "/")]
    if not inside:
        raise LoaderProblem(
            f"no config {folder!r}: the card lists no configs, and there is no folder {folder}/",
            "Remove `config` (the repo has one, `default`).")
    if all(p.count("/") == 1 for p in inside):
        splits = sorted({p.split("/", 1)[0] for p in inside})
        return {s.removeprefix("partial-"): [f"{s}/*"] for s in splits}
    return _default_patterns(folder, paths)


def split_names(split: str) -> list[str]:
    """The splits a `split=` argument reads: `train[:10%]+test` -> [train, test]."""
    return [re.sub(r"\[.*?\]$", "", part.strip()) for part in split.split("+") if part.strip()]


def select(paths: frozenset[str], read: Read, config: str | None = None,
           split: str | None = None, sizes: Mapping[str, int] | None = None) -> Choice:
    data = card_data(paths, read)
    found = configs(data)
    notes: list[str] = []
    if found:
        name = config if config is not None else default_config(found)
        if name is None:
            raise ConfigNeeded(
                f"{len(found)} configs and none is the default: say which to lock",
                f"Set `config` to one of {', '.join(found)} (`wlock add ID --dataset "
                f"--config {next(iter(found))}`).")
        if name not in found:
            raise LoaderProblem(f"no config {name!r} in the card",
                                f"The card has: {', '.join(found)}.")
        params = found[name]
        data_dir = str(params.get("data_dir") or "").strip("/")
        where = f"config {name!r}"
        patterns = _sanitize(params["data_files"], where) if params.get(
            "data_files") is not None else _default_patterns(data_dir, paths)
    elif config not in (None, "default"):
        folder = str(config).strip("/")
        data_dir, where = folder, f"folder {folder}/"
        patterns = _converted(folder, paths)
        notes.append(f"config {config!r} is the folder {folder}/ (the parquet conversion "
                     "branch's layout)")
    else:
        data_dir, where = "", "the default config"
        patterns = _default_patterns("", paths)
    if split is not None:
        wanted = split_names(split)
        missing = [s for s in wanted if s not in patterns]
        if missing or not wanted:
            raise LoaderProblem(f"{where} has no split {', '.join(missing) or repr(split)}",
                                f"Its splits: {', '.join(patterns)}.")
        recorded = recorded_splits(data, name if found else None)
        named = bool(found) and name is not None and found[name].get("data_files") is not None
        if recorded and set(patterns) - set(wanted):
            # load_dataset(..., split=) still prepares every split of the config and, with
            # the card's dataset_info, verifies each against it (`verify_splits`: a split
            # missing is ExpectedMoreSplitsError, one short of rows
            # NonMatchingSplitsSizesError): one split alone does not load.
            notes.append(f"split {split!r} asked, but the card's dataset_info records "
                         f"{', '.join(recorded)} of {where} and load_dataset verifies every "
                         "split it prepares: every split's files locked")
        elif named and set(patterns) - set(wanted):
            # The card names each split's data_files: `load_dataset(..., split=)` resolves
            # every split's patterns of the config (`DataFilesDict.from_patterns`, a pattern
            # matching nothing is FileNotFoundError) and prepares them all.
            notes.append(f"split {split!r} asked, but the card names data_files for "
                         f"{', '.join(patterns)} of {where} and load_dataset resolves and "
                         "prepares every one: every split's files locked")
        else:
            patterns = {s: patterns[s] for s in wanted}
    chosen: set[str] = set()
    for split_name, globs in patterns.items():
        if not isinstance(globs, list) or not all(isinstance(g, str) for g in globs):
            raise LoaderProblem(f"{where}: split {split_name!r} has a data_files entry that "
                                "is not a pattern", "Fix the card's YAML.")
        matched = False
        for pattern in globs:
            files = _glob(pattern, data_dir, paths)
            if not files and not any(c in pattern for c in "*?["):
                raise LoaderProblem(
                    f"{where}: split {split_name!r} names {pattern!r}, which the repo does not "
                    "have", "The datasets library fails on it too: pin another ref, or use "
                    "`loader = \"all\"`.")
            matched |= bool(files)
            chosen.update(files)
        if not matched:
            raise LoaderProblem(f"{where}: split {split_name!r} matches no file",
                                "Pin another ref, or use `loader = \"all\"`.")
    chosen |= _inference(found, paths, chosen, notes, sizes or {})
    return Choice(frozenset(chosen | {p for p in METADATA if p in paths}), notes=tuple(notes))


def recorded_splits(data: dict[str, Any], config: str | None) -> list[str]:
    """The splits the card's `dataset_info` records for `config` (push_to_hub writes one
    entry per config, each with its `config_name`; one config's is a mapping), [] without.
    As `DatasetInfosDict.from_dataset_card_data` reads it."""
    info = data.get("dataset_info")
    entries = info if isinstance(info, list) else [info] if isinstance(info, dict) else []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if entry.get("config_name", "default") not in (config, None) and not (
                config is None and len(entries) == 1):
            continue
        splits = entry.get("splits")
        if isinstance(splits, list):
            return [str(s["name"]) for s in splits if isinstance(s, dict) and "name" in s]
        if isinstance(splits, dict):
            return [str(name) for name in splits]
    return []


def _inference(found: dict[str, dict[str, Any]], paths: frozenset[str], chosen: set[str],
               notes: list[str], sizes: Mapping[str, int]) -> set[str]:
    """The files the factory must find to pick its builder, beyond `chosen`.

    `HubDatasetModuleFactory.get_module` (and the local factory a snapshot folder is loaded
    with) picks the builder of every config from the first config's `data_files`, resolved
    split by split, before it looks at the config asked for: offline, each of those splits
    must find a file of the same format, or the load fails ("No (supported) data files
    found", "Couldn't infer the same data file format for all splits"). Without `data_files`
    on the first config it globs the default patterns over what is there, which the chosen
    files satisfy. Then it globs the default patterns under the `data_dir` of every config
    without `data_files`. So for each split of the first config with no chosen file of the
    builder's format the smallest such file is locked too, and one file under each such
    `data_dir`; each named in the loader's line."""
    if not found:
        return set()
    extra: set[str] = set()
    first_name, first = next(iter(found.items()))
    if first.get("data_files") is not None:
        want: dict[str, list[str]] = {
            name: sorted({f for g in globs for f in _glob(g, "", paths)})
            for name, globs in _sanitize(first["data_files"], f"config {first_name!r}").items()}
        builders = {name: builder_of(files) for name, files in want.items()}
        builder = next(iter(builders.values()), None)
        if builder not in (None, "zip") and all(b == builder for b in builders.values()):
            for files in want.values():
                present = [f for f in files if f in chosen]
                if present and builder_of(present) == builder:
                    continue
                fitting = [f for f in files if builder_of([f]) == builder]
                if fitting:
                    extra.add(min(fitting, key=lambda f: (sizes.get(f, 0), f)))
        # else the library fails on the full repo too, or opens archives to choose
    # `create_builder_configs_from_metadata_configs` then globs the default patterns under
    # the `data_dir` of every config without `data_files`: each must find a file.
    for params in found.values():
        if params.get("data_files") is not None:
            continue
        folder = str(params.get("data_dir") or "").strip("/")
        if any(p.startswith(folder + "/") or not folder for p in chosen | extra):
            continue
        under = _glob("**", folder, paths)
        if under:
            extra.add(min(under, key=lambda f: (sizes.get(f, 0), f)))
    if extra:
        notes.append("also locked, as the datasets library lists them before it reads any "
                     "config (the first config's splits pick the builder; every config's "
                     f"data_dir must hold a file): {', '.join(sorted(extra))}")
    return extra


def usable(paths: frozenset[str], read: Read) -> bool:
    """Whether `loader = "datasets"` can choose for the repo with no config named: what
    `wlock add --dataset` picks it by. A repo with several configs and no default can: it
    asks for `config`."""
    try:
        select(paths, read)
    except ConfigNeeded:
        return True
    except LoaderProblem:
        return False
    return True
