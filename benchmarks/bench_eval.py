#!/usr/bin/env python3
"""Benchmark our pydeno against the reference peer (PyPI ``pydeno==0.13.2``) in one run.

Both packages are imported as ``pydeno``, so they cannot share an interpreter. This script
is therefore both the driver and the measurer: the driver re-runs this file once per side
(``--side ours|peer|peer-inprocess --json-out FILE``) under that side's interpreter, and
every side runs the same ``measure()`` (``_eval/measure.py``), section by section
(``_eval/sections/``). Our side runs in a subprocess too, so both are measured the same way
(fresh interpreter, same process tree shape).

Usage::

    python benchmarks/bench_eval.py --peer-python /path/to/peer/bin/python
    python benchmarks/bench_eval.py --quick          # one round, fewer samples: about 30 s
    python benchmarks/bench_eval.py --skip-peer      # ours only
    python benchmarks/bench_eval.py --skip-peer --sections pool_setup   # only these sections

The measuring side must only need the standard library (plus the ``pydeno`` under test and,
optionally, ``psutil``): the peer's venv has nothing else installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# A side runs with -I, which leaves this directory off sys.path. Only this directory: the
# checkout's root would put our pydeno ahead of the peer's.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _eval.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
