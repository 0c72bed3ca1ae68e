"""``pydeno.undefined``: JavaScript's ``undefined`` on the Python side (docs/values.md).

A leaf: the host's codec (pydeno/host/wire/codec.py) and the public API both use it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["Undefined", "undefined"]


class Undefined:
    """The type of :data:`pydeno.undefined`, JavaScript's ``undefined``; falsy, a singleton."""

    _instance: Undefined | None = None

    def __new__(cls) -> Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "pydeno.undefined"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "undefined"


undefined: Final = Undefined()
