"""The command line: ``python -m pydeno doctor``.

``doctor`` starts one real worker with every OS layer this system allows and prints one line
per protection (applied, missing, not applicable) with the reason, then whether
``sandbox="require"`` would start here. It exits 0 when it would, 1 when it would refuse.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ._sandbox import sandbox_status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pydeno", description="Run untrusted JavaScript in sandboxed Deno workers.")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser("doctor", help="report the OS sandbox layers in force on this machine")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        status = sandbox_status()
        print(json.dumps(status.to_dict(), indent=2) if args.json else status)
        return 0 if status.require_would_start else 1
    return 2  # pragma: no cover - argparse refuses unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
