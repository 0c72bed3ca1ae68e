"""The host's own failures: each message is made by one factory that names its kind, and the
anchored patterns (the contract for an exception known only by its type and text) classify
that message to the same kind, so message and kind cannot drift apart."""

from __future__ import annotations

import pickle
from typing import Any, Final

import pytest

import pydeno
from pydeno._base import failures

# Arguments for each factory, as the host calls them; a factory with none here fails below.
SAMPLES: Final[dict[str, tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "command_timed_out": ((0.5,), {}),
    "cpu_in_command": ((1e-05,), {}),
    "cpu_between_commands": ((1.0, None), {}),
    "host_wait_exceeded": ((2.5,), {}),
    "over_memory": ((612368384, 536870912), {}),
    "heap_exhausted": ((536870912,), {}),
    "over_threads": ((65, 64), {}),
    "host_calls_exceeded": ((10000,), {}),
    "protocol_broken": (("frame kind 9 is unknown: 'Error: evil'",), {"malformed": False}),
    "layer_missing": (("seccomp is unavailable: the kernel refused it",), {}),
    "selftest_failed": ((["read /etc/passwd succeeded", "net 127.0.0.1:9 connected"],), {}),
    "limit_unmeasurable": (("max_memory",), {}),
    "handshake_timed_out": ((10.0,), {}),
    "worker_died": (("worker process died (killed by SIGKILL): worker used 1 bytes, over max_memory=0; killed",), {}),
    "guest_ended_worker": ((f"{failures.GUEST_DEATH} (exit code 0): worker process died (killed by SIGKILL)",), {}),
    "start_failed": (("No such file or directory (/opt/deno) [ENOENT]",), {"cause": FileNotFoundError(2, "x")}),
    "closed_error": (("runtime is closed",), {}),
    "terminated": ((), {}),
    "force_killed": ((1.0,), {}),
}
FACTORIES: Final = {factory.__name__: factory for factory in failures.FACTORIES}


def made(name: str) -> Any:
    args, kwargs = SAMPLES[name]
    return FACTORIES[name](*args, **kwargs)


def test_every_factory_has_a_sample_here() -> None:
    assert sorted(FACTORIES) == sorted(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_factory_names_a_kind_of_the_table_and_explains_it(name: str) -> None:
    exc = made(name)
    assert exc.kind in pydeno.KINDS
    assert pydeno.classify_error(exc).kind == exc.kind
    assert exc.docs == f"pydeno errors {exc.kind}"
    if isinstance(exc, pydeno.PydenoError):
        assert len(exc.__notes__) == 1
        assert exc.__notes__[0].startswith(f"Kind: {exc.kind} (")


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_factory_message_classifies_to_its_kind_through_the_patterns_alone(name: str) -> None:
    exc = made(name)
    known_by_text = type(exc)(str(exc))
    known_by_text.__cause__ = exc.__cause__  # typed evidence, which crosses with the text
    assert getattr(known_by_text, "_authored_kind", None) is None
    assert pydeno.classify_error(known_by_text).kind == exc.kind
    for via_agent in (False, True):
        assert pydeno.classify_error(known_by_text, via_agent=via_agent) == pydeno.classify_error(
            exc, via_agent=via_agent
        )


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_failure_that_crossed_a_process_boundary_keeps_its_kind(name: str) -> None:
    exc = made(name)
    assert pydeno.classify_error(pickle.loads(pickle.dumps(exc))).kind == exc.kind


def test_the_kind_a_factory_names_is_read_before_the_message() -> None:
    # Text that quotes another host message (here, the worker's last stderr line) after the
    # prefix: the factory's kind decides, whatever the patterns would make of the whole text.
    quoting = failures.worker_died("worker used 5 bytes, over max_memory=1; killed")
    assert quoting.kind == "worker_crashed"
    assert pydeno.classify_error(pydeno.WorkerCrashed(str(quoting))).kind == "memory_limit"


def test_host_wait_through_an_agent_is_max_pause_either_way() -> None:
    exc = failures.host_wait_exceeded(2.5)
    assert pydeno.classify_error(exc, via_agent=True).kind == "max_pause"
    assert pydeno.classify_error(pydeno.RuntimeTimeout(str(exc)), via_agent=True).kind == "max_pause"
