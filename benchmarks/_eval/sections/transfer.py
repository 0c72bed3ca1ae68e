"""Large values across the boundary: the 20k-object result (with, for ours, the floor of its
parts beside each sample), and a 2 MB value each way."""

from __future__ import annotations

import gc
import time

from ..config import BIG_BUILD_CODE, BIG_CODE, BIG_LEN, TWO_MB_CODE, TWO_MB_LEN, TWO_MB_TO_GUEST_CODE
from ..context import Context
from ..floors import big_result_json, json_decoder
from ..runtimes import WrongValue, check_big


def big_result(ctx: Context) -> None:
    # With the floor (ours), each sample is followed by the two parts no design can skip:
    # the guest's own build (the same code, only the length crossing) and decoding the
    # value's JSON with the decoder our host uses, into the same 20k Python objects.
    params = ctx.params
    floor = (big_result_json(), json_decoder()) if ctx.ours else None
    # A fresh runtime: the warm one may have died, and this one's heap starts clean.
    with ctx.make() as big_rt:
        for _ in range(params.big_warmup):
            check_big(big_rt.eval(BIG_CODE))
            if floor is not None:
                big_rt.eval(BIG_BUILD_CODE)
        samples: list[int] = []
        builds: list[int] = []
        decodes: list[int] = []
        for _ in range(params.big_runs):
            gc.collect()
            t0 = time.perf_counter_ns()
            value = big_rt.eval(BIG_CODE)
            t1 = time.perf_counter_ns()
            check_big(value)
            del value
            samples.append(t1 - t0)
            if floor is None:
                continue
            text, decode = floor
            gc.collect()
            t0 = time.perf_counter_ns()
            length = big_rt.eval(BIG_BUILD_CODE)
            t1 = time.perf_counter_ns()
            if length != BIG_LEN:
                raise WrongValue(f"the 20k build's length came back as {length!r}")
            gc.collect()
            t2 = time.perf_counter_ns()
            value = decode(text)
            t3 = time.perf_counter_ns()
            check_big(value)
            del value
            builds.append(t1 - t0)
            decodes.append(t3 - t2)
    ctx.record("big_result", samples)
    if floor is not None:
        ctx.record("big_result_build", builds)
        ctx.record("big_result_decode", decodes)
        ctx.record("big_result_floor", [b + d for b, d in zip(builds, decodes, strict=True)])


def two_mb_to_host(ctx: Context) -> None:
    params = ctx.params
    with ctx.make() as big_rt:
        samples: list[int] = []
        for i in range(params.big_warmup + params.big_runs):
            gc.collect()
            t0 = time.perf_counter_ns()
            value = big_rt.eval(TWO_MB_CODE)
            t1 = time.perf_counter_ns()
            if not isinstance(value, list) or len(value) != TWO_MB_LEN:
                raise WrongValue("the 2 MB value came back wrong")
            if i >= params.big_warmup:
                samples.append(t1 - t0)
            del value
    ctx.record("two_mb_to_host", samples)


def two_mb_to_guest(ctx: Context) -> None:
    # Through a host function's result, which both sides support.
    params = ctx.params
    value = [
        {"id": i, "name": f"item-{i}", "tags": ["a", "b", "c"], "score": i / 8, "note": "x" * 64}
        for i in range(TWO_MB_LEN)
    ]
    with ctx.make() as big_rt:
        big_rt.bind_function("big", lambda: value)
        samples: list[int] = []
        for i in range(params.big_warmup + params.big_runs):
            gc.collect()
            t0 = time.perf_counter_ns()
            seen = big_rt.eval(TWO_MB_TO_GUEST_CODE[ctx.side])
            t1 = time.perf_counter_ns()
            if seen != TWO_MB_LEN + 3:
                raise WrongValue(f"the guest saw {seen!r} for the 2 MB value")
            if i >= params.big_warmup:
                samples.append(t1 - t0)
    ctx.record("two_mb_to_guest", samples)
