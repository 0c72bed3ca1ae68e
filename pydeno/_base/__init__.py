"""The foundation every layer may use: the exceptions and their kinds, argument checks,
runtime options, guest values, determinism, stats, and where deno and npm packages come from."""
