"""Pools of ready runtimes: the bookkeeping both flavours share (``core``), the async pool
(the one source) and its generated sync twin, and retry on a fresh runtime (``retry``)."""
