"""One deno process and its confinement: where its files come from, the command it starts
with, the launcher and zygote that apply the OS layers, its monitor and its supervisor.

The launcher runs as a program (``python -I -S launcher.py``) and imports this package by
its bare name ``process``, so this file stays free of imports."""
