"""The chat templates of real models, as their files ship them: the Ollama library's models'
GGUF templates (Llama 3.x/4, Qwen 2.5/3, Gemma 2/3, Mistral, Mixtral, DeepSeek, Phi 3/4,
Granite, Command R, ...), as Hugging Face's @huggingface/ollama-utils records them in
src/chat-template-automap.ts. `.ci/corpora` brings the npm package; node reads the TypeScript
file's array (its types stripped), so no hand-written parser decides what a template is."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TARBALL = ROOT / ".corpora" / "huggingface-ollama-utils-0.0.18.tgz"
MEMBER = "package/src/chat-template-automap.ts"
READ = """
const fs = require("fs");
const src = fs.readFileSync(process.argv[1], "utf8")
  .replace(/^import type .*$/m, "")
  .replace(/^export const OLLAMA_CHAT_TEMPLATE_MAPPING: OllamaChatTemplateMapEntry\\[\\] =/m,
           "module.exports =");
const m = new module.constructor();
m._compile(src, process.argv[1]);
const out = {};
for (const e of m.exports) {
  if (!e.gguf) continue;
  let name = e.model, n = 1;
  while (name in out) name = `${e.model} (${++n})`;  // a tag listed again, another file
  out[name] = e.gguf;
}
process.stdout.write(JSON.stringify(out));
"""


def real_chat_templates(tmp: Path) -> dict[str, str]:
    """{Ollama model tag: its chat template}."""
    if not TARBALL.exists():
        pytest.fail(f"{TARBALL} is missing: run `bash .ci/corpora` (it fetches the npm package "
                    "@huggingface/ollama-utils the real-template corpus comes from)")
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed to read the real-template corpus (Debian: apt-get "
                    "install nodejs)")
    with tarfile.open(TARBALL) as tar:
        source = tar.extractfile(MEMBER)
        assert source is not None
        (tmp / "automap.ts").write_bytes(source.read())
    read = subprocess.run([node, "-e", READ, str(tmp / "automap.ts")], capture_output=True,
                          text=True, check=True)
    templates: dict[str, str] = json.loads(read.stdout)
    return templates
