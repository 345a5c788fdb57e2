"""The hosted endpoint: streamable HTTP at ``/mcp`` behind the request gate, plus ``/healthz``.

The MCP app runs stateless with JSON responses: each POST is one self-contained
exchange, so any replica can answer any request (the rate-limit buckets live in
Postgres for the same reason). The SDK bounds request bodies; the gate checks Host,
Origin and the API key before any of that runs. ``/healthz`` sits in front of the
gate so load balancers can probe it without a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio.to_thread
import psycopg
import psycopg_pool
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.store.api_keys import KeyVerifier
from mcp_server.auth import AccessPolicy, RequestGate
from mcp_server.backend import Backend
from mcp_server.limits import MAX_REQUEST_BYTES
from mcp_server.ratelimit import RateLimiter, RatePolicy
from mcp_server.server import build_server, warm_up
from mcp_server.tools import ToolSpec

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"


class HealthCheck:
    """Answers ``GET /healthz`` (200 when the database answers, else 503); passes everything else on."""

    def __init__(self, app: ASGIApp, backend: Backend) -> None:
        self.app = app
        self.backend = backend

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != HEALTH_PATH:
            await self.app(scope, receive, send)
            return
        healthy = await anyio.to_thread.run_sync(self._database_answers)
        body = {"status": "ok" if healthy else "unavailable", "database": "ok" if healthy else "unreachable"}
        await JSONResponse(body, status_code=200 if healthy else 503)(scope, receive, send)

    def _database_answers(self) -> bool:
        try:
            with self.backend.pool.connection(timeout=2) as conn:
                conn.execute("select 1")
        except (psycopg.Error, psycopg_pool.PoolTimeout):
            return False
        return True


def build_http_app(backend: Backend, policy: AccessPolicy, rate_policy: RatePolicy | None = None,
                   tools: Sequence[ToolSpec[Any]] | None = None) -> ASGIApp:
    """The ASGI app: ``/healthz``, then the gate, then MCP at ``/mcp``. Keys are metered by ``rate_policy``."""
    limiter = RateLimiter(backend.pool, rate_policy or RatePolicy()) if policy.require_key else None
    server = build_server(backend, limiter=limiter, tools=tools)
    mcp_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=MAX_REQUEST_BYTES,
        # Host and Origin are checked by the gate, for every path and with the envelope's error body.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    verifier = KeyVerifier(backend.pool) if policy.require_key else None
    return HealthCheck(RequestGate(mcp_app, policy, verifier), backend)


def endpoint_url(host: str, port: int) -> str:
    """Where clients reach MCP when serving on ``host:port`` (an IPv6 address goes in brackets)."""
    address = f"[{host}]" if ":" in host else host
    return f"http://{address}:{port}{MCP_PATH}"


def uvicorn_server(app: ASGIApp, host: str, port: int, **options: Any) -> uvicorn.Server:
    config = uvicorn.Config(app, host=host, port=port, lifespan="on", server_header=False, **options)
    return uvicorn.Server(config)


def serve_http(backend: Backend, *, host: str, port: int, policy: AccessPolicy,
               rate_policy: RatePolicy | None = None) -> None:
    """Serve until interrupted."""
    app = build_http_app(backend, policy, rate_policy)
    warm_up(backend)
    uvicorn_server(app, host, port, log_level="info").run()
