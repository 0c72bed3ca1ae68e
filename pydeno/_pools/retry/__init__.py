"""Retry on a fresh runtime: which failures are retried and how long to wait (``policy``),
and the async loop (the one source) with its generated sync twin."""
