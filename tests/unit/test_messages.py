"""The messages a newcomer meets first: a misspelt option, a size written as text, a byte
count in a hint, ``with`` on an async-only class (and ``async with`` on a sync one), and
where an error's docs can be read; made without a worker. The same messages from a running
worker (a result too large to send) are tests/runtime/test_limit_messages.py."""

from __future__ import annotations

import argparse
import email.message
import typing
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import anyio
import pytest

import pydeno
import pydeno.pydantic_ai
import pydeno.ray
from pydeno._base import checks as _checks
from pydeno._base import docs_links, failures
from pydeno._base.options import RuntimeKwargs, RuntimeOptions
from pydeno._cli import main as _cli
from pydeno._cli.pages import kind_page

KEY = b"k" * 32


# -- 1. a misspelt option names the class that was called and the closest option ----------------
def _store() -> pydeno.MemoryJournalStore:
    return pydeno.MemoryJournalStore()


CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "Runtime": pydeno.Runtime,
    "AsyncRuntime": pydeno.AsyncRuntime,
    "SandboxPool": pydeno.SandboxPool,
    "AsyncSandboxPool": pydeno.AsyncSandboxPool,
    "AgentSandbox": pydeno.AgentSandbox,
    "AsyncAgentSandbox": pydeno.AsyncAgentSandbox,
    "CodeMode": lambda **kw: pydeno.CodeMode([], **kw),
    "AsyncCodeMode": lambda **kw: pydeno.AsyncCodeMode([], **kw),
    "SessionPool": lambda **kw: pydeno.SessionPool(_store(), KEY, **kw),
    "AsyncSessionPool": lambda **kw: pydeno.AsyncSessionPool(_store(), KEY, **kw),
    "RayPool": pydeno.ray.RayPool,
    "RayCodeMode": lambda **kw: pydeno.ray.RayCodeMode([], **kw),
    "CodeModeToolset": pydeno.pydantic_ai.CodeModeToolset,
}


@pytest.mark.parametrize("name", list(CONSTRUCTORS))
def test_a_misspelt_option_names_the_class_called_and_suggests_the_closest_option(name: str) -> None:
    with pytest.raises(TypeError) as caught:
        CONSTRUCTORS[name](timeot=1)
    assert str(caught.value) == f"{name}() got an unexpected keyword argument 'timeot'; did you mean 'timeout'?"


def test_a_misspelt_option_of_the_class_itself_is_suggested_too() -> None:
    with pytest.raises(
        TypeError, match=r"^SessionPool\(\) .* 'max_live_per_ownr'; did you mean 'max_live_per_owner'\?$"
    ):
        pydeno.SessionPool(_store(), KEY, max_live_per_ownr=1)


def test_a_misspelt_option_of_a_load_names_the_load() -> None:
    with pytest.raises(TypeError, match=r"^AgentSandbox\.load\(\) .* 'max_journal_byte'; did you mean"):
        pydeno.AgentSandbox.load(b"", key=KEY, max_journal_byte=10)


def test_an_option_like_no_other_lists_the_accepted_names() -> None:
    with pytest.raises(TypeError) as caught:
        pydeno.SandboxPool(colour="blue")
    message = str(caught.value)
    assert message.startswith("SandboxPool() got an unexpected keyword argument 'colour'; it accepts: ")
    accepted = message.removeprefix("SandboxPool() got an unexpected keyword argument 'colour'; it accepts: ")
    assert accepted.split(", ") == sorted(
        {"size", "max_workers", "checkout_timeout", "setup"} | set(typing.get_type_hints(RuntimeKwargs))
    )


def test_an_agent_session_keeps_its_own_word_for_max_host_wait() -> None:
    with pytest.raises(TypeError, match="bounds tool waits with max_pause="):
        pydeno.AgentSandbox(max_host_wait=1)


# -- 2. sizes as text ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "size"),
    [
        (268435456, 268435456),
        ("268435456", 268435456),
        ("256M", 256 * 2**20),
        ("256MB", 256 * 2**20),
        ("256MiB", 256 * 2**20),
        ("256mib", 256 * 2**20),
        ("1.5G", 3 * 2**29),
        ("1.5GiB", 3 * 2**29),
        ("1.5 GB", 3 * 2**29),
        ("512K", 512 * 2**10),
        ("512KB", 512 * 2**10),
        (" 2g ", 2 * 2**30),
    ],
)
def test_a_byte_option_takes_the_command_lines_sizes_in_powers_of_1024(given: Any, size: int) -> None:
    assert RuntimeOptions(max_message_bytes=given).max_message_bytes == size
    assert RuntimeOptions(max_console_bytes=given).max_console_bytes == size
    if size >= 32 * 2**20:
        assert RuntimeOptions(max_memory=given).max_memory == size


def test_a_size_that_is_not_a_whole_number_of_bytes_is_refused_with_the_spelling_to_use() -> None:
    with pytest.raises(ValueError) as caught:
        RuntimeOptions(max_memory="1.3M")
    assert str(caught.value) == (
        "max_memory='1.3M' is 1363148.8 bytes, not a whole number of bytes: "
        "give max_memory=1363148 (or another whole number of bytes)"
    )


@pytest.mark.parametrize("text", ["", "M", "12X", "-1M", "1 T", "0x10", "1e6", "256 MBs", "1.5.2M"])
def test_a_size_string_that_is_not_a_size_is_refused_with_the_forms_and_an_example(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        RuntimeOptions(max_memory=text)
    message = str(caught.value)
    assert message.startswith(f"max_memory={text!r} is not a size: give ")
    assert "268435456" in message and "256M" in message and "1.5G" in message and "512KiB" in message
    assert "max_memory='256M'" in message


@pytest.mark.parametrize(("given", "error"), [(1.5, TypeError), (True, TypeError), (b"1M", TypeError)])
def test_a_byte_option_of_another_type_is_a_type_error_that_says_both_forms(given: Any, error: type) -> None:
    with pytest.raises(error, match=r"^max_memory must be an int .*size .*'256M'.*, got "):
        RuntimeOptions(max_memory=given)


def test_a_size_string_under_the_minimum_says_the_minimum_in_both_units() -> None:
    with pytest.raises(ValueError, match=r"^max_memory must be at least 33554432 \(32 MiB\), got 1048576 \(1 MiB\)$"):
        RuntimeOptions(max_memory="1M")


def test_fetch_and_session_byte_caps_take_sizes_too() -> None:
    fetch = pydeno.HttpFetch(["https://example.org/"], max_request_bytes="64K", max_response_bytes="1.5MiB")
    try:
        assert (fetch.max_request_bytes, fetch.max_response_bytes) == (64 * 2**10, 3 * 2**19)
    finally:
        fetch.close()
    sessions = pydeno.SessionPool(_store(), KEY, max_bytes_per_owner="1M", max_journal_bytes="256KB")
    try:
        assert (sessions._book.max_bytes_per_owner, sessions._max_journal_bytes) == (2**20, 256 * 2**10)
    finally:
        sessions.close()
    with pytest.raises(ValueError, match=r"^max_journal_bytes='lots' is not a size"):
        pydeno.AgentSandbox.load(b"", key=KEY, max_journal_bytes="lots")


def test_the_command_line_reads_sizes_with_the_same_parser() -> None:
    assert _cli.parse_size("256MB") == _checks.parse_size("256MB") == 256 * 2**20
    with pytest.raises(argparse.ArgumentTypeError, match=r"256M, 1\.5G"):
        _cli.parse_size("lots")
    with pytest.raises(argparse.ArgumentTypeError, match=r"1363148"):
        _cli.parse_size("1.3M")


def test_type_checkers_see_that_byte_options_take_strings() -> None:
    hints = typing.get_type_hints(RuntimeKwargs)
    for name in ("max_memory", "max_message_bytes", "max_console_bytes"):
        assert str in typing.get_args(hints[name]), name


# -- 3. byte counts in hints also in MiB/GiB -----------------------------------------------------
@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 bytes"),
        (1000, "1000 bytes"),
        (1024, "1 KiB"),
        (512 * 2**20, "512 MiB"),
        (3 * 2**29, "1.5 GiB"),
        (2**20 + 2**17, "1.125 MiB"),
        (1290000, "about 1.23 MiB"),
        (612000000, "about 584 MiB"),
        (2**30 - 1, "about 1 GiB"),
        (5 * 2**40, "5 TiB"),
    ],
)
def test_a_byte_count_reads_in_binary_units_marked_about_when_not_exact(count: int, text: str) -> None:
    assert _checks.human_bytes(count) == text


def test_the_memory_limit_fix_gives_the_limit_in_bytes_and_mib_and_the_message_keeps_its_shape() -> None:
    exc = failures.over_memory(612368384, 536870912)
    assert str(exc) == "worker used 612368384 bytes, over max_memory=536870912; killed"
    assert exc.hint == "raise max_memory= (now 536870912 = 512 MiB), or reduce what the code keeps alive"
    assert f"\nFix: {exc.hint}\n" in exc.__notes__[0]
    heap = failures.heap_exhausted(64 * 2**20)
    assert str(heap) == "worker ran out of its V8 heap (sized from max_memory=67108864) and was stopped"
    assert heap.hint.startswith("raise max_memory= (now 67108864 = 64 MiB)")


# -- 4. with on an async-only class, async with on a sync one ------------------------------------
ASYNC_ONLY = [
    pydeno.AsyncRuntime,
    pydeno.AsyncSandboxPool,
    pydeno.AsyncAgentSandbox,
    pydeno.AsyncCodeMode,
    pydeno.AsyncSessionPool,
]
SYNC_ONLY = [
    (pydeno.Runtime, "pydeno.Runtime", "pydeno.AsyncRuntime"),
    (pydeno.SandboxPool, "pydeno.SandboxPool", "pydeno.AsyncSandboxPool"),
    (pydeno.AgentSandbox, "pydeno.AgentSandbox", "pydeno.AsyncAgentSandbox"),
    (pydeno.CodeMode, "pydeno.CodeMode", "pydeno.AsyncCodeMode"),
    (pydeno.SessionPool, "pydeno.SessionPool", "pydeno.AsyncSessionPool"),
    (pydeno.ray.RayPool, "pydeno.ray.RayPool", None),
    (pydeno.ray.RayCodeMode, "pydeno.ray.RayCodeMode", None),
]


def test_with_on_the_pydantic_ai_toolset_says_to_use_async_with() -> None:
    toolset = pydeno.pydantic_ai.CodeModeToolset()
    with pytest.raises(TypeError) as caught, toolset:
        pass
    assert str(caught.value) == (
        'CodeModeToolset is async: use "async with pydeno.pydantic_ai.CodeModeToolset(...)" in async code'
    )


@pytest.mark.parametrize("cls", ASYNC_ONLY, ids=lambda c: c.__name__)
def test_with_on_an_async_only_class_says_to_use_async_with(cls: type) -> None:
    obj = cls.__new__(cls)
    with pytest.raises(TypeError) as caught, obj:
        pass
    name = cls.__name__
    assert str(caught.value) == (
        f'{name} is async: use "async with pydeno.{name}(...)" in async code, '
        f'or "with pydeno.{name.removeprefix("Async")}(...)" in sync code'
    )


@pytest.mark.parametrize(("cls", "path", "twin"), SYNC_ONLY, ids=lambda c: getattr(c, "__name__", ""))
def test_async_with_on_a_sync_class_says_to_use_with_or_the_async_twin(cls: type, path: str, twin: str | None) -> None:
    obj = cls.__new__(cls)

    async def enter() -> None:
        async with obj:
            pass

    with pytest.raises(TypeError) as caught:
        anyio.run(enter)
    expected = f'{cls.__name__} is sync: use "with {path}(...)"'
    if twin is not None:
        expected += f', or "async with {twin}(...)" in async code'
    assert str(caught.value) == expected


def test_a_real_async_runtime_refuses_with_before_starting_a_worker() -> None:
    rt = pydeno.AsyncRuntime()
    try:
        with pytest.raises(TypeError, match=r'use "async with pydeno\.AsyncRuntime\(\.\.\.\)"'), rt:
            pass
    finally:
        anyio.run(rt.close)


def test_type_checkers_see_that_the_wrong_with_never_returns() -> None:
    for cls in ASYNC_ONLY:
        assert typing.get_type_hints(cls.__enter__)["return"] is NoReturn
    for cls, _, _ in SYNC_ONLY:
        assert typing.get_type_hints(cls.__aenter__)["return"] is NoReturn
    # The twins keep their own protocol: the sync one enters with "with".
    assert typing.get_type_hints(pydeno.Runtime.__enter__)["return"] is pydeno.Runtime


# -- 5. where the docs are ----------------------------------------------------------------------
@pytest.fixture
def metadata(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[int]]]:
    """Fake the installed distribution's metadata; returns a counter of the lookups."""

    def fake(version: str = pydeno.__version__, urls: tuple[str, ...] = ()) -> list[int]:
        calls: list[int] = []
        message = email.message.Message()
        message["Name"] = "pydeno"
        message["Version"] = version
        for url in urls:
            message["Project-URL"] = url

        def lookup() -> email.message.Message:
            calls.append(1)
            return message

        monkeypatch.setattr(docs_links, "_installed_metadata", lookup)
        docs_links.docs_site.cache_clear()
        return calls

    yield fake
    docs_links.docs_site.cache_clear()


def test_without_a_docs_site_an_error_points_at_the_command_that_prints_its_page(
    metadata: Callable[..., list[int]],
) -> None:
    metadata(urls=("Source, https://example.org/src",))
    exc = failures.over_memory(612368384, 536870912)
    assert exc.docs == "pydeno errors memory_limit"
    assert exc.__notes__[0].endswith("\nDocs: pydeno errors memory_limit")


def test_with_a_docs_site_an_error_points_at_its_page_there_too(metadata: Callable[..., list[int]]) -> None:
    metadata(urls=("Source, https://example.org/src", "Documentation, https://pydeno.example/docs/"))
    exc = failures.command_timed_out(0.5)
    assert exc.docs == "pydeno errors timeout or https://pydeno.example/docs/errors/timeout/"
    assert exc.__notes__[0].endswith("\nDocs: pydeno errors timeout or https://pydeno.example/docs/errors/timeout/")


def test_the_docs_site_of_another_distribution_named_pydeno_is_not_used(metadata: Callable[..., list[int]]) -> None:
    metadata(version="0.13.2", urls=("Documentation, https://elsewhere.example/",))
    assert failures.command_timed_out(0.5).docs == "pydeno errors timeout"


def test_the_metadata_is_read_once_and_only_when_an_error_is_explained(metadata: Callable[..., list[int]]) -> None:
    calls = metadata(urls=("Documentation, https://pydeno.example/",))
    assert calls == []
    for _ in range(3):
        failures.command_timed_out(0.5)
    pydeno.classify_error(ValueError("x"))
    assert calls == [1]


def test_a_failing_metadata_lookup_leaves_the_command_pointer(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> NoReturn:
        raise OSError("unreadable")

    monkeypatch.setattr(docs_links, "_installed_metadata", broken)
    docs_links.docs_site.cache_clear()
    try:
        assert failures.command_timed_out(0.5).docs == "pydeno errors timeout"
    finally:
        docs_links.docs_site.cache_clear()


def test_the_pointer_names_a_command_that_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    command = docs_links.docs_page("memory_limit").split(" or ")[0].split()
    assert command[:2] == ["pydeno", "errors"]
    assert _cli.main(command[1:]) == 0
    assert capsys.readouterr().out == kind_page("memory_limit")
