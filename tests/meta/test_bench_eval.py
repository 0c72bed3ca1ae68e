"""The side-by-side benchmark's own measuring: CPU and memory accounting of descendant
processes (benchmarks/_common), the bare deno floor, the rates, the sections and how they are
selected, and how targets are judged and printed (benchmarks/_eval)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import pydeno

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
# As bench_eval.py finds them: its directory on sys.path, never the checkout's root.
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from _common import cpu, procfs  # noqa: E402
from _eval import cli, config, floors, merge, rates, report, rows, runtimes  # noqa: E402
from _eval.measure import measure  # noqa: E402
from _eval.sections import BY_NAME, SECTIONS  # noqa: E402

# A child that, told to, burns 0.2 s of CPU by its own clock, reports what it burned, then waits.
BURNER = """
import sys, time
sys.stdin.readline()
start = time.process_time_ns()
while time.process_time_ns() - start < 200_000_000:
    pass
print(time.process_time_ns() - start, flush=True)
sys.stdin.read()
"""


# Started, it says so and only waits on its stdin, so that its memory holds still.
WAITER = "import sys; print('ready', flush=True); sys.stdin.read()"


@contextlib.contextmanager
def _waiter() -> Iterator[subprocess.Popen[bytes]]:
    with subprocess.Popen([sys.executable, "-c", WAITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == b"ready\n"
            yield proc
        finally:
            proc.stdin.close()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    with _waiter() as proc:
        yield proc


def _burn(proc: subprocess.Popen[str]) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return int(proc.stdout.readline())


def _burn_in_a_child(as_helper: pytest.MonkeyPatch | None = None) -> tuple[dict[str, Any], int]:
    """cpu_used() over a child that burns CPU, and what the child says it burned; with
    as_helper, the child counts as a per-host helper."""
    with subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as p:
        if as_helper is not None:
            # Beside the helpers the suite's earlier tests left alive (the zygote), which stay helpers.
            helpers = procfs.shared_helpers() | {p.pid}
            as_helper.setattr(procfs, "shared_helpers", lambda: helpers)
        try:
            reported: list[int] = []
            used = cpu.cpu_used(lambda: reported.append(_burn(p)))
        finally:
            assert p.stdin is not None
            p.stdin.close()
    return used, reported[0]


def test_cpu_used_charges_a_descendant_process_to_the_workers_with_all_the_cpu_it_used() -> None:
    used, burned = _burn_in_a_child()
    assert used["worker_processes"] == 1
    assert used["workers_ns"] >= burned
    assert used["shared_ns"] == 0


def test_the_cpu_clock_of_another_process_agrees_with_its_proc_stat_ticks() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as p:
        try:
            _burn(p)
            clock = cpu.cpu_clock_ns(p.pid)
            with open(f"/proc/{p.pid}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        finally:
            assert p.stdin is not None
            p.stdin.close()
    tick_ns = 1e9 / os.sysconf("SC_CLK_TCK")
    ticks_ns = (int(fields[11]) + int(fields[12])) * tick_ns
    assert abs(clock - ticks_ns) <= 2 * tick_ns


def test_cpu_used_reports_a_per_host_helper_apart_from_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    used, burned = _burn_in_a_child(monkeypatch)
    assert used["shared_ns"] >= burned
    assert used["workers_ns"] == 0
    assert used["worker_processes"] == 0


def test_the_smaps_rollup_reader_gives_the_uss_and_pss_psutil_gives(sleeper: subprocess.Popen[bytes]) -> None:
    def by_psutil() -> tuple[int, int]:
        info = psutil.Process(sleeper.pid).memory_full_info()
        return int(info.uss), int(info.pss)

    # Another process's exit may move a shared page's share at any moment: compare only
    # between two psutil readings that agree.
    for _ in range(20):
        before, ours, after = by_psutil(), procfs.smaps_rollup(sleeper.pid), by_psutil()
        if before == after:
            assert ours == before
            return
    pytest.fail("the process's memory never held still between two readings")


def test_process_memory_counts_workers_and_a_helper_apart(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Beside the helpers the suite's earlier tests left alive (the zygote), which stay helpers.
    helpers = procfs.shared_helpers() | {sleeper.pid}
    monkeypatch.setattr(procfs, "shared_helpers", lambda: helpers)
    with _waiter() as other:
        memory = procfs.process_memory()
    assert [w["pid"] for w in memory["workers"]] == [other.pid]
    shared = {s["pid"]: s for s in memory["shared"]}
    assert sleeper.pid in shared and set(shared) <= helpers
    assert memory["shared_pss_bytes"] == sum(s["pss_bytes"] for s in shared.values())
    assert shared[sleeper.pid]["pss_bytes"] > 0
    assert memory["worker_uss_bytes"] == memory["workers"][0]["uss_bytes"] > 0


def test_a_binary_is_counted_as_running_elsewhere_only_outside_our_processes(tmp_path: Path) -> None:
    # A copy no other process on the machine can be running.
    binary = tmp_path / "lone-sleep"
    shutil.copy("/bin/sleep", binary)
    with subprocess.Popen([binary, "30"]) as one, subprocess.Popen([binary, "30"]) as two:
        try:
            exe = os.readlink(f"/proc/{one.pid}/exe")
            assert procfs.running_elsewhere({exe}, set()) == {exe: 2}
            assert procfs.running_elsewhere({exe}, {one.pid}) == {exe: 1}
        finally:
            one.kill()
            two.kill()


def test_the_memory_of_a_worker_names_its_binary_and_its_anonymous_part(sleeper: subprocess.Popen[bytes]) -> None:
    (entry,) = procfs.process_memory()["workers"]
    assert entry["exe"] == os.readlink(f"/proc/{sleeper.pid}/exe")
    assert 0 < entry["anon_bytes"] <= entry["uss_bytes"]


def test_the_peers_spare_worker_is_a_per_host_helper(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The peer's package has neither of our host modules, and keeps its spare here.
    for name in ("pydeno.host.process.spawner", "pydeno.host._spawner", "pydeno.host._process"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "pydeno._isolated", types.SimpleNamespace(_SPARE=(sleeper, None)))
    assert procfs.shared_helpers() == frozenset([sleeper.pid])


def test_an_idle_window_names_the_host_thread_that_used_the_cpu() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, name="spinner")
    spinner.start()
    try:
        cost = cpu.idle_cost(0.1)
    finally:
        stop.set()
        spinner.join()
    assert cost["host_threads_ms_per_s"]["spinner"] > 0
    assert cost["host_ms_per_s"] >= cost["host_threads_ms_per_s"]["spinner"]
    parts = cost["worker_ms_per_s"] + cost["host_ms_per_s"] + cost["shared_ms_per_s"]
    assert cost["total_ms_per_s"] == pytest.approx(parts, abs=1e-3)


def test_the_bare_deno_floors_run_deno_on_an_empty_script_and_on_the_worker_s_program_never_run(tmp_path: Path) -> None:
    commands = floors.deno_floor_commands(tmp_path)
    assert set(commands) == {
        "deno_floor",
        "deno_floor_jitless",
        "deno_floor_inspector",
        "deno_floor_worker_flags",
        "deno_floor_worker_code",
        "deno_floor_first_byte",
    }
    assert "--no-code-cache" in commands["deno_floor_worker_flags"]
    # The worker's own program, inside a function nothing calls: compiled, never run.
    parsed = Path(commands["deno_floor_worker_code"][-1]).read_text()
    assert parsed.startswith("function never() {\n") and "const $m_codec = (() => {" in parsed
    assert parsed.endswith(floors.FIRST_BYTE)
    assert commands["deno_floor_worker_code"][:-1] == commands["deno_floor_worker_flags"][:-1]
    assert floors.spawn_to_first_byte_ns(commands["deno_floor_worker_code"], tmp_path) > 0
    assert floors.spawn_to_first_byte_ns(commands["deno_floor_first_byte"], tmp_path) > 0
    assert Path(commands["deno_floor_worker_flags"][-1]).read_text() == ""
    assert commands["deno_floor"][1] == "run" and Path(commands["deno_floor"][-1]).read_text() == ""
    assert Path(commands["deno_floor_inspector"][-1]).read_text() == 'import "node:inspector";\n'
    assert floors.spawn_to_exit_ns(commands["deno_floor_inspector"], tmp_path) > 0
    assert floors.spawn_to_exit_ns(commands["deno_floor_worker_flags"], tmp_path) > 0
    assert floors.spawn_to_exit_ns(commands["deno_floor"], tmp_path) > 0


def test_the_memory_floor_reads_idle_bare_deno_processes_and_leaves_none_running(tmp_path: Path) -> None:
    floor = floors.deno_floor_memory(tmp_path, count=2)
    assert floor["processes"] == 2
    for prefix in ("", "inspector_"):
        assert floor[f"{prefix}uss_bytes"] > floor[f"{prefix}anon_bytes"] > 0
        assert floor[f"{prefix}pss_per_process_bytes"] > 0
    assert 'import "node:inspector";' in (tmp_path / "inspector_idle.js").read_text()
    running = []
    for pid in procfs.descendants(os.getpid()):
        with contextlib.suppress(OSError):
            if str(tmp_path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                running.append(pid)
    assert running == []


def test_the_memory_floors_are_divided_by_the_peers_idle_worker_and_its_density() -> None:
    results = _results(deno_floor_memory={"uss_bytes": 15.0, "pss_per_process_bytes": 6.0})
    results["peer"] |= {"idle_uss": {"worker_uss_bytes": 30.0}, "density": {"pss_per_worker_bytes": 12.0}}
    ratios = report.compute_ratios(results)
    assert (ratios["deno_floor_uss"], ratios["deno_floor_pss"]) == (0.5, 0.5)


def test_a_floor_command_that_fails_is_an_error_not_a_time(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited with 1"):
        floors.spawn_to_exit_ns([sys.executable, "-c", "raise SystemExit(1)"], tmp_path)


def test_every_runtime_driven_by_its_own_thread_counts_toward_the_rate() -> None:
    with pydeno.Runtime() as one, pydeno.Runtime() as two:
        rate = rates.evals_per_second([one, two], 0.1)
    assert rate["runtimes"] == 2
    assert all(n > 0 for n in rate["per_runtime"])
    assert rate["evals"] == sum(rate["per_runtime"])
    assert rate["evals_per_s"] == pytest.approx(rate["evals"] / rate["seconds"], rel=0.01)


class _Wrong:
    def eval(self, code: str) -> object:
        return 3


def test_a_runtime_that_returns_a_wrong_value_fails_the_rate() -> None:
    with pytest.raises(runtimes.WrongValue, match="returned 3"):
        rates.evals_per_second([_Wrong()], 0.05)


def test_a_rate_target_holds_only_at_or_above_its_floor() -> None:
    floor = rows.Target(2.5, "issue 20", at_least=True)
    assert (floor.holds(2.5), floor.holds(2.4), floor.holds(None)) == (True, False, None)
    assert floor.direction == ">="


def _results(**ours: Any) -> dict[str, Any]:
    return {
        "ours": {
            "host_call": {"p50_us": 30.0},
            "cold_start": {"p50_ms": 26.0},
            "deno_floor": {"p50_ms": 20.0},
            "oversubscribed": {"evals_per_s": 30_000.0},
            "idle_pool_cpu": {"total_ms_per_s": 4.0},
            **ours,
        },
        "peer": {
            "host_call": {"p50_us": 100.0},
            "cold_start": {"p50_ms": 80.0},
            "oversubscribed": {"evals_per_s": 10_000.0},
            "idle_pool_cpu": {"total_ms_per_s": 1.0},
        },
        "peer_inprocess": None,
    }


def test_a_ratio_is_held_to_the_newest_target_with_the_earlier_one_beside_it() -> None:
    results = _results()
    ratios = report.compute_ratios(results)
    targets = report.compute_targets(results, ratios)
    host = targets["host_call_p50"]
    assert ratios["host_call_p50"] == 0.3
    assert (host["source"], host["phase"], host["direction"], host["target"], host["met"]) == (
        "issue 20",
        "this issue",
        "<=",
        0.2,
        False,
    )
    assert [(e["source"], e["target"], e["met"]) for e in host["earlier"]] == [("issue 7", 0.4, True)]


def test_the_cold_start_is_also_divided_by_our_own_deno_floor() -> None:
    results = _results(deno_floor_worker_flags={"p50_ms": 13.0})
    ratios = report.compute_ratios(results)
    assert ratios["cold_start_vs_deno_floor"] == 1.3
    assert ratios["cold_start_vs_worker_flags_floor"] == 2.0
    assert report.compute_targets(results, ratios)["cold_start_vs_deno_floor"]["met"] is True


def test_the_20k_floor_and_the_wake_floor_are_divided_by_the_peers_figures_and_ours_by_them() -> None:
    results = _results(
        big_result={"p50_ms": 9.0},
        big_result_floor={"p50_ms": 6.0},
        pool_first_eval={"p50_us": 600.0},
        wake_floor={"p50_us": 300.0},
    )
    results["peer"].update(big_result={"p50_ms": 40.0}, pool_first_eval={"p50_us": 800.0})
    ratios = report.compute_ratios(results)
    assert (ratios["big_result_floor"], ratios["big_result_vs_floor"]) == (0.15, 1.5)
    assert (ratios["wake_floor"], ratios["pool_first_eval_vs_wake_floor"]) == (0.375, 2.0)


def test_the_20k_floor_decodes_exactly_the_value_the_guest_builds() -> None:
    text = floors.big_result_json()
    with pydeno.Runtime() as rt:
        assert rt.eval(f"JSON.stringify({config.BIG_CODE})") == text.decode()
        assert rt.eval(config.BIG_BUILD_CODE) == config.BIG_LEN
    runtimes.check_big(floors.json_decoder()(text))


def test_the_wake_floor_echoes_after_sleeping_as_long_as_it_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its collection before each echo walks every live object of the process, which late in
    # a full test run is most of a 0.2 s window: only the sleep is under test here.
    monkeypatch.setattr(floors.gc, "collect", lambda *args: 0)
    wake = floors.WakeFloor(tmp_path, warm=3)
    try:
        started = time.perf_counter()
        assert wake.round_trip_ns(0.2) > 0
        assert time.perf_counter() - started >= 0.2
        started = time.perf_counter()
        wake.round_trip_ns(0.0)
        assert time.perf_counter() - started < 0.2
    finally:
        wake.close()
    assert wake._proc.returncode == 0


def test_a_rate_ratio_is_written_both_ways() -> None:
    ratios = report.compute_ratios(_results())
    assert ratios["oversubscribed"] == 3.0
    assert ratios["oversubscribed_time_per_eval"] == pytest.approx(1 / 3, abs=1e-4)
    target = report.compute_targets(_results(), ratios)["oversubscribed"]
    assert (target["direction"], target["min_ratio"], target["met"]) == (">=", 2.5, True)


def test_a_cpu_per_second_target_judges_our_own_figure_not_the_ratio() -> None:
    results = _results()
    targets = report.compute_targets(results, report.compute_ratios(results))
    assert targets["idle_pool_cpu"]["value"] == 4.0
    assert targets["idle_pool_cpu"]["met"] is True
    results["ours"]["idle_pool_cpu"]["total_ms_per_s"] = 6.0
    assert report.compute_targets(results, report.compute_ratios(results))["idle_pool_cpu"]["met"] is False


def test_the_printed_run_says_which_targets_hold_and_which_are_missed() -> None:
    results = _results()
    results["ratios"] = report.compute_ratios(results)
    results["targets"] = report.compute_targets(results, results["ratios"])
    table = report.render_table(results)
    host_line = next(line for line in table.splitlines() if line.startswith("host call eval('add(1, 2)') p50"))
    assert "<= 0.20 MISS (issue 7: <= 0.40 ok)" in host_line
    summary = report.render_targets(results["targets"])
    assert "targets of issue 20:" in summary
    assert "ours / peer (isolated) = 0.300 <= 0.20: MISSED" in summary
    assert "ours / peer (isolated) = 3.000 >= 2.50: met" in summary
    assert "not measured" in summary


def test_a_once_per_round_section_is_the_median_rounds_with_every_rounds_figure() -> None:
    runs = [{"density": {"pss_per_worker_bytes": n, "workers": 8}} for n in (30, 10, 20)]
    merged = merge.merge_rounds(runs)
    assert merged["density"]["pss_per_worker_bytes"] == 20
    assert merged["density"]["pss_per_worker_bytes_per_round"] == [30, 10, 20]


def test_every_section_is_registered_once_and_the_in_process_peer_runs_only_those_without_a_pool() -> None:
    names = [section.name for section in SECTIONS]
    assert len(names) == len(set(names)) == len(BY_NAME)
    in_process = [section.name for section in SECTIONS if "peer-inprocess" in section.sides]
    assert in_process == ["warm_eval", "host_call", "cpu_per_eval", "rss", "close", "big_result", "cold_start"]


def test_an_unknown_section_name_is_refused_and_known_ones_are_kept_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(["--skip-peer", "--sections", "pool_setup,cold_start_off"])
    assert exited.value.code == 2
    assert "unknown cold_start_off" in capsys.readouterr().err
    assert cli.parse_args(["--sections", "pool_setup,warm_eval"]).sections == ("pool_setup", "warm_eval")


def test_the_parameters_a_side_is_given_are_the_drivers() -> None:
    params = config.Params(
        iterations=7, warmup=0, cold_runs=2, big_runs=3, window_s=0.25, idle_s=0.5, sections=("rss", "close")
    )
    args = cli.parse_args(["--side", "ours", "--json-out", "x.json", *params.argv()])
    assert (args.iterations, args.warmup, args.cold_runs, args.big_runs, args.cold_warmup, args.big_warmup) == (
        7,
        0,
        2,
        3,
        2,
        2,
    )
    assert (args.window, args.idle_seconds, args.sections) == (0.25, 0.5, ("rss", "close"))


def test_measure_runs_the_selected_sections_in_their_order_on_the_warm_runtime() -> None:
    params = config.Params(
        iterations=20, warmup=5, cold_runs=1, big_runs=1, sections=("close", "host_call", "warm_eval")
    )
    result = measure("ours", params)
    assert result["errors"] == {}
    assert list(result["section_seconds"]) == ["warm_eval", "host_call", "close"]
    # Ours: the warm eval's floor (a bare deno echoing a byte) is measured beside it.
    assert list(result["samples_ns"]) == ["warm_eval", "echo_floor", "host_call"]
    assert result["warm_eval"]["n"] == result["echo_floor"]["n"] == result["host_call"]["n"] == 20
    assert result["rss_at_start"]["worker_bytes"] > 0
    assert "rss" not in result


def test_a_section_that_fails_is_recorded_and_the_next_still_runs() -> None:
    # rss reads the warm runtime, which only warm_eval starts.
    params = config.Params(iterations=1, warmup=0, cold_runs=1, big_runs=1, sections=("rss", "close"))
    result = measure("ours", params)
    assert result["errors"] == {"rss": "RuntimeError: no runtime (warm_eval failed to create one)"}
    assert list(result["section_seconds"]) == ["rss", "close"]
