"""The command line (``pydeno``, ``python -m pydeno``: ``main``) and the MCP server it runs
(``mcp_server``)."""
