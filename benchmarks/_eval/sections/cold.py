"""Cold start: a new runtime to its first result, and (ours) the bare deno floors beside it."""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import WARM_CODE
from ..context import Context
from ..floors import FIRST_BYTE_FLOORS, deno_floor_commands, spawn_to_exit_ns, spawn_to_first_byte_ns
from ..runtimes import WrongValue


def cold_start(ctx: Context) -> None:
    _cold_start(ctx, ctx.make, "cold_start", floors=ctx.ours)


def cold_start_back_to_back(ctx: Context) -> None:
    # Each start right after the last one's close, nothing timed between them: a side that
    # starts its next worker ahead (ours, the zygote's spare; the peer's spare worker) has only
    # the previous start's first result and close to do it in. The cold start above, with the
    # floors timed between starts, gives it more.
    _cold_start(ctx, ctx.make, "cold_start_back_to_back", floors=False)


def cold_start_unsandboxed(ctx: Context) -> None:
    # The default is sandbox="require"; the difference is what the OS layers and the
    # self-test cost at start-up.
    import pydeno

    _cold_start(ctx, lambda: pydeno.Runtime(sandbox="off"), "cold_start_off", floors=False)


def _cold_start(ctx: Context, make: Callable[[], Any], name: str, floors: bool) -> None:
    # With floors (ours): the bare deno floor, deno spawned on an empty script, timed just
    # before each of our starts, so that the two meet the same moment of the machine.
    params = ctx.params
    workdir = Path(tempfile.mkdtemp(prefix="bench-deno-floor-"))
    try:
        commands = deno_floor_commands(workdir) if floors else {}
        if commands:
            ctx.result["deno_floor_command"] = commands
        floor_samples: dict[str, list[int]] = {key: [] for key in commands}
        samples: list[int] = []
        for i in range(params.cold_warmup + params.cold_runs):
            for key, argv in commands.items():
                gc.collect()
                timed = spawn_to_first_byte_ns if key in FIRST_BYTE_FLOORS else spawn_to_exit_ns
                spent = timed(argv, workdir)
                if i >= params.cold_warmup:
                    floor_samples[key].append(spent)
            gc.collect()
            t0 = time.perf_counter_ns()
            cold = make()
            try:
                value = cold.eval(WARM_CODE)
                t1 = time.perf_counter_ns()
            finally:
                # Teardown is not part of "time to first result", but it must finish
                # before the next run so a dying worker does not compete for the CPU.
                cold.close()
            if value != 2:
                raise WrongValue(f"cold eval({WARM_CODE!r}) returned {value!r}, expected 2")
            if i >= params.cold_warmup:
                samples.append(t1 - t0)
        ctx.record(name, samples)
        for key, taken in floor_samples.items():
            ctx.record(key, taken)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
