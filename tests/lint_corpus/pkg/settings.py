"""A project's settings module: ids and pins as constants, imported elsewhere."""

BASE_MODEL = "acme/bert"
BASE_REVISION = "79a579b0a251dfd74d363b615e210828963a37d1"
EVAL_SET: str = "acme/squad"  # no pin: every load of it must pin itself
