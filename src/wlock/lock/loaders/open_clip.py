"""`open_clip.create_model_and_transforms("hf-hub:id")`: its config, weights and tokenizer.

Mirrors open_clip's `factory._get_hf_config` (open_clip_config.json) and
`pretrained.download_pretrained_from_hf` (open_clip_model.safetensors when present, else
open_clip_pytorch_model.bin); `get_tokenizer` reads the HF tokenizer files beside them. Every
other file is kept but what `loaders.unread` names (the transformers `model.safetensors` copy
many CLIP repos carry, other formats).
"""

from __future__ import annotations

from wlock.lock.loaders import Choice, Read, beside, weights

NAMES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    return Choice(beside(paths, weights(paths, "", NAMES, read) or ()))
