"""The sandbox launcher starts the real worker confined by every OS layer (not yet wired to
a runtime option: that arrives with the sandbox= switch)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import pydeno
from pydeno.host import _process

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64" or os.geteuid() != 0,
    reason="the layers are Linux x86_64 only, and these checks assume a root host",
)


@pytest.fixture
def confined(monkeypatch: pytest.MonkeyPatch) -> Iterator[pydeno.Runtime]:
    monkeypatch.setattr(_process, "worker_command", _process.sandboxed_command)
    with pydeno.Runtime() as rt:
        yield rt


def _status(rt: pydeno.Runtime) -> dict[str, str]:
    process = rt._core.process
    assert process is not None
    lines = Path(f"/proc/{process.pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def test_the_confined_worker_evaluates_awaits_and_calls_the_host(confined: pydeno.Runtime) -> None:
    confined.bind_function("add", lambda a, b: a + b)
    assert confined.eval("1 + 1") == 2
    assert confined.eval("const q = await Promise.resolve(5); q") == 5
    assert confined.eval("add(2, 3)") == 5


def test_the_confined_worker_runs_unprivileged_with_no_new_privs_and_seccomp(confined: pydeno.Runtime) -> None:
    status = _status(confined)
    assert status["Uid"].split() == ["65534"] * 4
    assert status["CapEff"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"


def test_the_confined_worker_has_its_own_network_namespace(confined: pydeno.Runtime) -> None:
    process = confined._core.process
    assert process is not None
    assert os.readlink(f"/proc/{process.pid}/ns/net") != os.readlink("/proc/self/ns/net")


def test_a_plain_worker_has_none_of_these_layers() -> None:
    with pydeno.Runtime() as rt:
        status = _status(rt)
        process = rt._core.process
        assert process is not None
        assert (status["NoNewPrivs"], status["Seccomp"]) == ("0", "0")
        assert os.readlink(f"/proc/{process.pid}/ns/net") == os.readlink("/proc/self/ns/net")


def test_the_transpile_cache_is_private_to_this_user_and_readable_by_the_worker() -> None:
    cache = _process.transpile_cache(os.path.realpath(_process.find_deno()), _process.worker_entry())
    base = cache.parent
    info = base.lstat()
    assert info.st_uid == os.getuid()
    assert not info.st_mode & 0o022
    assert info.st_mode & 0o005 == 0o005
    assert any(cache.rglob("main.ts*"))


def test_a_transpile_cache_dir_someone_else_can_write_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    planted = tmp_path / f"pydeno-{os.getuid()}"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    monkeypatch.setattr(_process.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(_process, "_warm_cache", None)
    cache = _process.transpile_cache(os.path.realpath(_process.find_deno()), _process.worker_entry())
    assert planted not in cache.parents
