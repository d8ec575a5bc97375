"""Helpers that take the id as a parameter, shaped like real projects' download utilities."""

from huggingface_hub import snapshot_download
from transformers import AutoModel, AutoTokenizer

import wlock


def snap_download_model(repo_id, local_dir=None):
    return snapshot_download(repo_id=repo_id, local_dir=local_dir)


def load_backbone(name, revision=None):
    return AutoModel.from_pretrained(name, revision=revision)


def load_tokenizer(name, *, revision="main"):
    return AutoTokenizer.from_pretrained(name, revision=revision)


def load_pinned(name):
    return AutoModel.from_pretrained(name, revision=wlock.revision(name))


class Registry:
    def load(self, name):  # a method: its callers are not matched by name
        return AutoModel.from_pretrained(name)


backbone = load_backbone("acme/bert")
