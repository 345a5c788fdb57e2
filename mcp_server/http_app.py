"""The hosted endpoint: streamable HTTP at ``/mcp`` behind the request gate, plus ``/healthz``.

The MCP app runs stateless with JSON responses: each POST is one self-contained
exchange, so any replica can answer any request (the rate-limit buckets live in
Postgres for the same reason). The SDK bounds request bodies; the gate checks Host,
Origin and the API key before any of that runs. ``/healthz`` sits in front of the
gate so load balancers can probe it without a key.

What a client cannot hold (``HttpLimits``, from the settings): a connection whose request
headers take longer than ``http_header_timeout_s`` is closed, and so is an idle keep-alive
one after ``http_keepalive_timeout_s``; past ``http_max_connections`` a new connection gets
503 and is closed; ``GET /mcp`` streams are capped per key and in total. And what it never
gets back: the SDK's own JSON-RPC errors quote rejected input (pydantic's ``input_value``),
so every JSON-RPC error below the tools leaves with a fixed message for its code.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio.to_thread
import h11
import psycopg
import psycopg_pool
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.config import Settings
from engine.store.api_keys import KeyVerifier, VerifiedKey
from mcp_server.auth import (
    CALLER_SCOPE_KEY,
    AccessPolicy,
    FailedKeyLimiter,
    RequestGate,
    client_address,
    error_response,
)
from mcp_server.backend import Backend
from mcp_server.limits import MAX_REQUEST_BYTES
from mcp_server.ratelimit import RateLimiter, RatePolicy
from mcp_server.server import build_server, warm_up
from mcp_server.tools import ToolSpec

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one server process lets clients hold open (documented in engine.config.Settings)."""

    header_timeout_s: float = 10.0
    keepalive_timeout_s: float = 5.0
    max_connections: int = 1000
    max_streams: int = 100
    max_streams_per_key: int = 4

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(settings.http_header_timeout_s, settings.http_keepalive_timeout_s, settings.http_max_connections,
                   settings.mcp_max_streams, settings.mcp_max_streams_per_key)


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


class StreamLimit:
    """Caps open ``GET /mcp`` event streams: ``max_streams`` in all, ``max_streams_per_key`` per API key
    (per client address without keys). A stream past a cap is refused at once with BUSY (429 for the
    key's own cap, 503 for the server's); one that ends, or whose client goes away, frees its place."""

    def __init__(self, app: ASGIApp, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits
        self.open: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"].rstrip("/") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        caller = scope.get(CALLER_SCOPE_KEY)
        holder = f"key:{caller.id}" if isinstance(caller, VerifiedKey) else f"client:{client_address(scope)}"
        if self.open[holder] >= self.limits.max_streams_per_key:
            refusal = error_response(429, "BUSY", f"this caller already has {self.limits.max_streams_per_key} open "
                                     "GET /mcp streams (the most allowed); close one first")
            await refusal(scope, receive, send)
            return
        if self.open.total() >= self.limits.max_streams:
            await error_response(503, "BUSY", "this server has as many open GET /mcp streams as it allows; retry "
                                 "later")(scope, receive, send)
            return
        self.open[holder] += 1  # one event loop: no lock needed between the check and this
        try:
            await self.app(scope, receive, send)
        finally:
            self.open[holder] -= 1
            if self.open[holder] <= 0:
                del self.open[holder]


#: SDK error messages that quote nothing of the request: passed on as they are.
_FIXED_SDK_MESSAGES: Final = frozenset({
    "Not Acceptable: Client must accept application/json",
    "Not Acceptable: Client must accept both application/json and text/event-stream",
    "Not Acceptable: Client must accept text/event-stream",
    "Unsupported Media Type: Content-Type must be application/json",
    "Not Found: Session has been terminated", "Not Found: Invalid or expired session ID",
    "Session terminated before the request completed", "Error handling POST request",
    "Conflict: Only one SSE stream is allowed per session", "Method Not Allowed",
    "Method Not Allowed: Session termination not supported", "Bad Request: Missing session ID",
    "Session not found", "Too many open sessions", "Request cancelled", "Unsupported protocol version",
    "Body must be a single JSON-RPC request or notification object", "Parse error", "Error replaying events",
})
#: What replaces any other message, by JSON-RPC code.
_SCRUBBED_MESSAGES: Final = {
    -32700: "Parse error: the body is not valid JSON",
    -32600: "Invalid request: the body is not a valid JSON-RPC request",
    -32601: "Method not found",
    -32602: "Invalid params: the message does not match the JSON-RPC and MCP schemas (rejected values are not "
            "repeated)",
    -32603: "Internal error",
}


def scrubbed_rpc_error(message: Any) -> Any:
    """``message`` (a decoded JSON-RPC message or batch) with every error's text replaced unless fixed."""
    if isinstance(message, list):
        return [scrubbed_rpc_error(item) for item in message]
    if not isinstance(message, dict) or not isinstance(message.get("error"), dict):
        return message
    error = message["error"]
    if error.get("message") in _FIXED_SDK_MESSAGES:
        return message
    code = error.get("code")
    text = _SCRUBBED_MESSAGES.get(code, "the request was refused") if isinstance(code, int) else "request refused"
    return {**message, "error": {"code": code, "message": text}}


class ScrubbedErrors:
    """Rewrites the JSON-RPC errors the SDK answers with (any status) so none quotes the request.

    Only complete ``application/json`` bodies are looked at (JSON-response mode sends each in one
    piece); Quarry's own envelopes (``{"error": {"code": "INVALID", ...}}``) and tool results
    pass unchanged, since their messages already never repeat a rejected value.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: Message | None = None

        async def scrubbing_send(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                if content_type.startswith(b"application/json"):
                    held = message
                    return
            elif message["type"] == "http.response.body" and held is not None:
                start, held = held, None
                if not message.get("more_body", False):
                    body = _scrubbed_body(message.get("body", b""))
                    headers = [(name, value) for name, value in start.get("headers", []) if name != b"content-length"]
                    await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                    await send({**message, "body": body})
                    return
                await send(start)
            await send(message)

        await self.app(scope, receive, scrubbing_send)


def _scrubbed_body(body: bytes) -> bytes:
    if b'"error"' not in body:
        return body
    try:
        decoded = json.loads(body)
    except ValueError:
        return body
    if not _is_rpc_error(decoded):
        return body
    return json.dumps(scrubbed_rpc_error(decoded), separators=(",", ":")).encode()


def _is_rpc_error(decoded: Any) -> bool:
    if isinstance(decoded, list):
        return any(_is_rpc_error(item) for item in decoded)
    return isinstance(decoded, dict) and decoded.get("jsonrpc") == "2.0" and isinstance(decoded.get("error"), dict)


class QuarryHttpApp:
    """The ASGI app ``build_http_app`` returns, with the connection limits ``uvicorn_server`` applies."""

    def __init__(self, app: ASGIApp, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def build_http_app(backend: Backend, policy: AccessPolicy, rate_policy: RatePolicy | None = None,
                   tools: Sequence[ToolSpec[Any]] | None = None) -> QuarryHttpApp:
    """The ASGI app: ``/healthz``, then the gate, then MCP at ``/mcp``. Keys are metered by ``rate_policy``."""
    settings = backend.settings
    limits = HttpLimits.from_settings(settings)
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
    failures = FailedKeyLimiter(settings.auth_failure_burst, settings.auth_failures_per_minute)
    gated = RequestGate(StreamLimit(ScrubbedErrors(mcp_app), limits), policy, verifier, failures)
    return QuarryHttpApp(HealthCheck(gated, backend), limits)


def endpoint_url(host: str, port: int) -> str:
    """Where clients reach MCP when serving on ``host:port`` (an IPv6 address goes in brackets)."""
    address = f"[{host}]" if ":" in host else host
    return f"http://{address}:{port}{MCP_PATH}"


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline on request headers and a cap on connections.

    uvicorn closes an idle keep-alive connection only once a response was sent, and never one
    that trickles its headers, so a few hundred such sockets would hold the process's files.
    Here, whenever no request is in progress (from the connection's start, and again after
    each response) the next request's headers must complete within ``header_timeout_s``.
    """

    limits: HttpLimits = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.limits.keepalive_timeout_s  # type: ignore[assignment]  # a float works
        self._header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            transport.write(_TOO_MANY_CONNECTIONS)
            transport.close()
            return
        super().connection_made(transport)
        self._watch_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_deadline()
        if self.transport is None:  # refused in connection_made: never counted
            return
        super().connection_lost(exc)

    def _watch_headers(self) -> None:
        in_progress = self.cycle is not None and not self.cycle.response_complete
        if in_progress or self.transport.is_closing():
            self._stop_header_deadline()
        elif self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.limits.header_timeout_s, self._headers_too_slow)

    def _stop_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.cycle is not None and not self.cycle.response_complete:
            return
        if not self.transport.is_closing():
            if self.conn.our_state not in (h11.ERROR, h11.CLOSED):
                self.conn.send(h11.ConnectionClosed())
            self.transport.close()


_TOO_MANY_BODY: Final = (b'{"error":{"code":"BUSY","message":"this server has as many open connections as it '
                         b'allows; retry later"}}')
_TOO_MANY_CONNECTIONS: Final = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                                b"connection: close\r\nretry-after: 1\r\ncontent-length: "
                                + str(len(_TOO_MANY_BODY)).encode() + b"\r\n\r\n" + _TOO_MANY_BODY)


def guarded_protocol(limits: HttpLimits) -> type[GuardedH11Protocol]:
    """``GuardedH11Protocol`` bound to ``limits`` (uvicorn builds one protocol object per connection)."""
    return type("QuarryH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def uvicorn_server(app: ASGIApp, host: str, port: int, **options: Any) -> uvicorn.Server:
    """uvicorn serving ``app``; a ``QuarryHttpApp`` brings its connection limits."""
    limits = app.limits if isinstance(app, QuarryHttpApp) else HttpLimits()
    config = uvicorn.Config(app, host=host, port=port, lifespan="on", server_header=False,
                            http=guarded_protocol(limits), **options)
    return uvicorn.Server(config)


def serve_http(backend: Backend, *, host: str, port: int, policy: AccessPolicy,
               rate_policy: RatePolicy | None = None) -> None:
    """Serve until interrupted."""
    app = build_http_app(backend, policy, rate_policy)
    warm_up(backend)
    # no access log: a line per request says less than the tools' own logs, and costs every call a write
    uvicorn_server(app, host, port, log_level="info", access_log=False).run()
