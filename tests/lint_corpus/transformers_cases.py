"""transformers, tokenizers, peft and diffusers: pinned, unpinned, wrongly pinned, mismatched,
dynamic and local cases. The expected findings are in tests/cli/test_lint.py."""

from pathlib import Path

import transformers
import wlock
from diffusers import DiffusionPipeline, UNet2DConditionModel
from peft import AutoPeftModelForCausalLM, PeftModel
from tokenizers import Tokenizer
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoProcessor,
    AutoTokenizer,
    BertModel,
    GenerationConfig,
    pipeline,
)
from wlock import revision as locked_revision

BERT = "79a579b0a251dfd74d363b615e210828963a37d1"
NOT_A_PIN = "main"

ok_literal = AutoModel.from_pretrained("acme/bert", revision="79a579b0a251dfd74d363b615e210828963a37d1")
ok_constant = AutoTokenizer.from_pretrained("acme/bert", revision=BERT)
ok_wlock = AutoConfig.from_pretrained("acme/bert", revision=wlock.revision("acme/bert"))
ok_alias = BertModel.from_pretrained("acme/bert", revision=locked_revision("acme/bert"))

unpinned = AutoModel.from_pretrained("acme/bert")
unpinned_module = transformers.AutoModelForSequenceClassification.from_pretrained("acme/bert")
branch = AutoProcessor.from_pretrained("acme/bert", revision="main")
short = GenerationConfig.from_pretrained("acme/bert", revision="79a579b")
constant_branch = AutoModel.from_pretrained("acme/bert", revision=NOT_A_PIN)
mismatch = AutoModel.from_pretrained("acme/bert", revision="0000000000000000000000000000000000000000")
other_repo = AutoModel.from_pretrained("acme/bert", revision=wlock.revision("acme/llama"))
not_locked = AutoModel.from_pretrained("someone/else", revision="1111111111111111111111111111111111111111")
canonical = AutoModel.from_pretrained("gpt2")
multi_line = AutoModelForCausalLM.from_pretrained(
    "acme/llama",
    torch_dtype="auto",
)
remote = AutoModelForCausalLM.from_pretrained(
    "acme/coder", revision="adc2d41cb395a6bf38eb05157e79829a9c8535ad", trust_remote_code=True
)
ignored = AutoModel.from_pretrained("acme/bert")  # wlock: ignore[WL101]
ignored_all = AutoModel.from_pretrained("acme/bert")  # wlock: ignore
wrong_ignore = AutoModel.from_pretrained("acme/bert")  # wlock: ignore[WL104]


def dynamic(name, rev, **kwargs):
    a = AutoModel.from_pretrained(name)
    b = AutoModel.from_pretrained("acme/bert", revision=rev)
    c = AutoModel.from_pretrained("acme/bert", **kwargs)
    return a, b, c


local_dot = AutoModel.from_pretrained("./checkpoints/best")
local_abs = AutoModel.from_pretrained("/models/bert")
local_up = AutoModel.from_pretrained("../bert")
local_path = AutoModel.from_pretrained(Path("out") / "final")
local_div = AutoModel.from_pretrained(Path.home() / "bert")

pipe_ok = pipeline("fill-mask", model="acme/bert", revision=BERT)
pipe_unpinned = pipeline("fill-mask", model="acme/bert")
pipe_positional = pipeline("text-generation", "acme/llama")
pipe_default = pipeline("sentiment-analysis")

adapter_ok = PeftModel.from_pretrained(ok_literal, "acme/adapter", revision="0c91b64fb8c39a57e248b8fa8bf64941edb91d8f")
adapter = PeftModel.from_pretrained(ok_literal, "acme/adapter")
auto_peft = AutoPeftModelForCausalLM.from_pretrained("acme/adapter")

sd_variant = DiffusionPipeline.from_pretrained("acme/sd", revision="fp16")
sd_unet = UNet2DConditionModel.from_pretrained("acme/sd", subfolder="unet")
tok = Tokenizer.from_pretrained("acme/tok")
remote_unpinned = AutoModelForCausalLM.from_pretrained("acme/coder", trust_remote_code=True)
remote_branch = AutoModelForCausalLM.from_pretrained(
    "acme/coder", revision="adc2d41cb395a6bf38eb05157e79829a9c8535ad", trust_remote_code=True,
    code_revision="main",
)
