"""The runtime drivers: ``AsyncRuntime`` (the one source) and its generated sync twin
``Runtime``, how each flavour waits (``backends``), guest function handles, the syntax-error
locator and ``sandbox_status()``."""
