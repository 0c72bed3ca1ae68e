"""One side of a side-by-side run, measured in a subprocess of its own.

Ours and the peer are both imported as ``pydeno``, so they cannot share an interpreter: the
driver re-runs a benchmark's script with ``--side NAME --json-out FILE`` under that side's
interpreter, and reads back the JSON the side wrote. Our side runs in a subprocess too, so
both are measured the same way (fresh interpreter, same process tree shape).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent.parent


def add_side_arguments(parser: argparse.ArgumentParser, sides: tuple[str, ...]) -> None:
    """The arguments the driver re-runs its script with to measure one side."""
    parser.add_argument("--side", choices=sides, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)


def check_side_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.side and not args.json_out:
        parser.error("--side needs --json-out")


def write_side_result(json_out: Path, result: dict[str, Any]) -> None:
    # The driver reads this only once we have exited, so a plain write cannot be seen half done.
    json_out.write_text(json.dumps(result), encoding="utf-8")


def run_script_side(
    script: Path, side: str, python: str, argv: list[str], output: Path, label: str, timeout: float
) -> dict[str, Any]:
    """Run ``script --side side`` under python and return the JSON it wrote, or the error
    that stopped it; ``wall_seconds`` is how long it took."""
    tmp = output.with_name(f"{output.stem}.{side}.tmp")
    tmp.unlink(missing_ok=True)
    # -I: neither PYTHONPATH nor the working directory may put the other side's package
    # first on sys.path; the child also checks which pydeno it imported.
    cmd = [python, "-I", str(script.resolve()), "--side", side, "--json-out", str(tmp), *argv]
    print(f"{label}measuring {side} ({python}) ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, check=False, timeout=timeout, cwd=BENCHMARKS)
    except subprocess.TimeoutExpired:
        return {"side": side, "errors": {"process": f"timed out after {timeout:.0f}s"}}
    except OSError as exc:
        return {"side": side, "errors": {"process": f"could not start {python}: {exc}"}}
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or not tmp.exists():
        return {"side": side, "errors": {"process": f"exited with code {proc.returncode}"}}
    data: dict[str, Any] = json.loads(tmp.read_text(encoding="utf-8"))
    tmp.unlink()
    data["wall_seconds"] = round(elapsed, 2)
    return data
