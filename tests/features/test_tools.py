"""ToolBridge: a service's functions as ``tools.<name>(...)`` in guest code, on a budget,
against real deno workers."""

from __future__ import annotations

import asyncio
import datetime
import functools
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

import pydeno
from pydeno.host.process.staging import find_deno

HIDDEN = "tools.{name}() failed on the host ({cls}); its details are hidden from the program"


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.fixture
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as runtime:
        yield runtime


def counted(calls: list[tuple[Any, ...]], fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, appending each call's arguments to calls; keeps fn's signature for the bridge."""

    @functools.wraps(fn)
    def tool(*args: Any) -> Any:
        calls.append(args)
        return fn(*args)

    return tool


# --- calling tools ----------------------------------------------------------------------------


def test_the_guest_sees_sync_and_async_tools_as_async_functions(rt: pydeno.Runtime) -> None:
    async def mul(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a * b

    pydeno.ToolBridge({"add": add, "mul": mul}).attach(rt)
    assert rt.eval("Object.keys(tools)") == ["add", "mul"]
    assert rt.eval("[typeof tools.add, tools.add(1, 2) instanceof Promise, tools.mul(2, 3) instanceof Promise]") == [
        "function",
        True,
        True,
    ]
    assert rt.eval("await tools.add(40, 2) + await tools.mul(6, 7)") == 84


@pytest.mark.parametrize(("max_calls", "reached"), [(0, 0), (1, 1), (3, 3), (None, 4)])
def test_a_tool_past_the_budget_never_reaches_python(rt: pydeno.Runtime, max_calls: int | None, reached: int) -> None:
    calls: list[tuple[Any, ...]] = []
    bridge = pydeno.ToolBridge({"add": counted(calls, add)}, max_calls=max_calls)
    bridge.attach(rt)
    outcomes = rt.eval(
        """
        const outcomes = [];
        for (let i = 0; i < 4; i++) {
          try { outcomes.push(await tools.add(i, 10)); }
          catch (e) { outcomes.push(`${e instanceof Error} ${e.name}: ${e.message}`); }
        }
        outcomes
        """
    )
    refused = f"true ToolBudgetError: the tool-call budget of {max_calls} calls is spent"
    assert outcomes == [10, 11, 12, 13][:reached] + [refused] * (4 - reached)
    assert calls == [(i, 10) for i in range(reached)]
    assert bridge.calls_made == reached


def test_an_uncaught_call_past_the_budget_fails_the_eval_as_tool_budget(rt: pydeno.Runtime) -> None:
    pydeno.ToolBridge({"add": add}, max_calls=1).attach(rt)
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval("await tools.add(1, 2); await tools.add(3, 4)")
    exc = exc_info.value
    assert str(exc) == "Evaluation failed: ToolBudgetError: the tool-call budget of 1 calls is spent"
    assert pydeno.classify_error(exc).kind == exc.kind == "tool_budget"


def test_a_budget_spent_in_one_runtime_is_refused_by_the_host_in_another() -> None:
    # rt2's guest still believes it has two calls left; the host's count refuses the call.
    calls: list[tuple[Any, ...]] = []
    bridge = pydeno.ToolBridge({"add": counted(calls, add)}, max_calls=2)
    with pydeno.Runtime() as rt1, pydeno.Runtime() as rt2:
        bridge.attach(rt1)
        bridge.attach(rt2)
        assert rt1.eval("[await tools.add(1, 1), await tools.add(2, 2)]") == [2, 4]
        assert rt2.eval("try { await tools.add(3, 3) } catch (e) { `${e.name}: ${e.message}` }") == (
            "ToolBudgetError: the tool-call budget of 2 calls is spent"
        )
    assert calls == [(1, 1), (2, 2)]
    assert bridge.calls_made == 2


class QuotaError(pydeno.ToolError):
    """A service's own tool error: the guest sees the family's name."""


@pytest.mark.parametrize(
    ("error", "name", "kind"),
    [
        (pydeno.ToolError("upstream refused"), "ToolError", "tool_failed"),
        (pydeno.ToolNotFoundError("no such user"), "ToolNotFoundError", "tool_not_found"),
        (pydeno.ToolBudgetError("the upstream quota is spent"), "ToolBudgetError", "tool_budget"),
        (QuotaError("over quota"), "ToolError", "tool_failed"),
    ],
)
def test_a_tool_error_reaches_the_guest_catchable_by_name_and_classifies_by_kind_when_uncaught(
    rt: pydeno.Runtime, error: pydeno.ToolError, name: str, kind: str
) -> None:
    def fail() -> None:
        raise error

    pydeno.ToolBridge({"fail": fail}).attach(rt)
    caught = rt.eval("try { await tools.fail() } catch (e) { [e instanceof Error, e.name, e.message] }")
    assert caught == [True, name, str(error)]
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval("await tools.fail()")
    exc = exc_info.value
    assert (exc.name, exc.message, str(exc)) == (name, str(error), f"Evaluation failed: {name}: {error}")
    assert pydeno.classify_error(exc).kind == kind
    assert exc.kind == kind
    assert rt.eval("1 + 1") == 2


@pytest.mark.parametrize(
    ("error", "expose", "message"),
    [
        (KeyError("customer 42"), False, HIDDEN.format(name="lookup", cls="KeyError")),
        (KeyError("customer 42"), True, "tools.lookup() failed on the host (KeyError): 'customer 42'"),
        (PermissionError("db password is hunter2"), False, HIDDEN.format(name="lookup", cls="PermissionError")),
        (
            PermissionError("db password is hunter2"),
            True,
            "tools.lookup() failed on the host (PermissionError): db password is hunter2",
        ),
    ],
)
def test_another_exception_reaches_the_guest_as_a_host_failure_with_its_message_hidden_unless_exposed(
    error: Exception, expose: bool, message: str
) -> None:
    def lookup() -> None:
        raise error

    name = type(error).__name__
    with pydeno.Runtime(expose_host_errors=expose) as rt:
        pydeno.ToolBridge({"lookup": lookup}).attach(rt)
        assert rt.eval("try { await tools.lookup() } catch (e) { [e.name, e.message] }") == [name, message]
        with pytest.raises(pydeno.JavaScriptError) as exc_info:
            rt.eval("await tools.lookup()")
    assert str(exc_info.value) == f"Evaluation failed: {name}: {message}"
    # A failure on the host, never the program's own error; the operator's note (not the
    # guest) says how to show the details.
    assert pydeno.classify_error(exc_info.value).kind == "tool_failed"
    assert "expose_host_errors" not in message
    note = exc_info.value.__notes__[0]
    assert note.startswith("Kind: tool_failed (retryable: no)")
    assert f"(tools.lookup() raised {name})" in note
    assert ("pass expose_host_errors=True" in note) is not expose


def keyword_only(*, x: int) -> int:
    return x


@pytest.mark.slow
@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("tools.add(1)", "tools.add(): missing a required argument: 'b'"),
        ("tools.add()", "tools.add(): missing a required argument: 'a'"),
        ("tools.add(1, 2, 3)", "tools.add(): too many positional arguments"),
        ("tools.keyword_only(1)", "tools.keyword_only(): too many positional arguments"),
    ],
)
def test_a_call_that_does_not_fit_the_signature_gives_the_guest_a_tool_error_naming_the_problem(
    rt: pydeno.Runtime, call: str, message: str
) -> None:
    calls: list[tuple[Any, ...]] = []
    tools: dict[str, Callable[..., Any]] = {"add": add, "keyword_only": keyword_only}
    bridge = pydeno.ToolBridge({name: counted(calls, fn) for name, fn in tools.items()})
    bridge.attach(rt)
    assert rt.eval(f"try {{ await {call} }} catch (e) {{ [e.name, e.message] }}") == ["ToolError", message]
    assert calls == []
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval(f"await {call}")
    assert pydeno.classify_error(exc_info.value).kind == "tool_failed"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("result", "detail"),
    [
        (
            object(),
            "cannot convert builtins.object to a JavaScript value: pass None, bool, int, float, str, bytes, list, "
            "tuple, dict, set, an aware datetime, pydeno.undefined or a JsFunction",
        ),
        (
            datetime.datetime(2024, 5, 1, 12, 0),
            "cannot convert a naive datetime to a JavaScript Date: attach a timezone, "
            "for example dt.replace(tzinfo=datetime.timezone.utc)",
        ),
    ],
)
def test_an_unserialisable_tool_result_gives_the_guest_a_type_error_and_the_worker_lives_on(
    rt: pydeno.Runtime, result: object, detail: str
) -> None:
    pydeno.ToolBridge({"get": lambda: result, "add": add}).attach(rt)
    assert rt.eval("try { await tools.get() } catch (e) { [e instanceof Error, e.name, e.message] }") == [
        True,
        "TypeError",
        f"the host function's result could not be converted: {detail}",
    ]
    assert not rt.closed
    assert rt.eval("await tools.add(2, 3)") == 5


# --- the guest's view -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attempt", "error"),
    [
        ("'use strict'; tools = {}", "TypeError: Cannot assign to read only property 'tools' of object '#<Window>'"),
        ("let tools = {}", "SyntaxError: Identifier 'tools' has already been declared"),
        ("function tools() {}", "SyntaxError: Identifier 'tools' has already been declared"),
        ("Object.defineProperty(globalThis, 'tools', { value: {} })", "TypeError: Cannot redefine property: tools"),
        ("'use strict'; delete globalThis.tools", "TypeError: Cannot delete property 'tools' of #<Window>"),
        (
            "'use strict'; tools.add = async () => 99",
            "TypeError: Cannot assign to read only property 'add' of object '[object Object]'",
        ),
        ("'use strict'; delete tools.add", "TypeError: Cannot delete property 'add' of [object Object]"),
        ("'use strict'; tools.extra = async () => 1", "TypeError: Cannot add property extra, object is not extensible"),
        ("Object.setPrototypeOf(tools, { add: async () => 99 })", "TypeError: [object Object] is not extensible"),
    ],
)
def test_the_guest_cannot_replace_or_change_tools(rt: pydeno.Runtime, attempt: str, error: str) -> None:
    pydeno.ToolBridge({"add": add}).attach(rt)
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval(attempt)
    assert str(exc_info.value) == f"Evaluation failed: {error}"
    # Sloppy-mode attempts fail silently; either way the tool is still the real one.
    assert rt.eval("tools = {}; tools.add = null; delete tools.add; globalThis.tools = 1; await tools.add(2, 3)") == 5
    assert rt.eval("Object.getOwnPropertyDescriptor(globalThis, 'tools').configurable") is False


def test_the_hidden_host_function_is_not_reachable_as_a_global(rt: pydeno.Runtime) -> None:
    pydeno.ToolBridge({"add": add}).attach(rt)
    assert rt.eval(
        """[
          typeof __pydeno_tool_call,
          '__pydeno_tool_call' in globalThis,
          Reflect.ownKeys(globalThis).includes('__pydeno_tool_call'),
          globalThis.__pydeno_tool_call,
        ]"""
    ) == ["undefined", False, False, pydeno.undefined]
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval("__pydeno_tool_call('add', [1, 2])")
    assert str(exc_info.value) == "Evaluation failed: ReferenceError: __pydeno_tool_call is not defined"


@pytest.mark.slow
@pytest.mark.parametrize("same_bridge", [True, False])
def test_attaching_a_second_bridge_to_a_runtime_raises_runtime_error(rt: pydeno.Runtime, same_bridge: bool) -> None:
    first = pydeno.ToolBridge({"add": add})
    first.attach(rt)
    second = first if same_bridge else pydeno.ToolBridge({"sub": lambda a, b: a - b})
    with pytest.raises(RuntimeError) as exc_info:
        second.attach(rt)
    assert str(exc_info.value) == "a ToolBridge is already attached to this runtime"
    assert rt.eval("[Object.keys(tools), await tools.add(1, 2)]") == [["add"], 3]


@pytest.mark.parametrize(
    ("tools", "max_calls", "error", "message"),
    [
        (
            {"get-weather": add},
            None,
            ValueError,
            "tool name 'get-weather' is not a JavaScript identifier (letters, digits, _ or $), "
            "or several joined by dots for a namespace",
        ),
        (
            {"1st": add},
            None,
            ValueError,
            "tool name '1st' is not a JavaScript identifier (letters, digits, _ or $), "
            "or several joined by dots for a namespace",
        ),
        (
            {"": add},
            None,
            ValueError,
            "tool name '' is not a JavaScript identifier (letters, digits, _ or $), "
            "or several joined by dots for a namespace",
        ),
        (
            {"math.": add},
            None,
            ValueError,
            "tool name 'math.' is not a JavaScript identifier (letters, digits, _ or $), "
            "or several joined by dots for a namespace",
        ),
        (
            {"math": add, "math.add": add},
            None,
            ValueError,
            "tool name 'math' is both a tool and the namespace of 'math.add'",
        ),
        ({"add": 42}, None, TypeError, "tool 'add' must be callable, got int"),
        ({"add": add}, -1, ValueError, "max_calls must be at least 0, got -1"),
        ({"add": add}, 2.5, TypeError, "max_calls must be an int or None, got float"),
        ({"add": add}, True, TypeError, "max_calls must be an int or None, got bool"),
        ([add], None, TypeError, "tools must be a mapping of name to function, got list"),
    ],
)
def test_bad_bridge_arguments_are_refused(tools: Any, max_calls: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as exc_info:
        pydeno.ToolBridge(tools, max_calls=max_calls)
    assert str(exc_info.value) == message


def test_dotted_names_are_namespaces_of_frozen_objects(rt: pydeno.Runtime) -> None:
    pydeno.ToolBridge({"math.add": add, "math.deep.mul": lambda a, b: a * b, "echo": lambda x: x}).attach(rt)
    assert rt.eval(
        "(async () => [await tools.math.add(1, 2), await tools.math.deep.mul(3, 4), await tools.echo(5)])()"
    ) == [
        3,
        12,
        5,
    ]
    assert rt.eval(
        "[Object.isFrozen(tools.math), Object.isFrozen(tools.math.deep), Object.keys(tools.math).sort()]"
    ) == [
        True,
        True,
        ["add", "deep"],
    ]
    assert (
        rt.eval(
            "(() => { 'use strict'; try { tools.math.add = null; return 'replaced'; } catch (e) { return e.name; } })()"
        )
        == "TypeError"
    )


def test_identifier_names_with_dollar_and_underscore_are_accepted(rt: pydeno.Runtime) -> None:
    pydeno.ToolBridge({"$get": lambda: "dollar", "_get2": lambda: "underscore"}).attach(rt)
    assert rt.eval("[await tools.$get(), await tools._get2()]") == ["dollar", "underscore"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_bridge_attaches_to_an_async_runtime_by_awaiting(backend: str) -> None:
    calls: list[str] = []

    async def fetch(url: str) -> str:
        await anyio.sleep(0.001)
        calls.append(url)
        return f"<page {url}>"

    async def main() -> None:
        bridge = pydeno.ToolBridge({"fetch": fetch}, max_calls=1)
        async with pydeno.AsyncRuntime() as rt:
            await bridge.attach(rt)
            with pytest.raises(RuntimeError) as exc_info:
                await pydeno.ToolBridge({}).attach(rt)
            assert str(exc_info.value) == "a ToolBridge is already attached to this runtime"
            assert await rt.eval(
                """[await tools.fetch('a'), await tools.fetch('b').catch((e) => `${e.name}: ${e.message}`)]"""
            ) == ["<page a>", "ToolBudgetError: the tool-call budget of 1 calls is spent"]

    anyio.run(main, backend=backend)
    assert calls == ["a"]


# --- descriptions -----------------------------------------------------------------------------


def get_weather(city: str, unit: Literal["c", "f"] = "c") -> dict[str, float]:
    """Current weather for a city.

    Reads the cache first; this paragraph is not in the description."""
    return {}


async def search(query: str, limit: int | None = None) -> list[str]:
    """Search the web
    and return page titles."""
    return []


def schedule(when: datetime.datetime, attendees: set[str], payload: bytes, slot: tuple[int, str]) -> None:
    return None


def untyped(x, y=1, *, z=2):  # type: ignore[no-untyped-def]
    return x


TYPED_TOOLS: dict[str, Callable[..., Any]] = {
    "get_weather": get_weather,
    "search": search,
    "schedule": schedule,
    "untyped": untyped,
}


def test_typescript_declares_typed_tools_from_signatures_docstrings_and_hints() -> None:
    assert pydeno.ToolBridge(TYPED_TOOLS).typescript() == (
        "declare const tools: {\n"
        "  /** Current weather for a city. */\n"
        '  get_weather(city: string, unit?: "c" | "f"): Promise<Record<string, number>>;\n'
        "  /** Search the web and return page titles. */\n"
        "  search(query: string, limit?: number | null): Promise<string[]>;\n"
        "  schedule(when: Date, attendees: Set<string>, payload: Uint8Array, slot: [number, string]): Promise<null>;\n"
        "  untyped(x: unknown, y?: unknown): Promise<unknown>;\n"
        "};"
    )


def test_describe_tools_reports_each_tool_for_a_prompt() -> None:
    described = pydeno.ToolBridge({"get_weather": get_weather, "search": search}).describe_tools()
    assert described == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": [
                {"name": "city", "type": "string", "required": True},
                {"name": "unit", "type": '"c" | "f"', "required": False},
            ],
            "returns": "Record<string, number>",
            "async": False,
        },
        {
            "name": "search",
            "description": "Search the web and return page titles.",
            "parameters": [
                {"name": "query", "type": "string", "required": True},
                {"name": "limit", "type": "number | null", "required": False},
            ],
            "returns": "string[]",
            "async": True,
        },
    ]


def tagged_search(query: str, *tags: str) -> list[str]:
    """Search with any number of tags."""
    return []


@pytest.mark.slow
def test_typescript_output_type_checks_with_deno_including_a_rest_parameter(tmp_path: Path) -> None:
    declarations = pydeno.ToolBridge({**TYPED_TOOLS, "tagged_search": tagged_search}).typescript()
    source = tmp_path / "tools.ts"
    source.write_text(
        declarations
        + """
const weather: Record<string, number> = await tools.get_weather("Oslo", "c");
const titles: string[] = await tools.tagged_search("deno", "a", "b");
const none: null = await tools.schedule(new Date(), new Set(["ada"]), new Uint8Array(1), [1, "x"]);
// @ts-expect-error a city is a string
await tools.get_weather(42);
export { none, titles, weather };
"""
    )
    env = {**os.environ, "DENO_DIR": str(tmp_path / "deno"), "DENO_NO_UPDATE_CHECK": "1", "NO_COLOR": "1"}
    checked = subprocess.run(
        [find_deno(), "check", "--quiet", str(source)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stderr
