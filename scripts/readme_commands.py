"""Print the set-up commands README.md gives, one per line, in order: `.ci/run` runs exactly these.

The README's "Set up" section holds two ```sh blocks of one line each: the first installs and
runs an eval, the second runs the tests. Reading them from the README keeps the two the same.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def setup_commands(text: str) -> list[str]:
    section = text.split("## Set up (fresh machine)", 1)[1].split("\n## ", 1)[0]
    commands = [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]
    if len(commands) != 2 or any("\n" in command for command in commands):
        raise SystemExit(f"README.md's set-up section must hold two one-line sh blocks, found {commands!r}")
    return commands


if __name__ == "__main__":
    print("\n".join(setup_commands(README.read_text())))
    sys.exit(0)
