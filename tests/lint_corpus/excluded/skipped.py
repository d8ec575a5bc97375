from transformers import AutoModel

model = AutoModel.from_pretrained("acme/bert")  # excluded by [tool.wlock.lint] exclude
