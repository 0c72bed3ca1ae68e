"""Writing a run's results: the JSON file, and the text tables printed beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write data as indented JSON, through a temporary file, so that a run stopped half way
    leaves the previous results whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def render_grid(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    """header and rows as aligned text lines, columns joined by `` | ``, a rule under the
    header; the columns in right are right-aligned, the others left-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return " | ".join(padded).rstrip()

    return [line(header), "-+-".join("-" * w for w in widths), *(line(row) for row in rows)]
