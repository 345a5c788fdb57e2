"""Who may call the HTTP endpoint: Host and Origin checks (DNS-rebinding protection) and API keys.

Runs as ASGI middleware in front of the MCP app, before any MCP work. A refused
request gets a JSON body in the error envelope (``UNAUTHORIZED`` with HTTP 401, or
``INVALID`` with 403/421 for a foreign Origin or Host). An accepted key's identity
travels in the ASGI scope, where the tool handlers read it for rate limiting.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import psycopg
import psycopg_pool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.errors import new_error_id
from engine.store.api_keys import KeyRejected, KeyVerifier, VerifiedKey
from mcp_server.envelope import ErrorCode, ToolFailure

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
                   error_id: str | None = None) -> JSONResponse:
    return JSONResponse(ToolFailure(code, message, error_id=error_id).envelope(), status_code=status,
                        headers=headers)


class RequestGate:
    """ASGI middleware: refuse foreign Hosts and Origins, then require a valid API key."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, verifier: KeyVerifier | None) -> None:
        if policy.require_key and verifier is None:
            raise ValueError("a key verifier is required when keys are")
        self.app = app
        self.policy = policy
        self.verifier = verifier

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
        try:
            caller = await anyio.to_thread.run_sync(self.verifier.verify, token.strip())
        except KeyRejected as rejected:
            return error_response(401, "UNAUTHORIZED", rejected.reason, challenge)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
            error_id = new_error_id()
            logger.error("key verification failed %s", error_id, exc_info=error)
            return error_response(503, "UNAVAILABLE", "the database is unavailable; retry later",
                                  error_id=error_id)
        scope[CALLER_SCOPE_KEY] = caller
        return None
