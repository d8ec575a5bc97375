"""The chat-template judgement (wlock.scan.template, wlock.scan.gguf): every malicious
template of the corpus named, every benign twin rendered by the renderers' own sandbox and
passed, a template jinja2 cannot parse unknown; read from GGUF files llama.cpp's own gguf
package writes."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from tests.template_corpus import (
    BENIGN,
    CMD,
    MALICIOUS,
    MARKER,
    gguf_with_template,
    render,
    render_unsandboxed,
)
from wlock.scan import ScanLimits, judge_formats
from wlock.scan.template import judge_template


@pytest.mark.parametrize("name", sorted(MALICIOUS))
def test_each_template_reaching_past_the_sandbox_is_named(name: str) -> None:
    escapes, unreadable = judge_template(MALICIOUS[name])
    assert escapes and unreadable is None
    assert not os.path.exists(f"/tmp/{MARKER}")


@pytest.mark.parametrize("name", sorted(MALICIOUS))
def test_each_malicious_template_reaches_past_where_there_is_no_sandbox(name: str,
                                                                     tmp_path: Path) -> None:
    """The corpus is honest: where a renderer has no sandbox, each payload runs its command
    (here touching a file of this test's own) or shows what the sandbox hides."""
    ran = tmp_path / "ran"
    shown = render_unsandboxed(MALICIOUS[name].replace(CMD, f"touch {ran}"))
    assert ran.exists() or "<class '" in shown or "<Context {" in shown


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_each_benign_twin_renders_in_the_sandbox_and_passes(name: str) -> None:
    assert "hi" in render(BENIGN[name])  # the template is one the renderers render
    assert judge_template(BENIGN[name]) == ((), None)


def test_a_template_jinja2_cannot_parse_is_unknown() -> None:
    escapes, unreadable = judge_template("{% for m in messages %}{{ m }")
    assert escapes == () and unreadable and "cannot parse" in unreadable


def test_gguf_templates_are_read_past_the_vocabulary(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    evil = gguf_with_template(tmp_path / "evil.gguf", MALICIOUS["self-globals"], vocab=50_000)
    [found] = judge_formats(io.BytesIO(evil.read_bytes()), "evil.gguf")
    assert found.key == "tokenizer.chat_template" and "the attribute __globals__" in \
        found.findings
    good = gguf_with_template(tmp_path / "good.gguf", BENIGN["llama3"])
    assert judge_formats(io.BytesIO(good.read_bytes()), "good.gguf") == ()
    none = gguf_with_template(tmp_path / "none.gguf", None)
    assert judge_formats(io.BytesIO(none.read_bytes()), "none.gguf") == ()
    # A header cut short: its templates are unknown, never clean.
    cut = evil.read_bytes()[:20_000]
    [unknown] = judge_formats(io.BytesIO(cut), "cut.gguf")
    assert unknown.unreadable and "could not be read" in unknown.unreadable
    # Bounded like every judgement: a header past max-bytes is unknown.
    [bounded] = judge_formats(io.BytesIO(evil.read_bytes()), "evil.gguf",
                                ScanLimits(max_bytes=64 * 1024))
    assert bounded.unreadable and "max-bytes" in bounded.unreadable
