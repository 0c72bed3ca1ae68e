"""The supervisor side of the wire: spawning workers, framing, limits (all private)."""
