"""host/_staging and host/_command without a process: locating deno (the deno wheel's binary or
$PYDENO_DENO, from many threads at once) and the worker's command line: its permissions, no code
cache, and a V8 heap sized from max_memory. Starting and killing workers is
tests/runtime/test_process.py."""

from __future__ import annotations

import os
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pydeno._base import deno as _deno
from pydeno.host.process import spec as _command
from pydeno.host.process.staging import find_deno
from tests.support.worker_config import MiB, _config


def test_find_deno_uses_the_binary_the_deno_wheel_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYDENO_DENO", raising=False)
    path = Path(find_deno())
    assert path.name == "deno" and os.access(path, os.X_OK)


def test_threads_finding_deno_at_once_all_find_it_while_sysconfig_fills_slowly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wheel's lookup reads sysconfig, whose first fill is not thread-safe: a second
    # reader during it sees the dict half-filled. Slowing that fill makes the race certain.
    monkeypatch.delenv("PYDENO_DENO", raising=False)
    monkeypatch.setattr(_deno, "_wheel_deno", [])
    monkeypatch.setattr(sysconfig, "_CONFIG_VARS", None)
    fill = sysconfig._init_posix  # type: ignore[attr-defined]

    def slow_fill(values: dict[str, Any]) -> None:
        time.sleep(0.2)
        fill(values)

    monkeypatch.setattr(sysconfig, "_init_posix", slow_fill)
    found: list[str] = []
    failed: list[BaseException] = []
    start = threading.Barrier(4)

    def find() -> None:
        start.wait()
        try:
            found.append(find_deno())
        except (TypeError, OSError) as exc:  # what a half-filled sysconfig raises
            failed.append(exc)

    threads = [threading.Thread(target=find) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == [] and len(found) == 4 and len(set(found)) == 1 and Path(found[0]).name == "deno"


def test_pydeno_deno_overrides_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDENO_DENO", "/opt/elsewhere/deno")
    assert find_deno() == "/opt/elsewhere/deno"


def test_the_worker_gets_no_permission_but_its_settings_which_it_revokes() -> None:
    argv = _config().argv("deno", Path("/w/main.ts"))
    grants = [a for a in argv if a.startswith("--allow")]
    assert grants == [f"--allow-env={_command.SETTINGS_VARIABLE}"]
    # The settings travel in the environment: the guest can read the command line back.
    assert argv[-1] == "/w/main.ts"
    for flag in ("--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm"):
        assert flag in argv


@pytest.mark.parametrize("selftest", [None, {"read": []}])
def test_deno_keeps_no_code_cache_of_what_the_worker_evaluates(selftest: dict[str, list[str]] | None) -> None:
    # Deno's code cache serves evalContext too: without the flag every eval of new code was
    # serialized for it, and written to the shared cache file where the worker may write.
    argv = _config().argv("deno", Path("/w/main.ts"), selftest)
    assert "--no-code-cache" in argv
    assert argv.index("--no-code-cache") < argv.index("/w/main.ts")


# What every worker's V8 starts with, after the heap's flags.
COMMON_FLAGS = "--min-semi-space-size=2,--expose-gc,--no-enable-lazy-source-positions"


@pytest.mark.parametrize(
    ("max_memory", "jitless", "expected"),
    [
        (512 * MiB, True, f"--v8-flags=--max-old-space-size=384,--jitless,{COMMON_FLAGS}"),
        (64 * MiB, False, f"--v8-flags=--max-old-space-size=48,{COMMON_FLAGS}"),
        (16 * MiB, True, f"--v8-flags=--max-old-space-size=16,--jitless,{COMMON_FLAGS}"),
        (None, False, f"--v8-flags={COMMON_FLAGS}"),
    ],
)
def test_the_v8_heap_is_sized_from_max_memory(max_memory: int | None, jitless: bool, expected: str) -> None:
    assert expected in _config(max_memory=max_memory, jitless=jitless).argv("deno", Path("/w/main.ts"))
