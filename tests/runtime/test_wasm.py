"""WebAssembly from the host: rt.load_wasm(name, bytes) gives the guest a compiled
WebAssembly.Module as a global; only with jitless=False, since V8 without its JIT has none."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

import pydeno

# (module
#   (func (export "add") (param i32 i32) (result i32)
#     local.get 0
#     local.get 1
#     i32.add))
ADD = (
    b"\x00asm\x01\x00\x00\x00"  # magic, version 1
    b"\x01\x07\x01\x60\x02\x7f\x7f\x01\x7f"  # type section: (i32, i32) -> i32
    b"\x03\x02\x01\x00"  # function section: one function of type 0
    b"\x07\x07\x01\x03add\x00\x00"  # export section: "add" = function 0
    b"\x0a\x09\x01\x07\x00\x20\x00\x20\x01\x6a\x0b"  # code: local.get 0, local.get 1, i32.add, end
)

# (module
#   (import "env" "secret" (func $secret (result i32)))
#   (func (export "call") (result i32)
#     call $secret))
IMPORTS = (
    b"\x00asm\x01\x00\x00\x00"
    b"\x01\x05\x01\x60\x00\x01\x7f"  # type section: () -> i32
    b"\x02\x0e\x01\x03env\x06secret\x00\x00"  # import section: env.secret, a function of type 0
    b"\x03\x02\x01\x00"  # function section
    b"\x07\x08\x01\x04call\x00\x01"  # export section: "call" = function 1 (0 is the import)
    b"\x0a\x06\x01\x04\x00\x10\x00\x0b"  # code: call 0, end
)

CALL_ADD = "new WebAssembly.Instance(adder, {}).exports.add(1, 2)"


@pytest.fixture
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(jitless=False) as rt:
        yield rt


def test_the_guest_instantiates_a_loaded_module_and_calls_its_export(rt: pydeno.Runtime) -> None:
    rt.load_wasm("adder", ADD)
    assert rt.eval("adder instanceof WebAssembly.Module") is True
    assert rt.eval(CALL_ADD) == 3
    assert rt.eval("WebAssembly.Module.exports(adder)") == [{"name": "add", "kind": "function"}]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_async_runtime_loads_a_module_too(anyio_backend: str) -> None:
    async with pydeno.AsyncRuntime(jitless=False) as rt:
        await rt.load_wasm("adder", ADD)
        assert await rt.eval(CALL_ADD) == 3


def padded(total: int) -> bytes:
    """ADD with a custom section after it (which compiling ignores), total bytes long; from
    172 bytes to 16 KiB, where the section's size takes two bytes of LEB128."""
    content = total - len(ADD) - 3
    return ADD + bytes([0, content & 0x7F | 0x80, content >> 7, 3]) + b"pad" + bytes(content - 4)


def test_a_bytearray_or_a_memoryview_of_any_format_is_read_as_the_modules_bytes(rt: pydeno.Runtime) -> None:
    rt.load_wasm("a", bytearray(ADD))
    rt.load_wasm("b", memoryview(ADD + b"tail")[:-4])
    rt.load_wasm("c", memoryview(padded(200)).cast("I"))  # 50 items of 4 bytes
    assert rt.eval("[a, b, c].map((m) => new WebAssembly.Instance(m).exports.add(2, 2))") == [4, 4, 4]


def test_loading_a_name_again_replaces_its_module(rt: pydeno.Runtime) -> None:
    rt.load_wasm("m", ADD)
    rt.load_wasm("m", IMPORTS)
    assert rt.eval("WebAssembly.Module.imports(m).map((i) => i.name)") == ["secret"]


@pytest.mark.parametrize(
    ("name", "module", "error", "message"),
    [
        (7, ADD, TypeError, "name must be a str, got int"),
        ("1st", ADD, ValueError, "'1st' cannot be a guest global: use a JavaScript identifier"),
        ("a-b", ADD, ValueError, "'a-b' cannot be a guest global"),
        ("class", ADD, ValueError, "'class' cannot be a guest global"),
        ("globalThis", ADD, ValueError, "'globalThis' cannot be a guest global"),
        (
            "WebAssembly",
            ADD,
            ValueError,
            "'WebAssembly' cannot be a guest global: use a JavaScript identifier (letters, digits, _ or $, not "
            "starting with a digit) that is not a reserved word or WebAssembly",
        ),
        ("adder", ADD.decode("latin-1"), TypeError, "module must be the module's bytes, got str: read a .wasm"),
        ("adder", list(ADD), TypeError, "module must be bytes, bytearray or memoryview, got list"),
        ("adder", None, TypeError, "module must be bytes, bytearray or memoryview, got NoneType"),
    ],
    ids=["int", "digit", "dash", "reserved", "globalThis", "WebAssembly", "str", "list", "None"],
)
def test_bad_arguments_are_refused_saying_what_to_pass(
    rt: pydeno.Runtime, name: Any, module: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match="^" + re.escape(message)):
        rt.load_wasm(name, module)
    assert rt.eval("typeof adder") == "undefined"


def test_a_module_over_max_message_bytes_is_refused_naming_the_limit() -> None:
    with pydeno.Runtime(jitless=False, max_message_bytes=1024) as rt:
        rt.load_wasm("small", padded(1024))
        with pytest.raises(ValueError, match=r"^the module's 1025 \(about 1 KiB\) bytes are over max_message_bytes "):
            rt.load_wasm("big", padded(1025))
        assert rt.eval("typeof big") == "undefined"


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (b"", "WebAssembly.Module(): BufferSource argument is empty"),
        (b"\x01\x02\x03\x04\x01\x00\x00\x00", "WebAssembly.Module(): expected magic word 00 61 73 6d"),
        (ADD[:-1], "WebAssembly.Module(): "),
    ],
    ids=["empty", "magic", "truncated"],
)
def test_bytes_that_do_not_compile_raise_a_compile_error_and_bind_nothing(
    rt: pydeno.Runtime, module: bytes, message: str
) -> None:
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.load_wasm("broken", module)
    exc = exc_info.value
    assert exc.name == "CompileError"
    assert exc.message.startswith(message)
    assert pydeno.classify_error(exc).kind == "js_error"
    assert rt.eval("typeof broken") == "undefined"


def test_under_jitless_the_guest_has_no_webassembly_and_load_wasm_refuses_naming_jitless_false() -> None:
    # Pins V8's behaviour: if a deno's V8 ever runs WebAssembly jitless (an interpreter built
    # in), this fails, and the refusal should give way.
    with pydeno.Runtime() as rt:
        assert rt.eval("typeof WebAssembly") == "undefined"
        with pytest.raises(ValueError, match=r"^WebAssembly is not available with jitless=True \(the default\)") as exc:
            rt.load_wasm("adder", ADD)
        assert "Start the runtime with jitless=False" in str(exc.value)
        assert "docs/security.md#webassembly" in str(exc.value)
        assert rt.eval("typeof adder") == "undefined"
        # The name is checked first: a wrong argument is reported as that.
        with pytest.raises(ValueError, match="cannot be a guest global"):
            rt.load_wasm("1st", ADD)


def test_an_instance_gets_only_the_imports_the_guest_passes(rt: pydeno.Runtime) -> None:
    rt.load_wasm("m", IMPORTS)
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval("new WebAssembly.Instance(m, {})")
    assert (exc_info.value.name, exc_info.value.message) == (
        "TypeError",
        'WebAssembly.Instance(): Import #0 "env": module is not an object or function',
    )
    assert rt.eval("new WebAssembly.Instance(m, {env: {secret: () => 42}}).exports.call()") == 42


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "await WebAssembly.instantiateStreaming(fetch('https://example.com/m.wasm'))",
            'no network access in this sandbox: "example.com:443" was not reached',
        ),
        ("await WebAssembly.compileStreaming(fetch('file:///etc/hostname'))", "no file access in this sandbox"),
    ],
)
def test_webassembly_reaches_no_network_or_files(rt: pydeno.Runtime, code: str, message: str) -> None:
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval(code)
    assert exc_info.value.message.startswith(message)
    assert pydeno.classify_error(exc_info.value).kind == "sandbox_denied"


@pytest.mark.parametrize(
    "poison",
    [
        "WebAssembly.Module = function () { return { decoy: true }; };",
        "Object.defineProperty(globalThis, 'WebAssembly', { get() { throw new Error('poisoned'); } });",
        "delete globalThis.WebAssembly;",
    ],
)
def test_a_guest_that_replaced_webassembly_first_still_gets_a_real_compiled_module(
    rt: pydeno.Runtime, poison: str
) -> None:
    rt.eval("globalThis.Instance = WebAssembly.Instance; globalThis.Module = WebAssembly.Module;")
    rt.eval(poison + " null")
    rt.load_wasm("adder", ADD)
    assert rt.eval("adder instanceof Module && new Instance(adder, {}).exports.add(20, 22)") == 42


def test_a_name_the_guest_made_unreplaceable_fails_in_the_guest_and_the_runtime_lives_on(rt: pydeno.Runtime) -> None:
    rt.eval("Object.defineProperty(globalThis, 'adder', { value: 'mine' }); null")
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.load_wasm("adder", ADD)
    assert (exc_info.value.name, exc_info.value.message) == ("TypeError", "Cannot redefine property: adder")
    assert rt.eval("adder") == "mine"
    rt.load_wasm("other", ADD)
    assert rt.eval("new WebAssembly.Instance(other).exports.add(1, 1)") == 2
