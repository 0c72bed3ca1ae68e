"""A service endpoint that evaluates user-written formulas in a sandbox.

Users of a spreadsheet-like product type formulas such as ``price * quantity * (1 - discount)``;
the service evaluates them against the row's variables. The formula is untrusted JavaScript,
so it runs in a pydeno worker with a deadline and a memory cap, on a warm worker from a
``SandboxPool``, and ``run_with_retry`` retries only the failures a fresh worker could fix.
Every failure becomes a small, stable JSON answer built from ``classify_error``: the client
sees the kind and whether to retry; the full host message goes to the service's log.

Run it with ``.venv/bin/python examples/formula_service.py``: one JSON line per request.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any

import pydeno

log = logging.getLogger("formula_service")

# The limits of one evaluation. A formula is a one-liner: a second of the guest's own time and
# 128 MiB are generous, and they bound what a hostile formula can cost the service.
LIMITS: dict[str, Any] = {"timeout": 1.0, "max_memory": 128 * 1024 * 1024}

# The pool the endpoint draws its workers from: created by main() (a real service would create
# it at start-up) and closed on the way out, which kills every worker it started.
pool: pydeno.SandboxPool | None = None

# Runs in the guest. The formula and the variables travel as *values* (arguments of this
# function), never spliced into host-written code; the guest compiles the formula itself,
# in strict mode, with the variables as parameters, and insists on a finite number.
EVALUATOR = """
(formula, variables) => {
  const names = Object.keys(variables);
  const compute = new Function(...names, `"use strict"; return (${formula});`);
  const value = compute(...names.map((name) => variables[name]));
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new TypeError(`a formula must give a finite number, got ${String(value)}`);
  }
  return value;
}
"""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Fault injection for the demo only: how many of the next attempts should find their worker
# dead, as if the OOM killer or an operator had killed it. See simulate_worker_crashes().
_crashes_to_simulate = 0


def simulate_worker_crashes(count: int) -> None:
    """Demo only: make the next ``count`` attempts fail as a crashed worker does."""
    global _crashes_to_simulate
    _crashes_to_simulate = count


def _check_request(formula: str, variables: dict[str, Any]) -> None:
    """Refuse malformed requests before any worker is spent on them."""
    if not isinstance(formula, str) or not formula.strip():
        raise ValueError("formula must be a non-empty string")
    for name, value in variables.items():
        if not _NAME.fullmatch(name):
            raise ValueError(f"variable names must be identifiers, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"variable {name!r} must be a number, got {type(value).__name__}")


def evaluate(formula: str, variables: dict[str, Any]) -> dict[str, Any]:
    """The endpoint: ``{"ok": True, "value": ...}``, or ``{"ok": False, "kind": ...,
    "retryable": ..., "message": ...}``. ``attempts`` says how many workers it took."""
    if pool is None:
        raise RuntimeError("the service is not started: main() creates the pool")
    attempts = 0

    def attempt(rt: pydeno.Runtime) -> float:
        # One attempt, on a fresh worker checked out of the pool (closed when this returns).
        nonlocal attempts
        global _crashes_to_simulate
        attempts += 1
        if _crashes_to_simulate > 0:
            _crashes_to_simulate -= 1
            raise pydeno.WorkerCrashed("worker process died (killed by SIGKILL)")  # demo fault
        compute = rt.eval(EVALUATOR)  # a JsFunction handle into this worker
        value: float = compute(formula, variables)
        return value

    try:
        _check_request(formula, variables)
        # Retries only what classify_error calls retryable (a crashed worker, a checkout
        # timeout), each time on another warm worker. A formula's own error, its timeout or
        # its memory bomb is not retried: it would fail the same way again.
        value = pydeno.run_with_retry(attempt, pool=pool, max_attempts=3, backoff=0.05)
    except (pydeno.PydenoError, ValueError) as exc:  # anything else is a bug: let it be a 500
        info = pydeno.classify_error(exc)
        log.warning("formula failed after %d attempt(s): %s: %s", attempts, info.kind, exc)
        if isinstance(exc, pydeno.JavaScriptError):
            # The guest's own error is the user's to read: it is about their formula.
            message = f"{exc.name}: {exc.message}" if exc.name else exc.message
        elif isinstance(exc, ValueError):
            message = str(exc)
        else:
            # Anything else (a limit, a crash) gets the stable summary; the host's full
            # message, with byte counts and limits, stays in the log.
            message = info.summary
        return {"ok": False, "kind": info.kind, "retryable": info.retryable, "message": message, "attempts": attempts}
    return {"ok": True, "value": value, "attempts": attempts}


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("price * quantity * (1 - discount)", {"price": 12.5, "quantity": 4, "discount": 0.2}),
    ("Math.hypot(width, height)", {"width": 3, "height": 4}),
    ("Math.round(total / count * 100) / 100", {"total": 10, "count": 3}),
    ("price *", {"price": 1}),  # a syntax error
    ("price * tax", {"price": 10}),  # an unknown variable
    ("total / count", {"total": 1, "count": 0}),  # Infinity: refused by the evaluator
    ("(() => { while (true) {} })()", {}),  # never ends: the deadline kills the worker
    ("(() => { const rows = []; while (true) rows.push(new Array(1e5).fill(1.5)); })()", {}),  # memory bomb
    ("a + b", {"a": 1, "not a name": 2}),  # refused before it reaches a worker
]


def main() -> None:
    global pool
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    pool = pydeno.SandboxPool(size=2, max_workers=4, checkout_timeout=10.0, **LIMITS)
    try:
        for formula, variables in REQUESTS:
            print(json.dumps({"formula": formula, **evaluate(formula, variables)}))
        # A worker dies under the request (simulated): the retry loop takes another one.
        simulate_worker_crashes(1)
        formula, variables = "base + bonus", {"base": 100, "bonus": 25}
        print(json.dumps({"formula": formula, **evaluate(formula, variables)}))
    finally:
        pool.close()
        pool = None


if __name__ == "__main__":
    main()
