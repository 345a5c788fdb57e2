"""Who may call the HTTP endpoint: Host and Origin checks (DNS-rebinding protection) and API keys.

Runs as ASGI middleware in front of the MCP app, before any MCP work. A refused
request gets a JSON body in the error envelope (``UNAUTHORIZED`` with HTTP 401, or
``INVALID`` with 403/421 for a foreign Origin or Host). An accepted key's identity
travels in the ASGI scope, where the tool handlers read it for rate limiting.

A client address whose keys keep failing is refused before any check (``RATE_LIMITED``,
HTTP 429, with ``retry_after``): guessing costs the server nothing once the budget is spent.
Tools that write (``admin_database``) hand the caller's key to the database, which checks
the admin scope itself.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import psycopg
import psycopg_pool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.errors import new_error_id
from engine.store.api_keys import KeyRejected, KeyVerifier, VerifiedKey
from engine.store.db import owner_pool
from mcp_server.envelope import ErrorCode, ToolFailure

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from mcp_server.tools import ToolContext

logger = logging.getLogger("quarry.mcp")

#: Where the authenticated key is kept in the ASGI scope of a request.
CALLER_SCOPE_KEY = "quarry.caller"

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """``allowed_hosts`` None accepts any Host header (a public bind behind keys and a proxy)."""

    require_key: bool
    allowed_hosts: tuple[str, ...] | None
    allowed_origins: tuple[str, ...] = field(default=())

    @classmethod
    def for_bind(cls, host: str, *, no_auth: bool, extra_hosts: tuple[str, ...] = (),
                 extra_origins: tuple[str, ...] = ()) -> AccessPolicy:
        """The policy for a server bound to ``host``; ``no_auth`` is only allowed on loopback."""
        loopback = is_loopback(host)
        if no_auth and not loopback:
            raise ValueError("--no-auth is only allowed when binding a loopback address (127.0.0.1, ::1, localhost)")
        if loopback:
            # A loopback server is what DNS rebinding targets: only loopback names may reach it.
            hosts: tuple[str, ...] | None = (*_LOOPBACK_NAMES, *extra_hosts)
            origins = (*(f"{scheme}://{name}:*" for scheme in ("http", "https") for name in _LOOPBACK_NAMES),
                       *extra_origins)
        else:
            hosts = extra_hosts or None
            origins = extra_origins
        return cls(require_key=not no_auth, allowed_hosts=hosts, allowed_origins=tuple(origins))

    def host_allowed(self, host: str | None) -> bool:
        if self.allowed_hosts is None:
            return True
        if not host:
            return False
        return any(host == allowed or (host.startswith(allowed + ":") and host[len(allowed) + 1:].isdigit())
                   for allowed in self.allowed_hosts)

    def origin_allowed(self, origin: str | None) -> bool:
        # Browsers always send Origin on cross-site requests; other clients usually send none.
        if origin is None:
            return True
        for allowed in self.allowed_origins:
            if allowed.endswith(":*"):
                base = allowed[:-2]
                if origin == base or (origin.startswith(base + ":") and origin[len(base) + 1:].isdigit()):
                    return True
            elif origin == allowed:
                return True
        return False


def caller_of(request: Any) -> VerifiedKey | None:
    """The key that authenticated an HTTP request (None on stdio or without auth)."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    caller = scope.get(CALLER_SCOPE_KEY)
    return caller if isinstance(caller, VerifiedKey) else None


def error_response(status: int, code: ErrorCode, message: str, headers: dict[str, str] | None = None,
                   error_id: str | None = None, retry_after: float | None = None) -> JSONResponse:
    return JSONResponse(ToolFailure(code, message, error_id=error_id, retry_after=retry_after).envelope(),
                        status_code=status, headers=headers)


def client_address(scope: Scope) -> str:
    """The peer's address (a proxy's, unless uvicorn is told to trust its forwarded headers)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class FailedKeyLimiter:
    """Failed key checks per client address: a bucket of ``burst``, regained at ``per_minute``.

    In memory, per process: it bounds what one address can make this process spend on wrong
    keys (a database round trip each, a scrypt run for a key not yet converted), and holds at
    most ``max_clients`` addresses (the least recently failing ones are forgotten first).
    """

    def __init__(self, burst: int, per_minute: float, *, max_clients: int = 10_000) -> None:
        self.burst = float(burst)
        self.refill_per_second = per_minute / 60.0
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may try a key again; 0 when it may now."""
        with self._lock:
            tokens = self._level(client, time.monotonic())
        return 0.0 if tokens >= 1 else (1 - tokens) / self.refill_per_second

    def failed(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._buckets[client] = (max(0.0, self._level(client, now) - 1), now)
            self._buckets.move_to_end(client)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)

    def _level(self, client: str, now: float) -> float:
        stored = self._buckets.get(client)
        if stored is None:
            return self.burst
        tokens, at = stored
        return min(self.burst, tokens + (now - at) * self.refill_per_second)


class RequestGate:
    """ASGI middleware: refuse foreign Hosts and Origins, then require a valid API key."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, verifier: KeyVerifier | None,
                 failures: FailedKeyLimiter | None = None) -> None:
        if policy.require_key and verifier is None:
            raise ValueError("a key verifier is required when keys are")
        self.app = app
        self.policy = policy
        self.verifier = verifier
        self.failures = failures or FailedKeyLimiter(burst=20, per_minute=10.0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not self.policy.host_allowed(headers.get("host")):
            await error_response(421, "INVALID", "this Host is not served here")(scope, receive, send)
            return
        if not self.policy.origin_allowed(headers.get("origin")):
            await error_response(403, "INVALID", "requests from this Origin are not allowed")(scope, receive, send)
            return
        if self.policy.require_key:
            refusal = await self._authenticate(scope, headers)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _authenticate(self, scope: Scope, headers: Headers) -> JSONResponse | None:
        assert self.verifier is not None
        challenge = {"WWW-Authenticate": 'Bearer realm="quarry"'}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return error_response(401, "UNAUTHORIZED", "an API key is required: send 'Authorization: Bearer <key>' "
                                  "(create one with `quarry keys create NAME`)", challenge)
        client = client_address(scope)
        wait = self.failures.retry_after(client)
        if wait > 0:
            return error_response(429, "RATE_LIMITED", f"too many failed API keys from this address; retry after "
                                  f"{wait:.1f} seconds", {"Retry-After": str(max(1, round(wait)))},
                                  retry_after=wait)
        try:
            caller = await anyio.to_thread.run_sync(self.verifier.verify, token.strip())
        except KeyRejected as rejected:
            self.failures.failed(client)
            return error_response(401, "UNAUTHORIZED", rejected.reason, challenge)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
            error_id = new_error_id()
            logger.error("key verification failed %s", error_id, exc_info=error)
            return error_response(503, "UNAVAILABLE", "the database is unavailable; retry later",
                                  error_id=error_id)
        scope[CALLER_SCOPE_KEY] = caller
        return None


@contextmanager
def admin_database(context: ToolContext) -> Iterator[tuple[ConnectionPool, str | None]]:
    """Where a tool that writes (job actions, vector writes) runs, and the key the database checks.

    With a key: the server's own pool and the caller's key; the definer function verifies its admin
    scope again, so a server that lost track of scopes still cannot write. Without keys (stdio,
    ``--no-auth`` on loopback) the local user is the owner: a small pool on the owner's DSN. A
    refusal by the database becomes UNAUTHORIZED.
    """
    caller = context.caller
    if caller is not None:
        pool, credential = context.backend.pool, caller.credential
    else:
        pool, credential = owner_pool(context.backend.settings), None
    try:
        yield pool, credential
    except psycopg.errors.InsufficientPrivilege:
        raise ToolFailure("UNAUTHORIZED", "this action needs an API key with the admin scope") from None
