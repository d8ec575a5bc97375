"""Calls of another module's helpers, with the literal id at the call site."""

from pkg.hub_helpers import Registry, load_backbone, load_pinned, load_tokenizer, snap_download_model

snap_download_model("acme/llama")
model = load_backbone("acme/bert")
pinned = load_backbone("acme/bert", revision="79a579b0a251dfd74d363b615e210828963a37d1")
tokenizer = load_tokenizer("acme/tok")
safe = load_pinned("acme/bert")
registry = Registry().load("acme/bert")
local = load_backbone("./checkpoints/last")
