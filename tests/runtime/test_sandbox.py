"""sandbox=: "require" fails closed, "best_effort" reports honestly, "off" applies nothing;
the self-test's probes can fail; sandbox_status() and `python -m pydeno doctor` tell the truth.

A simulated kernel is the launcher's private test switch: layers it treats as refused
(Launch.missing_layers), or accepts without enforcing (Launch.silent_layers); the launch
fixture puts them in force.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import pydeno
from pydeno._cli import main as cli
from pydeno.host.process import cgroup, monitor, spec, staging, supervisor

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64" or os.geteuid() != 0,
    reason="the OS layers are Linux x86_64 only, and these checks assume a root host",
)

Launcher = Callable[..., None]
LAYERS = ["parent-death signal", "namespaces", "privilege drop", "no_new_privs", "landlock", "seccomp"]
MISSING = "simulated: this kernel refuses it"


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Warnings are once per process; each test starts with none given yet.
    monkeypatch.setattr(supervisor, "_warned", set())
    yield


def started(**options: Any) -> tuple[list[str], Any]:
    """Start a runtime, evaluate 1 + 1, and return the RuntimeWarnings it gave and its hello."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pydeno.Runtime(**options) as rt:
            assert rt.eval("1 + 1") == 2
            hello = rt._sup.hello
    return [str(w.message) for w in caught if w.category is RuntimeWarning], hello


def refusal(**options: Any) -> pydeno.WorkerCrashed:
    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.Runtime(**options)
    return info.value


# --- the option ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (True, TypeError, "sandbox must be 'require', 'best_effort' or 'off', got bool"),
        (None, TypeError, "sandbox must be 'require', 'best_effort' or 'off', got NoneType"),
        ("strict", ValueError, r"sandbox must be 'require' \(every OS layer.*got 'strict'"),
        ("REQUIRE", ValueError, r"sandbox must be 'require' .*got 'REQUIRE'"),
    ],
)
def test_a_bad_sandbox_value_is_refused_with_the_choices(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        pydeno.Runtime(sandbox=value)
    assert re.fullmatch(message, str(info.value))


@pytest.mark.slow
def test_require_is_the_default_and_every_probe_is_refused_here() -> None:
    gaps, hello = started()
    assert gaps == []
    assert hello.breaches == ()


# --- require fails closed -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("layer", LAYERS)
def test_require_refuses_to_start_when_any_layer_is_missing(launch: Launcher, layer: str) -> None:
    launch(missing_layers={layer: MISSING})
    exc = refusal()
    assert str(exc) == f"worker failed to start: an OS sandbox is required but {layer} is unavailable: {MISSING}"
    info = pydeno.classify_error(exc)
    assert (info.kind, info.retryable, info.retry_with_larger_limits) == ("sandbox_unavailable", False, False)
    assert "python -m pydeno doctor" in exc.hint


@pytest.mark.slow
@pytest.mark.parametrize(
    ("silent", "through"),
    [
        # Without Landlock the unprivileged worker still reads world-readable files.
        ({"landlock"}, "read /etc/passwd"),
        # Without the privilege drop and Landlock, it writes where root may.
        ({"landlock", "privilege drop"}, "created /tmp/.pydeno-selftest-"),
        # Without the namespaces, Landlock's TCP rule and seccomp's socket rule, it listens.
        ({"namespaces", "landlock", "seccomp"}, "listened on 127.0.0.1"),
        # Without seccomp (exec) and Landlock (which files may run), it starts deno again.
        ({"landlock", "seccomp"}, "started a process"),
        # Without seccomp alone, a process can still start (a fork) and run another program.
        ({"seccomp"}, "started a process; ran execve for another program"),
        # Without the privilege drop and seccomp, it may signal the host.
        ({"privilege drop", "seccomp"}, "signalled the host (pid "),
    ],
)
def test_require_refuses_a_worker_whose_self_test_gets_through(
    launch: Launcher, silent: set[str], through: str
) -> None:
    # The kernel accepts these layers without enforcing them: only the self-test can tell.
    launch(silent_layers=frozenset(silent))
    exc = refusal()
    assert str(exc).startswith("worker failed to start: sandbox self-test failed: ")
    assert through in str(exc)
    assert pydeno.classify_error(exc).kind == "sandbox_unavailable"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("reading", "limit", "options"),
    [
        ("memory_of", "max_memory", {}),
        ("cpu_of", "cpu_limit", {"cpu_limit": 5.0}),
        ("threads_of", "max_threads", {}),
    ],
)
def test_require_refuses_a_limit_the_monitor_cannot_read(
    monkeypatch: pytest.MonkeyPatch, reading: str, limit: str, options: dict[str, Any]
) -> None:
    def refused(usage: monitor.Usage) -> int:
        raise PermissionError(13, "Permission denied", "/proc/<pid>/stat")

    monkeypatch.setattr(monitor, reading, refused)
    exc = refusal(**options)
    assert str(exc) == (
        f"{limit} cannot be enforced on this system (the worker's resource usage cannot be read) "
        "and sandbox='require' demands every protection"
    )
    info = pydeno.classify_error(exc)
    assert (info.kind, info.retryable) == ("limits_unmeasurable", False)


def test_a_limit_that_is_not_set_need_not_be_measurable(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(usage: monitor.Usage) -> int:
        raise PermissionError(13, "Permission denied", "/proc/<pid>/stat")

    monkeypatch.setattr(monitor, "cpu_of", refused)
    gaps, _ = started(cpu_limit=None)
    assert gaps == []


def test_the_async_runtime_refuses_the_same_way(launch: Launcher) -> None:
    launch(missing_layers={"seccomp": MISSING})

    async def main() -> None:
        with pytest.raises(pydeno.WorkerCrashed) as info:
            async with pydeno.AsyncRuntime() as rt:
                await rt.eval("1")
        assert str(info.value).endswith(f"but seccomp is unavailable: {MISSING}")

    anyio.run(main)


# --- best_effort reports honestly ---------------------------------------------------------


def test_best_effort_starts_without_a_missing_layer_and_warns_once_naming_it(launch: Launcher) -> None:
    launch(missing_layers={"landlock": MISSING})
    gaps, hello = started(sandbox="best_effort")
    assert len(gaps) == 1
    assert gaps[0].startswith(
        f"pydeno: sandbox='best_effort' started a worker without: landlock is unavailable: {MISSING}; self-test: "
    )
    # What Landlock would have stopped got through (the launcher's probe, not the worker's),
    # and the warning says so.
    assert hello.breaches == ()
    assert "self-test: read /etc/passwd" in gaps[0]
    again, _ = started(sandbox="best_effort")
    assert len(again) <= 1
    assert all("landlock is unavailable" in gap for gap in again)


def test_best_effort_with_every_layer_in_place_says_nothing() -> None:
    gaps, hello = started(sandbox="best_effort")
    assert (gaps, hello.breaches) == ([], ())


def test_best_effort_warns_about_a_limit_it_cannot_enforce(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(usage: monitor.Usage) -> int:
        raise PermissionError(13, "Permission denied", "/proc/<pid>/stat")

    monkeypatch.setattr(monitor, "threads_of", refused)
    gaps, _ = started(sandbox="best_effort")
    assert gaps == [
        "pydeno: sandbox='best_effort' started a worker without: "
        "max_threads cannot be enforced (the worker's resource usage cannot be read)"
    ]


def test_off_applies_no_layer_and_runs_no_self_test(launch: Launcher) -> None:
    launch(missing_layers={"landlock": MISSING})
    gaps, hello = started(sandbox="off")
    assert (gaps, hello.breaches) == ([], ())


# --- the probes can fail ------------------------------------------------------------------


def unconfined_with_selftest(config: spec.WorkerConfig) -> list[str]:
    """deno started with the worker's self-test but no launcher, and a host secret in its
    environment: the worker's own probe must report it."""
    deno, entry = os.path.realpath(staging.find_deno()), staging.worker_entry()
    own = spec.selftest_environment(staging.stage(deno, entry).cache)
    settings = f"{spec.SETTINGS_VARIABLE}={config.environment(Path('/'), own)[spec.SETTINGS_VARIABLE]}"
    return ["/usr/bin/env", "PYDENO_SELFTEST_SECRET=hunter2", settings, *config.argv(deno, entry, own)]


@pytest.mark.slow
def test_every_probe_of_the_launcher_reports_its_breach_when_no_layer_is_enforced(launch: Launcher) -> None:
    # A kernel that accepts every layer and enforces none: the launcher, still root, may do
    # all that its probes try, right before deno's execve.
    launch(silent_layers=frozenset(LAYERS))
    gaps, hello = started(sandbox="best_effort")
    assert hello.breaches == ()  # the worker's own probe: its environment is the host's
    assert len(gaps) == 1
    breaches = re.findall(r"self-test: ([^;]+)", gaps[0])
    expected = {
        "read /etc/passwd",
        f"read {Path(spec.__file__).resolve()}",
        f"read {os.path.realpath(sys.executable)}",
        "listed /",
        f"listed {Path(spec.__file__).resolve().parent}",
        "listened on 127.0.0.1",
        "started a process",
        "ran execve for another program",
        f"signalled the host (pid {os.getpid()})",
    }
    assert expected <= set(breaches), breaches
    created = [b for b in breaches if b.startswith("created ")]
    assert len(created) == 3
    port = spec.SELFTEST_PORT
    assert any(b in (f"reached 127.0.0.1:{port} (refused)", f"connected to 127.0.0.1:{port}") for b in breaches)
    # The probe's files are removed again.
    for line in created:
        assert not Path(line.removeprefix("created ")).exists()


def test_the_workers_own_probe_reports_an_environment_the_host_did_not_set(launch: Launcher) -> None:
    launch(command=unconfined_with_selftest)
    gaps, hello = started(sandbox="best_effort")
    (breach,) = hello.breaches
    assert re.fullmatch(r"saw \d+ environment variables the host did not set", breach)
    # Counts only: the secret's name and value appear nowhere.
    assert "hunter2" not in breach and "PYDENO_SELFTEST_SECRET" not in breach
    assert len(gaps) == 1


def test_require_refuses_the_unconfined_worker_naming_what_got_through(launch: Launcher) -> None:
    launch(command=unconfined_with_selftest)
    exc = refusal()
    assert re.fullmatch(
        r"worker failed to start: sandbox self-test failed: saw \d+ environment variables the host did not set",
        str(exc),
    )
    assert "hunter2" not in str(exc)


def test_a_worker_that_keeps_a_permission_is_refused(fake_worker: Callable[..., None]) -> None:
    fake_worker("keeps_permission")
    exc = refusal()
    assert str(exc) == "worker failed to start: sandbox self-test failed: the net permission is still granted"
    assert pydeno.classify_error(exc).kind == "sandbox_unavailable"


# --- sandbox_status() and doctor ----------------------------------------------------------


def test_sandbox_status_finds_every_layer_applied_on_this_machine() -> None:
    status = pydeno.sandbox_status()
    assert [(x.name, x.state) for x in status.layers] == [
        *((name, "applied") for name in LAYERS),
        ("self-test", "applied"),
        ("resource monitor", "applied"),
        ("kernel limits", "applied"),
    ]
    assert status.require_would_start
    assert status.refusal is None
    assert str(status).endswith("sandbox='require' would start here: every layer applies and the self-test passes")


def test_sandbox_status_says_when_only_the_host_monitor_enforces_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "mechanism", lambda: cgroup.Mechanism(None, reason="no cgroup here"))
    status = pydeno.sandbox_status()
    (kernel,) = [x for x in status.layers if x.name == "kernel limits"]
    assert kernel.state == "missing"
    assert kernel.reason.startswith("host monitor only (no per-worker cgroup: no cgroup here)")
    # The monitor still enforces every limit: not a reason for "require" to refuse.
    assert status.require_would_start


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["namespaces", "seccomp"])
def test_sandbox_status_reports_a_missing_layer_and_the_exact_refusal(launch: Launcher, layer: str) -> None:
    launch(missing_layers={layer: MISSING})
    status = pydeno.sandbox_status()
    assert pydeno.LayerStatus(layer, "missing", MISSING) in status.layers
    assert not status.require_would_start
    assert status.refusal == str(refusal())
    assert status.to_dict()["refusal"] == status.refusal


def test_sandbox_status_checks_the_running_worker_not_the_launchers_word(launch: Launcher) -> None:
    # The launcher skips seccomp silently: /proc shows the worker has no filter.
    launch(silent_layers=frozenset({"seccomp"}))
    status = pydeno.sandbox_status()
    (seccomp,) = [x for x in status.layers if x.name == "seccomp"]
    assert (seccomp.state, seccomp.reason) == ("missing", "the worker's seccomp mode is 0, not a filter")
    assert status.refusal == "worker failed to start: an OS sandbox is required but seccomp is unavailable: " + (
        "the worker's seccomp mode is 0, not a filter"
    )


def test_doctor_names_the_project_then_prints_one_line_per_layer_and_exits_zero_where_require_starts() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pydeno", "doctor"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    about, *lines = result.stdout.splitlines()
    assert (
        about
        == f"pydeno: supervised Deno worker processes, version {pydeno.__version__}, in {Path(pydeno.__file__).parent}"
    )
    assert [line.split("  ")[0] for line in lines[: len(LAYERS)]] == LAYERS
    assert all(" applied " in line for line in lines[:-1])
    assert lines[-1] == "sandbox='require' would start here: every layer applies and the self-test passes"


def test_doctor_exits_one_with_the_refusal_where_require_would_refuse(
    launch: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    launch(missing_layers={"landlock": MISSING})
    assert cli.main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["require_would_start"] is False
    assert report["pydeno"]["version"] == pydeno.__version__
    assert {"name": "landlock", "state": "missing", "reason": MISSING} in report["layers"]
    assert (
        report["refusal"] == f"worker failed to start: an OS sandbox is required but landlock is unavailable: {MISSING}"
    )
