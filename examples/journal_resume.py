"""An agent session paused for approval, saved, and resumed in another process.

A support agent looks a customer up, finds their late orders and wants to refund them.
Refunds need a human's approval, which may take hours: rather than keep a worker waiting,
the service dumps the paused session into a signed journal (a *snapshot*) and exits. Later,
another process loads it with ``AgentSandbox.load``: the recorded runs are replayed on a fresh
worker with the recorded tool answers (no tool is called again), the session comes back
paused at the same call, and once approved it carries on with every global it had before.

    .venv/bin/python examples/journal_resume.py --dump session.journal     # first process
    .venv/bin/python examples/journal_resume.py --resume session.journal   # any later one
    .venv/bin/python examples/journal_resume.py          # both, as two subprocesses of itself

The journal is signed with HMAC-SHA256 under a key only the service knows: set
``PYDENO_EXAMPLE_KEY`` to its hex (``python -c "import secrets; print(secrets.token_hex(32))"``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydeno

KEY_VARIABLE = "PYDENO_EXAMPLE_KEY"
# DEMO ONLY. A journal signed with a key anyone can read proves nothing: a real service keeps
# its own secret (and never in source code). Used only when PYDENO_EXAMPLE_KEY is not set.
DEMO_ONLY_KEY = b"pydeno example: DEMO ONLY, public"


def signing_key() -> bytes:
    """The service's journal key: PYDENO_EXAMPLE_KEY (hex), or the public demo key."""
    key_hex = os.environ.get(KEY_VARIABLE)
    if key_hex:
        return bytes.fromhex(key_hex)
    print(f"warning: {KEY_VARIABLE} is not set; signing with the public DEMO-ONLY key", file=sys.stderr)
    return DEMO_ONLY_KEY


# -- the service's tools, and a log of the calls this process really made -------------------
calls: list[str] = []

ORDERS = [
    {"id": "o-1001", "total": 120.0, "days_late": 0},
    {"id": "o-1002", "total": 48.0, "days_late": 6},
    {"id": "o-1003", "total": 75.5, "days_late": 9},
]


def lookup_customer(email: str) -> dict[str, Any]:
    """The customer with this email."""
    calls.append(f"lookup_customer({email})")
    return {"id": "c-42", "name": "Ada Lovelace", "email": email}


def list_orders(customer_id: str) -> list[dict[str, Any]]:
    """A customer's orders, with how many days late each was delivered."""
    calls.append(f"list_orders({customer_id})")
    return ORDERS


def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an amount (EUR) on an order; needs approval."""
    calls.append(f"issue_refund({order_id}, {amount})")
    return {"refund": f"rf-{order_id}", "order": order_id, "amount": amount}


TOOLS: dict[str, Callable[..., Any]] = {
    "lookup_customer": lookup_customer,
    "list_orders": list_orders,
    "issue_refund": issue_refund,
}

# The model's programs. The first gathers facts, the second acts on them: each refund is a
# tool call the service stops at for approval.
INVESTIGATE = """
const customer = await tools.lookup_customer("ada@example.com");
const orders = await tools.list_orders(customer.id);
const late = orders.filter((order) => order.days_late > 3);
`${customer.name} has ${late.length} late orders`
"""
REFUND = """
const refunds = [];
for (const order of late) {
  refunds.push(await tools.issue_refund(order.id, Math.round(order.total * 0.2 * 100) / 100));
}
refunds.length
"""
# Run after the resume: it uses globals from both runs before, made in the other process.
SUMMARY = """
`refunded ${refunds.reduce((sum, r) => sum + r.amount, 0)} EUR to ${customer.name} ` +
  `on ${refunds.map((r) => r.order).join(" and ")}`
"""


def describe(paused: pydeno.PausedToolCall) -> str:
    return f"tools.{paused.name}({json.dumps(paused.args)[1:-1]})"


def dump(path: Path) -> None:
    """First process: run the session up to the first refund, then save it and exit."""
    with pydeno.AgentSandbox(TOOLS, max_tool_calls=10, max_pause=60) as agent:
        print("investigate:", agent.run(INVESTIGATE))
        step = agent.start(REFUND)
        assert isinstance(step, pydeno.PausedToolCall), step
        print("waiting for approval of", describe(step))
        path.write_bytes(agent.dump(signing_key()))  # a snapshot: the run is paused
    print("tools called in this process:", calls)
    print("snapshot saved; this process exits without an answer")


def resume(path: Path) -> int:
    """A later process: load the snapshot, approve the refunds, and carry on."""
    try:
        agent = pydeno.AgentSandbox.load(path.read_bytes(), key=signing_key(), tools=TOOLS, max_pause=60)
    except (pydeno.JournalError, pydeno.SnapshotAuthenticationError) as exc:
        # A journal from elsewhere, or altered, or signed under another key, is refused.
        print(f"cannot resume: {pydeno.classify_error(exc).kind}: {exc}", file=sys.stderr)
        return 2
    with agent:
        print("replayed without calling a tool:", calls == [])
        step: Any = agent.paused  # the snapshot comes back paused at the same call
        assert isinstance(step, pydeno.PausedToolCall), step
        print(f"restored, paused at: name={step.name!r} args={step.args!r}")
        while isinstance(step, pydeno.PausedToolCall):
            print("approved:", describe(step))  # here a human said yes
            step = step.resume(value=TOOLS[step.name](*step.args))
        print("refunds issued:", step)
        print("summary:", agent.run(SUMMARY))
        print("tools called in this process:", calls)
        print("tool calls charged to the session:", agent.tool_calls_made)
    return 0


def demo() -> int:
    """Both halves, each in its own process, sharing only the journal file and the key."""
    env = dict(os.environ)
    # Both processes must use the same key; if none is configured, make one for this demo.
    env.setdefault(KEY_VARIABLE, secrets.token_hex(32))
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "session.journal"
        for flag in ("--dump", "--resume"):
            print(f"$ journal_resume.py {flag} session.journal", flush=True)
            child = subprocess.run([sys.executable, __file__, flag, str(journal)], env=env, check=False)
            if child.returncode != 0:
                return child.returncode
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--dump", type=Path, metavar="PATH", help="run until the approval, save the session")
    group.add_argument("--resume", type=Path, metavar="PATH", help="load a saved session and finish it")
    args = parser.parse_args(argv)
    if args.dump is not None:
        dump(args.dump)
        return 0
    if args.resume is not None:
        return resume(args.resume)
    return demo()


if __name__ == "__main__":
    raise SystemExit(main())
