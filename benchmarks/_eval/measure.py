"""The measuring side: every section for one side, in a subprocess of its own (see
_common.sides), under that side's interpreter."""

from __future__ import annotations

import importlib.metadata
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from _common.sides import write_side_result

from .config import Params
from .context import Context
from .runtimes import factory
from .sections import SECTIONS


def measure(side: str, params: Params) -> dict[str, Any]:
    """Every metric for one side. A failing section is recorded and the rest still run."""
    import pydeno

    make, runtime_info = factory(side, params)
    ctx = Context(side, params, make)
    ctx.result.update(
        {
            "side": side,
            "runtime": runtime_info,
            "env": {
                "python": sys.version.split()[0],
                "executable": sys.executable,
                "pydeno_version": importlib.metadata.version("pydeno"),
                "pydeno_file": pydeno.__file__,
            },
            "params": {
                "iterations": params.iterations,
                "warmup": params.warmup,
                "cold_runs": params.cold_runs,
                "big_runs": params.big_runs,
                "cold_warmup": params.cold_warmup,
                "big_warmup": params.big_warmup,
                "window_s": params.window_s,
                "idle_s": params.idle_s,
            },
            "errors": {},
        }
    )
    errors: dict[str, str] = ctx.result["errors"]
    for section in SECTIONS:
        if side not in section.sides or (params.sections and section.name not in params.sections):
            continue
        started = time.perf_counter()
        try:
            section.run(ctx)
        except Exception as exc:  # noqa: BLE001 - reported in the results, the other sections go on
            errors[section.name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
        ctx.result.setdefault("section_seconds", {})[section.name] = round(time.perf_counter() - started, 3)
    return ctx.result


def run_side(side: str, params: Params, json_out: Path) -> int:
    write_side_result(json_out, measure(side, params))
    return 0
