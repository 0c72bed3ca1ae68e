"""A worker's configuration as the host makes it, with some fields replaced: shared by the
command-line tests (tests/unit/test_worker_command.py) and the process tests
(tests/runtime/test_process.py)."""

from __future__ import annotations

from pydeno.host.process.spec import WorkerConfig

MiB = 2**20


def _config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {
        "max_memory": 512 * MiB,
        "max_message_bytes": MiB,
        "jitless": True,
        "max_depth": 128,
    }
    values.update(overrides)
    return WorkerConfig(**values)  # type: ignore[arg-type]
