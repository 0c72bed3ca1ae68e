"""Charts of the benchmark figures for the docs site, drawn from the benchmark's own JSON.

``scripts/mkdocs_hooks.py`` calls :func:`charts` at build time and adds each SVG to the built
site, so no picture is kept in the repository and none can fall behind the JSON beside it.
The output is deterministic (fixed ids, no date), so two builds of one JSON are identical.

    python scripts/docs_charts.py OUT_DIR    # write the SVGs of the recorded run to OUT_DIR
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "bench_eval.json"


@dataclass(frozen=True)
class Metric:
    """One figure of ``bench_eval.json``, shown as a table row and in the charts."""

    label: str  # Markdown, for the table
    short: str  # plain text, for the charts
    key: str  # the result's key on each side
    stat: str  # the statistic shown, e.g. "p50_us" or "worker_bytes"
    unit: str  # "µs", "ms" or "MiB"
    ratio: str | None  # the key in "ratios", when the benchmark computes one
    percentiles: bool = False  # latency samples with p50/p90/p99


METRICS: tuple[Metric, ...] = (
    Metric('warm `eval("1+1")`', 'warm eval("1+1")', "warm_eval", "p50_us", "µs", "warm_eval_p50", True),
    Metric("eval with one host call", "eval with one host call", "host_call", "p50_us", "µs", "host_call_p50", True),
    Metric(
        "cold start to first result", "cold start to first result", "cold_start", "p50_ms", "ms", "cold_start_p50", True
    ),
    Metric(
        'cold start, ours with `sandbox="off"`', 'cold start, sandbox="off"', "cold_start_off", "p50_ms", "ms", None
    ),
    Metric("20,000-object result", "20,000-object result", "big_result", "p50_ms", "ms", "big_result_p50", True),
    Metric(
        "2 MB value guest → host",
        "2 MB value guest → host",
        "two_mb_to_host",
        "p50_ms",
        "ms",
        "two_mb_to_host_p50",
        True,
    ),
    Metric(
        "2 MB value host → guest",
        "2 MB value host → guest",
        "two_mb_to_guest",
        "p50_ms",
        "ms",
        "two_mb_to_guest_p50",
        True,
    ),
    Metric("pool checkout", "pool checkout", "pool_checkout", "p50_us", "µs", "pool_checkout_p50", True),
    Metric(
        "pool checkout + first eval",
        "pool checkout + first eval",
        "pool_first_eval",
        "p50_us",
        "µs",
        "pool_first_eval_p50",
        True,
    ),
    Metric(
        "pool of 2, 2 threads: time per eval",
        "pool of 2, 2 threads, per eval",
        "pool_throughput",
        "p50_us",
        "µs",
        "pool_throughput",
    ),
    Metric("Code Mode: one execution", "Code Mode execution", "code_mode", "p50_ms", "ms", "code_mode_p50", True),
    Metric("idle worker RSS", "idle worker RSS", "idle_rss", "worker_bytes", "MiB", "idle_rss"),
    Metric(
        "worker RSS after the warm loops", "worker RSS after warm loops", "rss", "worker_bytes", "MiB", "worker_rss"
    ),
)

# Colours that stay apart for the common colour-vision deficiencies (blue and orange).
_OURS, _PEER, _WORSE = "#1f6fb4", "#e08a1e", "#c0392b"
_STYLE: Any = {
    # Fixed ids and text kept as text: reproducible files, and labels a reader can search.
    "svg.hashsalt": "pydeno-docs",
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_METADATA: dict[str, str | None] = {"Date": None, "Creator": None}


def figure(side: Mapping[str, Any], metric: Metric, stat: str | None = None) -> float | None:
    """One side's figure for a metric in the metric's unit, or None when it was not measured."""
    value = (side.get(metric.key) or {}).get(stat or metric.stat)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return value / 2**20 if metric.unit == "MiB" else float(value)


def ratio(results: Mapping[str, Any], metric: Metric) -> float | None:
    """Ours / peer (isolated) for a metric: the benchmark's own ratio, else one from the figures."""
    if metric.ratio is None:
        return None
    recorded = (results.get("ratios") or {}).get(metric.ratio)
    if isinstance(recorded, int | float):
        return float(recorded)
    mine = figure(results.get("ours") or {}, metric)
    theirs = figure(results.get("peer") or {}, metric)
    return mine / theirs if mine is not None and theirs else None


def ratios(results: Mapping[str, Any]) -> list[tuple[Metric, float]]:
    found = [(metric, ratio(results, metric)) for metric in METRICS]
    return [(metric, value) for metric, value in found if value is not None]


def _svg(fig: Figure, title: str) -> str:
    with matplotlib.rc_context(_STYLE):
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata=_METADATA, bbox_inches="tight")
    text = out.getvalue()
    # A title element is what a screen reader announces for an SVG opened on its own.
    head, sep, rest = text.partition(">\n <metadata>")
    if not sep:
        return text
    label = escape(title, {'"': "&quot;"})
    return f'{head} role="img" aria-label="{label}">\n <title>{escape(title)}</title>\n <metadata>{rest}'


def ratios_chart(results: Mapping[str, Any], narrow: bool = False) -> tuple[str, str]:
    """Horizontal bars of ours / peer per metric, a line at 1.0: the SVG and its alt text.
    ``narrow`` draws it for a phone's width, where the wide one's text would be too small."""
    rows = ratios(results)
    if not rows:
        raise ValueError("no metric has both sides' figures")
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(4.6 if narrow else 8.0, 0.42 * len(rows) + 1.4))
        ax = fig.subplots()
        labels = [metric.short for metric, _ in rows]
        values = [value for _, value in rows]
        colours = [_OURS if value <= 1.0 else _WORSE for value in values]
        positions = list(range(len(rows)))
        ax.barh(positions, values, color=colours, height=0.62)
        ax.set_yticks(positions, labels)
        ax.invert_yaxis()
        top = max([*values, 1.0]) * 1.18
        ax.set_xlim(0, top)
        ax.axvline(1.0, color="#333333", linestyle="--", linewidth=1.2)
        ax.text(1.0, -0.9, " peer = 1.0", va="bottom", ha="left", fontsize=10, color="#333333")
        for position, value in zip(positions, values, strict=True):
            ax.text(value + top * 0.01, position, f"{value:.2f}", va="center", fontsize=10)
        ax.set_xlabel(
            "ours / peer (isolated): lower is better"
            if narrow
            else "ours / peer (isolated), p50 or RSS: lower is better"
        )
        if not narrow:
            ax.set_title("pydeno against the reference peer, last recorded run", loc="left", fontsize=12)
        title = "Ratio of pydeno's figure to the reference peer's, per metric (lower is better)"
        svg = _svg(fig, title)
    listed = "; ".join(f"{metric.short} {value:.2f}" for metric, value in rows)
    return svg, f"Bar chart, ours / peer (isolated), lower is better, 1.0 is the peer: {listed}."


def _latency_metrics(results: Mapping[str, Any]) -> list[Metric]:
    ours, peer = results.get("ours") or {}, results.get("peer") or {}
    unit = {"µs": "us", "ms": "ms"}
    shown = []
    for metric in METRICS:
        if not metric.percentiles:
            continue
        suffix = unit[metric.unit]
        if all(figure(side, metric, f"{p}_{suffix}") is not None for side in (ours, peer) for p in ("p50", "p99")):
            shown.append(metric)
    return shown


def _percentiles(side: Mapping[str, Any], metric: Metric) -> list[float]:
    suffix = {"µs": "us", "ms": "ms"}[metric.unit]
    return [figure(side, metric, f"{p}_{suffix}") or 0.0 for p in ("p50", "p90", "p99")]


def _panel(ax: Axes, metric: Metric, ours: Sequence[float], peer: Sequence[float]) -> None:
    width = 0.38
    places = [0.0, 1.0, 2.0]
    ax.bar([x - width / 2 for x in places], ours, width, color=_OURS, label="ours")
    ax.bar([x + width / 2 for x in places], peer, width, color=_PEER, label="peer (isolated)")
    ax.set_xticks(places, ["p50", "p90", "p99"])
    ax.set_title(metric.short, fontsize=11, loc="left")
    ax.set_ylabel(metric.unit)
    ax.tick_params(labelsize=9)


def latency_chart(results: Mapping[str, Any], narrow: bool = False) -> tuple[str, str]:
    """p50 / p90 / p99 of ours and the peer for each latency metric: the SVG and its alt text.
    ``narrow`` puts the panels in two columns, for a phone's width."""
    shown = _latency_metrics(results)
    if not shown:
        raise ValueError("no latency metric has both sides' percentiles")
    ours, peer = results.get("ours") or {}, results.get("peer") or {}
    columns = min(2 if narrow else 3, len(shown))
    rows = -(-len(shown) // columns)
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(2.6 * columns if narrow else 3.4 * columns, 2.5 * rows + 0.6), layout="constrained")
        grid = fig.subplots(rows, columns, squeeze=False)
        cells = [ax for row in grid for ax in row]
        for ax, metric in zip(cells, shown, strict=False):
            _panel(ax, metric, _percentiles(ours, metric), _percentiles(peer, metric))
        for ax in cells[len(shown) :]:
            ax.set_axis_off()
        handles, labels = cells[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside upper left", ncols=2, frameon=False)
        title = "Latency percentiles (p50, p90, p99) of pydeno and the reference peer, per metric"
        svg = _svg(fig, title)
    parts = []
    for metric in shown:
        mine, theirs = _percentiles(ours, metric), _percentiles(peer, metric)
        parts.append(
            f"{metric.short} in {metric.unit}: ours {mine[0]:.3g}/{mine[1]:.3g}/{mine[2]:.3g}, "
            f"peer {theirs[0]:.3g}/{theirs[1]:.3g}/{theirs[2]:.3g}"
        )
    return svg, "Bar charts of p50/p90/p99, ours against the peer (isolated), lower is better: " + "; ".join(
        parts
    ) + "."


# file name in the built site -> what draws it; "NAME-narrow.svg" is NAME.svg for small screens
CHARTS = {"ratios.svg": ratios_chart, "latency.svg": latency_chart}
NARROW = "-narrow.svg"


def narrow_name(name: str) -> str:
    return name.removesuffix(".svg") + NARROW


def charts(results: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Every chart of a ``bench_eval.json`` run: file name -> (SVG text, alt text)."""
    drawn: dict[str, tuple[str, str]] = {}
    for name, draw in CHARTS.items():
        drawn[name] = draw(results)
        drawn[narrow_name(name)] = draw(results, narrow=True)
    return drawn


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, (svg, _alt) in charts(json.loads(RESULTS.read_text(encoding="utf-8"))).items():
        (out / name).write_text(svg, encoding="utf-8")
        print(out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
