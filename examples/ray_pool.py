"""Untrusted formulas on a Ray cluster: a ``pydeno.ray.RayPool`` of two actors.

Each actor keeps a warm pool of fresh workers on its node; every formula runs on a fresh one,
with the limits below. ``map`` keeps the results in order, and ``return_exceptions=True``
puts each failure, a pydeno exception with its ``kind``, in its place. One formula goes
through ``submit``: the reference is an ordinary ``ray.ObjectRef``.

Run it with ``.venv/bin/python examples/ray_pool.py``: it starts a local Ray cluster of two
CPUs for itself (pass a real cluster's address to ``ray.init`` to use one), prints one JSON
line per formula and one with the pool's figures, and shuts the cluster down.
"""

from __future__ import annotations

import json

import ray

import pydeno
import pydeno.ray

FORMULAS = [
    "2 ** 10",
    "Math.hypot(3, 4)",
    "[3, 1, 2].sort()",
    "null.price",  # the guest's own error
    "while (true) {}",  # stopped by timeout=
]


def main() -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with pydeno.ray.RayPool(actors=2, workers_per_actor=1, timeout=1.0, max_memory=128 * 2**20) as pool:
            for formula, result in zip(FORMULAS, pool.map(FORMULAS, return_exceptions=True), strict=True):
                if isinstance(result, BaseException):
                    info = pydeno.classify_error(result)
                    answer = {"formula": formula, "ok": False, "kind": info.kind, "retryable": info.retryable}
                else:
                    answer = {"formula": formula, "ok": True, "value": result}
                print(json.dumps(answer))
            ref = pool.submit("'submitted: ' + (6 * 7)")
            print(json.dumps({"ref": type(ref).__name__, "value": pool.result(ref)}))
            stats = pool.stats()
            print(json.dumps({k: stats[k] for k in ("commands", "actors", "actors_replaced", "workers_killed")}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
