"""Quarry's MCP server: retrieval tools for IDE assistants over stdio (``quarry mcp``) and
streamable HTTP (``quarry serve``).

Modules: ``schemas`` (strict tool inputs), ``envelope`` (error envelope), ``bounds``
(response size bound), ``tools`` (one module per tool family), ``server`` (catalogue,
call path, stdio), ``http_app`` (hosted endpoint), ``auth`` (Host/Origin checks, API
keys), ``ratelimit`` (per-key token buckets), ``limits``.
"""
