"""A side's runtimes and pools, the timed eval loop, and the checks of what they return."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .config import BIG_LEN, PEER_DEFAULT_MAX_HOST_CALLS, POOL_IDLE_SECONDS, POOL_SIZE, Params


class WrongValue(AssertionError):
    """A runtime returned something other than what the benchmarked code evaluates to."""


def time_evals(rt: Any, code: str, expected: object, n: int, *, first: int | None = None) -> list[int]:
    """Time n evals of code. With ``first``, each eval's code is new: its ``{i}`` replaced by
    first, first + 1, ... (before the timed window)."""
    clock = time.perf_counter_ns
    run = rt.eval
    samples: list[int] = []
    for i in range(n):
        text = code if first is None else code.replace("{i}", str(first + i))
        t0 = clock()
        value = run(text)
        t1 = clock()
        # Outside the timed window; a fast wrong answer must not count as a result.
        if value != expected:
            raise WrongValue(f"eval({code!r}) returned {value!r} (iteration {i}), expected {expected!r}")
        samples.append(t1 - t0)
    return samples


def add(a: int, b: int) -> int:
    return a + b


def check_big(value: object) -> None:
    if not isinstance(value, list):
        raise WrongValue(f"20k-object result is a {type(value).__name__}, expected a list")
    if len(value) != BIG_LEN:
        raise WrongValue(f"20k-object result has {len(value)} items, expected {BIG_LEN}")
    last = value[-1]
    if last != {"id": BIG_LEN - 1, "name": f"x{BIG_LEN - 1}"}:
        raise WrongValue(f"20k-object result's last item is {last!r}")


def factory(side: str, params: Params) -> tuple[Callable[[], Any], dict[str, Any]]:
    """The runtime constructor for a side, after checking we imported the right package."""
    import pydeno

    is_peer = hasattr(pydeno, "IsolatedRuntime")
    if side == "ours":
        if is_peer:
            raise SystemExit(f"--side ours imported the peer package from {pydeno.__file__}")
        return pydeno.Runtime, {"class": "pydeno.Runtime"}
    if not is_peer:
        raise SystemExit(f"--side {side} imported our package from {pydeno.__file__}, not the peer")
    if side == "peer-inprocess":
        return pydeno.Runtime, {"class": "pydeno.Runtime (peer, V8 in-process)"}
    options: dict[str, Any] = {}
    if params.iterations + params.warmup >= PEER_DEFAULT_MAX_HOST_CALLS:
        # Only lifted when the run would trip it, so the default run uses the peer's defaults.
        options["max_host_calls"] = None
    # Checked against our package, which has no IsolatedRuntime; the peer is untyped here.
    peer_cls: Any = pydeno.IsolatedRuntime  # type: ignore[attr-defined]

    def make() -> Any:
        return peer_cls(**options)

    return make, {"class": "pydeno.IsolatedRuntime", "options": {k: repr(v) for k, v in options.items()}}


def make_pool(size: int = POOL_SIZE) -> Any:
    import pydeno

    # The same call on both sides; each package's own pool.
    return pydeno.SandboxPool(size=size)


def wait_pool_full(side: str, pool: Any, size: int = POOL_SIZE, limit: float = 30.0) -> float:
    """Until the pool has size ready workers, so a checkout never waits on a start; returns
    when it was seen full (time.perf_counter), which is when its newest worker became ready."""
    deadline = time.monotonic() + limit
    if side != "ours":
        pool.wait_ready()
        full = time.perf_counter()
    else:
        while len(pool._core.idle) < size or pool._core.starting:
            if time.monotonic() > deadline:
                raise RuntimeError("the pool did not fill up")
            time.sleep(0.01)
        full = time.perf_counter()
    time.sleep(POOL_IDLE_SECONDS)  # let the last start's CPU settle
    return full
