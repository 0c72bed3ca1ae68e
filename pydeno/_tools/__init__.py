"""Host functions offered to guest code: the ``Tool`` model and its JSON Schema, the
``ToolBridge``, tools from MCP servers, and ``HttpFetch`` (``fetch``), the guest's only road to
the network."""
