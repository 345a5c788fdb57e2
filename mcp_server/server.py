"""Quarry's MCP server: the tool catalogue, the call path, and the stdio transport.

Built on the SDK's low-level ``Server`` rather than ``MCPServer``: ``MCPServer``
derives argument models from function signatures and validates them leniently
(JSON strings are pre-parsed, unknown fields dropped, errors repeat the input),
which the tool contract forbids. Here every call goes: strict argument model ->
rate limit (HTTP keys only) -> the tool's blocking ``run`` in a worker thread ->
bounded JSON text; every failure becomes the error envelope with ``isError: true``.
With read replicas, a read-only tool's ``run`` gets a replica's pool; the key check
(in the HTTP gate), the rate limit and every tool that writes use the primary's.
While an embedded database that went away is started again (``engine.runtime``), calls
answer UNAVAILABLE at once, and the outage is logged once rather than per call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from importlib import metadata
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import psycopg
import psycopg_pool
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from engine.embed.base import TEXT_SPACE
from engine.runtime import Runtime
from engine.store.api_keys import VerifiedKey
from engine.store.replicas import ReplicaSet
from mcp_server.auth import caller_of
from mcp_server.backend import Backend, database_keeper_of, on_pool, replicas_of
from mcp_server.envelope import ToolFailure, classify, failure, success
from mcp_server.profiles import Profile, build_profile
from mcp_server.profiles.default import DEFAULT_INSTRUCTIONS
from mcp_server.ratelimit import RateLimiter
from mcp_server.schemas import parse_arguments, published_schema
from mcp_server.tools import ToolContext, ToolSpec

logger = logging.getLogger("quarry.mcp")

_READ_ONLY = types.ToolAnnotations(read_only_hint=True)
_CHANGES_STATE = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                       open_world_hint=False)


def listing(spec: ToolSpec[Any]) -> types.Tool:
    """How ``tools/list`` shows a tool: no title (the name says it, and every session pays each byte)."""
    return types.Tool(name=spec.name, description=spec.description,
                      input_schema=published_schema(spec.arguments, full_filters=spec.full_filters),
                      output_schema=spec.output_schema, annotations=_READ_ONLY if spec.read_only else _CHANGES_STATE)


def may_administer(caller: VerifiedKey | None) -> bool:
    """Whether a caller sees the admin tools: an admin key, or no key at all (stdio, ``--no-auth``: the owner)."""
    return caller is None or caller.allows("admin")


def build_server(backend: Backend, *, limiter: RateLimiter | None = None,
                 tools: str | Sequence[ToolSpec[Any]] | None = None) -> Server[Any]:
    """The MCP server for ``backend``; ``limiter`` meters callers that authenticated with a key.

    ``tools`` is a profile's name (``mcp_server.profiles``) or the tool specs themselves; None takes the
    profile the settings name (``QUARRY_TOOLS``, default ``default``).
    """
    if tools is None or isinstance(tools, str):
        profile = build_profile(tools or backend.settings.tools, backend.settings)
    else:
        profile = Profile("custom", tuple(tools), DEFAULT_INSTRUCTIONS)
    specs = {spec.name: spec for spec in profile.tools}
    context = ToolContext(backend, limiter.policy if limiter is not None else None)
    capacity = InFlight(backend.settings.max_in_flight)
    # Admitted calls run on at most running_tool_calls worker threads, the rest waiting their turn in
    # arrival order (why: Settings.tool_threads). A limiter of its own: anyio's shared one (40 threads)
    # also serves key checks and /healthz.
    tool_threads = anyio.CapacityLimiter(backend.settings.running_tool_calls)
    replicas = replicas_of(backend)
    listed = {name: listing(spec) for name, spec in specs.items()}
    everyone = [tool for tool in listed.values() if specs[tool.name].audience == "everyone"]
    administrators = list(listed.values())
    input_schemas = {name: tool.input_schema for name, tool in listed.items()}

    async def list_tools(ctx: Any, _: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=administrators if may_administer(caller_of(ctx.request)) else everyone)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            return failure(ToolFailure("NOT_FOUND", f"no such tool; the tools are {', '.join(specs)}"))
        if not capacity.enter():
            return failure(ToolFailure("BUSY", f"the server is at capacity ({capacity.limit} calls running); "
                                       "retry shortly", retry_after=BUSY_RETRY_AFTER_S), spec.errors)
        started = time.monotonic()
        keeper = database_keeper_of(backend)  # looked up per call: a server starts it after building this
        try:
            arguments = parse_arguments(spec.arguments, params.arguments)
            if keeper is not None and keeper.lost:
                return failure(DATABASE_RESTARTING, spec.errors)
            caller = caller_of(ctx.request)
            if caller is not None and limiter is not None:
                await anyio.to_thread.run_sync(limiter.charge, caller, spec.cost(arguments))
            call_context = context if caller is None else replace(context, caller=caller)
            if spec.read_only and replicas is not None:
                text = await anyio.to_thread.run_sync(run_on_replica, replicas, spec, call_context, arguments,
                                                      limiter=tool_threads)
            else:
                text = await anyio.to_thread.run_sync(spec.run, call_context, arguments, limiter=tool_threads)
        except Exception as error:  # the boundary: whatever happened, the client gets the envelope
            if keeper is not None and _database_unreachable(error) and keeper.accounts_for(started):
                return failure(DATABASE_RESTARTING, spec.errors)  # the keeper logs the outage once, not each call
            return failure(classify(error, spec.name), spec.errors)
        finally:
            capacity.leave()
        return success(text)

    return Server(
        "quarry",
        version=server_version(),
        title="Quarry",
        description="Hybrid search over documentation and code",
        instructions=profile.instructions,
        # Without it the SDK runs the whole tools/list handler on every 2026-07-28 tools/call, to find the
        # schema it checks Mcp-Param-* headers against (1.5-2 ms of the event loop per call, in process).
        get_tool_input_schema=input_schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def run_on_replica(replicas: ReplicaSet, spec: ToolSpec[Any], context: ToolContext, arguments: Any) -> str:
    """A read-only tool on a replica's pool (or the primary's, when none is usable or the replica fails)."""
    return replicas.run_read(lambda pool: spec.run(replace(context, backend=on_pool(context.backend, pool)),
                                                   arguments))


#: What a BUSY answer suggests waiting: about one search's time on a loaded server.
BUSY_RETRY_AFTER_S = 0.25

#: The answer while an embedded database that went away is being started again (a start takes a second or two).
DATABASE_RESTARTING = ToolFailure("UNAVAILABLE", "the embedded database went away and is being started again; "
                                  "retry in a moment", retry_after=1.0)


def _database_unreachable(error: BaseException) -> bool:
    """A failure to reach the database at all: no pooled connection, or a connection that broke."""
    # a statement timeout is an OperationalError too, but a database that answered too slowly is not an outage
    return isinstance(error, psycopg_pool.PoolTimeout) or (
        isinstance(error, psycopg.OperationalError) and not isinstance(error, psycopg.errors.QueryCanceled))


class InFlight:
    """A count of running tool calls with a ceiling: past it, calls are refused, not queued.

    Queueing under overload only makes every caller wait (and time out) together; an
    immediate BUSY lets an assistant back off or try another replica.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self._running >= self.limit:
                return False
            self._running += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._running -= 1


def server_version() -> str:
    try:
        return metadata.version("quarry")
    except metadata.PackageNotFoundError:
        return "0"


def warm_up(backend: Backend) -> None:
    """Start a serving process's background work: load the query embedders and the reranker, so the first
    search does not wait, and keep an embedded database running (``Runtime.keep_embedded_server``)."""
    if isinstance(backend, Runtime):
        backend.keep_embedded_server()

    def load() -> None:
        try:
            _ = backend.embedders[TEXT_SPACE]
        except Exception:  # a broken model shows up (and degrades) on the first search instead
            logger.warning("the query embedder did not load; searches will run keyword-only", exc_info=True)
        try:
            _ = backend.reranker
        except Exception:  # e.g. a cross-encoder directory that is not a model: said on every search
            logger.warning("the reranker did not load; searches will keep the fused order", exc_info=True)

    threading.Thread(target=load, name="quarry-warm-up", daemon=True).start()


def serve_stdio(backend: Backend) -> None:
    """Serve MCP over stdin/stdout until the client closes stdin (no keys: the client owns this process).

    The tools are the profile ``QUARRY_TOOLS`` names (``quarry mcp --tools`` sets it)."""
    server = build_server(backend)
    warm_up(backend)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
