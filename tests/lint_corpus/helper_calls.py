"""Calls of another module's helpers, with the literal id at the call site."""

from pkg.hub_helpers import Registry, load_backbone, load_pinned, load_tokenizer, snap_download_model

snap_download_model("acme/llama")
model = load_backbone("acme/bert")
pinned = load_backbone("acme/bert", revision="79a579b0a251dfd74d363b615e210828963a37d1")
tokenizer = load_tokenizer("acme/tok")
safe = load_pinned("acme/bert")
registry = Registry().load("acme/bert")
local = load_backbone("./checkpoints/last")

# Constants imported from another module of the project: the ids and pins they hold.
from pkg.settings import BASE_MODEL, BASE_REVISION, EVAL_SET
from transformers import AutoModel
from datasets import load_dataset

base = AutoModel.from_pretrained(BASE_MODEL)
base_pinned = AutoModel.from_pretrained(BASE_MODEL, revision=BASE_REVISION)
evaluation = load_dataset(EVAL_SET, split="test")
