"""How a driver waits: one module per flavour, with the same names.

The async drivers (each ``pydeno/**/_async.py``) are the source; their sync twins are
generated from them (scripts/unasync.py), which turns ``from .backends import anyio as backend``
into ``from .backends import sync as backend``. Everything that differs between the two
flavours beyond ``async``/``await`` lives in these two modules.
"""
