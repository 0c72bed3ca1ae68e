"""pydeno.ray on a real local Ray cluster: ``ray.init(num_cpus=2)``, started once for the
module (a Ray start takes seconds) and shut down at its end, real actors and real deno
workers in them; nothing of pydeno's is mocked.

Most tests share one pool (two actors of half a CPU each, so that the tests with a pool of
their own find a CPU free); a test that kills actors or changes the pool's settings makes
its own with ``own_pool``, which closes it and checks that every process its actors held is
gone. The module's end shuts Ray down with the shared pool still open, and checks that no
deno process and no Ray process is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray

import pydeno
import pydeno.ray
from pydeno._base import failures
from pydeno._pools.core import PoolCore
from pydeno._pools.retry.policy import gave_up
from pydeno.ray._actor import HOLD_LIMIT
from pydeno.ray._dispatch import Actors
from tests.support.processes import deno_workers, is_worker

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

SLOW: str = "await new Promise(r => setTimeout(r, {ms})); {value}"
RAY_KILLED = r"Ray actor {index} died running {what}: The actor died unexpectedly before finishing this task\.[\s\S]*"

# Every process an actor reported while this module ran: none may outlive it.
SEEN: dict[int, float] = {}


def alive(pid: int, create_time: float) -> bool:
    """Whether the process is still running (a zombie has ended; a reused pid is another)."""
    try:
        process = psutil.Process(pid)
        return bool(abs(process.create_time() - create_time) < 0.5 and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def still_running(processes: dict[int, float], within: float = 10.0) -> list[int]:
    """The pids of processes that are still running after waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        left = [pid for pid, created in processes.items() if alive(pid, created)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def actor_infos(pool: Any) -> list[dict[str, Any]]:
    """What each live actor of the pool reports about itself (its pid, its processes, ...);
    every process it names is remembered for the module's final check."""
    infos: list[dict[str, Any]] = ray.get([slot.handle.info.remote() for slot in pool._actors.slots])
    for info in infos:
        SEEN[info["pid"]] = psutil.Process(info["pid"]).create_time()
        for child in info["processes"]:
            SEEN[child["pid"]] = child["create_time"]
    return infos


def processes_of(infos: list[dict[str, Any]], name: str | None = None) -> dict[int, float]:
    return {p["pid"]: p["create_time"] for info in infos for p in info["processes"] if name in (None, p["name"])}


def workers_of(infos: list[dict[str, Any]]) -> dict[int, float]:
    """The actors' deno workers: not their zygotes' spares, which go with the zygote."""
    found = {}
    for pid, created in processes_of(infos, "deno").items():
        with contextlib.suppress(psutil.Error):
            if is_worker(psutil.Process(pid)):
                found[pid] = created
    return found


def checkouts(pool: Any, index: int = 0) -> int:
    return int(pool.stats()["per_actor"][index]["checkouts"])


def running_on(pool: Any, before: int, index: int = 0) -> None:
    """Wait until actor ``index`` of the pool runs a command on a worker it checked out (its
    pool had served ``before`` checkouts until then)."""
    deadline = time.monotonic() + 20
    while True:
        figures = pool.stats()["per_actor"][index]
        if figures["running"] and figures["checkouts"] > before:
            return
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.02)


def in_background(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run fn in a thread; the dict gets its "value" or its "error"."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def ray_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


# -- fixtures --------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """This module's stand-in for the conftest's guard, which fails a test that leaves any new
    process, thread or descriptor: a Ray cluster starts and ends processes, threads and
    descriptors of its own as it schedules, and a pool replaces each worker after every
    command, so that guard cannot tell a leak here. Instead every pool a test makes
    (``own_pool``) is checked for its processes at the test's end, and the module's end
    (``cluster``) checks that nothing of Ray's or pydeno's outlives the cluster."""
    yield


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    before = {p.pid for p in ray_processes()}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        # The shared pool is still open: Ray's shutdown must end its actors and their workers.
        assert still_running(SEEN) == [], "processes of the actors outlived Ray"
        deadline = time.monotonic() + 10
        while (left := [p for p in ray_processes() if p.pid not in before]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [], f"processes outlived Ray: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture(scope="module")
def pool(cluster: None) -> pydeno.ray.RayPool:
    shared = pydeno.ray.RayPool(actors=2, workers_per_actor=1, num_cpus_per_actor=0.5, timeout=10)
    actor_infos(shared)
    # Not closed: the module's end shuts Ray down under it (see cluster).
    return shared


@pytest.fixture
def own_pool(cluster: None) -> Iterator[Callable[..., Any]]:
    """``own_pool(**kwargs)``: a RayPool (``code_mode=tools`` for a RayCodeMode) for this test
    alone, closed at its end, after which no process its actors held may be running."""
    made: list[Any] = []

    def make(code_mode: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", 10)
        kwargs.setdefault("start_timeout", 20)
        pool = pydeno.ray.RayPool(**kwargs) if code_mode is None else pydeno.ray.RayCodeMode(code_mode, **kwargs)
        made.append(pool)
        return pool

    yield make
    for pool in made:
        held = {} if pool.closed else processes_of(actor_infos(pool))
        pool.close()
        assert still_running(held) == [], "a closed pool left processes running"


# -- the optional extra ------------------------------------------------------------------------
def test_importing_pydeno_ray_without_ray_installed_names_the_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "try:\n    import pydeno.ray\nexcept ImportError as exc:\n    print(exc)\n"
        "import pydeno; print(pydeno.Runtime.__name__)"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    message, still = child.stdout.splitlines()
    assert message.startswith("pydeno.ray needs the ray extra: pip install 'pydeno[ray]' where this pydeno is")
    assert still == "Runtime"


# -- shipping this project to the nodes ---------------------------------------------------------
RAY_DOCS = Path(__file__).resolve().parents[2] / "docs" / "ray.md"


def test_the_docs_ship_this_project_to_the_nodes_never_the_pypi_name() -> None:
    text = RAY_DOCS.read_text()
    # "pip": ["pydeno..."] installs the other project of that name from PyPI on every node.
    assert not re.search(r"""["']pip["']\s*:\s*\[\s*["']pydeno""", text)
    assert '"py_modules": ["dist/pydeno-' in text


SHIPPED_DRIVER = """
import sys

address, wheel, checkout = sys.argv[1:]
# The driver runs this checkout's pydeno; the actors get only what the job ships them.
sys.path.insert(0, checkout)

import ray

import pydeno.ray

# The docs' runtime_env; env_vars only takes this checkout off the actors' path (the test's
# own PYTHONPATH), as on a node that never had it.
runtime_env = {"py_modules": [wheel], "env_vars": {"PYTHONPATH": ""}}
ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)


@ray.remote(num_cpus=0)
def where():
    import pydeno

    return pydeno.__file__


print(ray.get(where.remote(), timeout=300))
with pydeno.ray.RayPool(actors=1, num_cpus_per_actor=0.5, timeout=10, start_timeout=300) as pool:
    print(pool.eval("6 * 7"))
ray.shutdown()
"""


def test_a_wheel_shipped_in_py_modules_as_the_docs_show_is_what_the_actors_run(cluster: None, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(root),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("pydeno-*.whl")
    # A job of its own on this cluster: Ray uploads what py_modules names only for a job's
    # runtime_env (ray.init), as the docs show it.
    address = ray.get_runtime_context().gcs_address
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    job = subprocess.run(
        [sys.executable, "-c", SHIPPED_DRIVER, address, str(wheel), str(root)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    location, value = job.stdout.split()
    # Ray installed the wheel into a directory of its own on the node: not the driver's copy.
    assert "runtime_resources" in location and location.endswith("pydeno/__init__.py"), location
    assert not location.startswith(str(root))
    assert value == "42"


# -- arguments ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"actors": 0}, ValueError, "actors must be at least 1, got 0"),
        ({"actors": "2"}, TypeError, "actors must be an int, got str"),
        ({"workers_per_actor": 0}, ValueError, "workers_per_actor must be at least 1, got 0"),
        ({"max_inflight_per_actor": 0}, ValueError, "max_inflight_per_actor must be at least 1, got 0"),
        ({"num_cpus_per_actor": -1}, ValueError, "num_cpus_per_actor must be a non-negative, finite number, got -1"),
        ({"worker_start_rate": 0}, ValueError, "worker_start_rate must be a positive, finite number, got 0"),
        ({"start_jitter": "a"}, TypeError, "start_jitter must be a number, got str"),
        ({"max_attempts": 0}, ValueError, "max_attempts must be an int of at least 1, got 0"),
        ({"retry": "worker_crashed"}, TypeError, "retry must be a pydeno.RetryPolicy or None, got str"),
        (
            {"actor_options": {"max_restarts": 3}},
            ValueError,
            "actor_options may not set max_restarts: the pool decides them",
        ),
        ({"timeout": -1}, ValueError, "timeout must be a positive, finite number of seconds, got -1"),
        ({"sandbox": "loose"}, ValueError, "sandbox must be 'require' .*"),
    ],
    ids=lambda value: str(value) if isinstance(value, dict) else "",
)
def test_a_bad_pool_argument_is_a_typed_error_before_any_actor_starts(
    cluster: None, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{message}$") as raised:
        pydeno.ray.RayPool(**kwargs)
    assert pydeno.classify_error(raised.value).kind == "invalid_input"


def test_code_that_is_not_a_str_is_a_type_error_and_nothing_is_sent(pool: pydeno.ray.RayPool) -> None:
    before = pool.stats()["commands"]
    for call in (
        lambda: pool.eval(123),  # type: ignore[arg-type]
        lambda: pool.map(["1", 2]),  # type: ignore[list-item]
        lambda: pool.submit(None),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match=r"^code must be a str of JavaScript, got (int|NoneType)$"):
            call()
    with pytest.raises(TypeError, match=r"^codes must be an iterable of str, not a single str$"):
        pool.map("1 + 1")
    with pytest.raises(ValueError, match=r"^timeout must be a positive, finite number of seconds, got -1$"):
        pool.eval("1", timeout=-1)
    assert pool.stats()["commands"] == before


# -- commands ------------------------------------------------------------------------------------
def test_an_eval_returns_the_guest_value_and_each_runs_on_a_fresh_worker(pool: pydeno.ray.RayPool) -> None:
    assert pool.eval("1 + 1") == 2
    assert pool.eval("({a: [1, 'two', null]})") == {"a": [1, "two", None]}
    assert pool.eval("globalThis.kept = 1; typeof kept") == "number"
    assert pool.eval("typeof globalThis.kept") == "undefined"


def test_map_returns_each_value_in_the_order_of_the_codes_from_both_actors(pool: pydeno.ray.RayPool) -> None:
    before = [a["commands"] for a in pool.stats()["per_actor"]]
    # The later codes finish first.
    codes = [SLOW.format(ms=(6 - i) * 30, value=i) for i in range(6)]
    assert pool.map(codes) == list(range(6))
    after = [a["commands"] for a in pool.stats()["per_actor"]]
    assert all(a > b for a, b in zip(after, before, strict=True))


def test_map_raises_the_first_failed_item_and_with_return_exceptions_puts_each_in_its_place(
    pool: pydeno.ray.RayPool,
) -> None:
    codes = ["1", "null.x", "3", "throw new RangeError('four')"]
    with pytest.raises(pydeno.JavaScriptError, match=r"^Evaluation failed: TypeError: Cannot read properties of null"):
        pool.map(codes)
    results = pool.map(codes, return_exceptions=True)
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], pydeno.JavaScriptError) and results[1].name == "TypeError"
    assert isinstance(results[3], pydeno.JavaScriptError) and results[3].message == "four"


def test_submit_returns_a_ray_object_reference_that_ray_get_and_result_both_resolve(
    pool: pydeno.ray.RayPool,
) -> None:
    ref = pool.submit("6 * 7")
    assert isinstance(ref, ray.ObjectRef)
    assert ray.get(ref) == 42
    assert pool.result(ref) == 42
    refs = [pool.submit(f"{i} + 1") for i in range(4)]
    assert ray.get(refs) == [1, 2, 3, 4]


def test_a_failed_submit_gives_ray_get_a_wrapper_that_classifies_and_result_the_original(
    pool: pydeno.ray.RayPool,
) -> None:
    ref = pool.submit("while (true) {}", timeout=0.3)
    with pytest.raises(pydeno.RuntimeTimeout) as wrapped:
        ray.get(ref)
    assert type(wrapped.value) is not pydeno.RuntimeTimeout  # Ray's RayTaskError(RuntimeTimeout)
    assert isinstance(wrapped.value, ray.exceptions.RayTaskError)
    assert pydeno.classify_error(wrapped.value).kind == "timeout"
    with pytest.raises(pydeno.RuntimeTimeout) as original:
        pool.result(ref)
    assert type(original.value) is pydeno.RuntimeTimeout
    assert str(original.value) == "command exceeded timeout=0.3s; worker killed"
    assert (
        original.value.kind == "timeout"
        and original.value.hint == "raise timeout= (now 0.3), or make the code finish sooner"
    )


def test_an_eval_failure_is_the_pydeno_exception_the_worker_raised(pool: pydeno.ray.RayPool) -> None:
    with pytest.raises(pydeno.JavaScriptError) as raised:
        pool.eval("function f() { null.x }\nf()")
    exc = raised.value
    assert type(exc) is pydeno.JavaScriptError
    assert (exc.name, exc.kind) == ("TypeError", "js_error")
    assert "at f (" in exc.stack
    with pytest.raises(pydeno.RuntimeTimeout) as timed_out:
        pool.eval("while (true) {}", timeout=0.2)
    assert str(timed_out.value) == "command exceeded timeout=0.2s; worker killed"


def test_a_value_that_holds_a_function_handle_is_refused_with_a_type_error(pool: pydeno.ray.RayPool) -> None:
    with pytest.raises(TypeError) as raised:
        pool.eval("({ok: 1, f: [() => 1]})")
    assert str(raised.value) == (
        "the value holds a function handle (JsFunction), which ends with the worker that made it: "
        "a pool's command returns plain data"
    )
    assert pydeno.classify_error(raised.value).kind == "invalid_input"


# -- errors across the boundary ------------------------------------------------------------------
def _js(name: str, message: str) -> pydeno.JavaScriptError:
    return pydeno.JavaScriptError(name, message, f"{name}: {message}\n    at <anonymous>:1:1")


# One instance of each kind's exception, as pydeno makes it (the host's factories where a
# factory makes it).
KIND_EXAMPLES: dict[str, Callable[[], BaseException]] = {
    "js_error": lambda: _js("TypeError", "Cannot read properties of null (reading 'x')"),
    "timeout": lambda: failures.command_timed_out(0.5),
    "cpu_limit": lambda: failures.cpu_in_command(0.25),
    "memory_limit": lambda: failures.over_memory(612368384, 536870912),
    "thread_limit": lambda: failures.over_threads(65, 64),
    "worker_crashed": lambda: failures.worker_died("worker process died (killed by SIGKILL)"),
    "guest_crashed": lambda: failures.guest_ended_worker(f"{failures.GUEST_DEATH} (exit code 0)"),
    "terminated": failures.terminated,
    "force_killed": lambda: failures.force_killed(1.0),
    "host_wait": lambda: failures.host_wait_exceeded(0.2),
    "max_pause": lambda: failures.host_wait_exceeded(0.2),
    "host_call_budget": lambda: failures.host_calls_exceeded(5),
    "inflight_limit": lambda: _js("Error", "more than 4 host calls in flight"),
    "tool_budget": lambda: pydeno.ToolBudgetError("the tool-call budget of 1 calls is spent"),
    "tool_not_found": lambda: pydeno.ToolNotFoundError("there is no tool named 'x'"),
    "tool_failed": lambda: pydeno.ToolError("upstream refused"),
    "protocol_violation": lambda: failures.protocol_broken("unexpected frame of kind 99", malformed=False),
    "sandbox_unavailable": lambda: failures.layer_missing("landlock is unavailable: ENOSYS"),
    "limits_unmeasurable": lambda: failures.limit_unmeasurable("max_memory"),
    "closed": lambda: failures.closed_error("runtime is closed"),
    "journal_invalid": lambda: pydeno.JournalError("journal is not authentic: wrong key"),
    "replay_divergence": lambda: pydeno.ReplayDivergence("replaying run 1: call 1 was tools.add()"),
    "snapshot_invalid": lambda: pydeno.SnapshotAuthenticationError("snapshot is not authentic"),
    "typecheck_failed": lambda: pydeno.TypeCheckError(
        "the program did not type-check (1 type error); nothing ran:\nTS2322: ...",
        diagnostics=({"code": 2322, "message": "Type 'string' is not assignable", "line": 1, "column": 21},),
    ),
    "fetch_refused": lambda: pydeno.FetchRefused("fetch refused: GET http://169.254.169.254/: a metadata address"),
    "fetch_failed": lambda: pydeno.FetchFailed("fetch failed: GET http://127.0.0.1:1/: Connection refused"),
    "fetch_timeout": lambda: pydeno.FetchTimeout("fetch timed out after 0.2s: GET http://127.0.0.1:1/"),
    "upstream_failed": lambda: pydeno.UpstreamError("MCP server 'files' went away during tools.files.hang()"),
    "deno_unavailable": lambda: failures.start_failed(
        "No such file or directory (/x/deno) [ENOENT]", FileNotFoundError(2, "x")
    ),
    "checkout_timeout": lambda: PoolCore(0, 1, 0.2).timeout(("checkout_timeout", 0.2)),
    "lease_timeout": lambda: pydeno.LeaseTimeout("session 'a' is leased elsewhere; waited lease_timeout=0.1s"),
    "session_limit": lambda: pydeno.SessionLimitError("owner 'o' has 1 live sessions, the cap max_live_per_owner=1"),
    "store_busy": lambda: pydeno.StoreBusy("journal store s.db is locked by another process; waited busy_timeout=0.1s"),
    "store_failed": lambda: pydeno.StoreError("journal store s.db failed: DatabaseError: file is not a database"),
    "actor_died": lambda: pydeno.ray.actor_died(3, "eval", "The actor died unexpectedly before finishing this task."),
    "invalid_input": lambda: TypeError("code must be a str of JavaScript, got int"),
    "cancelled": asyncio.CancelledError,
    "unknown": lambda: KeyError("x"),
    "sandbox_denied": lambda: failures.worker_reported(
        "TypeError", 'no network access in this sandbox: "example.com:443" was not reached', "", max_message_bytes=2**20
    ),
    "import_refused": lambda: failures.worker_reported(
        "TypeError", "npm packages cannot be imported in this sandbox", "", max_message_bytes=2**20
    ),
    "package_unresolved": lambda: pydeno.PackageUnresolved("package 'left-pad@9' could not be resolved: not found"),
    "package_refused": lambda: pydeno.PackageRefused("package bundle refused: 'fs-extra@11.2.0' needs node:fs"),
}
ATTRIBUTES = (
    "kind",
    "hint",
    "model_hint",
    "docs",
    "__notes__",
    "_authored_kind",
    "name",
    "message",
    "stack",
    "diagnostics",
    "line",
    "column",
    "value",
    "has_value",
)


@ray.remote(num_cpus=0)
class Relay:
    """An actor that raises what it is sent, as a pool's actor raises a worker's failure."""

    def raise_(self, exc: BaseException) -> None:
        raise exc


@pytest.fixture(scope="module")
def relay(cluster: None) -> Any:
    return Relay.remote()  # type: ignore[attr-defined]


def test_every_kind_has_an_example_to_send_across() -> None:
    assert set(KIND_EXAMPLES) == set(pydeno.KINDS)


@pytest.mark.parametrize("kind", sorted(KIND_EXAMPLES))
def test_an_exception_of_each_kind_crosses_a_real_actor_as_the_same_exception(
    pool: pydeno.ray.RayPool, relay: Any, kind: str
) -> None:
    sent = KIND_EXAMPLES[kind]()
    via_agent = kind == "max_pause"
    # What a retry loop adds when it gives up: notes beyond pydeno's own must cross too.
    gave_up(sent, 2, 3)
    ref = relay.raise_.remote(sent)
    with pytest.raises(BaseException) as wrapped:
        ray.get(ref)
    # What a caller of ray.get holds: Ray's wrapper, an instance of the class, that classifies.
    assert isinstance(wrapped.value, type(sent))
    assert pydeno.classify_error(wrapped.value, via_agent=via_agent).kind == kind
    with pytest.raises(BaseException) as unwrapped:
        pool.result(ref)
    got = unwrapped.value
    assert type(got) is type(sent)
    assert str(got) == str(sent)
    assert pydeno.classify_error(got, via_agent=via_agent) == pydeno.classify_error(sent, via_agent=via_agent)
    assert pydeno.classify_error(got, via_agent=via_agent).kind == kind
    for name in ATTRIBUTES:
        assert getattr(got, name, None) == getattr(sent, name, None), name


@pytest.mark.parametrize("kind", sorted(KIND_EXAMPLES))
def test_an_exception_of_each_kind_pickles_with_its_attributes_and_notes(kind: str) -> None:
    sent = KIND_EXAMPLES[kind]()
    gave_up(sent, 2, 3)
    got = pickle.loads(pickle.dumps(sent))
    assert type(got) is type(sent) and str(got) == str(sent)
    for name in ATTRIBUTES:
        assert getattr(got, name, None) == getattr(sent, name, None), name


# -- actor death -----------------------------------------------------------------------------
def test_an_actor_killed_with_ray_kill_mid_eval_raises_actor_died_and_the_pool_replaces_it(
    own_pool: Callable[..., Any],
) -> None:
    pool = own_pool(actors=1)
    (info,) = actor_infos(pool)
    before = checkouts(pool)
    thread, outcome = in_background(lambda: pool.eval(SLOW.format(ms=20_000, value=1)))
    running_on(pool, before)
    ray.kill(pool._actors.slots[0].handle)
    thread.join()
    exc = outcome["error"]
    assert type(exc) is pydeno.ActorDied
    assert re.fullmatch(RAY_KILLED.format(index=0, what="eval"), str(exc)), str(exc)
    assert "killed by `ray.kill`" in str(exc)
    kind = pydeno.classify_error(exc)
    assert (kind.kind, kind.retryable, exc.kind, exc.docs) == (
        "actor_died",
        True,
        "actor_died",
        "pydeno errors actor_died",
    )
    assert isinstance(exc.__cause__, ray.exceptions.RayActorError)
    assert still_running(processes_of([info], "deno")) == []
    assert pool.eval("2 + 2") == 4
    stats = pool.stats()
    assert (stats["actors"], stats["actors_replaced"]) == (1, 1)
    (new,) = actor_infos(pool)
    assert new["pid"] != info["pid"]


def test_an_actor_whose_process_is_sigkilled_mid_eval_raises_actor_died_and_its_workers_die_with_it(
    own_pool: Callable[..., Any],
) -> None:
    pool = own_pool(actors=1)
    before = checkouts(pool)
    thread, outcome = in_background(lambda: pool.eval(SLOW.format(ms=20_000, value=1)))
    running_on(pool, before)
    (info,) = actor_infos(pool)
    workers = processes_of([info], "deno")
    assert workers
    os.kill(info["pid"], signal.SIGKILL)
    thread.join()
    exc = outcome["error"]
    assert type(exc) is pydeno.ActorDied
    assert str(exc).startswith("Ray actor 0 died running eval: ")
    assert pydeno.classify_error(exc).kind == "actor_died"
    assert still_running(workers) == []
    assert pool.eval("'again'") == "again"
    assert pool.stats()["actors_replaced"] == 1


def test_with_retries_an_eval_whose_actor_dies_runs_again_on_the_new_actor(own_pool: Callable[..., Any]) -> None:
    pool = own_pool(actors=1, max_attempts=2)
    before = checkouts(pool)
    thread, outcome = in_background(lambda: pool.eval(SLOW.format(ms=600, value="'done'")))
    running_on(pool, before)
    ray.kill(pool._actors.slots[0].handle)
    thread.join()
    assert outcome == {"value": "done"}
    stats = pool.stats()
    assert (stats["actors_replaced"], stats["commands"]) == (1, 2)


def test_with_retries_a_worker_killed_mid_eval_runs_again_but_a_guest_error_does_not(
    own_pool: Callable[..., Any],
) -> None:
    pool = own_pool(actors=1, max_attempts=3)
    before = checkouts(pool)
    thread, outcome = in_background(lambda: pool.eval(SLOW.format(ms=800, value="'survived'")))
    running_on(pool, before)
    # The command's worker (and the spare beside it) killed from outside: worker_crashed.
    for pid in processes_of(actor_infos(pool), "deno"):
        os.kill(pid, signal.SIGKILL)
    thread.join()
    assert outcome == {"value": "survived"}, outcome
    # Two attempts at least: a spare killed while it started fails the retry's checkout too.
    answered = pool.stats()["commands"]
    assert answered >= 2
    with pytest.raises(pydeno.JavaScriptError) as raised:
        pool.eval("null.x")
    assert not any("attempt" in note for note in raised.value.__notes__)
    assert pool.stats()["commands"] == answered + 1
    assert pool.stats()["actors_replaced"] == 0


# -- admission, start rate, resources -------------------------------------------------------------
def test_no_actor_is_sent_more_than_max_inflight_per_actor_commands_and_the_rest_wait_in_the_driver(
    pool: pydeno.ray.RayPool,
) -> None:
    waits = pool.stats()["queue_wait_seconds"]["count"]
    thread, outcome = in_background(lambda: pool.map([SLOW.format(ms=150, value=i) for i in range(8)]))
    seen = []
    while thread.is_alive():
        seen.append(pool.stats()["inflight"])
        time.sleep(0.02)
    thread.join()
    assert outcome == {"value": list(range(8))}
    assert max(seen) == 2  # two actors, one command each
    stats = pool.stats()
    assert [a["peak_running"] for a in stats["per_actor"]] == [1, 1]
    # Six items found both actors full, however close together the two in flight ended.
    assert stats["queue_wait_seconds"]["count"] == waits + 6


def test_worker_starts_in_an_actor_are_spaced_by_the_rate_limit_with_random_jitter(
    own_pool: Callable[..., Any],
) -> None:
    pool = own_pool(actors=1, worker_start_rate=5, start_jitter=0.1)
    for i in range(4):
        assert pool.eval(str(i)) == i
    (info,) = actor_infos(pool)
    starts = info["start_times"]
    assert len(starts) >= 4
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.2
    assert len({round(g, 4) for g in gaps}) > 1


def test_each_actor_asks_ray_for_one_cpu_per_worker_and_a_pool_the_cluster_cannot_place_times_out(
    pool: pydeno.ray.RayPool, own_pool: Callable[..., Any]
) -> None:
    assert [info["resources"] for info in actor_infos(pool)] == [{"CPU": 0.5}, {"CPU": 0.5}]
    one = own_pool(actors=1, workers_per_actor=1)
    assert [info["resources"] for info in actor_infos(one)] == [{"CPU": 1.0}]
    one.close()
    with pytest.raises(TimeoutError) as raised:
        pydeno.ray.RayPool(actors=1, workers_per_actor=3, start_timeout=1)
    assert str(raised.value) == (
        "Ray placed 0 of the pool's 1 actors within start_timeout=1.0s (each asks for num_cpus=3; the cluster "
        "has 2 CPUs): start fewer actors or workers per actor, add nodes, or raise start_timeout="
    )
    assert pydeno.classify_error(raised.value).kind == "timeout"


# -- the end of a command's checkout ---------------------------------------------------------------
def untold(pool: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, int]]:
    """Keep the pool's driver from telling its actors that it has a command's reply: what it
    would have told them (the place and the command's token), in order."""
    told: list[tuple[Any, int]] = []
    monkeypatch.setattr(pool._actors, "end", lambda slot, token: told.append((slot, token)))
    return told


def the_worker(pool: Any) -> psutil.Process:
    """The one deno worker of the pool's only actor, once its pool has it ready."""
    actor = psutil.Process(actor_infos(pool)[0]["pid"])
    deadline = time.monotonic() + 20
    while len(found := deno_workers(actor)) != 1 or pool.stats()["per_actor"][0]["idle"] != 1:
        assert time.monotonic() < deadline, "the actor's pool never had its worker ready"
        time.sleep(0.02)
    return found[0]


def stopped(process: psutil.Process) -> bool:
    """Whether the process is stopped (SIGSTOP), waiting a moment for the signal to land."""
    deadline = time.monotonic() + 5
    while True:
        with contextlib.suppress(psutil.Error):
            if process.status() == psutil.STATUS_STOPPED:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def held(pool: Any) -> int:
    return int(pool.stats()["per_actor"][0]["held"])


def test_a_used_worker_is_stopped_serves_no_second_command_and_ends_when_the_driver_says_it_has_the_reply(
    own_pool: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pydeno.ray.RayPool, "_hold_limit", 120.0)
    pool = own_pool(actors=1)
    told = untold(pool, monkeypatch)
    used = the_worker(pool)
    assert pool.eval("globalThis.mark = 'first'") == "first"
    assert stopped(used)
    assert held(pool) == 1
    # The next command runs on another worker; the used one stays stopped, held.
    assert pool.eval("typeof globalThis.mark") == "undefined"
    assert used.is_running() and stopped(used)
    assert held(pool) == 2
    assert [token for _, token in told] == [0, 1]
    # The driver's word, late: the worker ends at once, long before the hold's limit.
    Actors.end(pool._actors, *told[0])
    assert still_running({used.pid: used.create_time()}, within=5) == []
    assert held(pool) == 1


def test_the_driver_ends_each_checkout_once_it_has_the_reply_of_eval_map_submit_and_execute(
    own_pool: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pydeno.ray.RayPool, "_hold_limit", 120.0)

    def nothing_held(pool: Any) -> bool:
        deadline = time.monotonic() + 5
        while held(pool):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    # Half a CPU each: the module's shared pool holds one of the cluster's two.
    pool = own_pool(actors=1, num_cpus_per_actor=0.5)
    used = the_worker(pool)
    assert pool.eval("1") == 1
    assert still_running({used.pid: used.create_time()}, within=5) == []
    assert nothing_held(pool)
    assert pool.map(["1", "2", "null.x"], return_exceptions=True)[:2] == [1, 2]
    assert nothing_held(pool)
    # A reference a caller reads with Ray's own ray.get, never with result(), too.
    assert ray.get(pool.submit("3")) == 3
    assert nothing_held(pool)
    cm = own_pool(code_mode=[], actors=1, num_cpus_per_actor=0.5)
    assert cm.execute("4").value == 4
    assert nothing_held(cm)


def test_a_used_worker_the_driver_never_ends_is_ended_by_the_hold_limit(
    own_pool: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = own_pool(actors=1)
    untold(pool, monkeypatch)
    used = the_worker(pool)
    assert pool.eval("1") == 1
    held_at = time.monotonic()
    assert stopped(used)
    assert still_running({used.pid: used.create_time()}, within=HOLD_LIMIT + 5) == []
    assert time.monotonic() - held_at >= HOLD_LIMIT * 0.9
    assert held(pool) == 0


def test_closing_an_actor_ends_every_held_checkout_at_once_and_leaves_no_deno_process(
    own_pool: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pydeno.ray.RayPool, "_hold_limit", 120.0)
    pool = own_pool(actors=1)
    untold(pool, monkeypatch)
    actor = psutil.Process(actor_infos(pool)[0]["pid"])
    actor_created = actor.create_time()
    # Two: the actor's pool has at most two workers alive (max_workers), the held among them.
    assert [pool.eval(str(i)) for i in range(2)] == [0, 1]
    assert held(pool) == 2
    workers = deno_workers(actor)
    assert len(workers) == 2 and all(stopped(w) for w in workers)
    created = {w.pid: w.create_time() for w in workers}
    started = time.monotonic()
    # What the pool's close() asks each actor first; its kill of the actor comes after.
    figures = ray.get(pool._actors.slots[0].handle.close.remote(), timeout=10)
    assert time.monotonic() - started < 5
    assert figures["held"] == 0
    assert [pid for pid, at in created.items() if alive(pid, at)] == []
    assert deno_workers(actor) == []
    pool.close()
    assert still_running({actor.pid: actor_created}) == []


# -- close and stats --------------------------------------------------------------------------
def test_close_kills_every_worker_and_actor_of_the_pool_and_refuses_more_work(own_pool: Callable[..., Any]) -> None:
    pool = own_pool(actors=1, workers_per_actor=2, num_cpus_per_actor=1)
    assert pool.map(["1", "2", "3"]) == [1, 2, 3]
    # The pool keeps two spares ready: wait until its workers are up again.
    deadline = time.monotonic() + 20
    while len(deno := workers_of(infos := actor_infos(pool))) < 2:
        assert time.monotonic() < deadline, "the actor's pool never refilled"
        time.sleep(0.05)
    pool.close()
    assert pool.closed
    # The actor kills and reaps its workers before close() returns; the actor's process ends
    # after it (and with it the zygote that started them).
    assert [pid for pid, created in deno.items() if alive(pid, created)] == []
    assert still_running({info["pid"]: SEEN[info["pid"]] for info in infos} | processes_of(infos)) == []
    with pytest.raises(RuntimeError, match=r"^the pool is closed$"):
        pool.eval("1")
    pool.close()
    stats = pool.stats()
    assert (stats["commands"], stats["per_actor"], stats["inflight"]) == (3, [], 0)
    assert stats["workers_started"] >= 3


def test_stats_has_the_common_keys_and_the_ray_pool_keys(pool: pydeno.ray.RayPool) -> None:
    pool.eval("1")
    stats = pool.stats()
    assert list(stats)[:7] == [
        "commands",
        "host_calls",
        "cpu_seconds",
        "peak_rss_bytes",
        "workers_started",
        "workers_killed",
        "queue_wait_seconds",
    ]
    assert {"actors", "actors_replaced", "inflight", "per_actor"} <= set(stats)
    assert stats["actors"] == 2 and stats["inflight"] == 0
    assert stats["cpu_seconds"] > 0 and stats["peak_rss_bytes"] > 0
    assert stats["workers_started"] == sum(a["workers_started"] for a in stats["per_actor"])
    assert [a["index"] for a in stats["per_actor"]] == [0, 1]
    assert set(stats["queue_wait_seconds"]) == {"count", "total", "max"}


# -- Code Mode -------------------------------------------------------------------------------------
def test_ray_code_mode_runs_tools_in_the_actor_and_returns_execution_results(own_pool: Callable[..., Any]) -> None:
    # Defined here, so that they travel to the actors by value (this module is not importable
    # there); a service's own tools are importable on its nodes.
    def where() -> int:
        """The process this tool runs in."""
        return os.getpid()

    def die() -> None:
        """End the process this tool runs in."""
        os.kill(os.getpid(), signal.SIGKILL)

    cm = own_pool(code_mode=[where, die], actors=1)
    assert "where(args?: WhereInput): Promise<WhereOutput>;" in cm.typescript()
    (info,) = actor_infos(cm)
    result = cm.execute("console.log('hi'); await tools.where()")
    assert isinstance(result, pydeno.ExecutionResult)
    assert (result.ok, result.value, result.stdout) == (True, info["pid"], "hi")
    assert result.value != os.getpid()
    assert [c["name"] for c in result.tool_calls] == ["where"]
    failed = cm.execute("null.x")
    assert failed.ok is False and failed.error is not None and failed.error["kind"] == "js_error"
    assert type(failed.exception) is pydeno.JavaScriptError
    # A tool that kills its actor: the execution's result says so, and the next one runs.
    died = cm.execute("await tools.die()")
    assert died.ok is False and died.error is not None
    assert (died.error["kind"], died.error["retryable"]) == ("actor_died", True)
    assert type(died.exception) is pydeno.ActorDied
    assert str(died.exception).startswith("Ray actor 0 died running execute: ")
    assert cm.execute("1 + 1").value == 2
    assert cm.stats()["actors_replaced"] == 1


def test_ray_code_mode_refuses_tools_that_cannot_be_shipped_to_the_actors(cluster: None) -> None:
    lock = threading.Lock()

    def holds_a_lock() -> bool:
        """Reads a lock."""
        return lock.locked()

    with pytest.raises(TypeError, match=r"^tools and approve= must be picklable to run on Ray actors: "):
        pydeno.ray.RayCodeMode([holds_a_lock])


@pytest.mark.slow
def test_a_ray_pool_s_actors_get_the_packages_whole_and_their_guests_import_them(
    own_pool: Callable[..., Any],
) -> None:
    from tests.packages_cache import LODASH, packages

    pool = own_pool(actors=1, workers_per_actor=1, num_cpus_per_actor=0.5, packages=packages(LODASH))
    assert pool.eval('(await import("lodash-es")).sum([4, 5])') == 9
