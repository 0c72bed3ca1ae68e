"""What a section of bench_eval is: a named function of a Context, run on some of the sides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _common.stats import summary_ns

from .config import SECTION_UNITS, SIDES, Params

ALL_SIDES = frozenset(SIDES)
OURS = frozenset({"ours"})
# The sides whose runtimes are worker processes and which have pools: all but the peer's
# in-process runtime.
WORKER_SIDES = frozenset({"ours", "peer"})


@dataclass(slots=True)
class Context:
    """One side's measuring: its name, the run's parameters, the side's runtime constructor,
    and the result every section adds its figures to."""

    side: str
    params: Params
    make: Callable[[], Any]
    result: dict[str, Any] = field(default_factory=dict)
    # The runtime warm_eval starts: the sections after it measure that one, warm, until close.
    warm: Any = None

    @property
    def ours(self) -> bool:
        return self.side == "ours"

    def record(self, name: str, samples_ns: list[int]) -> None:
        """A timed figure: its summary, and its samples for the rounds to be pooled."""
        self.result[name] = summary_ns(samples_ns, SECTION_UNITS[name])
        self.result.setdefault("samples_ns", {})[name] = samples_ns

    def warm_runtime(self) -> Any:
        if self.warm is None:
            raise RuntimeError("no runtime (warm_eval failed to create one)")
        return self.warm


@dataclass(frozen=True, slots=True)
class Section:
    """A part of the run that ``--sections NAME`` selects; it measures on the sides named."""

    name: str
    run: Callable[[Context], None]
    sides: frozenset[str] = ALL_SIDES
