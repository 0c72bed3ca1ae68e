"""``python -m pydeno``: see :mod:`pydeno._cli`."""

from ._cli import main

raise SystemExit(main())
