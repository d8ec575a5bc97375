"""`open_clip.create_model_and_transforms("hf-hub:id")`: its config, weights and tokenizer.

Mirrors open_clip's `factory._get_hf_config` (open_clip_config.json) and
`pretrained.download_pretrained_from_hf` (open_clip_model.safetensors when present, else
open_clip_pytorch_model.bin); the HF tokenizer files beside them are read by `get_tokenizer`.
"""

from __future__ import annotations

from wlock.lock.loaders import Choice, Read, small_files, weights

NAMES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    return Choice(frozenset(small_files(paths, "")) |
                  frozenset(weights(paths, "", NAMES, read) or ()))
