"""What the benchmarks share, once: machine and version facts, summaries of samples, the
peer's venv, the subprocess that measures one side, the /proc readings of memory and CPU,
and writing results.

Every module here imports only the standard library at its top: the measuring side of
``bench_eval.py`` and ``bench_memory.py`` runs under the peer's venv, which has nothing but the
peer installed (``psutil`` is used where it is present). A script puts ``benchmarks/`` on
``sys.path`` itself before importing this, because a side runs with ``python -I``.
"""
