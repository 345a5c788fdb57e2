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
from engine.store.replicas import ReplicaSet
from mcp_server.auth import caller_of
from mcp_server.backend import Backend, database_keeper_of, on_pool, replicas_of
from mcp_server.envelope import ToolFailure, classify, failure, success
from mcp_server.flow_gate import FlowGate
from mcp_server.ratelimit import RateLimiter
from mcp_server.schemas import parse_arguments, published_schema
from mcp_server.tools import ToolContext, ToolSpec, all_tools

logger = logging.getLogger("quarry.mcp")

INSTRUCTIONS = """\
Quarry searches an indexed corpus of documentation and source code (docs sites, code repositories, \
standalone pages), ranking by keyword and semantic similarity together.

How to work with it:
1. Start with `search` for a question, an error message, an API or identifier name.
2. For several phrasings of one need, or to restrict by source, language, package, kind or format, call \
`facets` first to see which filter values exist, then `advanced_search` with `queries` and `filters`.
3. Results are chunks of documents. Read around a hit with `get_chunk` (neighbouring chunks) or \
`get_document` (the whole document, page by page via `next_cursor`); `read_document_bytes` returns exact \
raw bytes, e.g. a chunk's start_byte/end_byte span.
4. For "how many" questions use `count`; for whole pages `query_documents`; to cite, `generate_urls`. \
When unsure which source to ask, `route_sources` ranks them and `suggest_query_params` proposes filters; \
`guided_query` does routing, suggestion and the search or count in one call and explains its choices.
5. For the user's version, filter `advanced_search` on `language_target` / `sdk_dependency` with \
`version_satisfies` (a node-semver range); `version_match: "strict"` never substitutes another version.
6. `list_sources` shows what is indexed; `status` shows health, models, embedding coverage and limits; \
`jobs` shows ingestion jobs. `vector_*` tools store and search your own embeddings.

Reading results: `confidence` (0-1) is how strongly retrieval ranked a chunk; `trust_score` (0-1) is how \
far to trust its source, explained by `confidence_factors` (attribution, verification, freshness, \
deprecation, version match). When sources disagree prefer higher trust; be careful with deprecated ones. \
`degraded: true` means part of the search failed and the results come from what still worked \
(`degradation_reason` and `hybrid_leg_failed` say what); they are usable but may be ranked less well. \
`reranked: false` with `rerank_skipped_reason` means the fused order was kept. `notes` explain arguments \
that had no effect. Long content is cut to keep responses under 256 KiB and marked `truncated: true`; \
read the rest with get_chunk, get_document or read_document_bytes.

Errors arrive as {"error": {"code", "message", "problems": [{"path", "rule"}]}}: INVALID (fix the named \
argument), LIMIT (ask for less: fewer queries, a smaller limit), NOT_FOUND (an unknown id: search again), \
RATE_LIMITED (wait retry_after seconds), UNAUTHORIZED (API key missing, revoked or without the needed \
scope), UNAVAILABLE (a dependency is down: retry later), BUSY (the server is at capacity: retry after \
retry_after seconds), FLOW_GATE (call suggest_query_params for that \
source first), INTERNAL (a bug: quote error_id)."""

_READ_ONLY = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False)
_CHANGES_STATE = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                       open_world_hint=False)


def build_server(backend: Backend, *, limiter: RateLimiter | None = None,
                 tools: Sequence[ToolSpec[Any]] | None = None) -> Server[Any]:
    """The MCP server for ``backend``; ``limiter`` meters callers that authenticated with a key.

    ``tools`` defaults to every tool, behind the flow gate the settings configure.
    """
    if tools is None:
        tools = FlowGate.from_settings(backend.settings).wrap(all_tools())
    specs = {spec.name: spec for spec in tools}
    context = ToolContext(backend, limiter.policy if limiter is not None else None)
    capacity = InFlight(backend.settings.max_in_flight)
    # One worker thread per admitted call: anyio's shared pool (40 threads, also used by key
    # checks and /healthz) would otherwise queue calls past 40 behind the in-flight ceiling.
    tool_threads = anyio.CapacityLimiter(backend.settings.max_in_flight)
    replicas = replicas_of(backend)
    catalogue = [
        types.Tool(name=spec.name, title=spec.title, description=spec.description,
                   input_schema=published_schema(spec.arguments),
                   annotations=_READ_ONLY if spec.read_only else _CHANGES_STATE)
        for spec in specs.values()
    ]

    async def list_tools(_: Any, __: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=catalogue)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            return failure(ToolFailure("NOT_FOUND", f"no such tool; the tools are {', '.join(specs)}"))
        if not capacity.enter():
            return failure(ToolFailure("BUSY", f"the server is at capacity ({capacity.limit} calls running); "
                                       "retry shortly", retry_after=BUSY_RETRY_AFTER_S))
        started = time.monotonic()
        keeper = database_keeper_of(backend)  # looked up per call: a server starts it after building this
        try:
            arguments = parse_arguments(spec.arguments, params.arguments)
            if keeper is not None and keeper.lost:
                return failure(DATABASE_RESTARTING)
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
                return failure(DATABASE_RESTARTING)  # the keeper logs the outage once, not each call
            return failure(classify(error, spec.name))
        finally:
            capacity.leave()
        return success(text)

    return Server(
        "quarry",
        version=server_version(),
        title="Quarry",
        description="Hybrid search over documentation and code",
        instructions=INSTRUCTIONS,
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
    """Serve MCP over stdin/stdout until the client closes stdin (no keys: the client owns this process)."""
    server = build_server(backend)
    warm_up(backend)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
