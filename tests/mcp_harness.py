"""Drive Quarry's MCP server through the SDK's real client from synchronous tests.

The client lives in a blocking portal (an event loop in a helper thread), so one
connection can serve a whole test module. Servers: ``quarry mcp`` as a subprocess
over stdio, or the HTTP app under uvicorn in a thread on a pre-bound loopback socket.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from psycopg_pool import ConnectionPool
from starlette.types import ASGIApp

from engine.config import Settings
from engine.embed.base import Embedder
from engine.rerank.base import Reranker
from mcp_server.http_app import uvicorn_server

REPO = Path(__file__).resolve().parent.parent


@dataclass
class StaticBackend:
    """A backend made of parts a test already has (the session pool, the shared embedder)."""

    settings: Settings
    pool: ConnectionPool
    embedders: Mapping[str, Embedder] = field(default_factory=dict)
    reranker: Reranker | None = None


@dataclass(frozen=True)
class ToolReply:
    is_error: bool
    text: str

    @property
    def body(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.text)
        return parsed

    @property
    def error(self) -> dict[str, Any]:
        assert self.is_error, self.text[:500]
        error: dict[str, Any] = self.body["error"]
        return error

    @property
    def wire_bytes(self) -> int:
        """Size of the result as the server serialised it (the text is the only content)."""
        result = types.CallToolResult(content=[types.TextContent(type="text", text=self.text)], is_error=self.is_error)
        return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


class McpSession:
    def __init__(self, portal: BlockingPortal, client: Client) -> None:
        self._portal = portal
        self.client = client

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolReply:
        result = self._portal.call(self.client.call_tool, name, dict(arguments or {}))
        assert isinstance(result, types.CallToolResult)
        assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
        return ToolReply(bool(result.is_error), result.content[0].text)

    def ok(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        reply = self.call(name, arguments)
        assert not reply.is_error, reply.text[:1000]
        return reply.body

    def list_tools(self) -> list[types.Tool]:
        listed = self._portal.call(self.client.list_tools)
        return list(listed.tools)


@contextmanager
def mcp_session(server: Any, mode: str = "auto") -> Iterator[McpSession]:
    """A connected client for ``server`` (``StdioServerParameters`` or an HTTP transport).

    ``mode="legacy"`` speaks the initialize-handshake protocol most IDE clients use today.
    """
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(
        Client(server, read_timeout_seconds=120, mode=mode)
    ) as client:
        yield McpSession(portal, client)


def stdio_parameters(database_url: str, model_cache: Path, home: Path) -> StdioServerParameters:
    """``quarry mcp`` through the CLI module, on the test database and the shared model cache."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "engine.cli", "mcp"],
        env={"DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache), "QUARRY_HOME": str(home),
             "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        cwd=str(REPO),
    )


@asynccontextmanager
async def http_transport(url: str, headers: Mapping[str, str] | None = None) -> AsyncIterator[TransportStreams]:
    async with httpx2.AsyncClient(headers=dict(headers or {}), timeout=60) as http, \
            streamable_http_client(url, http_client=http) as streams:
        yield streams


@contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """Run ``app`` under uvicorn in a thread on a free loopback port; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn_server(app, "127.0.0.1", port, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the HTTP server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@functools.cache
def _raw_client() -> httpx2.Client:
    """One client for every raw POST: a new client builds an SSL context (~70 ms of CPU, for http:// too).

    No keep-alive, so each POST still has a connection of its own, as a one-off ``httpx2.post`` had.
    """
    return httpx2.Client(timeout=60, limits=httpx2.Limits(max_keepalive_connections=0))


def rpc(url: str, body: bytes | str, headers: Mapping[str, str] | None = None) -> httpx2.Response:
    """One raw JSON-RPC POST to ``/mcp`` (for what the SDK client cannot send, such as NaN)."""
    sent = {"content-type": "application/json", "accept": "application/json, text/event-stream", **(headers or {})}
    return _raw_client().post(url + "/mcp", content=body if isinstance(body, bytes) else body.encode(), headers=sent)
