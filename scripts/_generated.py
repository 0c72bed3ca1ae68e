"""The command line every generator in scripts/ shares: write what it generates, or with
``--check`` only list what is stale (exit 1), as the tests do."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def main(description: str, problems: Callable[[], list[str]], write: Callable[[], None]) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="report what is stale instead of writing it")
    args = parser.parse_args()
    if args.check:
        found = problems()
        for line in found:
            print(line)
        return 1 if found else 0
    write()
    return 0
