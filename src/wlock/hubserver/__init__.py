"""A Hub-compatible HTTP server: the emulator tests and the demo run against.

It speaks the read side of the Hugging Face Hub protocol as huggingface_hub 2.x and the live
Hub do (see ../shared/DESIGN.md and tests/integration/test_hub_fidelity.py), serves repos from a
store on disk, and takes fault injection from tests over its `/_emulator/*` control routes.

It always runs in its own process: hf_transfer holds the GIL for a whole download, so a server
thread in the downloading process would deadlock.
"""
