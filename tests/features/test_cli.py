"""The command line, run for real: the ``pydeno`` console script and ``python -m pydeno``.

Every case is a subprocess (Python plus, for an eval, one worker: about half a second), so
the table stays short; the page renderer is checked in process, in
tests/unit/test_cli_in_process.py, and the values' JSON in tests/unit/test_json_values.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pydeno
from pydeno._base.docs_links import docs_page
from pydeno._base.kinds import Catalog
from pydeno._cli import main as _cli
from pydeno._cli.pages import kind_page

SCRIPT = Path(sys.executable).parent / "pydeno"
MODULE = [sys.executable, "-m", "pydeno"]

RICH_CODE = (
    "({a: 1, b: [undefined, 0/0, -0, 10n**30n, Infinity], d: new Date(1.5), u: new Uint8Array([1, 2, 255]),"
    ' s: new Set([3, "a", 1]), f: x => x, m: new Map([[1, 2], [null, 4], [new Date(0), 5], [NaN, 6]]), e: "é"})'
)
RICH_JSON = (
    '{"a": 1, "b": [{"$type": "undefined"}, {"$type": "number", "value": "NaN"}, -0.0, 1000000000000000000000000000000,'
    ' {"$type": "number", "value": "Infinity"}], "d": {"$type": "date", "iso": "1970-01-01T00:00:00.001000+00:00"},'
    ' "u": {"$type": "bytes", "base64": "AQL/"}, "s": {"$type": "set", "values": ["a", 1, 3]},'
    ' "f": {"$type": "function"}, "m": {"$type": "map", "entries": [[1, 2], [null, 4],'
    ' [{"$type": "date", "iso": "1970-01-01T00:00:00+00:00"}, 5],'
    ' [{"$type": "number", "value": "NaN"}, 6]]}, "e": "é"}\n'
)
MEMORY_HOG = "const a = []; while (true) a.push(new Uint8Array(1e6).fill(1))"


def run(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, command: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    if command is None:
        assert SCRIPT.exists(), f"no console script at {SCRIPT}: pip install -e . to create it"
        command = [str(SCRIPT)]
    result = subprocess.run(
        [*command, *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode("utf-8"), result.stderr.decode("utf-8")
    )


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    status: int
    stdout: str | None = None  # exact, when given
    stderr: str | None = None  # exact, when given
    stderr_has: tuple[str, ...] = ()
    stdout_has: tuple[str, ...] = ()
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)


CASES = {
    "value": Case(("[1, 2].map(x => x * 3)",), 0, stdout="[3, 6]\n", stderr=""),
    "promise": Case(("Promise.resolve('done')",), 0, stdout='"done"\n', stderr=""),
    "undefined": Case(("undefined",), 0, stdout='{"$type": "undefined"}\n', stderr=""),
    "rich-value": Case((RICH_CODE,), 0, stdout=RICH_JSON, stderr=""),
    "js-error": Case(
        ("null.x",),
        1,
        stdout="",
        stderr="Evaluation failed: TypeError: Cannot read properties of null (reading 'x')\n    at guest:eval:1:6\n",
    ),
    "syntax-error": Case(("1 +",), 1, stdout="", stderr_has=("SyntaxError",)),
    "timeout": Case(
        ("--timeout", "0.3", "while (true) {}"),
        2,
        stdout="",
        stderr_has=(
            "pydeno: RuntimeTimeout: command exceeded timeout=0.3s; worker killed",
            "Kind: timeout (retryable: no; a larger limit may let it finish)",
            "Fix: raise timeout= (now 0.3), or make the code finish sooner",
            "Option: --timeout",
            "Docs: pydeno errors timeout",
        ),
    ),
    "memory-limit": Case(
        ("--max-memory", "40M", MEMORY_HOG), 2, stdout="", stderr_has=("Kind: memory_limit", "Option: --max-memory")
    ),
    "no-deno": Case(
        ("1",), 2, stdout="", stderr_has=("Kind: deno_unavailable",), env={"PYDENO_DENO": "/nonexistent/deno"}
    ),
    "stdin": Case(("-",), 0, stdin=b"const doctor = 6;\ndoctor * 7\n", stdout="42\n", stderr=""),
    "stdin-not-utf8": Case(("-",), 2, stdin=b"\xff", stdout="", stderr_has=("Kind: invalid_input",)),
    "dash-dash": Case(("--", "-1"), 0, stdout="-1\n", stderr=""),
    "console-to-stderr": Case(
        ("console.log('to stderr'); console.error('also'); 5",), 0, stdout="5\n", stderr="to stderr\nalso\n"
    ),
    "sandbox-off": Case(("--sandbox", "off", "'ok'"), 0, stdout='"ok"\n', stderr=""),
    "sandbox-bad": Case(("--sandbox", "nah", "1"), 2, stdout="", stderr_has=("invalid choice: 'nah'",)),
    "max-memory-suffix": Case(("--max-memory", "256M", "1"), 0, stdout="1\n", stderr=""),
    "max-memory-binary-suffix": Case(("--max-memory", "1.5GiB", "1"), 0, stdout="1\n", stderr=""),
    "max-memory-bytes": Case(("--max-memory", "268435456", "1"), 0, stdout="1\n", stderr=""),
    "max-memory-junk": Case(
        ("--max-memory", "12X", "1"),
        2,
        stdout="",
        stderr_has=("argument --max-memory: invalid size '12X'", "256M, 1.5G"),
    ),
    "max-memory-too-small": Case(
        ("--max-memory", "1k", "1"), 2, stdout="", stderr_has=("argument --max-memory: max_memory must be at least",)
    ),
    "timeout-bad": Case(("--timeout", "-1", "1"), 2, stdout="", stderr_has=("argument --timeout",)),
    "no-code": Case((), 2, stdout="", stderr_has=("required: CODE",)),
    "errors-table": Case(("errors",), 0, stderr="", stdout_has=tuple(f"\n{kind} " for kind in pydeno.KINDS)),
    "errors-kind": Case(
        ("errors", "timeout"), 0, stderr="", stdout_has=("# `timeout`", Catalog["timeout"].fix, "## Example")
    ),
    "errors-unknown": Case(("errors", "nope"), 2, stdout="", stderr_has=("unknown kind 'nope'", "js_error, timeout")),
    "doctor": Case(("doctor",), 0, stderr="", stdout_has=("sandbox='require' would start here",)),
    "help": Case(
        ("--help",), 0, stderr="", stdout_has=("pydeno doctor", "pydeno errors", "--max-memory", "exit codes")
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_command_line(case: Case) -> None:
    result = run(*case.args, stdin=case.stdin, env=case.env)
    assert result.returncode == case.status, result.stderr
    if case.stdout is not None:
        assert result.stdout == case.stdout
    if case.stderr is not None:
        assert result.stderr == case.stderr
    for text in case.stderr_has:
        assert text in result.stderr
    for text in case.stdout_has:
        assert text in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("command", [[str(SCRIPT)], MODULE], ids=["script", "module"])
@pytest.mark.parametrize(
    ("args", "stdout"),
    [(("6 * 7",), "42\n"), (("errors", "unknown"), kind_page("unknown"))],
    ids=["eval", "errors"],
)
def test_both_entry_points(command: list[str], args: tuple[str, ...], stdout: str) -> None:
    result = run(*args, command=command)
    assert (result.returncode, result.stdout, result.stderr) == (0, stdout, "")


JSON_CASES: dict[str, tuple[tuple[str, ...], bytes, dict[str, str], int, str]] = {
    "js_error": (("null.x",), b"", {}, 1, "js_error"),
    "timeout": (("--timeout", "0.3", "while (true) {}"), b"", {}, 2, "timeout"),
    "memory_limit": (("--max-memory", "40M", MEMORY_HOG), b"", {}, 2, "memory_limit"),
    "deno_unavailable": (("1",), b"", {"PYDENO_DENO": "/nonexistent/deno"}, 2, "deno_unavailable"),
    "invalid_input": (("-",), b"\xff", {}, 2, "invalid_input"),
}


@pytest.mark.slow
def test_json_success() -> None:
    result = run("--json", "[1, 'a', undefined]")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.count("\n") == 1
    assert json.loads(result.stdout) == {"ok": True, "value": [1, "a", {"$type": "undefined"}]}


@pytest.mark.slow
@pytest.mark.parametrize(("args", "stdin", "env", "status", "kind"), JSON_CASES.values(), ids=JSON_CASES.keys())
def test_json_failure(args: tuple[str, ...], stdin: bytes, env: dict[str, str], status: int, kind: str) -> None:
    result = run("--json", *args, stdin=stdin, env=env)
    assert (result.returncode, result.stderr) == (status, "")
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["classification"] == pydeno.ErrorInfo(kind, *_triple(kind)).to_dict()
    assert report["docs"] == docs_page(kind)
    assert report["hint"]
    assert report["option"] == _cli.OPTIONS.get(kind)
    error = report["error"]
    if kind == "js_error":
        assert error == {
            "type": "JavaScriptError",
            "name": "TypeError",
            "message": "Cannot read properties of null (reading 'x')",
            "stack": "TypeError: Cannot read properties of null (reading 'x')\n    at guest:eval:1:6",
            "line": None,
            "column": None,
        }
    else:
        assert set(error) == {"type", "message"}
        assert error["message"]


def _triple(kind: str) -> tuple[bool, str, bool]:
    retryable, larger, summary = pydeno.KINDS[kind]
    return retryable, summary, larger


@pytest.mark.slow
def test_errors_json() -> None:
    table = json.loads(run("errors", "--json").stdout)
    assert [row["kind"] for row in table] == list(pydeno.KINDS)
    row = json.loads(run("errors", "--json", "memory_limit").stdout)
    assert row["fix"] == Catalog["memory_limit"].fix
    assert row["model_fix"] == Catalog["memory_limit"].model_fix
    assert row["docs"] == docs_page("memory_limit") == "pydeno errors memory_limit"
