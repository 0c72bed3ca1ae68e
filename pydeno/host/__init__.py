"""The supervisor side of the wire: spawning workers, framing, limits (all private), in two
layers: ``wire`` (sans-IO) below ``process`` (one deno process and its confinement)."""
