"""bench_eval.py's parts: what is run (config), the measuring side (measure, and one function
per section in sections/, with the probes they share), and the driver (cli, merge, rows, report).

The measuring side runs under either side's venv, so it imports only the standard library,
``_common`` and the ``pydeno`` under test (and ``psutil`` where installed).
"""
