"""huggingface_hub, datasets, sentence-transformers, vLLM, timm, open_clip and hf:// paths."""

import datasets
import open_clip
import pandas as pd
import timm
from datasets import load_dataset, load_dataset_builder
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from sentence_transformers import CrossEncoder, SentenceTransformer
from vllm import LLM

config = hf_hub_download("acme/bert", "config.json")
config_ok = hf_hub_download(repo_id="acme/bert", filename="config.json", revision="79a579b0a251dfd74d363b615e210828963a37d1")
folder = snapshot_download("acme/bert", revision="v1.0")
data_files = snapshot_download(repo_id="acme/squad", repo_type="dataset")
space = snapshot_download("acme/demo", repo_type="space")
api_file = HfApi().hf_hub_download("acme/bert", "config.json")

squad = load_dataset("acme/squad")
squad_ok = load_dataset("acme/squad", revision="ae50bcfa009c368a3a91495098d8bf545301e72d")
builder = datasets.load_dataset_builder("acme/squad", revision="main")
local_json = load_dataset("json", data_files="train.jsonl")
local_dir = load_dataset("./data")
also_builder = load_dataset_builder(path="acme/squad")

st = SentenceTransformer("acme/st")
st_ok = SentenceTransformer("acme/st", revision="ff448545d81eb595d201858853c12c34f0f9d36d")
ce = CrossEncoder(model_name="acme/st")

llm_ok = LLM(model="acme/llama", revision="c84d61dfa5650c9d2af6b98349ecd54bb24f23a6",
             tokenizer_revision="c84d61dfa5650c9d2af6b98349ecd54bb24f23a6")
llm_half = LLM(model="acme/llama", revision="c84d61dfa5650c9d2af6b98349ecd54bb24f23a6")
llm_tok = LLM("acme/llama", tokenizer="acme/tok", revision="c84d61dfa5650c9d2af6b98349ecd54bb24f23a6")

vit = timm.create_model("hf-hub:acme/vit", pretrained=True)
vit_ok = timm.create_model("hf-hub:acme/vit@978594578b097c5b7fc69be31c6feebf7609f76d", pretrained=True)
clip, _, preprocess = open_clip.create_model_and_transforms("hf-hub:acme/clip@main")
clip_tok = open_clip.get_tokenizer("hf-hub:acme/clip")

frame = pd.read_parquet("hf://datasets/acme/squad/data/train.parquet")
frame_ok = pd.read_parquet("hf://datasets/acme/squad@ae50bcfa009c368a3a91495098d8bf545301e72d/data/train.parquet")

# Pinned, but to another commit than weights.lock's, and dynamic ids or revisions.
OLD = "2222222222222222222222222222222222222222"
mismatch_hub = snapshot_download("acme/bert", revision=OLD)
mismatch_data = load_dataset("acme/squad", revision=OLD)
mismatch_st = SentenceTransformer("acme/st", revision=OLD)
mismatch_llm = LLM(model="acme/llama", revision=OLD, tokenizer_revision=OLD)
mismatch_timm = timm.create_model("hf-hub:acme/vit@2222222222222222222222222222222222222222")
mismatch_hf = pd.read_csv("hf://datasets/acme/squad@2222222222222222222222222222222222222222/x.csv")


def dynamic_everywhere(repo, rev):
    hf_hub_download(repo, "config.json")
    load_dataset(repo, revision=rev)
    SentenceTransformer(f"acme/{repo}")
    LLM(model=repo)
    return snapshot_download("acme/bert", revision=rev)


local_st = SentenceTransformer("/opt/models/st")
local_hub = load_dataset("~/data/squad")

# Loaders beyond the first list (each shaped like public code that uses it).
from FlagEmbedding import BGEM3FlagModel, FlagModel, FlagReranker
from huggingface_hub import get_safetensors_metadata, model_info
from sentence_transformers import SparseEncoder
from vllm.transformers_utils.tokenizer import get_tokenizer

import wlock

sparse = SparseEncoder("acme/st")
bge = FlagModel("acme/st", query_instruction_for_retrieval="Represent this sentence:")
m3 = BGEM3FlagModel("acme/st", use_fp16=True)
reranker = FlagReranker(wlock.snapshot_path("acme/st"), use_fp16=True)
vllm_tok = get_tokenizer("acme/tok", trust_remote_code=False)
info = HfApi().model_info("acme/bert")
card = model_info("acme/bert", revision="79a579b0a251dfd74d363b615e210828963a37d1")
meta = get_safetensors_metadata("acme/bert")
squad_info = HfApi().repo_info("acme/squad", repo_type="dataset", revision="main")
old_timm = timm.create_model("hf_hub:acme/vit", pretrained=True)
split = "train"
built = pd.read_parquet(f"hf://datasets/acme/squad/data/{split}.parquet")
joined = pd.read_parquet("hf://datasets/acme/squad@" + "main" + "/data/train.parquet")
SQUAD_COMMIT = "ae50bcfa009c368a3a91495098d8bf545301e72d"
pinned_fstring = pd.read_parquet(f"hf://datasets/acme/squad@{SQUAD_COMMIT}/data/train.parquet")


def read(named):  # the id is not written out: not a load wlock can name
    return pd.read_parquet(f"hf://datasets/acme/{named}/data/train.parquet")


# FlagEmbedding's newer entry point, and an id from the environment with a default.
import os

from FlagEmbedding import FlagAutoModel

auto = FlagAutoModel.from_finetuned("acme/st", use_fp16=True)
m3_env = BGEM3FlagModel(model_name_or_path=os.getenv("BGE_MODEL_PATH", "acme/st"), use_fp16=True)
