"""wlock: lock Hugging Face model weights to exact commits and bytes, then sync them anywhere.

Importing this package imports nothing heavy (no huggingface_hub): it is safe in any script.
"""

from __future__ import annotations

__version__ = "0.1.0"
