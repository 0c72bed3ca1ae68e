"""The scripts in examples/ run as real processes and print what they are meant to print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
KEY_VARIABLE = "PYDENO_EXAMPLE_KEY"


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run examples/<name>.py from the repository root, as its README says to."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != KEY_VARIABLE}
    return subprocess.run(
        [sys.executable, f"examples/{name}.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def lines(child: subprocess.CompletedProcess[str]) -> list[str]:
    assert child.returncode == 0, child.stderr
    return child.stdout.splitlines()


def test_every_example_is_tested_and_listed_in_the_readme() -> None:
    scripts = sorted(p.stem for p in EXAMPLES.glob("*.py"))
    assert scripts == [
        "approval_agent",
        "code_mode",
        "formula_service",
        "journal_resume",
        "mcp_code_mode",
        "ray_pool",
        "trio_agent",
    ]
    readme = (EXAMPLES / "README.md").read_text()
    tested = Path(__file__).read_text()
    for name in scripts:
        assert f".venv/bin/python examples/{name}.py" in readme, name
        assert f'run_example("{name}"' in tested, name


def test_formula_service_answers_every_request_and_retries_only_the_crash() -> None:
    answers = [json.loads(line) for line in lines(run_example("formula_service"))]
    by_formula: dict[str, dict[str, Any]] = {a.pop("formula"): a for a in answers}
    assert len(by_formula) == len(answers) == 10
    assert by_formula["price * quantity * (1 - discount)"] == {"ok": True, "value": 40, "attempts": 1}
    assert by_formula["Math.hypot(width, height)"] == {"ok": True, "value": 5, "attempts": 1}
    assert by_formula["Math.round(total / count * 100) / 100"] == {"ok": True, "value": 3.33, "attempts": 1}

    syntax = by_formula["price *"]
    assert (syntax["ok"], syntax["kind"], syntax["retryable"], syntax["attempts"]) == (False, "js_error", False, 1)
    assert syntax["message"].startswith("SyntaxError: ")
    assert by_formula["price * tax"] == {
        "ok": False,
        "kind": "js_error",
        "retryable": False,
        "message": "ReferenceError: tax is not defined",
        "attempts": 1,
    }
    assert by_formula["total / count"] == {
        "ok": False,
        "kind": "js_error",
        "retryable": False,
        "message": "TypeError: a formula must give a finite number, got Infinity",
        "attempts": 1,
    }
    # The limits: killed, classified, and not retried (a fresh worker would fail the same way).
    assert by_formula["(() => { while (true) {} })()"] == {
        "ok": False,
        "kind": "timeout",
        "retryable": False,
        "message": "A deadline passed before the work finished.",
        "attempts": 1,
    }
    bomb = next(a for f, a in by_formula.items() if "rows.push" in f)
    assert bomb == {
        "ok": False,
        "kind": "memory_limit",
        "retryable": False,
        "message": "The worker went over max_memory and was stopped.",
        "attempts": 1,
    }
    assert by_formula["a + b"] == {
        "ok": False,
        "kind": "invalid_input",
        "retryable": False,
        "message": "variable names must be identifiers, got 'not a name'",
        "attempts": 0,
    }
    # The simulated crash is retryable: the loop took a second worker and succeeded.
    assert by_formula["base + bonus"] == {"ok": True, "value": 125, "attempts": 2}


APPROVAL_RESULT = {
    "searched": 3,
    "booked": {"booking": "BK-LH863", "passenger": "Ada Lovelace", "price": 285},
    "refused": ["TP1203: ToolError: 640 EUR is over the approval limit of 400 EUR"],
}


def test_approval_agent_books_the_cheaper_flight_after_the_rejection() -> None:
    out = lines(run_example("approval_agent"))
    assert out[:3] == [
        'approved: tools.search_flights("OSL", "LIS")',
        'rejected: tools.book_flight("TP1203", "Ada Lovelace"): 640 EUR is over the approval limit of 400 EUR',
        'approved: tools.book_flight("LH863", "Ada Lovelace")',
    ]
    assert out[3].startswith("result: ")
    assert json.loads(out[3].removeprefix("result: ")) == APPROVAL_RESULT
    assert out[4:] == ["tool calls charged: 3"]


DUMP_LINES = [
    "investigate: Ada Lovelace has 2 late orders",
    'waiting for approval of tools.issue_refund("o-1002", 9.6)',
    "tools called in this process: ['lookup_customer(ada@example.com)', 'list_orders(c-42)']",
    "snapshot saved; this process exits without an answer",
]
RESUME_LINES = [
    "replayed without calling a tool: True",
    "restored, paused at: name='issue_refund' args=['o-1002', 9.6]",
    'approved: tools.issue_refund("o-1002", 9.6)',
    'approved: tools.issue_refund("o-1003", 15.1)',
    "refunds issued: 2",
    # customer, late and refunds are globals of runs made in the first process.
    "summary: refunded 24.7 EUR to Ada Lovelace on o-1002 and o-1003",
    "tools called in this process: ['issue_refund(o-1002, 9.6)', 'issue_refund(o-1003, 15.1)']",
    "tool calls charged to the session: 4",
]


def test_journal_resume_demo_runs_both_halves_in_two_processes() -> None:
    assert lines(run_example("journal_resume")) == [
        "$ journal_resume.py --dump session.journal",
        *DUMP_LINES,
        "$ journal_resume.py --resume session.journal",
        *RESUME_LINES,
    ]


def test_journal_dumped_by_one_process_is_resumed_by_another_and_only_under_its_key(tmp_path: Path) -> None:
    journal = str(tmp_path / "session.journal")
    env = {k: v for k, v in os.environ.items() if k != KEY_VARIABLE}
    keyed = {**env, KEY_VARIABLE: bytes(range(32)).hex()}

    dumped = run_example("journal_resume", "--dump", journal, env=keyed)
    assert lines(dumped) == DUMP_LINES
    assert "DEMO-ONLY" not in dumped.stderr

    refused = run_example("journal_resume", "--resume", journal, env={**env, KEY_VARIABLE: bytes(32).hex()})
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert "cannot resume: snapshot_invalid: snapshot is not authentic" in refused.stderr

    assert lines(run_example("journal_resume", "--resume", journal, env=keyed)) == RESUME_LINES


def test_journal_resume_falls_back_to_the_demo_key_and_says_so(tmp_path: Path) -> None:
    journal = str(tmp_path / "session.journal")
    dumped = run_example("journal_resume", "--dump", journal)
    assert lines(dumped) == DUMP_LINES
    assert "DEMO-ONLY key" in dumped.stderr


def test_trio_agent_runs_the_agent_and_the_pool_under_trio() -> None:
    out = lines(run_example("trio_agent"))
    assert out[0] == "running under trio"
    assert out[1:4] == [
        'agent: approved: tools.search_flights("OSL", "LIS")',
        'agent: rejected: tools.book_flight("TP1203", "Ada Lovelace"): 640 EUR is over the approval limit of 400 EUR',
        'agent: approved: tools.book_flight("LH863", "Ada Lovelace")',
    ]
    assert out[4].startswith("agent: result: ")
    assert json.loads(out[4].removeprefix("agent: result: ")) == APPROVAL_RESULT
    evals = [json.loads(line.removeprefix("eval: ")) for line in out[5:]]
    assert all(line.startswith("eval: ") for line in out[5:])
    assert [{k: v for k, v in e.items() if k != "code"} for e in evals] == [
        {"ok": True, "value": [1, 4, 9]},
        {"ok": True, "value": [11, 21]},
        {"ok": True, "value": "from=OSL&to=LIS"},
        {"ok": False, "kind": "timeout", "retryable": False},
    ]


def test_the_code_mode_agent_recovers_from_a_type_error_and_a_failing_tool() -> None:
    turns = [json.loads(line) for line in lines(run_example("code_mode"))]
    assert turns[0] == {
        "turn": 1,
        "ok": False,
        "value": None,
        "kind": "typecheck_failed",
        "where": [2, 43],
        "tool_calls": [],
        "stderr": "",
    }
    assert turns[1] == {
        "turn": 2,
        "ok": True,
        "value": {"crashes": [1, 3], "labelled": [3], "notified": False},
        "kind": None,
        "where": None,
        "tool_calls": [["issues.search", "ok"], ["issues.label", "ok"], ["notify", "error"]],
        "stderr": "could not notify: the chat service is unavailable",
    }
    assert turns[2] == {
        "model_read": [
            "error: TypeCheckError: the program did not type-check (1 type error); nothing ran:",
            "TS2322: Type 'number' is not assignable to type 'string'. (line 2, column 43)",
        ]
    }


def test_the_mcp_code_mode_example_runs_read_only_tools_of_its_server_and_refuses_the_write() -> None:
    runs = [json.loads(line) for line in lines(run_example("mcp_code_mode"))]
    assert runs == [
        {
            "ok": True,
            "value": ["#3 Checkout fails with a 500", "#1 Login page is slow"],
            "tool_calls": ["tickets.search_tickets ok"],
        },
        {
            "ok": True,
            "value": "ToolError: tools.tickets.close_ticket() was refused by the approval policy",
            "tool_calls": ["tickets.close_ticket refused"],
        },
    ]


def test_the_ray_example_evaluates_on_a_local_cluster_and_classifies_each_failure() -> None:
    out = [json.loads(line) for line in lines(run_example("ray_pool"))]
    by_formula = {o["formula"]: o for o in out if "formula" in o}
    assert by_formula["2 ** 10"] == {"formula": "2 ** 10", "ok": True, "value": 1024}
    assert by_formula["null.price"]["kind"] == "js_error"
    assert by_formula["while (true) {}"]["kind"] == "timeout"
    assert {"ref": "ObjectRef", "value": "submitted: 42"} in out
    assert out[-1]["workers_killed"] == {"timeout": 1}
