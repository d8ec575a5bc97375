"""`wlock lint` on a corpus covering every call family: exact findings, the formats, --fix
and the settings. The corpus and its weights.lock are in tests/lint_corpus/."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_wlock

CORPUS = ROOT / "tests" / "lint_corpus"
BERT = "79a579b0a251dfd74d363b615e210828963a37d1"

# (where, code, repo, param): reviewed by hand against the comments in the corpus.
EXPECTED = [
    # A variable with a literal default one hop away is judged by that default; the fix names
    # the variable (wlock.revision(args.model_name)), so --fix leaves these to a person.
    ("defaults_cases.py:35:13", "WL101", "acme/bert", "revision"),
    ("defaults_cases.py:36:13", "WL102", "acme/bert", "revision"),
    ("defaults_cases.py:38:15", "WL103", "acme/bert", "revision"),
    ("defaults_cases.py:39:15", "WL101", "acme/adapter", "revision"),
    ("defaults_cases.py:40:12", "WL200", None, "revision"),
    ("defaults_cases.py:43:13", "WL101", "acme/llama", "revision"),
    ("defaults_cases.py:44:17", "WL101", "acme/tok", "revision"),
    ("defaults_cases.py:45:11", "WL101", "acme/bert", "revision"),
    ("defaults_cases.py:46:14", "WL104", "someone/else", "revision"),
    ("defaults_cases.py:53:5", "WL101", "acme/st", "revision"),
    ("defaults_cases.py:57:5", "WL103", "acme/coder", "revision"),
    ("defaults_cases.py:58:5", "WL101", "acme/tok", "revision"),
    ("defaults_cases.py:65:9", "WL101", "acme/st", "revision"),  # a class attribute
    # Helpers that pass their parameter as the id, called from another module: judged at the
    # call site's literal, naming the load it reaches (the WL200s inside them stay).
    ("helper_calls.py:5:1", "WL101", "acme/llama", "revision"),
    ("helper_calls.py:6:9", "WL101", "acme/bert", "revision"),
    ("helper_calls.py:8:13", "WL102", "acme/tok", "revision"),
    # Repo ids in constants imported from the project's settings module (pins too).
    ("helper_calls.py:18:8", "WL101", "acme/bert", "revision"),
    ("helper_calls.py:20:14", "WL101", "acme/squad", "path"),
    # The same helper imported in parentheses over several lines, as formatters wrap it.
    ("helper_calls_wrapped.py:7:11", "WL101", "acme/llama", "revision"),
    ("hub_cases.py:12:10", "WL101", "acme/bert", "revision"),
    ("hub_cases.py:14:10", "WL102", "acme/bert", "revision"),
    ("hub_cases.py:15:14", "WL101", "acme/squad", "revision"),
    ("hub_cases.py:17:12", "WL101", "acme/bert", "revision"),
    ("hub_cases.py:19:9", "WL101", "acme/squad", "path"),
    ("hub_cases.py:21:11", "WL102", "acme/squad", "path"),
    ("hub_cases.py:24:16", "WL101", "acme/squad", "path"),
    ("hub_cases.py:26:6", "WL101", "acme/st", "revision"),
    ("hub_cases.py:28:6", "WL101", "acme/st", "revision"),
    ("hub_cases.py:32:12", "WL101", "acme/llama", "tokenizer_revision"),
    ("hub_cases.py:33:11", "WL101", "acme/tok", "tokenizer_revision"),
    ("hub_cases.py:35:25", "WL101", "acme/vit", "@"),
    ("hub_cases.py:37:61", "WL102", "acme/clip", "@"),
    ("hub_cases.py:38:36", "WL101", "acme/clip", "@"),
    ("hub_cases.py:40:25", "WL101", "acme/squad", "@"),
    ("hub_cases.py:45:16", "WL103", "acme/bert", "revision"),
    ("hub_cases.py:46:17", "WL103", "acme/squad", "path"),
    ("hub_cases.py:47:15", "WL103", "acme/st", "revision"),
    ("hub_cases.py:48:16", "WL103", "acme/llama", "revision"),
    ("hub_cases.py:48:16", "WL103", "acme/llama", "tokenizer_revision"),
    ("hub_cases.py:49:35", "WL103", "acme/vit", "@"),
    ("hub_cases.py:50:27", "WL103", "acme/squad", "@"),
    ("hub_cases.py:54:5", "WL200", None, "revision"),
    ("hub_cases.py:55:5", "WL200", None, "revision"),
    ("hub_cases.py:56:5", "WL200", None, "revision"),
    ("hub_cases.py:57:5", "WL200", None, "revision"),
    ("hub_cases.py:57:5", "WL200", None, "tokenizer_revision"),
    ("hub_cases.py:58:12", "WL200", "acme/bert", "revision"),
    # SparseEncoder; FlagEmbedding (no revision parameter: the locked folder, never --fix);
    # vLLM's get_tokenizer; metadata calls; timm's older hf_hub:; hf:// built with an
    # f-string or + (judged, never rewritten), pinned through a constant in an f-string.
    ("hub_cases.py:72:10", "WL101", "acme/st", "revision"),
    ("hub_cases.py:73:7", "WL101", "acme/st", "revision"),
    ("hub_cases.py:74:6", "WL101", "acme/st", "revision"),
    ("hub_cases.py:76:12", "WL101", "acme/tok", "revision"),
    ("hub_cases.py:77:8", "WL101", "acme/bert", "revision"),
    ("hub_cases.py:79:8", "WL101", "acme/bert", "revision"),
    ("hub_cases.py:80:14", "WL102", "acme/squad", "revision"),
    ("hub_cases.py:81:30", "WL101", "acme/vit", "@"),
    ("hub_cases.py:83:25", "WL101", "acme/squad", "@"),
    ("hub_cases.py:84:26", "WL102", "acme/squad", "@"),
    ("hub_cases.py:98:8", "WL101", "acme/st", "revision"),  # FlagAutoModel.from_finetuned
    ("hub_cases.py:99:10", "WL101", "acme/st", "revision"),  # an os.getenv default
    ("notebook.ipynb:cell 3:1:9", "WL101", "acme/bert", "revision"),
    ("pkg/hub_helpers.py:10:12", "WL200", None, "revision"),
    ("pkg/hub_helpers.py:14:12", "WL200", None, "revision"),
    ("pkg/hub_helpers.py:18:12", "WL200", None, "revision"),
    ("pkg/hub_helpers.py:27:16", "WL200", None, "revision"),
    ("pkg/hub_helpers.py:30:12", "WL101", "acme/bert", "revision"),
    ("transformers_cases.py:31:12", "WL101", "acme/bert", "revision"),
    ("transformers_cases.py:32:19", "WL101", "acme/bert", "revision"),
    ("transformers_cases.py:33:10", "WL102", "acme/bert", "revision"),
    ("transformers_cases.py:34:9", "WL102", "acme/bert", "revision"),
    ("transformers_cases.py:35:19", "WL102", "acme/bert", "revision"),
    ("transformers_cases.py:36:12", "WL103", "acme/bert", "revision"),
    ("transformers_cases.py:37:14", "WL103", "acme/bert", "revision"),
    ("transformers_cases.py:38:14", "WL104", "someone/else", "revision"),
    ("transformers_cases.py:39:13", "WL104", "gpt2", "revision"),
    ("transformers_cases.py:40:14", "WL101", "acme/llama", "revision"),
    ("transformers_cases.py:49:16", "WL101", "acme/bert", "revision"),
    ("transformers_cases.py:53:9", "WL200", None, "revision"),
    ("transformers_cases.py:54:9", "WL200", "acme/bert", "revision"),
    ("transformers_cases.py:55:9", "WL200", "acme/bert", "revision"),
    ("transformers_cases.py:66:17", "WL101", "acme/bert", "revision"),
    ("transformers_cases.py:67:19", "WL101", "acme/llama", "revision"),
    ("transformers_cases.py:68:16", "WL106", None, "revision"),
    ("transformers_cases.py:71:11", "WL101", "acme/adapter", "revision"),
    ("transformers_cases.py:72:13", "WL101", "acme/adapter", "revision"),
    ("transformers_cases.py:74:14", "WL102", "acme/sd", "revision"),
    ("transformers_cases.py:75:11", "WL101", "acme/sd", "revision"),
    ("transformers_cases.py:76:7", "WL101", "acme/tok", "revision"),
    # Remote code with no revision at all: the revision and the code's both unpinned.
    ("transformers_cases.py:77:19", "WL101", "acme/coder", "revision"),
    ("transformers_cases.py:77:19", "WL105", "acme/coder", "code_revision"),
    # code_revision given as a branch: judged like any revision.
    ("transformers_cases.py:78:17", "WL102", "acme/coder", "code_revision"),
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    shutil.copytree(CORPUS, tmp_path / "corpus")
    return tmp_path / "corpus"


def findings(result) -> list[tuple[str, str, str | None, str]]:  # type: ignore[no-untyped-def]
    out = []
    for f in json.loads(result.stdout)["findings"]:
        cell = f":cell {f['cell']}" if f["cell"] else ""
        out.append((f"{f['path']}{cell}:{f['line']}:{f['col']}", f["code"], f["repo"], f["param"]))
    return out


def test_every_family_gives_the_exact_findings(corpus: Path) -> None:
    result = run_wlock("lint", "--format", "json", cwd=corpus)
    assert result.code == 1
    assert findings(result) == EXPECTED
    report = json.loads(result.stdout)
    assert report["files"] == 8  # excluded/ is skipped by [tool.wlock.lint] exclude
    # Among them FlagReranker(wlock.snapshot_path("acme/st")), and the code_revision of each
    # trust_remote_code load (judged by where the lock says its code is).
    assert report["loads"] == 118


def test_text_output_says_what_to_write(corpus: Path) -> None:
    result = run_wlock("lint", "transformers_cases.py", cwd=corpus)
    lines = result.stdout.splitlines()
    assert lines[0] == (
        'transformers_cases.py:31:12: WL101 AutoModel.from_pretrained() loads model "acme/bert" '
        'without a pinned revision; write revision=wlock.revision("acme/bert") (it follows '
        f'weights.lock: {BERT[:7]} now), or the commit, revision="{BERT}"'
    )
    assert (
        'transformers_cases.py:74:14: WL102 DiffusionPipeline.from_pretrained() loads model '
        '"acme/sd" with revision="fp16": a variant, not a pin (use variant=); write '
        'revision=wlock.revision("acme/sd") (it follows weights.lock: 998760a now), or the '
        'commit, revision="998760a71daad75d67d1b86bc401ec547f5dd421"'
    ) in lines
    assert (
        'transformers_cases.py:38:14: WL104 AutoModel.from_pretrained() loads model '
        '"someone/else", which is not in weights.lock; run `wlock add someone/else` (it '
        'locks it)'
    ) in lines
    assert result.stderr.endswith("22 errors, 3 warnings in " + result.stderr.rsplit(" in ", 1)[1])


@pytest.mark.parametrize("pin", ["lock", "commit"])
def test_fix_then_lint_leaves_nothing_fixable_and_code_that_parses(corpus: Path, pin: str
                                                                   ) -> None:
    """`fix-pin`: "lock" (the default) writes wlock.revision("org/name"), which follows
    weights.lock; "commit" the locked commit itself."""
    if pin == "commit":
        manifest = corpus / "weights.toml"
        manifest.write_text(manifest.read_text().replace(
            "[tool.wlock.lint]\n", '[tool.wlock.lint]\nfix-pin = "commit"\n'))
    fixed = run_wlock("lint", "--fix", "--format", "json", cwd=corpus)
    assert fixed.stderr.startswith("Fixed 52 findings in 6 files.")
    again = run_wlock("lint", "--format", "json", cwd=corpus)
    left = findings(again)
    assert [f for f in json.loads(again.stdout)["findings"] if f["fix"]] == []
    # What is left needs a person: another repo named, repos not in the lock, dynamic ids,
    # pipeline(task) without a model, and ids that are a variable's default.
    assert sorted({code for _, code, _, _ in left}) == [
        "WL101", "WL102", "WL103", "WL104", "WL106", "WL200"]
    assert {where.rsplit(":", 1)[0] for where, code, _, _ in left
            if code in ("WL101", "WL102") and not where.startswith("defaults_cases.py")} == {
        "hub_cases.py:73", "hub_cases.py:74",  # FlagEmbedding: no revision parameter
        "hub_cases.py:83", "hub_cases.py:84",  # hf:// built with an f-string or +
        "hub_cases.py:98", "hub_cases.py:99",  # FlagEmbedding again
        "helper_calls.py:5",  # the helper passes no revision: it is the helper to change
        "helper_calls.py:8",  # "main" is the helper's default: the caller's fix is a person's
    }
    for path in corpus.glob("*.py"):
        ast.parse(path.read_text())
    def pin_of(repo_id: str, commit: str) -> str:
        return f'wlock.revision("{repo_id}")' if pin == "lock" else f'"{commit}"'

    notebook = json.loads((corpus / "notebook.ipynb").read_text())
    cell = "".join(notebook["cells"][2]["source"])
    assert f'AutoModel.from_pretrained("acme/bert", revision={pin_of("acme/bert", BERT)})' in cell
    assert ("import wlock\n" in cell) == (pin == "lock")
    assert "".join(notebook["cells"][1]["source"]).startswith("%pip install transformers\n")
    text = (corpus / "transformers_cases.py").read_text()
    llama = "c84d61dfa5650c9d2af6b98349ecd54bb24f23a6"
    assert (
        '    "acme/llama",\n    torch_dtype="auto",\n'
        f'    revision={pin_of("acme/llama", llama)},\n)'
    ) in text
    hub_text = (corpus / "hub_cases.py").read_text()
    assert 'HfApi().hf_hub_download("acme/bert", "config.json", revision=' in hub_text
    assert (f'mismatch_llm = LLM(model="acme/llama", revision={pin_of("acme/llama", llama)}, '
            f'tokenizer_revision={pin_of("acme/llama", llama)})') in hub_text
    assert '"hf-hub:acme/clip@ce0c72bcc8eaaea1e4a3eaa0d7cf3bd9e757fd5a"' in (
        corpus / "hub_cases.py"
    ).read_text()


def test_fix_never_invents_a_pin_without_a_lock(corpus: Path) -> None:
    (corpus / "weights.lock").unlink()
    before = (corpus / "transformers_cases.py").read_text()
    result = run_wlock("lint", "--fix", cwd=corpus)
    assert result.code == 1
    assert result.stderr.startswith("Fixed 0 findings in 0 files.")
    assert (corpus / "transformers_cases.py").read_text() == before
    assert (
        'transformers_cases.py:31:12: WL101 AutoModel.from_pretrained() loads model "acme/bert" '
        'without a pinned revision; pin it: run `wlock add acme/bert` (it locks it), '
        'then write revision=wlock.revision("acme/bert")'
    ) in result.stdout.splitlines()
    assert "WL104" not in result.stdout  # without a lock there is nothing to be missing from
    assert "against no weights.lock (pins not compared)" in result.stderr


def test_github_annotations(corpus: Path) -> None:
    result = run_wlock("lint", "hub_cases.py", "--format", "github", cwd=corpus)
    first = result.stdout.splitlines()[0]
    assert first == (
        "::error file=hub_cases.py,line=12,col=10,title=wlock WL101::hf_hub_download() loads "
        'model "acme/bert" without a pinned revision; write revision=wlock.revision("acme/bert") '
        f'(it follows weights.lock: {BERT[:7]} now), or the commit, revision="{BERT}"'
    )


def test_sarif_report(corpus: Path) -> None:
    result = run_wlock("lint", "--format", "sarif", cwd=corpus)
    sarif = json.loads(result.stdout)
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    assert run["tool"]["driver"]["name"] == "wlock"
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert len(run["results"]) == len(EXPECTED)
    for result_, (where, code, _, _) in zip(run["results"], EXPECTED, strict=True):
        assert result_["ruleId"] == code and rule_ids[result_["ruleIndex"]] == code
        region = result_["locations"][0]["physicalLocation"]["region"]
        assert where.endswith(f":{region['startLine']}:{region['startColumn']}")
        assert result_["level"] == ("warning" if code == "WL200" else "error")
    # No link to documentation that does not exist.
    assert all("helpUri" not in rule for rule in run["tool"]["driver"]["rules"])


def test_paths_are_relative_to_the_repository_wherever_lint_runs(corpus: Path) -> None:
    """GitHub's annotations and SARIF resolve paths from the repository's root: run from a
    sub-folder, they still name the file from there; text too (as the other formats)."""
    repo = corpus.parent
    (repo / ".git").mkdir()
    sub = corpus / "excluded"
    github = run_wlock("lint", "../hub_cases.py", "--format", "github", cwd=sub)
    assert github.stdout.splitlines()[0].startswith(
        "::error file=corpus/hub_cases.py,line=12,col=10,title=wlock WL101::")
    sarif = json.loads(run_wlock("lint", "--format", "sarif", cwd=sub).stdout)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in sarif["runs"][0]["results"]}
    assert uris == {"corpus/defaults_cases.py", "corpus/helper_calls.py",
                    "corpus/helper_calls_wrapped.py", "corpus/hub_cases.py",
                    "corpus/notebook.ipynb", "corpus/pkg/hub_helpers.py",
                    "corpus/transformers_cases.py"}
    text = run_wlock("lint", "../notebook.ipynb", cwd=sub)
    assert text.stdout.startswith("corpus/notebook.ipynb:cell 3:1:9: WL101 ")  # as ruff


def test_a_file_that_does_not_parse_is_an_error(tmp_path: Path) -> None:
    """Its loads are unseen: that fails the gate (WL001), it is not a warning and exit 0."""
    (tmp_path / "weights.toml").write_text("")
    (tmp_path / "ok.py").write_text('from transformers import AutoModel\n')
    (tmp_path / "broken.py").write_text(
        'from transformers import AutoModel\nmodel = AutoModel.from_pretrained("a/b"\n')
    result = run_wlock("lint", "--format", "json", cwd=tmp_path)
    assert result.code == 1, result.stderr
    found = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["path"], f["line"], f["severity"]) for f in found] == [
        ("WL001", "broken.py", 2, "error")]
    assert "cannot parse" in found[0]["message"]
    text = run_wlock("lint", cwd=tmp_path)
    assert text.code == 1 and text.stdout.startswith("broken.py:2:")
    (tmp_path / "weights.toml").write_text('[tool.wlock.lint]\nseverity = { WL001 = "warning" }\n')
    assert run_wlock("lint", cwd=tmp_path).code == 0  # a project may choose to let it pass


def test_dynamic_ids_fail_only_when_asked(corpus: Path) -> None:
    (corpus / "dyn.py").write_text(
        "from transformers import AutoModel\n\n"
        "def load(name):\n    return AutoModel.from_pretrained(name)\n"
    )
    assert run_wlock("lint", "dyn.py", cwd=corpus).code == 0
    strict = run_wlock("lint", "dyn.py", "--fail-on-dynamic", cwd=corpus)
    assert strict.code == 1 and "WL200" in strict.stdout


def test_severity_and_config_errors(corpus: Path) -> None:
    toml = corpus / "weights.toml"
    toml.write_text(toml.read_text().replace(
        'exclude = ["excluded/*"]', 'exclude = ["excluded/*"]\nseverity = { WL104 = "off" }'))
    result = run_wlock("lint", "--format", "json", cwd=corpus)
    assert "WL104" not in {code for _, code, _, _ in findings(result)}
    toml.write_text(toml.read_text().replace('"off"', '"loud"'))
    bad = run_wlock("lint", cwd=corpus)
    assert bad.code == 4
    assert bad.stderr == (
        f"error: {toml}: `tool.wlock.lint.severity.WL104`: must be one of error, warning, off\n"
    )


def test_clean_code_passes(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(
        "import wlock\nfrom transformers import AutoModel\n"
        'm = AutoModel.from_pretrained("acme/x", revision=wlock.revision("acme/x"))\n'
        'local = AutoModel.from_pretrained("./out")\n'
    )
    result = run_wlock("lint", "ok.py", cwd=tmp_path)
    assert result.code == 0 and result.stdout == ""
    assert result.stderr.startswith("1 file, 1 Hub load checked against no weights.lock")


def test_settings_from_pyproject_without_a_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.wlock.lint]\nexclude = ["gen/*"]\n'
        'severity = { WL101 = "warning" }\n'
    )
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "skip.py").write_text(
        'from transformers import AutoModel\nAutoModel.from_pretrained("acme/x")\n')
    (tmp_path / "app.py").write_text(
        'from transformers import AutoModel\nAutoModel.from_pretrained("acme/x")\n')
    result = run_wlock("lint", ".", "--format", "json", cwd=tmp_path)
    assert result.code == 0  # WL101 is only a warning here
    report = json.loads(result.stdout)
    assert report["files"] == 1
    assert [(f["path"], f["code"], f["severity"]) for f in report["findings"]] == [
        ("app.py", "WL101", "warning")
    ]


def test_loaders_imported_under_another_name(tmp_path: Path) -> None:
    """`from huggingface_hub import hf_hub_download as _dl` (issue 13): the alias is a load
    like any other, and --fix pins it."""
    (tmp_path / "weights.toml").write_text('[[model]]\nid = "acme/bert"\n')
    shutil.copy(CORPUS / "weights.lock", tmp_path / "weights.lock")
    (tmp_path / "aliased.py").write_text(
        "from huggingface_hub import hf_hub_download as _dl, snapshot_download as snap\n"
        "from transformers import pipeline as make\n"
        '_dl("acme/bert", "config.json")\n'
        'snap(repo_id="acme/bert")\n'
        'make("fill-mask", model="acme/bert")\n'
        "def _dl2(x):\n    return x\n"
        '_dl2("acme/bert")\n'  # not a loader: a look-alike name
    )
    result = run_wlock("lint", "aliased.py", "--format", "json", cwd=tmp_path)
    assert result.code == 1, result.stderr
    found = [(f["line"], f["code"]) for f in json.loads(result.stdout)["findings"]]
    assert found == [(3, "WL101"), (4, "WL101"), (5, "WL101")]
    fixed = run_wlock("lint", "aliased.py", "--fix", cwd=tmp_path)
    assert fixed.code == 0, fixed.stdout + fixed.stderr
    assert '_dl("acme/bert", "config.json", revision=wlock.revision("acme/bert"))' in (
        tmp_path / "aliased.py").read_text()


def test_pre_commit_shapes_exclude_and_the_lock_itself(corpus: Path) -> None:
    """pre-commit passes changed files by name: an excluded file stays excluded, and a
    changed weights.lock (or weights.toml) lints the whole project (its pins may be stale)."""
    excluded = run_wlock("lint", "--format", "json", "excluded/skipped.py", cwd=corpus)
    assert excluded.code == 0 and json.loads(excluded.stdout)["files"] == 0
    whole = run_wlock("lint", "--format", "json", cwd=corpus)
    for changed in ("weights.lock", "weights.toml"):
        by_lock = run_wlock("lint", "--format", "json", changed, cwd=corpus)
        assert by_lock.code == 1
        assert json.loads(by_lock.stdout) == json.loads(whole.stdout)


def test_a_projects_own_loaders(tmp_path: Path) -> None:
    """[[tool.wlock.lint.loaders]]: a project's own helpers are judged like the known loaders,
    by the id and revision keywords it names (or none: the fix is the locked folder)."""
    (tmp_path / "weights.toml").write_text(
        '[[tool.wlock.lint.loaders]]\nname = "load_model"\nid = "model_id"\nrevision = "rev"\n'
        '\n[[tool.wlock.lint.loaders]]\nname = "fetch_corpus"\nid = "name"\nposition = 1\n'
        'revision = ""\nkind = "dataset"\n')
    (tmp_path / "train.py").write_text(
        "import wlock\n"
        "from project.hub import fetch_corpus, load_model\n"
        'a = load_model("acme/bert")\n'
        'b = load_model(model_id="acme/bert", rev="main")\n'
        f'c = load_model("acme/bert", rev="{BERT}")\n'
        'd = fetch_corpus("config", "acme/squad")\n'
        'e = fetch_corpus("config", wlock.snapshot_path("acme/squad", kind="dataset"))\n')
    result = run_wlock("lint", cwd=tmp_path)
    assert result.code == 1, result.stderr
    assert result.stdout.splitlines() == [
        'train.py:3:5: WL101 load_model() loads model "acme/bert" without a pinned rev; pin '
        'it: run `wlock add acme/bert` (it locks it), then write rev=wlock.revision('
        '"acme/bert")',
        'train.py:4:5: WL102 load_model() loads model "acme/bert" with rev="main": a branch, '
        'tag or short id, not a commit; pin it: run `wlock add acme/bert` (it locks it), '
        'then write rev=wlock.revision("acme/bert")',
        'train.py:6:5: WL101 fetch_corpus() loads dataset "acme/squad", which takes no '
        'revision; pass the locked commit\'s folder: fetch_corpus(wlock.snapshot_path('
        '"acme/squad"))',
    ]
    (tmp_path / "weights.toml").write_text(
        '[[tool.wlock.lint.loaders]]\nname = "load_model"\nid = "model id"\n')
    bad = run_wlock("lint", cwd=tmp_path)
    assert bad.code == 4 and "tool.wlock.lint.loaders[0].id" in bad.stderr, bad.stderr


def test_an_adapter_is_clean_only_with_its_base_in_the_lock(tmp_path: Path) -> None:
    """Issue 25: a pinned adapter reproduces nothing if its base follows `main`."""
    commit = "0c91b64fb8c39a57e248b8fa8bf64941edb91d8f"
    base = "79a579b0a251dfd74d363b615e210828963a37d1"
    (tmp_path / "weights.toml").write_text('[[model]]\nid = "acme/adapter"\nloader = "peft"\n')
    (tmp_path / "train.py").write_text(
        "from peft import PeftModel\n"
        f'm = PeftModel.from_pretrained(base_model, "acme/adapter", revision="{commit}")\n')
    entry = (f'[[model]]\nid = "acme/adapter"\nrequested = "main"\nrevision = "{commit}"\n'
             '{extra}files = []\n')
    base_entry = (f'\n[[model]]\nid = "acme/base"\nrequested = "{base}"\nrevision = "{base}"\n'
                  "files = []\n")
    header = ("# This file is generated by `wlock lock`. Do not edit it by hand.\nversion = 1\n"
              'manifest = "blake3:' + "0" * 64 + '"\n\n')
    cases = {
        "clean": (entry.format(extra='loader = "peft"\nrequires = ["acme/base"]\n') + base_entry,
                  None),
        "no loader": (entry.format(extra=""), 'its entry has no `loader = "peft"`'),
        "base gone": (entry.format(extra='loader = "peft"\nrequires = ["acme/base"]\n'),
                      "whose base model acme/base is not in weights.lock"),
    }
    for name, (lock, problem) in cases.items():
        (tmp_path / "weights.lock").write_text(header + lock)
        result = run_wlock("lint", "--format", "json", cwd=tmp_path)
        found = json.loads(result.stdout)["findings"]
        if problem is None:
            assert result.code == 0 and found == [], (name, result.stdout)
        else:
            assert result.code == 1, (name, result.stderr)
            assert [f["code"] for f in found] == ["WL107"], (name, found)
            assert problem in found[0]["message"], (name, found[0]["message"])


def test_a_script_exported_from_a_notebook_is_checked_and_fixed(tmp_path: Path) -> None:
    """Issue 28: a `!pip install` line made the whole file unparseable, so its loads went
    unchecked. IPython lines are blanked (as nbqa and ruff do for notebooks), kept by --fix."""
    shutil.copy(ROOT / "tests/lint_corpus/weights.lock", tmp_path / "weights.lock")
    shutil.copy(ROOT / "tests/lint_corpus/weights.toml", tmp_path / "weights.toml")
    script = ("# exported from Colab\n!pip install -q transformers\n%matplotlib inline\n"
              "from transformers import AutoModel\n\n"
              'model = AutoModel.from_pretrained("acme/bert")\n%%time\nx = (1\n     % 2)\n')
    (tmp_path / "colab.py").write_text(script)
    (tmp_path / "broken.py").write_text(
        '!pip install x\nfrom transformers import AutoModel\nAutoModel.from_pretrained("acme/bert"\n')
    result = run_wlock("lint", "--format", "json", cwd=tmp_path)
    found = sorted((f["path"], f["line"], f["code"]) for f in json.loads(result.stdout)["findings"])
    assert found == [("broken.py", 3, "WL001"), ("colab.py", 6, "WL101")], result.stdout
    fixed = run_wlock("lint", "--fix", "colab.py", cwd=tmp_path)
    assert fixed.code == 0, fixed.stderr
    assert (tmp_path / "colab.py").read_text() == script.replace(
        '"acme/bert")', '"acme/bert", revision=wlock.revision("acme/bert"))').replace(
        "from transformers import AutoModel\n", "from transformers import AutoModel\n"
        "import wlock\n")


def test_load_dataset_of_a_config_or_split_the_lock_does_not_hold(tmp_path: Path) -> None:
    """A dataset locked by config and split holds only those files (issue 37): a pinned
    load_dataset of another config (second argument or name=) or split fails offline."""
    commit = "0c91b64fb8c39a57e248b8fa8bf64941edb91d8f"
    (tmp_path / "weights.toml").write_text(
        '[[dataset]]\nid = "acme/web"\nloader = "datasets"\nconfig = "sample-10BT"\n'
        'split = "train"\n')
    (tmp_path / "weights.lock").write_text(
        "# This file is generated by `wlock lock`. Do not edit it by hand.\nversion = 1\n"
        'manifest = "blake3:' + "0" * 64 + '"\n\n'
        f'[[dataset]]\nid = "acme/web"\nrequested = "main"\nrevision = "{commit}"\n'
        'loader = "datasets"\nconfig = "sample-10BT"\nsplit = "train"\nfiles = []\n')
    cases = {
        f'load_dataset("acme/web", "sample-10BT", split="train", revision="{commit}")': None,
        f'load_dataset("acme/web", name="sample-10BT", split="train[:5%]", revision="{commit}")':
            None,
        f'load_dataset("acme/web", revision="{commit}", split="train")': None,
        f'load_dataset("acme/web", "sample-100BT", revision="{commit}")':
            'config "sample-100BT", but weights.lock holds its config "sample-10BT" only',
        f'load_dataset("acme/web", name="CC-MAIN-2024-10", revision="{commit}")':
            "--dataset --config CC-MAIN-2024-10",
        f'load_dataset("acme/web", "sample-10BT", split="test", revision="{commit}")':
            'split "test", but weights.lock holds its split "train" only',
    }
    for call, problem in cases.items():
        (tmp_path / "prep.py").write_text(f"from datasets import load_dataset\nd = {call}\n")
        result = run_wlock("lint", "--format", "json", cwd=tmp_path)
        found = json.loads(result.stdout)["findings"]
        if problem is None:
            assert result.code == 0 and found == [], (call, result.stdout)
        else:
            assert result.code == 1, (call, result.stderr)
            assert [f["code"] for f in found] == ["WL108"], (call, found)
            assert problem in found[0]["message"], (call, found[0]["message"])


def test_a_pin_variable_assigned_again_is_not_taken_for_the_pin(tmp_path: Path) -> None:
    """`rev = wlock.revision(id)` then `rev = "main"`: the load reads the branch, so it is
    not clean (issue 61: a lint that took the first assignment stayed green); the same code
    without the second assignment is."""
    (tmp_path / "weights.toml").write_text('[[model]]\nid = "acme/bert"\n')
    body = ('import wlock\nfrom transformers import AutoModel\n\n'
            'rev = wlock.revision("acme/bert")\n{again}'
            'model = AutoModel.from_pretrained("acme/bert", revision=rev)\n')
    (tmp_path / "pinned.py").write_text(body.format(again=""))
    (tmp_path / "moved.py").write_text(body.format(again='rev = "main"\n'))
    pinned = run_wlock("lint", "--format", "json", "pinned.py", cwd=tmp_path)
    moved = run_wlock("lint", "--format", "json", "moved.py", cwd=tmp_path)
    assert json.loads(pinned.stdout)["findings"] == [], pinned.stdout
    found = json.loads(moved.stdout)["findings"]
    assert [(f["line"], f["code"]) for f in found] == [(6, "WL200")], moved.stdout


def _python312() -> str:
    """A Python 3.12 or newer beside the one running the tests (this machine's pyenv keeps
    several; Debian 12 has none)."""
    import glob
    import os
    import sys

    # pyenv's own folders (its shims answer only for the version it selects), else PATH's.
    found = next(iter(sorted(glob.glob(os.path.expanduser(
        "~/.pyenv/versions/3.1[2-9]*/bin/python3")))), None) or next(
        (p for p in map(shutil.which, ("python3.12", "python3.13")) if p and "shims" not in p),
        None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no Python 3.12 or newer on this machine: the test of lint reading "
                        "newer syntax needs one")
        pytest.skip("no Python 3.12 or newer here")
    assert sys.version_info[:2] < (3, 12), "run this test under Python 3.11"
    return found


NEWER_SYNTAX = '''\
from transformers import AutoModel

type Ids = list[str]


def first[T](items: list[T]) -> T:
    return items[0]


name = "model"
print(f"loading {f"{name!r}"}")
model = AutoModel.from_pretrained("acme/tiny")
'''


def test_code_in_a_newer_pythons_syntax_is_read_by_the_projects_interpreter(tmp_path: Path
                                                                             ) -> None:
    """Issue 61: under Python 3.11, a file written for 3.12 (`type X = ...`, `def f[T]`, an
    f-string nesting its own quotes) was WL001 "cannot parse" and its unpinned load unseen.
    The project's interpreter (its `.venv`, or --python) parses it: the load is found, no
    syntax finding. Its own grammar still judges a file that is broken under it too."""
    import os
    import subprocess

    newer = _python312()
    (tmp_path / "weights.toml").write_text("")
    (tmp_path / "train.py").write_text(NEWER_SYNTAX)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    alone = run_wlock("lint", "--format", "json", "--python", sys_python(), cwd=tmp_path,
                      env={"VIRTUAL_ENV": ""})
    assert [f["code"] for f in json.loads(alone.stdout)["findings"]] == ["WL001"]
    subprocess.run([newer, "-m", "venv", "--without-pip", str(tmp_path / ".venv")], check=True,
                   env=env)
    result = run_wlock("lint", "--format", "json", cwd=tmp_path, env={"VIRTUAL_ENV": ""})
    assert result.code == 1, result.stderr
    found = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["path"], f["line"]) for f in found] == [("WL101", "train.py", 12)]
    (tmp_path / "train.py").write_text(NEWER_SYNTAX + "x = (\n")
    broken = run_wlock("lint", "--format", "json", "--python", newer, cwd=tmp_path)
    assert [f["code"] for f in json.loads(broken.stdout)["findings"]] == ["WL001"]


def sys_python() -> str:
    import sys

    return sys.executable


def test_json_and_format_json_print_one_document(tmp_path: Path) -> None:
    """Issue 61: `lint --json` printed wlock's contract (schema, ok, command, exit_code) and
    `lint --format json` the report alone; both now print the same document, an error's
    included."""
    (tmp_path / "weights.toml").write_text("")
    (tmp_path / "t.py").write_text('from transformers import AutoModel\n'
                                   'AutoModel.from_pretrained("a/b")\n')
    documents = []
    for flags in (("--json",), ("--format", "json"), ("--format=json",)):
        done = run_wlock("lint", *flags, cwd=tmp_path)
        assert done.code == 1, done.stderr
        document = json.loads(done.stdout)
        document.pop("seconds", None)
        documents.append(document)
    assert documents[0] == documents[1] == documents[2]
    assert documents[0]["command"] == "lint" and documents[0]["exit_code"] == 1
    (tmp_path / "weights.toml").write_text("[tool.wlock.lint]\nbogus = 1\n")
    for flags in (("--json",), ("--format", "json")):
        failed = run_wlock("lint", *flags, cwd=tmp_path)
        assert failed.code == 4
        assert json.loads(failed.stdout)["error"]["kind"] == "invalid file"
