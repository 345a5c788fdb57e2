"""Quarry's MCP server: retrieval tools for IDE assistants over stdio or streamable HTTP."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer

from engine.runtime import Runtime
from engine.search import search as run_search

INSTRUCTIONS = (
    "Quarry searches ingested documentation and code. Use `search` with a natural-language "
    "question or an identifier; results carry source, path, heading or symbol path, line span "
    "and per-leg ranks."
)


def build_server(runtime: Runtime) -> MCPServer:
    server = MCPServer(name="quarry", instructions=INSTRUCTIONS)

    @server.tool()
    async def search(
        query: str, mode: Literal["hybrid", "fts", "vector"] = "hybrid", limit: int = 10
    ) -> dict[str, Any]:
        """Search documentation and code; hybrid fuses keyword and semantic ranking."""
        embedder = None if mode == "fts" else runtime.embedders["text"]
        hits = await anyio.to_thread.run_sync(
            lambda: run_search(runtime.pool, embedder, query, mode=mode, limit=limit)
        )
        return {"results": [asdict(hit) for hit in hits]}

    return server


def serve(*, http: bool, host: str, port: int) -> None:
    runtime = Runtime()
    server = build_server(runtime)
    try:
        if http:
            server.run("streamable-http", host=host, port=port)
        else:
            server.run("stdio")
    finally:
        runtime.close()
