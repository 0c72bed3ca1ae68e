"""Agent sandboxes: runs that pause at a tool call and resume from a journal (``core``), the
async driver (the one source) and its generated sync twin, and session pools (``sessions``)."""
