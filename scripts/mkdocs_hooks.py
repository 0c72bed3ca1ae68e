"""MkDocs hooks for the docs site (mkdocs.yml loads this file under ``hooks:``).

Every figure on ``docs/performance.md`` comes from the benchmarks' own JSON in
``benchmarks/results/``, filled in when the site is built, so the page always shows the last
recorded runs. The files are only read: run the benchmarks to change them. The page uses

* block markers on a line of their own, ``<!-- NAME.json -->`` or ``<!-- NAME.json: PART -->``,
  replaced by a table or list (see ``_BLOCKS``), and ``<!-- chart: FILE.svg -->``, replaced by
  that chart (drawn by ``scripts/docs_charts.py`` and added to the built site);
* inline figures, ``{{ NAME:a.b.c }}`` or ``{{ NAME:a.b.c | SPEC }}``: the value at that path
  in ``benchmarks/results/NAME.json``, shown with a format spec (``.1f``, ``,``) or ``mib``
  (bytes as MiB). ``derived`` names the few figures computed from others (``_derived``).

A marker or figure that names nothing fails the build. The hooks also add the Mermaid
library, from its npm package, to the built site and load it on the pages with a diagram,
so diagrams render without a CDN.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from site_requirements import check, message, name_of, requirements

# Before anything the docs extra brings is imported: a partial install stops here, naming
# what is missing and the install.
if (_problem := check()) is not None:
    raise PluginError(_problem)
try:
    import docs_charts
    from docs_charts import METRICS, Metric, figure
    from mkdocs.structure.files import File, Files
    from mkdocs.utils import get_relative_url
except ModuleNotFoundError as _missing:
    # Installed by its metadata, yet not importable (a broken install).
    _wanted = {name_of(r).lower().replace("-", "_"): r for r in requirements()}
    raise PluginError(message([_wanted.get(_missing.name or "", _missing.name or "a module")])) from None

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
CHARTS_DIR = "charts"

# Mermaid, vendored into the built site: pinned to one release of its npm package, checked
# against the integrity recorded here before a byte of it is used.
MERMAID_VERSION = "11.17.2"
MERMAID_INTEGRITY = "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg=="
MERMAID_SITE_PATH = "javascripts/mermaid.min.js"
MERMAID_LICENSE_PATH = "javascripts/mermaid.LICENSE.txt"

_BLOCK = re.compile(r"^<!-- ([a-z_]+)\.json(?:: ([a-z_]+))? -->$", re.MULTILINE)
_CHART = re.compile(r"^<!-- chart: ([a-z_.]+\.svg) -->$", re.MULTILINE)
_INLINE = re.compile(r"\{\{ ([a-z_]+):([A-Za-z0-9_.\-]+)(?: \| ([^}]+?))? \}\}")

_MISSING = "\u2013"  # an en dash: the figure was not measured
_alts: dict[str, str] = {}


def load(name: str) -> dict[str, Any]:
    path = RESULTS_DIR / f"{name}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginError(f"the performance page needs {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise PluginError(f"{path} holds no JSON object")
    return data


# ----------------------------------------------------------------------------- formatting


def _number(value: float, unit: str) -> str:
    if unit in ("µs", "calls/s", "evals/s"):
        return f"{value:,.0f} {unit}"
    if unit == "ms":
        return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"
    return f"{value:.1f} {unit}"


def _cell(side: Mapping[str, Any], metric: Metric) -> str:
    value = figure(side, metric)
    if value is not None:
        return _number(value, metric.unit)
    failed = [text for name, text in (side.get("errors") or {}).items() if name.split(" ")[0] == metric.key]
    return "failed" if failed else _MISSING


def _ms(summary: Mapping[str, Any] | None, stat: str) -> str:
    value = (summary or {}).get(stat)
    return _number(float(value), "ms") if isinstance(value, int | float) else _MISSING


def _percentiles(summary: Mapping[str, Any] | None) -> str:
    """The p50, p90 and p99 cells of a summary in milliseconds."""
    return " | ".join(_ms(summary, stat) for stat in ("p50_ms", "p90_ms", "p99_ms"))


def _machine_line(data: Mapping[str, Any]) -> str:
    machine = data.get("machine") or {}
    load_avg = machine.get("loadavg_at_start")
    load_text = f", load average {load_avg[0]} at the start" if isinstance(load_avg, list) and load_avg else ""
    return (
        f"Run on {machine.get('cpus_usable', machine.get('cpu_count', '?'))} CPUs "
        f"({machine.get('cpu_model') or 'model not recorded'}), Python {machine.get('python', '?')}{load_text}."
    )


# ----------------------------------------------------------------------------- blocks


def eval_table(results: Mapping[str, Any]) -> str:
    """The last run of bench_eval.py: every metric, both sides, the ratio, and the peer in-process."""
    ours, peer = results.get("ours") or {}, results.get("peer") or {}
    inprocess = results.get("peer_inprocess") or {}
    lines = [
        "| metric (p50 unless RSS) | ours | peer (isolated) | ratio | peer in-process, for reference |",
        "|---|---|---|---|---|",
    ]
    for metric in METRICS:
        theirs = _MISSING if metric.key == "cold_start_off" else _cell(peer, metric)
        value = docs_charts.ratio(results, metric)
        reference = _cell(inprocess, metric) if figure(inprocess, metric) else _MISSING
        lines.append(
            f"| {metric.label} | {_cell(ours, metric)} | {theirs} | {'' if value is None else f'{value:.2f}'} "
            f"| {reference} |"
        )
    errors = sorted({text for text in (peer.get("errors") or {}).values()})
    notes = [f"The peer failed a metric: {text}." for text in errors]
    return "\n".join([*lines, "", *notes]).rstrip() + "\n"


def eval_machine(results: Mapping[str, Any]) -> str:
    machine, versions = results.get("machine") or {}, results.get("versions") or {}
    deno_lines = str(versions.get("deno_full") or versions.get("deno") or "deno ?").splitlines()
    deno = deno_lines[0].split(" (")[0]
    v8 = next((line for line in deno_lines if line.startswith("v8 ")), None)
    load_avg = machine.get("loadavg_at_start")
    items = [
        f"- **CPU:** {machine.get('cpu_model') or 'not recorded'}, {machine.get('cpus_usable', '?')} usable of "
        f"{machine.get('cpu_count', '?')} ({machine.get('machine', '?')})",
        f"- **OS:** `{machine.get('platform', '?')}`",
        f"- **Python:** {machine.get('python', '?')} (the peer: {versions.get('peer_python', '?')})",
        f"- **Deno:** {deno}{f' ({v8})' if v8 else ''}, jitless on both sides (both defaults)",
        f"- **pydeno:** {versions.get('ours', '?')} at commit `{versions.get('ours_git', '?')}`; "
        f"the peer: `pydeno=={versions.get('peer', '?')}`",
    ]
    if isinstance(load_avg, list) and load_avg:
        items.append(f"- **Load average at the start:** {', '.join(str(x) for x in load_avg)} (1, 5, 15 min)")
    return "\n".join(items) + "\n"


def eval_floors(results: Mapping[str, Any]) -> str:
    """What one round trip costs at least, and what the sandbox adds to a start."""
    ours, inprocess = results.get("ours") or {}, results.get("peer_inprocess") or {}

    def us(side: Mapping[str, Any], key: str, stat: str = "p50_us") -> str:
        value = (side.get(key) or {}).get(stat)
        return _number(float(value), "µs") if isinstance(value, int | float) else _MISSING

    def ms(side: Mapping[str, Any], key: str, stat: str = "p50_ms") -> str:
        return _ms(side.get(key), stat)

    monitoring = results.get("monitoring") or {}
    sample = monitoring.get("sample_cost_us")
    interval = monitoring.get("interval_s")
    rows = [
        ("fastest warm eval of the run (one pipe round trip and an evaluation)", us(ours, "warm_eval", "min_us")),
        ("warm eval p50, sync `Runtime`", us(ours, "warm_eval")),
        ("warm eval p50, no resource monitor", us(ours, "warm_eval_unmonitored")),
        ("warm eval p50, `AsyncRuntime` (asyncio)", us(ours, "warm_eval_async")),
        (
            "eval with one host call p50 (two round trips), sync / async",
            f"{us(ours, 'host_call')} / {us(ours, 'host_call_async')}",
        ),
        (
            "one sample of a worker by the monitor, host CPU",
            _MISSING if sample is None else f"{sample:.0f} µs every {interval} s",
        ),
        ('cold start p50, `sandbox="require"` / `"off"`', f"{ms(ours, 'cold_start')} / {ms(ours, 'cold_start_off')}"),
        (
            "deno alone, from exec to exit: an empty script / one that imports `node:inspector`",
            f"{ms(ours, 'deno_floor')} / {ms(ours, 'deno_floor_inspector')}",
        ),
        (
            "deno alone on an empty script with the worker's flags (no V8 code cache, jitless), to exit",
            ms(ours, "deno_floor_worker_flags"),
        ),
        (
            "the same to its first statement (a byte written) / with the worker's own program compiled"
            " and never run before it",
            f"{ms(ours, 'deno_floor_first_byte')} / {ms(ours, 'deno_floor_worker_code')}",
        ),
        (
            "20k-object result: the guest's build alone / decoding its JSON on the host / the two",
            f"{ms(ours, 'big_result_build')} / {ms(ours, 'big_result_decode')} / {ms(ours, 'big_result_floor')}",
        ),
        (
            "bare deno answering one byte over a pipe after the sleep a pooled worker had",
            us(ours, "wake_floor"),
        ),
        ("bare deno echoing one byte over pipes, neither side sleeping (a warm eval's floor)", us(ours, "echo_floor")),
        (
            "peer in-process: warm eval, pooled / its fastest round / cold start p50 (no process at all)",
            f"{us(inprocess, 'warm_eval')} / {us(inprocess, 'warm_eval', 'fastest_round_p50_us')}"
            f" / {ms(inprocess, 'cold_start')}",
        ),
    ]
    lines = ["| floor | figure |", "|---|---|", *(f"| {label} | {value} |" for label, value in rows)]
    return "\n".join(lines) + "\n"


def eval_memory(results: Mapping[str, Any]) -> str:
    ours, peer = results.get("ours") or {}, results.get("peer") or {}
    inprocess = results.get("peer_inprocess") or {}

    def mib(side: Mapping[str, Any], key: str, stat: str) -> str:
        value = (side.get(key) or {}).get(stat)
        return _number(value / 2**20, "MiB") if isinstance(value, int | float) else _MISSING

    rows = [
        (
            "a worker, idle after its first eval (RSS)",
            mib(ours, "idle_rss", "worker_bytes"),
            mib(peer, "idle_rss", "worker_bytes"),
        ),
        ("a worker after the warm loops (RSS)", mib(ours, "rss", "worker_bytes"), mib(peer, "rss", "worker_bytes")),
        (
            "a worker, idle after its first eval (USS)",
            mib(ours, "idle_uss", "worker_uss_bytes"),
            mib(peer, "idle_uss", "worker_uss_bytes"),
        ),
        (
            "PSS per worker, 8 alive",
            mib(ours, "density", "pss_per_worker_bytes"),
            mib(peer, "density", "pss_per_worker_bytes"),
        ),
        (
            "the floor: bare deno left idle, alone (USS) / 8 alive (PSS each)",
            f"{mib(ours, 'deno_floor_memory', 'uss_bytes')} / "
            f"{mib(ours, 'deno_floor_memory', 'pss_per_process_bytes')}",
            _MISSING,
        ),
        (
            "the same, importing `node:inspector` as every worker must",
            f"{mib(ours, 'deno_floor_memory', 'inspector_uss_bytes')} / "
            f"{mib(ours, 'deno_floor_memory', 'inspector_pss_per_process_bytes')}",
            _MISSING,
        ),
        ("once per host process: our zygote (RSS)", mib(ours, "idle_rss", "shared_bytes"), _MISSING),
        ("the host process itself (RSS)", mib(ours, "rss", "host_bytes"), mib(peer, "rss", "host_bytes")),
    ]
    lines = [
        "| memory | ours | peer (isolated) |",
        "|---|---|---|",
        *(f"| {label} | {mine} | {theirs} |" for label, mine, theirs in rows),
        f"| the host process of the peer in-process (V8 inside it) | | {mib(inprocess, 'rss', 'host_bytes')} |",
    ]
    return "\n".join(lines) + "\n"


def eval_code_mode(results: Mapping[str, Any]) -> str:
    ours, peer = results.get("ours") or {}, results.get("peer") or {}
    metric = next(m for m in METRICS if m.key == "code_mode")
    value = docs_charts.ratio(results, metric)
    costs = ours.get("code_mode_costs") or {}

    def us(key: str) -> str:
        cost = costs.get(key)
        return _number(float(cost), "µs") if isinstance(cost, int | float) else _MISSING

    lines = [
        "| Code Mode | p50 | p90 | p99 |",
        "|---|---|---|---|",
        *(
            f"| {name} | {_ms(side.get('code_mode'), 'p50_ms')} | {_ms(side.get('code_mode'), 'p90_ms')} "
            f"| {_ms(side.get('code_mode'), 'p99_ms')} |"
            for name, side in (("ours: `CodeMode.execute`", ours), ("peer: `AgentSandbox.execute`", peer))
        ),
        "",
        f"Ratio at p50: {_MISSING if value is None else f'{value:.2f}'}. Of ours, validating the three calls' "
        f"arguments on the host takes {us('validation_us')} per execution and stripping the program's "
        f"TypeScript types in the worker {us('strip_us')}; the peer validates no arguments.",
    ]
    return "\n".join(lines) + "\n"


_WORKLOADS = {
    "distinct": ("`(i) + 1`", "new code each eval, keeping nothing"),
    "block": ("`{ const x = i; x }`", "the same with a declaration inside a block"),
    "same": ("`(7) + 1`", "one eval repeated"),
    "let": ("`let vi = i; vi + 1`", "a new top-level binding each eval, which the language keeps"),
}
_MODES = ("ours", "ours-off")  # sandbox="require", sandbox="off"
_MEMORY_POINTS = (1_000, 10_000, 100_000)


def memory_table(data: Mapping[str, Any]) -> str:
    """bench_memory.py: the worker's growth over many evals, per workload, both sandbox modes."""
    sides = data.get("sides") or {}

    def growth(workload: str, side: str, point: int | None) -> str:
        run = ((sides.get(side) or {}).get("workloads") or {}).get(workload) or {}
        if point is None:
            value = run.get("peak_growth_bytes")
        else:
            value = (run.get("checkpoints", {}).get(str(point)) or {}).get("growth_bytes")
        return _MISSING if value is None else f"+{value / 2**20:.1f}"

    points = [*_MEMORY_POINTS, None]
    head = " | ".join("highest reading" if point is None else f"after {point:,}" for point in points)
    lines = [f"| eval number *i* | {head} |", "|---|" + "---|" * len(points)]
    for workload, (code, _) in _WORKLOADS.items():
        cells = [" / ".join(growth(workload, side, point) for side in _MODES) for point in points]
        lines.append(f"| {code} | {' | '.join(cells)} |")
    notes = [f"- {code}: {what}" for code, what in _WORKLOADS.values()]
    return (
        "\n".join(lines)
        + '\n\nEach cell is `sandbox="require"` / `sandbox="off"`, in MiB; the highest reading is over samples '
        + f"taken every {(data.get('params') or {}).get('sample_every', '?')} evals.\n\n"
        + "\n".join(notes)
        + "\n\n"
        + _machine_line(data)
        + "\n"
    )


def sessions_table(data: Mapping[str, Any]) -> str:
    result = data.get("result") or {}
    rows = [
        ("a new session", "create"),
        ("an evicted session, back to back (a worker start, then the replay)", "evicted"),
        ("an evicted session, a warm worker ready (the replay alone)", "evicted_paced"),
        ("a live session", "live"),
    ]
    lines = [
        "| lease | p50 | p90 | p99 |",
        "|---|---|---|---|",
        *(f"| {label} | {_percentiles(result.get(key))} |" for label, key in rows),
    ]
    return "\n".join(lines) + "\n\n" + _machine_line(data) + "\n"


def ray_table(data: Mapping[str, Any]) -> str:
    local, ray = data.get("local_pool") or {}, data.get("ray_pool") or {}
    lines = [
        "| one evaluation | p50 | p90 | p99 |",
        "|---|---|---|---|",
        f"| Ray's floor: a call of an empty actor method, back to back | {_percentiles(ray.get('floor'))} |",
        f"| Ray's floor, paced as the evaluations below are | {_percentiles(ray.get('floor_paced'))} |",
    ]
    for label, side in (("local `SandboxPool`", local), ("`RayPool`", ray)):
        lines.append(f"| {label}, a warm worker ready | {_percentiles(side.get('paced'))} |")
    lines += [
        "",
        "| throughput, every eval on a fresh worker | evaluations per second | driver CPU per eval |",
        "|---|---|---|",
    ]
    for label, part in (
        (
            f"local `SandboxPool`, {(local.get('throughput') or {}).get('clients', '?')} client threads",
            local.get("throughput"),
        ),
        (f"`RayPool`, {(ray.get('throughput') or {}).get('clients', '?')} client threads", ray.get("throughput")),
        ("`RayPool.map`", ray.get("map")),
    ):
        rate, cpu = (part or {}).get("evals_per_s"), (part or {}).get("driver_cpu_ms_per_eval")
        rate_text = _MISSING if rate is None else f"{rate:.1f}"
        lines.append(f"| {label} | {rate_text} | {_MISSING if cpu is None else _number(cpu, 'ms')} |")
    sizes = f"Ray {data.get('ray_version', '?')}, {data.get('workers', '?')} workers on each side."
    return "\n".join(lines) + f"\n\n{_machine_line(data)} {sizes}\n"


def mcp_table(data: Mapping[str, Any]) -> str:
    lines = [
        "| `run_javascript` round trip | p50 | p90 | p99 | the same through the library in-process, p50 |",
        "|---|---|---|---|---|",
        f"| `--session` (the session's own worker) | {_percentiles(data.get('mcp_session'))} "
        f"| `AsyncCodeMode.execute`: {_ms(data.get('bare_code_mode'), 'p50_ms')} |",
        f"| a fresh worker per call | {_percentiles(data.get('mcp_pooled'))} "
        f"| pool checkout + eval: {_ms(data.get('bare_pool_checkout'), 'p50_ms')} |",
        "",
        "| clients calling at once | calls per second |",
        "|---|---|",
    ]
    for label, key in (
        ("`--session` (a session and a worker each)", "parallel_session"),
        ("a fresh worker per call", "parallel_pooled"),
    ):
        part = data.get(key) or {}
        rate = part.get("calls_per_s")
        lines.append(f"| {part.get('clients', '?')} clients, {label} | {_MISSING if rate is None else f'{rate:.0f}'} |")
    launch = data.get("launch_to_first_call") or {}
    if launch:
        lines += [
            "",
            "| from starting `pydeno mcp` to its first `tools/call` answered | p50 | p90 | p99 |",
            "|---|---|---|---|",
            f"| a fresh worker per call | {_percentiles(launch.get('pooled'))} |",
            f"| `--session` | {_percentiles(launch.get('session'))} |",
            f"| the floor: the SDK's own import (`import mcp`) | {_percentiles(launch.get('sdk_import'))} |",
        ]
    return "\n".join(lines) + "\n\n" + _machine_line(data) + "\n"


# (file stem, part) -> renderer of that file's JSON
_BLOCKS: dict[tuple[str, str | None], Callable[[Mapping[str, Any]], str]] = {
    ("bench_eval", None): eval_table,
    ("bench_eval", "machine"): eval_machine,
    ("bench_eval", "floors"): eval_floors,
    ("bench_eval", "memory"): eval_memory,
    ("bench_eval", "code_mode"): eval_code_mode,
    ("bench_memory", None): memory_table,
    ("bench_sessions", None): sessions_table,
    ("bench_ray", None): ray_table,
    ("bench_mcp", None): mcp_table,
}


# ----------------------------------------------------------------------------- inline figures


def _derived() -> dict[str, float]:
    sessions = (load("bench_sessions").get("result") or {}).get("memory") or {}
    workers = sessions.get("live_workers") or 0
    out: dict[str, float] = {}
    if workers:
        out["sessions_uss_per_worker_mib"] = sessions.get("workers_uss_mib", 0.0) / workers
        out["sessions_pss_per_worker_mib"] = sessions.get("workers_pss_mib", 0.0) / workers
    return out


def _lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            raise KeyError(path)
    return data


def inline(markdown: str, source: Callable[[str], Mapping[str, Any]]) -> str:
    """Replace every ``{{ NAME:path | spec }}`` with the figure it names."""

    def one(match: re.Match[str]) -> str:
        name, path, spec = match.group(1), match.group(2), (match.group(3) or "").strip()
        try:
            value = _lookup(source(name), path)
        except KeyError:
            raise PluginError(f"{match.group(0)}: no {path!r} in {name}") from None
        if spec == "mib":
            return f"{value / 2**20:.1f}"
        try:
            return format(value, spec)
        except (TypeError, ValueError) as exc:
            raise PluginError(f"{match.group(0)}: {exc}") from exc

    return _INLINE.sub(one, markdown)


def chart_html(name: str, alt: str, page_url: str) -> str:
    """A chart as HTML: the narrow drawing on small screens, linked to the wide one, which a
    reader on a phone can open and zoom."""
    wide = get_relative_url(f"{CHARTS_DIR}/{name}", page_url)
    narrow = get_relative_url(f"{CHARTS_DIR}/{docs_charts.narrow_name(name)}", page_url)
    return (
        f'<a class="pydeno-chart" href="{wide}"><picture>'
        f'<source media="(max-width: 44em)" srcset="{narrow}">'
        f'<img src="{wide}" alt="{html.escape(alt, quote=True)}">'
        "</picture></a>"
    )


def render(markdown: str, page_url: str = "performance/") -> str:
    """The performance page's Markdown with every marker and figure filled in."""
    cache: dict[str, Mapping[str, Any]] = {}

    def source(name: str) -> Mapping[str, Any]:
        if name not in cache:
            cache[name] = _derived() if name == "derived" else load(name)
        return cache[name]

    def block(match: re.Match[str]) -> str:
        key = (match.group(1), match.group(2))
        if key not in _BLOCKS:
            raise PluginError(f"{match.group(0)} names no table of the performance page")
        return _BLOCKS[key](source(key[0])).rstrip("\n")

    def chart(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in docs_charts.CHARTS:
            raise PluginError(f"{match.group(0)} names no chart")
        alt = _alts.get(name) or docs_charts.CHARTS[name](source("bench_eval"))[1]
        return chart_html(name, alt, page_url)

    markdown = _BLOCK.sub(block, markdown)
    markdown = _CHART.sub(chart, markdown)
    return inline(markdown, source)


# ----------------------------------------------------------------------------- mermaid


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pydeno-docs" / f"mermaid-{MERMAID_VERSION}"


def _integrity(path: Path) -> str:
    digest = hashlib.sha512(path.read_bytes()).digest()
    return "sha512-" + base64.b64encode(digest).decode("ascii")


def mermaid_files() -> tuple[Path, Path]:
    """mermaid.min.js and its licence from the pinned npm package, fetched once into a cache."""
    cache = _cache_dir()
    script, licence = cache / "mermaid.min.js", cache / "LICENSE"
    if script.is_file() and licence.is_file():
        return script, licence
    npm = shutil.which("npm")
    if npm is None:
        raise PluginError(
            f"the docs vendor mermaid@{MERMAID_VERSION} from its npm package and need npm to fetch it once "
            f"(or its dist/mermaid.min.js and LICENSE placed in {cache})"
        )
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [npm, "pack", f"mermaid@{MERMAID_VERSION}", "--prefer-offline", "--silent", "--pack-destination", tmp],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        tarballs = list(Path(tmp).glob("mermaid-*.tgz"))
        if done.returncode != 0 or len(tarballs) != 1:
            raise PluginError(
                f"npm pack mermaid@{MERMAID_VERSION} failed: {done.stderr.strip() or done.stdout.strip()}"
            )
        found = _integrity(tarballs[0])
        if found != MERMAID_INTEGRITY:
            raise PluginError(
                f"mermaid@{MERMAID_VERSION} from npm has integrity {found}, not the pinned {MERMAID_INTEGRITY}"
            )
        cache.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarballs[0], "r:gz") as archive:
            for member, target in (("package/dist/mermaid.min.js", script), ("package/LICENSE", licence)):
                stream = archive.extractfile(member)
                if stream is None:
                    raise PluginError(f"mermaid@{MERMAID_VERSION}'s package has no {member}")
                partial = target.with_name(target.name + ".part")
                partial.write_bytes(stream.read())
                partial.replace(target)
    return script, licence


# ----------------------------------------------------------------------------- hooks


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    _alts.clear()
    for name, (svg, alt) in docs_charts.charts(load("bench_eval")).items():
        files.append(File.generated(config, f"{CHARTS_DIR}/{name}", content=svg))
        _alts[name] = alt
    script, licence = mermaid_files()
    files.append(File.generated(config, MERMAID_SITE_PATH, abs_src_path=str(script)))
    files.append(File.generated(config, MERMAID_LICENSE_PATH, abs_src_path=str(licence)))
    return files


def on_post_page(output: str, page: Any, config: Any, **kwargs: Any) -> str:
    """Load the vendored mermaid on the pages that have a diagram, and only there (it is
    large): with ``mermaid`` defined, Material draws with it instead of fetching a CDN's."""
    if 'class="mermaid"' not in output:
        return output
    tag = f'<script src="{get_relative_url(MERMAID_SITE_PATH, page.url)}"></script>'
    bundle = output.find('<script src="', output.find("</article>"))
    if bundle < 0:
        raise PluginError(f"{page.file.src_uri}: found no script tag to put mermaid before")
    return output[:bundle] + tag + "\n" + output[bundle:]


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != "performance.md":
        return markdown
    try:
        return render(markdown, page.url)
    except PluginError as exc:
        raise PluginError(f"{page.file.src_uri}: {exc}") from exc
