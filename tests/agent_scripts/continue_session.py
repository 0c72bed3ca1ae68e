"""Load an agent journal another process dumped, run more code, print the outcome as JSON.

Usage: continue_session.py JOURNAL_PATH KEY_HEX CODE. Used by tests/features/test_agent.py; the live
tool tags its answers with this process's id, so the output shows which answers were replayed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pydeno

calls: list[str] = []


def lookup(name: str) -> str:
    calls.append(name)
    return f"{name}@{os.getpid()}"


def main() -> None:
    path, key_hex, code = sys.argv[1:4]
    journal = Path(path).read_bytes()
    with pydeno.AgentSandbox.load(journal, key=bytes.fromhex(key_hex), tools={"lookup": lookup}) as sandbox:
        calls_during_load = list(calls)
        result = sandbox.run(code)
        made = sandbox.tool_calls_made
    print(json.dumps({"calls_during_load": calls_during_load, "calls": calls, "result": result, "made": made}))


if __name__ == "__main__":
    main()
