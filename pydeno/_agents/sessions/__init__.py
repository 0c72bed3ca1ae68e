"""Session pools: the lease rules and sealed records (``core``), the journal stores
(``store``), and the async pool (the one source) with its generated sync twin."""
