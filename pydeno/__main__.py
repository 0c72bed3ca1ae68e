"""``python -m pydeno``: see :mod:`pydeno._cli.main`."""

from ._cli.main import main

raise SystemExit(main())
