"""Types whose fields carry bounds in pydantic and annotated_types metadata, shared by the tool
validator's unit tests (tests/unit/test_tool_validation.py) and the programs that send such
values in real workers (tests/features/test_tool_arguments.py)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, TypedDict

import annotated_types as at
import pydantic
from pydantic import Field


class Range(TypedDict):
    low: Annotated[float, Field(ge=0)]
    tag: Annotated[str, at.MaxLen(3)]


@dataclasses.dataclass
class Sized:
    count: Annotated[int, at.Interval(gt=0, le=9)]
    names: list[Annotated[str, Field(min_length=1)]] = dataclasses.field(default_factory=list)


class Model(pydantic.BaseModel):
    share: Annotated[float, Field(ge=0, le=1)]


@pydantic.dataclasses.dataclass
class Placed:
    row: int = Field(ge=0)
    label: Annotated[str, Field(max_length=2)] = "a"
