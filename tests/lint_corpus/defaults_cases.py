"""Dynamic ids with a literal default one hop away, shaped like real training scripts:
argparse, HfArgumentParser dataclasses, click, function parameters, environment variables."""

import argparse
import os
from dataclasses import dataclass, field

import click
import wlock
from transformers import AutoModel, AutoTokenizer, HfArgumentParser

MODEL_ID = os.environ.get("MODEL_ID", "acme/bert")
LOCAL_DIR = os.getenv("DATA_DIR", "./data")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="acme/llama", metadata={"help": "the model"})
    tokenizer_name: str = "acme/tok"
    cache_dir: str = field(default=None)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-name", default="acme/bert")
    parser.add_argument("--revision", default="main")
    parser.add_argument("--adapter", dest="adapter_id", default="acme/adapter")
    parser.add_argument("--output", default="./out")
    parser.add_argument("--base", default=None)
    return parser.parse_args()


def train() -> None:
    args = parse()
    model = AutoModel.from_pretrained(args.model_name)
    model = AutoModel.from_pretrained(args.model_name, revision=args.revision)
    pinned = AutoModel.from_pretrained(args.model_name, revision=wlock.revision(args.model_name))
    crossed = AutoModel.from_pretrained(args.model_name, revision=wlock.revision(args.base))
    adapter = AutoModel.from_pretrained(args.adapter_id)
    base = AutoModel.from_pretrained(args.base)
    saved = AutoModel.from_pretrained(args.output)
    (model_args,) = HfArgumentParser(ModelArguments).parse_args_into_dataclasses()
    llama = AutoModel.from_pretrained(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name)
    env = AutoModel.from_pretrained(MODEL_ID)
    inline = AutoModel.from_pretrained(os.environ.get("EVAL_MODEL", "someone/else"))
    local = AutoModel.from_pretrained(LOCAL_DIR)


@click.command()
@click.option("--model", "model_id", default="acme/st")
def serve(model_id: str) -> None:
    AutoModel.from_pretrained(model_id)


def evaluate(checkpoint="acme/coder", *, tokenizer_id: str = "acme/tok") -> None:
    AutoModel.from_pretrained(checkpoint, revision="ba6c43ee4ee85e80e4e6a9f8c2bca7f3a7aa5c1a")
    AutoTokenizer.from_pretrained(tokenizer_id)


class Scorer:
    model_id = "acme/st"  # metadata the class keeps and passes on

    def load(self) -> None:
        AutoModel.from_pretrained(self.model_id)
