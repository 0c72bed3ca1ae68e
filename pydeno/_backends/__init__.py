"""How a driver waits: one module per flavour, with the same names.

The async drivers (``pydeno/_async_*.py``) are the source; their sync twins are generated
from them (scripts/unasync.py), which turns ``from ._backends import _anyio as backend``
into ``from ._backends import _sync as backend``. Everything that differs between the two
flavours beyond ``async``/``await`` lives in these two modules.
"""
