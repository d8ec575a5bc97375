"""`timm.create_model("hf-hub:id", pretrained=True)`: config.json and one format of weights.

Mirrors timm's `_hub.load_model_config_from_hf` (config.json) and `load_state_dict_from_hf`
(model.safetensors when safetensors is installed, else pytorch_model.bin). Every other file is
kept but what `loaders.unread` names (other formats, an `open_clip_*` copy, training state).
"""

from __future__ import annotations

from wlock.lock.loaders import Choice, Read, beside, weights

NAMES = ("model.safetensors", "pytorch_model.bin")


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    return Choice(beside(paths, weights(paths, "", NAMES, read) or ()))
