"""The driver's reading of the sides' results: every row's ratio, the targets and whether they
hold, and the printed table and summary."""

from __future__ import annotations

from typing import Any

from _common.output import render_grid

from .rows import CURRENT_ISSUE, ROWS, Row, Target, denominator, fmt, row_figure


def compute_ratios(results: dict[str, Any]) -> dict[str, float | None]:
    """Every row's ratio, ours over its denominator (the peer isolated unless the row names
    another). A rate's ratio is also written the other way round, as time per eval (peer's
    rate over ours), under ``<key>_time_per_eval`` so it reads like every other row."""
    ratios: dict[str, float | None] = {}
    for row in ROWS:
        if not row.has_ratio:
            continue
        mine, theirs = row_figure(results.get("ours"), row), denominator(results, row)
        ratios[row.ratio_key] = round(mine / theirs, 4) if mine is not None and theirs else None
        if row.higher_is_better:
            ratios[f"{row.ratio_key}_time_per_eval"] = round(theirs / mine, 4) if theirs is not None and mine else None
    return ratios


def _compares(row: Row, target: Target) -> str:
    if target.on_value:
        return f"ours, {row.unit}"
    side, section, _ = row.over or ("peer", row.section, row.key)
    if side == "ours":
        return f"ours / ours' {section}"
    return f"ours / {side.replace('_', ' ')}" + (" (isolated)" if side == "peer" else "")


def _target_entry(row: Row, target: Target, figure: float | None) -> dict[str, Any]:
    bound = "value" if target.on_value else "ratio"
    return {
        "source": target.source,
        "phase": "this issue" if target.source == CURRENT_ISSUE else "earlier",
        "compares": _compares(row, target),
        "direction": target.direction,
        "target": target.limit,
        f"{'min' if target.at_least else 'max'}_{bound}": target.limit,
        "value": figure,
        "met": target.holds(figure),
    }


def compute_targets(results: dict[str, Any], ratios: dict[str, float | None]) -> dict[str, Any]:
    """metric -> its target (the newest), the figure it is held to, and whether it holds;
    a target an earlier issue set for the same metric goes under "earlier"."""
    targets: dict[str, Any] = {}
    for row in ROWS:
        if not row.targets:
            continue
        entries = []
        for target in row.targets:
            figure = row_figure(results.get("ours"), row) if target.on_value else ratios.get(row.ratio_key)
            entries.append(_target_entry(row, target, figure))
        targets[row.ratio_key] = {"label": row.label, **entries[0], "earlier": entries[1:]}
    return targets


def _verdict(met: bool | None) -> str:
    return "" if met is None else (" ok" if met else " MISS")


def _target_cell(row: Row, targets: dict[str, Any]) -> str:
    entry = targets.get(row.ratio_key)
    if not entry:
        return "-"
    cells = []
    for part in [entry, *entry["earlier"]]:
        what = "ours " if part["compares"].startswith("ours,") else ""
        cell = f"{what}{part['direction']} {part['target']:.2f}{_verdict(part['met'])}"
        cells.append(cell if part is entry else f"{part['source']}: {cell}")
    return cells[0] + (f" ({'; '.join(cells[1:])})" if cells[1:] else "")


def _ratio_cell(row: Row, ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f} (higher is better)" if row.higher_is_better else f"{ratio:.2f}"


def _theirs_cell(results: dict[str, Any], row: Row) -> str:
    if row.over is None:
        return fmt(row_figure(results.get("peer"), row), row.unit)
    side, section, _ = row.over
    figure = fmt(denominator(results, row), row.unit)
    return f"{figure} (ours, {section})" if side == "ours" else f"{figure} ({side.replace('_', ' ')})"


def render_table(results: dict[str, Any]) -> str:
    ours, inproc = results["ours"], results.get("peer_inprocess")
    targets = results.get("targets") or {}
    header = ["metric", "ours", "peer (isolated)", "ratio", "target", "peer in-process (not like-for-like)"]
    lines: list[list[str]] = []
    for row in ROWS:
        in_process = fmt(row_figure(inproc, row), row.unit)
        if row.section == "rss" and inproc and "rss" in inproc:
            # No worker process exists in-process; the whole interpreter is the honest figure.
            in_process = f"no worker; host {inproc['rss']['host_bytes'] / 2**20:.1f} MiB"
        lines.append(
            [
                row.label,
                fmt(row_figure(ours, row), row.unit),
                _theirs_cell(results, row),
                _ratio_cell(row, results["ratios"].get(row.ratio_key)),
                _target_cell(row, targets),
                in_process,
            ]
        )
    return "\n".join(render_grid(header, lines, right={1, 2, 3, 5}))


def render_targets(targets: dict[str, Any]) -> str:
    """Every target of the run, the current issue's first: held or missed."""
    current = [(k, t) for k, t in targets.items() if t["phase"] == "this issue"]
    earlier = [(k, t) for k, t in targets.items() if t["phase"] != "this issue"]
    earlier += [(k, {**e, "label": t["label"]}) for k, t in targets.items() for e in t["earlier"]]
    lines = []
    for title, group in ((f"targets of {CURRENT_ISSUE}", current), ("earlier targets", earlier)):
        if not group:
            continue
        held = sum(1 for _, t in group if t["met"])
        lines.append(f"{title}: {held} of {len(group)} met")
        width = max(len(t["label"]) for _, t in group)
        for _, t in group:
            value = "-" if t["value"] is None else f"{t['value']:.3f}"
            verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
            source = "" if t["phase"] == "this issue" else f"  [{t['source']}]"
            lines.append(
                f"  {t['label'].ljust(width)}  {t['compares']} = {value} {t['direction']} {t['target']:.2f}: "
                f"{verdict}{source}"
            )
    return "\n".join(lines)
