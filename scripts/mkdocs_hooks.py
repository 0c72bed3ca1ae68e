"""MkDocs hooks for the docs site (mkdocs.yml loads this file under ``hooks:``).

``docs/performance.md`` holds the marker ``<!-- bench_eval.json -->``; at build time it is
replaced by a table made from ``benchmarks/results/bench_eval.json``, the benchmark's own
output, so the page always shows the figures of the last recorded run. The file is only
read: run ``benchmarks/bench_eval.py`` to change it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = "<!-- bench_eval.json -->"
RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "bench_eval.json"

# (label, result key, statistic, unit, ratio key in "ratios", target key in "targets")
_ROWS: list[tuple[str, str, str, str, str | None, str | None]] = [
    ('warm `eval("1+1")` p50', "warm_eval", "p50_us", "µs", "warm_eval_p50", "warm_eval_p50"),
    ("eval with one host call p50", "host_call", "p50_us", "µs", "host_call_p50", "host_call_p50"),
    ("cold start to first result p50", "cold_start", "p50_ms", "ms", "cold_start_p50", "cold_start_p50"),
    ('cold start, ours with `sandbox="off"` p50', "cold_start_off", "p50_ms", "ms", None, None),
    ("20,000-object result p50", "big_result", "p50_ms", "ms", "big_result_p50", "big_result_p50"),
    ("idle worker RSS", "idle_rss", "worker_bytes", "MiB", "idle_rss", "idle_rss"),
    ("per-host helper RSS (ours: the zygote, one per host)", "idle_rss", "shared_bytes", "MiB", None, None),
    ("worker RSS after the warm loops", "rss", "worker_bytes", "MiB", "worker_rss", None),
    ("pool checkout p50", "pool_checkout", "p50_us", "µs", "pool_checkout_p50", None),
    ("pool checkout + first eval p50", "pool_first_eval", "p50_us", "µs", "pool_first_eval_p50", "pool_first_eval_p50"),
    ("pool of 2, 2 threads: time per eval", "pool_throughput", "p50_us", "µs", "pool_throughput", None),
    ("2 MB value guest → host p50", "two_mb_to_host", "p50_ms", "ms", "two_mb_to_host_p50", None),
    ("2 MB value host → guest p50", "two_mb_to_guest", "p50_ms", "ms", "two_mb_to_guest_p50", None),
]


def _figure(side: dict[str, Any], key: str, stat: str, unit: str) -> float | None:
    value = side.get(key, {}).get(stat)
    if not isinstance(value, int | float):
        return None
    return value / 2**20 if unit == "MiB" else float(value)


def _shown(value: float | None, unit: str, side: dict[str, Any], key: str) -> str:
    if value is None:
        failed = [text for name, text in side.get("errors", {}).items() if name.split(" ")[0] == key]
        return "failed" if failed else "n/a"
    return f"{value:.1f} {unit}" if unit != "µs" else f"{value:.0f} {unit}"


def table(results: dict[str, Any]) -> str:
    """The Markdown of the latest-run section, from the benchmark's JSON."""
    ours, peer = results.get("ours", {}), results.get("peer", {})
    ratios, targets = results.get("ratios", {}), results.get("targets", {})
    lines = [
        "| metric | ours | peer (isolated) | ratio | target |",
        "|---|---|---|---|---|",
    ]
    for label, key, stat, unit, ratio_key, target_key in _ROWS:
        mine = _figure(ours, key, stat, unit)
        theirs = _figure(peer, "cold_start" if key == "cold_start_off" else key, stat, unit)
        ratio = ratios.get(ratio_key) if ratio_key else None
        if ratio is None and mine is not None and theirs:
            ratio = mine / theirs
        target = targets.get(target_key, {}) if target_key else {}
        goal = ""
        if "max_ratio" in target:
            goal = f"≤ {target['max_ratio']} ({'met' if target.get('met') else 'missed'})"
        lines.append(
            f"| {label} | {_shown(mine, unit, ours, key)} | {_shown(theirs, unit, peer, key)} "
            f"| {'' if ratio is None else f'{ratio:.2f}'} | {goal} |"
        )
    machine, versions = results.get("machine", {}), results.get("versions", {})
    rounds = results.get("params", {}).get("rounds", "?")
    about = (
        f"Machine: {machine.get('cpu_count', '?')} CPUs ({machine.get('cpu_model', '?')}), "
        f"Python {machine.get('python', '?')}, {versions.get('deno', 'deno ?').split(' (')[0]}; "
        f"ours at commit `{versions.get('ours_git', '?')}`, peer `pydeno=={versions.get('peer', '?')}`; "
        f"{rounds} rounds pooled. The peer's in-process `Runtime` (no process boundary, not "
        "like-for-like) is in the JSON too."
    )
    errors = sorted({text for text in peer.get("errors", {}).values()})
    notes = [f"The peer failed a metric: {text}." for text in errors]
    return "\n".join([about, "", *lines, "", *notes]).rstrip() + "\n"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    try:
        results = json.loads(RESULTS.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginError(f"{page.file.src_uri} needs {RESULTS}: {exc}") from exc
    return markdown.replace(MARKER, table(results))
