"""``pydeno mcp`` against a client nobody here wrote: the official MCP Inspector's command
line (``@modelcontextprotocol/inspector --cli``, built on the TypeScript SDK), from the npm
registry, pinned to one version, over stdio and streamable HTTP.

The Inspector is installed once into a cache outside the tree (``~/.cache/pydeno-tests``, or
``$XDG_CACHE_HOME/pydeno-tests``) and reused. ``npm install --ignore-scripts`` is enough: the
package's only install script installs the clients of a source checkout and does nothing
when the package is a dependency. When npm is missing or cannot install it, every test here
fails saying so: CI reaches the registry, and a client that was never run proves nothing.

Every call is a separate Inspector process, so every call is a one-shot client: it connects,
initializes, sends one request and exits, the way scripts and CI jobs use a server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import psutil
import pytest

from tests.support.processes import is_worker

pytestmark = pytest.mark.slow

INSPECTOR_PACKAGE: Final = "@modelcontextprotocol/inspector"
# One exact version: a newer Inspector may behave differently, and the tests should change
# only when this line does. It pins its SDK (@modelcontextprotocol/client 2.3.1) exactly; its
# other dependencies follow its own ranges. It declares Node >= 22.19, and its CLI runs on
# Node 20 too (npm only warns).
INSPECTOR_VERSION: Final = "2.12.0"

TREE: Final = Path(__file__).resolve().parents[2]
SERVER: Final = (sys.executable, "-m", "pydeno", "mcp")
# The TypeScript SDK's stdio transport refuses a message longer than this (its ReadBuffer's
# default); the server's own bound on a result has to stay under it.
TS_SDK_STDIO_MESSAGE_CAP: Final = 10 * 1024 * 1024
# The Inspector's exit status for a tool result with isError: true (its EXIT_CODES.TOOL_ERROR).
TOOL_ERROR_STATUS: Final = 5


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pydeno-tests"


def _installed_version(prefix: Path) -> str | None:
    manifest = prefix / "node_modules" / INSPECTOR_PACKAGE / "package.json"
    try:
        version = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def _entry(prefix: Path) -> Path:
    return prefix / "node_modules" / INSPECTOR_PACKAGE / "clients" / "launcher" / "build" / "index.js"


def _install(prefix: Path, npm: str) -> None:
    """npm-install the pinned Inspector into a fresh directory beside ``prefix``, then move it
    into place in one rename, so an interrupted install never looks like a finished one."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix.name + ".", dir=prefix.parent))
    try:
        (staging / "package.json").write_text('{"private": true}\n')
        spec = f"{INSPECTOR_PACKAGE}@{INSPECTOR_VERSION}"
        command = [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--save-exact", spec]
        try:
            done = subprocess.run(command, check=False, cwd=staging, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`{' '.join(command)}` did not finish within 600 s", pytrace=False)
        if done.returncode != 0:
            pytest.fail(
                f"`{' '.join(command)}` failed with exit status {done.returncode}; these tests need "
                f"the MCP Inspector from the npm registry:\n{done.stderr[-4000:]}",
                pytrace=False,
            )
        if _installed_version(staging) != INSPECTOR_VERSION or not _entry(staging).is_file():
            pytest.fail(f"npm installed {spec} but {_entry(staging)} is missing", pytrace=False)
        if prefix.exists():
            shutil.rmtree(prefix)
        with contextlib.suppress(OSError):  # another run installed it first: use theirs
            staging.rename(prefix)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def server_env() -> dict[str, str]:
    """The environment of a server under test: this tree first on the path."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(TREE) + (os.pathsep + path if path else "")}


@dataclasses.dataclass(frozen=True)
class Reply:
    """What one Inspector CLI run printed, and its exit status."""

    status: int
    stdout: str
    stderr: str

    def result(self) -> dict[str, Any]:
        """The JSON the Inspector printed on stdout: the server's result as the client got it."""
        try:
            value = json.loads(self.stdout)
        except ValueError:
            pytest.fail(
                f"the Inspector printed no result (exit status {self.status}); stderr: {self.stderr[-2000:]!r}; "
                f"stdout starts {self.stdout[:300]!r}",
                pytrace=False,
            )
        assert isinstance(value, dict), value
        return value


@dataclasses.dataclass(frozen=True)
class Inspector:
    """The pinned Inspector's command line, run once per call."""

    node: str
    entry: Path

    def command(self, target: Sequence[str], *options: str) -> list[str]:
        return [self.node, str(self.entry), "--cli", *options, *target]

    def __call__(self, target: Sequence[str], *options: str, timeout: float = 120.0) -> Reply:
        done = subprocess.run(
            self.command(target, *options),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Reply(done.returncode, done.stdout, done.stderr)

    def run_javascript(self, target: Sequence[str], code: str, timeout: float = 120.0) -> Reply:
        return self(target, *call_options(code), timeout=timeout)


def call_options(code: str) -> list[str]:
    # The CLI JSON-parses a --tool-arg value when it can ("42" would arrive as a number), so
    # the program goes as a JSON string.
    return ["--method", "tools/call", "--tool-name", "run_javascript", "--tool-arg", "code=" + json.dumps(code)]


@pytest.fixture(scope="session")
def inspector() -> Inspector:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("these tests need Node.js and npm on PATH, to run the MCP Inspector", pytrace=False)
    prefix = _cache_root() / f"inspector-{INSPECTOR_VERSION}"
    if _installed_version(prefix) != INSPECTOR_VERSION or not _entry(prefix).is_file():
        _install(prefix, npm)
    return Inspector(node, _entry(prefix))


def stdio(*flags: str) -> list[str]:
    """The Inspector's target for a stdio server it starts itself (``-e`` is the only way to
    set the server's environment: the SDK passes it only a few variables of its own)."""
    return ["-e", f"PYTHONPATH={server_env()['PYTHONPATH']}", "--", *SERVER, *flags]


def http(url: str) -> list[str]:
    return ["--transport", "http", "--server-url", url]


def wait_until(condition: Callable[[], Any], what: str, limit: float = 30.0) -> Any:
    """condition's first truthy value: a state of another process, which sends no event."""
    deadline = time.monotonic() + limit
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.02)
    return value


@contextlib.contextmanager
def http_server(log: Path, *flags: str) -> Iterator[tuple[str, psutil.Process]]:
    """``pydeno mcp --http`` on a free port: its URL and process; stopped with SIGTERM after,
    which it must answer by exiting 0. Its stderr goes to ``log``, a file, so nothing it
    writes can block it."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            [*SERVER, "--http", "--port", "0", *flags],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=server_env(),
        )
    try:

        def address() -> str | None:
            assert proc.poll() is None, f"the server exited {proc.returncode}: {log.read_text()}"
            found = re.search(r"serving on (http://\S+)", log.read_text())
            return found.group(1) if found else None

        yield wait_until(address, "the server's address"), psutil.Process(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(30)
    assert status == 0, log.read_text()


@pytest.fixture(params=["stdio", "http"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """A ``pydeno mcp`` with its default flags, as the Inspector reaches it."""
    if request.param == "stdio":
        yield stdio()
    else:
        with http_server(tmp_path / "server.err") as (url, _):
            yield http(url)


def structured(reply: Reply) -> dict[str, Any]:
    content = reply.result()["structuredContent"]
    assert isinstance(content, dict), content
    return content


def text(reply: Reply) -> str:
    [block] = reply.result()["content"]
    assert block["type"] == "text", block
    return str(block["text"])


# -- what any client sees first ----------------------------------------------------------


def test_the_inspector_lists_run_javascript_with_code_as_its_required_argument(
    inspector: Inspector, target: list[str]
) -> None:
    reply = inspector(target, "--method", "tools/list")
    assert reply.status == 0, reply.stderr
    [tool] = reply.result()["tools"]
    assert tool["name"] == "run_javascript"
    assert tool["inputSchema"]["required"] == ["code"]
    assert tool["inputSchema"]["properties"]["code"]["type"] == "string"


def test_the_inspector_gets_a_programs_value_as_structured_content_and_text(
    inspector: Inspector, target: list[str]
) -> None:
    reply = inspector.run_javascript(target, "const xs = [3, 1, 2]; xs.sort(); xs.map((x) => x * 14)")
    assert reply.status == 0, reply.stderr
    assert reply.result()["isError"] is False
    content = structured(reply)
    assert content["ok"] is True
    assert content["value"] == [14, 28, 42]
    assert text(reply).startswith("ok: [14, 28, 42]")


def test_the_inspector_runs_typescript(inspector: Inspector, target: list[str]) -> None:
    reply = inspector.run_javascript(target, "const n: number = 2; n * 21")
    assert reply.status == 0, reply.stderr
    assert structured(reply)["value"] == 42


# -- failures the client must be shown, not lose -----------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [("const user = null;\nuser.x", "TypeError"), ("let a = 1;\nlet b = ;\na", "SyntaxError")],
    ids=["throws", "does-not-compile"],
)
def test_a_failing_program_reaches_the_inspector_as_an_error_result_with_its_kind_and_place(
    inspector: Inspector, target: list[str], code: str, name: str
) -> None:
    reply = inspector.run_javascript(target, code)
    # An error result, not a protocol error: the Inspector prints it and exits with its own
    # status for a tool that returned isError.
    assert reply.status == TOOL_ERROR_STATUS, reply.stderr
    assert reply.result()["isError"] is True
    content = structured(reply)
    assert content["ok"] is False
    error = content["error"]
    assert (error["name"], error["kind"], error["line"]) == (name, "js_error", 2)
    # What a model is shown is the text: it carries the error itself, not only its kind.
    assert f"{name}: {error['message'].splitlines()[0]}" in text(reply)


# -- a result too big for the client's transport -----------------------------------------


def test_a_twenty_megabyte_value_reaches_the_inspector_as_a_bounded_result_that_says_it_was_cut(
    inspector: Inspector, target: list[str]
) -> None:
    reply = inspector.run_javascript(target, "'x'.repeat(20_000_000)")
    # Over stdio the SDK closes the connection on a message past its cap ("Connection closed",
    # exit status 1) and the client gets nothing; the server has to bound the whole result.
    assert reply.status in (0, TOOL_ERROR_STATUS), reply.stderr[-2000:]
    size = len(reply.stdout.encode())
    assert size < TS_SDK_STDIO_MESSAGE_CAP, f"the Inspector got a result of {size:,} bytes"
    content = structured(reply)
    assert "value" in content["truncated"], content["truncated"]


# -- one-shot clients never say goodbye --------------------------------------------------


def test_one_shot_inspector_calls_that_never_delete_their_session_are_never_locked_out(
    inspector: Inspector, tmp_path: Path
) -> None:
    # The TypeScript SDK closes without an HTTP DELETE, so every call here leaves its session
    # behind; more calls than --max-sessions must still each be served, each on a fresh
    # runtime: a session given up for a newcomer must not hand it the old one's state.
    code = "let seen = 42; const earlier = globalThis.earlier ?? null; globalThis.earlier = 'set'; ({ seen, earlier })"
    with http_server(tmp_path / "server.err", "--session", "--max-sessions", "2") as (url, _):
        for call in range(5):
            reply = inspector.run_javascript(http(url), code)
            assert reply.status == 0, f"call {call + 1}: {reply.stdout[:1000]}"
            assert structured(reply)["value"] == {"seen": 42, "earlier": None}, f"call {call + 1}"


def test_a_stdio_server_on_a_store_resumes_its_session_for_the_next_inspector_run(
    inspector: Inspector, tmp_path: Path
) -> None:
    # Each Inspector run starts a server process of its own and ends it: with --store, the one
    # stdio session outlives both, and the second run's server replays it.
    target = stdio("--session", "--store", str(tmp_path / "sessions.db"))
    first = inspector.run_javascript(target, "const kept = [1, 2, 3]; let total = 6; total")
    assert first.status == 0, first.stdout[:1000]
    assert structured(first)["value"] == 6
    second = inspector.run_javascript(target, "({ kept, total: total + 1 })")
    assert second.status == 0, second.stdout[:1000]
    assert structured(second)["value"] == {"kept": [1, 2, 3], "total": 7}


def test_one_shot_inspector_calls_to_an_http_server_on_a_store_are_each_served_afresh(
    inspector: Inspector, tmp_path: Path
) -> None:
    # Every Inspector run is a new MCP session (and never deletes it): each is stored, and
    # none sees another's state.
    code = "const earlier = globalThis.earlier ?? null; globalThis.earlier = 'set'; earlier"
    flags = ("--session", "--store", str(tmp_path / "sessions.db"), "--max-sessions", "2")
    with http_server(tmp_path / "server.err", *flags) as (url, _):
        for call in range(4):
            reply = inspector.run_javascript(http(url), code)
            assert reply.status == 0, f"call {call + 1}: {reply.stdout[:1000]}"
            assert structured(reply)["value"] is None, f"call {call + 1}"


# -- a stdio server never outlives its client --------------------------------------------


def _descendants(root: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return list(root.children(recursive=True))
    return []


def _is_server(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return bool(proc.cmdline()[1:4] == ["-m", "pydeno", "mcp"])
    return False


def test_a_stdio_server_and_its_workers_are_gone_once_the_inspector_exits(inspector: Inspector) -> None:
    code = "await new Promise((resolve) => setTimeout(resolve, 500)); 42"
    client = subprocess.Popen(
        inspector.command(stdio("--session"), *call_options(code)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, psutil.Process] = {}
    servers: set[int] = set()
    workers: set[int] = set()
    try:
        root = psutil.Process(client.pid)
        # Everything the server started while the call ran: the warm pool and the session's
        # worker, told apart while they are alive to be asked.
        while client.poll() is None:
            for proc in _descendants(root):
                if proc.pid not in seen:
                    seen[proc.pid] = proc
                    servers.update([proc.pid] if _is_server(proc) else [])
                    workers.update([proc.pid] if is_worker(proc) else [])
            time.sleep(0.02)
        stdout, stderr = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    assert client.returncode == 0, stderr
    assert json.loads(stdout)["structuredContent"]["value"] == 42
    assert servers, "never saw the server"
    assert workers, "never saw a worker"
    _, alive = psutil.wait_procs(list(seen.values()), timeout=15)
    assert not alive, f"left behind: {[(p.pid, p.name()) for p in alive]}"


def test_a_stdio_server_stops_its_running_call_when_the_inspector_is_killed(inspector: Inspector) -> None:
    client = subprocess.Popen(
        inspector.command(stdio("--pool-size", "1"), *call_options("await new Promise(() => {})")),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        root = psutil.Process(client.pid)
        # The call is running once there are two workers: its own, checked out of the pool of
        # one, and the one the pool started to take its place.
        left = wait_until(
            lambda: (found := _descendants(root)) and sum(map(is_worker, found)) >= 2 and found,
            "the call's worker and the pool's",
        )
        assert any(_is_server(p) for p in left), "never saw the server"
    finally:
        # No goodbye of any kind: the server only sees its stdin close.
        client.kill()
        client.wait()
    _, alive = psutil.wait_procs(left, timeout=15)
    assert not alive, f"left behind: {[(p.pid, p.name()) for p in alive]}"


@pytest.mark.parametrize("flags", [(), ("--session",)], ids=["fresh-workers", "session"])
def test_an_http_call_is_stopped_with_its_worker_when_the_inspector_is_killed_during_it(
    inspector: Inspector, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    with http_server(tmp_path / "server.err", "--pool-size", "1", *flags) as (url, server):
        client = subprocess.Popen(
            inspector.command(http(url), *call_options("await new Promise(() => {})")),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # Two workers: the call's own, checked out of the pool of one, and the pool's new one.
            running = wait_until(
                lambda: len(found := [p for p in _descendants(server) if is_worker(p)]) >= 2 and found,
                "the call's worker and the pool's",
            )
        finally:
            client.kill()
            client.wait()
        # The call's worker goes long before the server's 30 s timeout would end it; the
        # pool's stays, warm for the next call.
        wait_until(lambda: sum(p.is_running() for p in running) == 1, "the call's worker killed", limit=15)
