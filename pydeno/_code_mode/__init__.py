"""Code Mode: tools offered to a model as one typed TypeScript API, the execution and its
result (``core``), and the async driver (the one source) with its generated sync twin."""
