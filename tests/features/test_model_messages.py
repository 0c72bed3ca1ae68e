"""Two readers, two texts: what a model reads and what the operator reads of a failure.

A model reads Code Mode and MCP results (``error["hint"]``, ``str(result)``) and
``describe()``: it is told what the *program* can change, in the program's terms, with the
limit's value where the failure knows it, and never an option, a flag or
``expose_host_errors``. The operator reads the exception (``result.exception``, its
``.hint`` and PEP 678 note): which option to change. Deno's own command-line advice
(``--allow-net``, ``--no-npm``) reaches neither: the sandbox says what it refused, with a
kind of its own, and the guest that catches such an error reads the sandbox's words too
where the API is the sandbox's to wrap (fetch, WebSocket, in guest Workers as well).

Here the failures are produced for real; the catalog's own texts are
tests/unit/test_model_texts.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import pydeno
from pydeno._base.kinds import Catalog
from tests.support.model_checks import OPTION, MiB, lookup

DENO_ADVICE = re.compile(r"--allow-|--no-npm|--no-remote|run again with|[Ff]lag")


@pytest.fixture
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(timeout=10) as runtime:
        yield runtime


def model_side(result: pydeno.ExecutionResult) -> str:
    """Everything a model reads of a failed result: its text and its error's fields."""
    assert result.error is not None
    return str(result) + "\n" + "\n".join(str(v) for v in result.error.values())


def operator_note(result: pydeno.ExecutionResult) -> str:
    assert result.exception is not None
    return "\n".join(getattr(result.exception, "__notes__", []))


# -- limits in Code Mode -------------------------------------------------------------------------
def test_a_code_mode_timeout_tells_the_model_to_do_less_and_the_operator_to_raise_timeout() -> None:
    with pydeno.CodeMode([lookup], timeout=0.5) as cm:
        result = cm.execute("while (true) {}")
    assert result.error is not None and result.error["kind"] == "timeout"
    assert result.error["hint"] == (
        "The program did not finish in time (its limit is 0.5 s per run): make it do less work per run (smaller "
        "inputs, fewer awaits in series, no busy loops), or split the work across runs."
    )
    assert f"hint: {result.error['hint']}" in str(result)
    assert "raise timeout=" not in model_side(result)
    assert "retryable: no; a larger limit may let it finish" in operator_note(result)
    assert "Fix: raise timeout= (now 0.5)" in operator_note(result)


def test_a_code_mode_memory_limit_gives_the_model_the_limit_in_mib_and_no_option() -> None:
    with pydeno.CodeMode([lookup], max_memory=128 * MiB, timeout=30) as cm:
        result = cm.execute("const a = []; while (true) a.push(new Uint8Array(1e6).fill(1))")
    assert result.error is not None and result.error["kind"] == "memory_limit"
    assert result.error["hint"].startswith("The program kept too much in memory (its limit is 128 MiB): ")
    assert "max_memory" not in result.error["hint"] and "max_memory=" not in str(result).split("hint: ")[1]
    assert "Fix: raise max_memory= (now 134217728 = 128 MiB)" in operator_note(result)


def test_a_spent_tool_budget_tells_the_model_to_make_fewer_calls_not_to_raise_a_budget() -> None:
    with pydeno.CodeMode([lookup], max_tool_calls=1) as cm:
        result = cm.execute("await tools.lookup({key: 'a'}); await tools.lookup({key: 'a'})")
    assert result.error is not None and result.error["kind"] == "tool_budget"
    assert result.error["hint"] == Catalog["tool_budget"].model_fix
    assert "max_tool_calls" not in result.error["hint"]
    assert "max_tool_calls=" in operator_note(result)


# -- a tool that fails on the host ---------------------------------------------------------------
def test_a_tool_raising_key_error_is_a_tool_failure_the_model_cannot_fix_in_javascript() -> None:
    with pydeno.CodeMode([lookup]) as cm:
        result = cm.execute("await tools.lookup({key: 'zzz'})")
    error = result.error
    assert error is not None
    assert (error["kind"], error["name"]) == ("tool_failed", "KeyError")
    assert error["message"] == "tools.lookup() failed on the host (KeyError); its details are hidden from the program"
    assert error["hint"] == Catalog["tool_failed"].model_fix
    assert "Fix the JavaScript" not in str(result)
    assert "expose_host_errors" not in model_side(result)
    assert "  lookup: KeyError: tools.lookup() failed on the host (KeyError)" in str(result)
    note = operator_note(result)
    assert note.startswith("Kind: tool_failed (retryable: no)\n")
    assert "(tools.lookup() raised KeyError)" in note
    assert "pass expose_host_errors=True" in note
    assert "'zzz'" not in model_side(result)


def test_with_exposed_host_errors_the_model_reads_the_exception_text_after_the_host_failure() -> None:
    with pydeno.CodeMode([lookup], expose_host_errors=True) as cm:
        result = cm.execute("await tools.lookup({key: 'zzz'})")
    assert result.error is not None and result.error["kind"] == "tool_failed"
    assert result.error["message"] == "tools.lookup() failed on the host (KeyError): 'zzz'"
    assert "expose_host_errors=True" in operator_note(result)


def test_a_program_that_catches_a_host_failure_reads_that_the_tool_failed_on_the_host() -> None:
    with pydeno.CodeMode([lookup]) as cm:
        result = cm.execute("try { await tools.lookup({key: 'zzz'}) } catch (e) { [e.name, e.message] }")
    assert result.value == [
        "KeyError",
        "tools.lookup() failed on the host (KeyError); its details are hidden from the program",
    ]


def test_a_tool_error_raised_on_purpose_stays_the_tools_own_message() -> None:
    @pydeno.tool
    def refuse() -> None:
        """Refuse."""
        raise pydeno.ToolError("no such customer")

    with pydeno.CodeMode([refuse]) as cm:
        result = cm.execute("await tools.refuse()")
    assert result.error is not None
    assert (result.error["kind"], result.error["name"], result.error["message"]) == (
        "tool_failed",
        "ToolError",
        "no such customer",
    )


def test_a_bound_function_raising_is_a_host_failure_whose_note_says_how_to_show_details() -> None:
    def boom() -> None:
        raise ZeroDivisionError("secret")

    with pydeno.Runtime() as rt:
        rt.bind_function("boom", boom)
        with pytest.raises(pydeno.JavaScriptError) as caught:
            rt.eval("await boom()")
    exc = caught.value
    assert str(exc) == (
        "Evaluation failed: ZeroDivisionError: host function boom() failed on the host (ZeroDivisionError); its "
        "details are hidden from the program"
    )
    assert pydeno.classify_error(exc).kind == "tool_failed"
    assert "secret" not in str(exc)
    assert exc.__notes__[0].startswith(
        "Kind: tool_failed (retryable: no)\nFix: a host function or tool raised an exception that is not a "
        "pydeno.ToolError, and the guest did not catch it (host function boom() raised ZeroDivisionError): "
    )
    assert "expose_host_errors=True" in exc.__notes__[0]


def test_an_agent_tool_raising_key_error_uncaught_is_a_tool_failure() -> None:
    def find(key: str) -> str:
        return {"a": "alpha"}[key]

    with pydeno.AgentSandbox(tools={"find": find}) as sb, pytest.raises(pydeno.JavaScriptError) as caught:
        sb.run("await tools.find('zzz')")
    exc = caught.value
    assert exc.message == "tools.find() failed on the host (KeyError); its details are hidden from the program"
    assert pydeno.classify_error(exc, via_agent=True).kind == "tool_failed"
    assert "pass expose_host_errors=True" in exc.__notes__[0]


# -- deno's refusals, in the sandbox's words -----------------------------------------------------
REFUSED: list[Any] = [
    pytest.param(
        "await fetch('http://127.0.0.1:8080/')",
        "TypeError",
        'no network access in this sandbox: "127.0.0.1:8080" was not reached',
        "sandbox_denied",
        "pydeno.HttpFetch",
        id="fetch",
    ),
    pytest.param(
        "await fetch(new Request('https://example.com/'))",
        "TypeError",
        'no network access in this sandbox: "example.com:443" was not reached',
        "sandbox_denied",
        "pydeno.HttpFetch",
        id="fetch-request",
    ),
    pytest.param(
        "new WebSocket('ws://127.0.0.1:8080/')",
        "TypeError",
        'no network access in this sandbox: "127.0.0.1:8080" was not reached',
        "sandbox_denied",
        "pydeno.HttpFetch",
        id="websocket",
    ),
    pytest.param(
        "await new Promise(async (ok, no) => { const s = (await import('node:net')).connect(8080, '127.0.0.1');"
        " s.on('error', no); s.on('connect', ok) })",
        "NotCapable",
        'no network access in this sandbox: "127.0.0.1:8080" was not reached',
        "sandbox_denied",
        "pydeno.HttpFetch",
        id="node-net",
    ),
    pytest.param(
        "(await import('node:fs')).existsSync('/etc/passwd')",
        "NotCapable",
        'no file access in this sandbox: "/etc/passwd" was not read',
        "sandbox_denied",
        "read or write the files on the host",
        id="node-fs-exists",
    ),
    pytest.param(
        "(await import('node:fs')).readFileSync('/etc/passwd', 'utf8')",
        "ReferenceError",
        "no file access in this sandbox",
        "sandbox_denied",
        "read or write the files on the host",
        id="node-fs-read",
    ),
    pytest.param(
        "(await import('node:fs')).writeFileSync('/tmp/pydeno-never', 'x')",
        "ReferenceError",
        "no file access in this sandbox",
        "sandbox_denied",
        "read or write the files on the host",
        id="node-fs-write",
    ),
    pytest.param(
        "Deno.readTextFileSync('/etc/passwd')",
        "ReferenceError",
        "no Deno namespace in this sandbox",
        "sandbox_denied",
        "no option changes that",
        id="deno-namespace",
    ),
    pytest.param(
        "(await import('node:process')).default.env.HOME",
        "ReferenceError",
        "no environment variables in this sandbox",
        "sandbox_denied",
        "pass the values the guest needs",
        id="process-env",
    ),
    pytest.param(
        "(await import('node:child_process')).execSync('id')",
        "ReferenceError",
        "no subprocesses in this sandbox",
        "sandbox_denied",
        "no option changes that",
        id="child-process",
    ),
    pytest.param(
        "(await import('node:os')).homedir()",
        "NotCapable",
        'no system information in this sandbox: "homedir" was not read',
        "sandbox_denied",
        "no option changes that",
        id="os-homedir",
    ),
    pytest.param(
        "await import('npm:lodash')",
        "TypeError",
        "npm packages cannot be imported in this sandbox",
        "import_refused",
        'rt.add_module("npm:<package>", source)',
        id="npm",
    ),
    pytest.param(
        "const s = 'npm:' + 'zod'; await import(s)",
        "TypeError",
        "npm packages cannot be imported in this sandbox",
        "import_refused",
        "rt.add_module(",
        id="npm-computed",
    ),
    pytest.param(
        "await import('jsr:@std/path')",
        "TypeError",
        'module "jsr:@std/path" cannot be imported in this sandbox: jsr packages are not available',
        "import_refused",
        'rt.add_module("jsr:@std/path", source)',
        id="jsr",
    ),
    pytest.param(
        "await import('https://deno.land/x/foo/mod.ts')",
        "TypeError",
        'module "https://deno.land/x/foo/mod.ts" cannot be imported in this sandbox: remote modules are not available',
        "import_refused",
        'rt.add_module("https://deno.land/x/foo/mod.ts", source)',
        id="https",
    ),
    pytest.param(
        "await import('file:///etc/passwd')",
        "TypeError",
        'module "/etc/passwd" cannot be imported in this sandbox: files are not available',
        "import_refused",
        "rt.add_module(",
        id="file",
    ),
    pytest.param(
        "await import('lodash')",
        "TypeError",
        'module "lodash" cannot be imported in this sandbox: it was not added; only added modules, '
        "packages the host provided (packages=) and node: built-ins can be imported",
        "import_refused",
        'rt.add_module("lodash", source)',
        id="bare-not-added",
    ),
]


@pytest.mark.parametrize(("code", "name", "message", "kind", "operator"), REFUSED)
def test_what_deno_refuses_is_said_in_the_sandboxs_words_with_its_own_kind(
    rt: pydeno.Runtime, code: str, name: str, message: str, kind: str, operator: str
) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval(code, timeout=10)
    exc = caught.value
    assert (exc.name, exc.message) == (name, message)
    assert not DENO_ADVICE.search(str(exc))
    info = pydeno.classify_error(exc)
    assert (info.kind, info.retryable, info.retry_with_larger_limits) == (kind, False, False)
    assert operator in exc.hint
    assert exc.__notes__[0] == (f"Kind: {kind} (retryable: no)\nFix: {exc.hint}\nDocs: pydeno errors {kind}")
    assert not OPTION.search(exc.model_hint)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "code",
    [
        "try { await fetch('https://example.com/') } catch (e) { [e.name, e.message] }",
        "try { new WebSocket('wss://example.com/') } catch (e) { [e.name, e.message] }",
    ],
)
def test_a_guest_that_catches_a_network_refusal_reads_the_sandboxs_words(rt: pydeno.Runtime, code: str) -> None:
    assert rt.eval(code) == ["TypeError", 'no network access in this sandbox: "example.com:443" was not reached']


def test_fetch_of_a_data_url_still_works_without_a_network(rt: pydeno.Runtime) -> None:
    assert rt.eval("await (await fetch('data:text/plain,hello')).text()") == "hello"


WORKER = (
    "await new Promise((ok) => {{ const w = new Worker('data:text/javascript,' + encodeURIComponent({body}), "
    "{{type: 'module'}}); w.onmessage = (m) => {{ ok(m.data); w.terminate(); }}; "
    "w.onerror = (e) => {{ e.preventDefault(); ok(e.message); w.terminate(); }} }})"
)


def test_a_guest_worker_that_fetches_reads_the_sandboxs_words_too(rt: pydeno.Runtime) -> None:
    body = (
        "\"fetch('http://127.0.0.1:8080/').then(() => postMessage('ok'), e => postMessage(e.name + ': ' + e.message))\""
    )
    assert (
        rt.eval(WORKER.format(body=body))
        == 'TypeError: no network access in this sandbox: "127.0.0.1:8080" was not reached'
    )


def test_a_guest_worker_refusal_rethrown_by_its_parent_is_sandbox_denied(rt: pydeno.Runtime) -> None:
    body = "\"await fetch('http://127.0.0.1:8080/')\""
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval(f"throw new Error({WORKER.format(body=body)})")
    assert caught.value.message == 'no network access in this sandbox: "127.0.0.1:8080" was not reached'
    assert caught.value.kind == "sandbox_denied"


def test_a_code_mode_fetch_tells_the_model_there_is_no_network_and_the_operator_about_http_fetch() -> None:
    with pydeno.CodeMode([lookup]) as cm:
        result = cm.execute("const r = await fetch('https://example.com/');\nawait r.text()")
    assert result.error is not None
    assert (result.error["kind"], result.error["line"]) == ("sandbox_denied", 1)
    assert not DENO_ADVICE.search(model_side(result))
    assert not OPTION.search(result.error["hint"])
    assert result.error["hint"].startswith("The program cannot reach the network from the sandbox")
    assert "attach a pydeno.HttpFetch(allow=[...])" in operator_note(result)


def test_a_code_mode_npm_import_tells_the_model_there_are_no_packages() -> None:
    with pydeno.CodeMode([lookup]) as cm:
        result = cm.execute("const _ = await import('npm:lodash'); _.chunk([1, 2], 1)")
    assert result.error is not None and result.error["kind"] == "import_refused"
    assert result.error["message"] == "npm packages cannot be imported in this sandbox"
    assert result.error["hint"] == Catalog["import_refused"].model_fix
    assert not DENO_ADVICE.search(model_side(result))
    assert "rt.add_module(" in operator_note(result)


def test_the_wrapped_fetch_and_websocket_keep_the_native_shape(rt: pydeno.Runtime) -> None:
    assert rt.eval("[fetch.name, fetch.length, WebSocket.name, WebSocket.OPEN, WebSocket.CLOSED]") == [
        "fetch",
        1,
        "WebSocket",
        1,
        3,
    ]


def test_a_guest_worker_npm_import_rethrown_by_its_parent_is_import_refused(rt: pydeno.Runtime) -> None:
    body = "\"import('npm:lodash').then(() => postMessage('ok'), e => postMessage(e.name + ': ' + e.message))\""
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval(f"throw new TypeError({WORKER.format(body=body)})")
    assert caught.value.message == "npm packages cannot be imported in this sandbox"
    assert caught.value.kind == "import_refused"


@pytest.mark.parametrize(
    ("thrown", "message", "kind"),
    [
        (
            'Uncaught (in promise) NotCapable: Requires read access to "/etc/passwd", run again with the '
            "--allow-read flag",
            'no file access in this sandbox: "/etc/passwd" was not read',
            "sandbox_denied",
        ),
        (
            'TypeError: Requires read access to "/x.js", run again with the --allow-read flag',
            'module "/x.js" cannot be imported in this sandbox: files are not available',
            "import_refused",
        ),
        (
            "Error: npm specifiers were requested; but --no-npm is specified",
            "npm packages cannot be imported in this sandbox",
            "import_refused",
        ),
    ],
)
def test_deno_text_retold_with_a_name_in_front_is_still_said_in_the_sandboxs_words(
    rt: pydeno.Runtime, thrown: str, message: str, kind: str
) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval(f"throw new Error({json.dumps(thrown)})")
    assert (caught.value.message, caught.value.kind) == (message, kind)
