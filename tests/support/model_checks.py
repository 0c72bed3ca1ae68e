"""What the two-readers suites share (tests/unit/test_model_texts.py and
tests/features/test_model_messages.py): what an option looks like in a text, and a tool."""

from __future__ import annotations

import re

import pydeno

MiB = 2**20
# An option as a Python keyword (timeout=, max_memory=) or a command-line flag (--timeout).
OPTION = re.compile(r"\b[a-z_]+=|--[a-z]|expose_host_errors|HttpFetch|add_module")


@pydeno.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return {"a": "alpha"}[key]
