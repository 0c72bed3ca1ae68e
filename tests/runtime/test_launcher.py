"""host/process/launcher and host/process/staging: the launcher starts the real worker confined by every OS
layer (sandbox="require", the default), from files staged where the confined worker can
read them."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import pydeno
from pydeno.host.process import staging
from pydeno.host.process.launcher import WORKER_FILES_FD

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64" or os.geteuid() != 0,
    reason="the layers are Linux x86_64 only, and these checks assume a root host",
)


@pytest.fixture
def confined() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as rt:
        yield rt


def _status(rt: pydeno.Runtime) -> dict[str, str]:
    process = rt._sup.process
    assert process is not None
    lines = Path(f"/proc/{process.pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


@pytest.mark.slow
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
    process = confined._sup.process
    assert process is not None
    assert os.readlink(f"/proc/{process.pid}/ns/net") != os.readlink("/proc/self/ns/net")


def test_a_worker_with_sandbox_off_has_none_of_these_layers() -> None:
    with pydeno.Runtime(sandbox="off") as rt:
        status = _status(rt)
        process = rt._sup.process
        assert process is not None
        assert (status["NoNewPrivs"], status["Seccomp"]) == ("0", "0")
        assert os.readlink(f"/proc/{process.pid}/ns/net") == os.readlink("/proc/self/ns/net")


def _stage(root: Path | None = None) -> staging.Staged:
    return staging.stage(os.path.realpath(staging.find_deno()), staging.worker_entry(), root)


def _analysed(cache: Path) -> set[str]:
    """The module URLs deno's dependency-analysis cache (a SQLite file) has a record of."""
    path = cache / "dep_analysis_cache_v2"
    if not path.exists():
        return set()
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {url for (url,) in db.execute("SELECT specifier FROM moduleinfocache")}


def test_the_cache_is_private_to_this_user_and_warmed_for_the_worker_as_a_confined_one_has_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o755)
    staged = _stage(root)
    served = staged.served(WORKER_FILES_FD).as_uri()
    assert served not in _analysed(staged.cache)
    staging.warm_confined(staged)
    base = staged.cache.parent
    info = base.lstat()
    assert info.st_uid == os.getuid()
    assert not info.st_mode & 0o022
    assert info.st_mode & 0o005 == 0o005
    assert served in _analysed(staged.cache)


def test_a_cache_dir_someone_else_can_write_is_not_used(tmp_path: Path) -> None:
    planted = tmp_path / f"pydeno-{os.getuid()}"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    cache = _stage(tmp_path).cache
    assert cache.parent.parent == tmp_path
    assert planted not in cache.parents
    shutil.rmtree(cache.parent)


def test_worker_files_only_root_can_reach_are_staged_where_the_worker_can_read_them(
    launch: Callable[..., None], tmp_path: Path
) -> None:
    # tmp_path lies under a directory only root may search, like /root: the unprivileged
    # worker could not open its own entry module there.
    hidden = tmp_path / "hidden"
    shutil.copytree(staging.worker_entry().parent, hidden)
    hidden.chmod(0o700)
    launch(entry=hidden / "main.ts")
    assert not staging.reachable_by_others(str(hidden / "main.ts"), stat.S_IROTH)
    with pydeno.Runtime() as rt:
        assert rt.eval("[1, 2].map((x) => x * 5)") == [5, 10]
    staged = staging.staged(hidden / "main.ts")
    assert staged.entry.parent.name.startswith("worker-")
    assert staging.reachable_by_others(str(staged.entry), stat.S_IROTH)
    for module in ("codec.ts", "protocol.ts"):
        assert (staged.entry.parent / module).read_bytes() == (hidden / module).read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_deno_reads_the_worker_s_files_through_a_descriptor_under_urls_that_name_no_host_directory(
    sandbox: str,
) -> None:
    staged = _stage()
    with pydeno.Runtime(sandbox=sandbox) as rt:  # type: ignore[arg-type]
        process = rt._sup.process
        assert process is not None
        entry = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")[-2].decode()
        prefix, fd, folder, name = entry.rsplit("/", 3)
        assert prefix == "/proc/self/fd" and (folder, name) == (staged.entry.parent.name, staging.JOINED), entry
        # A confined worker's descriptor has the number the launcher gives it, whose URLs deno's
        # module cache was warmed for: it can write no cache of its own.
        if sandbox == "require":
            assert int(fd) == WORKER_FILES_FD
            assert f"file:///proc/self/fd/{WORKER_FILES_FD}/{folder}/{staging.JOINED}" in _analysed(staged.cache)
        assert os.readlink(f"/proc/{process.pid}/fd/{fd}") == str(staged.base)
        assert rt.eval("await 0; 6 * 7") == 42


@pytest.mark.slow
def test_a_runtime_made_in_a_thread_that_then_ends_keeps_its_worker() -> None:
    # The parent-death signal follows the thread that forked the worker, not the process.
    made: list[pydeno.Runtime] = []
    maker = threading.Thread(target=lambda: made.append(pydeno.Runtime()))
    maker.start()
    maker.join()
    time.sleep(0.2)
    with made[0] as rt:
        assert rt.eval("6 * 7") == 42


@pytest.mark.slow
def test_a_busy_worker_dies_with_its_host() -> None:
    # Busy in a loop, the worker never reads the closed pipe: only the parent-death signal
    # can end it.
    script = (
        "import os, threading, time, pydeno\n"
        "rt = pydeno.Runtime(timeout=None)\n"
        "print(rt._sup.process.pid, flush=True)\n"
        "threading.Thread(target=rt.eval, args=('for (;;) {}',), daemon=True).start()\n"
        "time.sleep(0.3)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False)
    pid = int(result.stdout.split()[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
        time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_a_staged_worker_file_keeps_the_contents_its_folder_is_named_by_when_the_source_is_edited_in_place(
    tmp_path: Path,
) -> None:
    sources = tmp_path / "worker"
    sources.mkdir()
    for source in staging.worker_entry().parent.glob("*.ts"):
        shutil.copyfile(source, sources / source.name)
    (tmp_path / "root").mkdir()
    staged = staging.stage(os.path.realpath(staging.find_deno()), sources / "main.ts", tmp_path / "root")
    before = staged.entry.read_bytes()
    with open(sources / "main.ts", "r+b") as edited:  # the same inode, new contents
        edited.write(b"// edited\n")
    assert staged.entry.read_bytes() == before
    assert os.stat(staged.entry).st_ino != os.stat(sources / "main.ts").st_ino
