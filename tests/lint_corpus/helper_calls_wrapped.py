"""A helper imported the way formatters wrap a long import: in parentheses, over lines."""

from pkg.hub_helpers import (
    load_backbone,
)

wrapped = load_backbone("acme/llama")
