"""The docs-server contract's discovery tools: ``list_namespaces``, ``namespace_router``, ``suggest_query_params``.

A namespace is a source slug. The namespace list is cached in the process for ``CACHE_TTL_S``
(the contract's ~30 minutes; responses say ``cache_hit`` and when the entry expires): routing
and suggestions check a namespace against it, as the contract's server does. Routing and
suggestions are Quarry's (``engine.retrieval.routing``, ``engine.retrieval.suggestions``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints

from engine.retrieval.routing import recommended
from engine.retrieval.suggestions import suggest_query_params
from mcp_server.envelope import to_json
from mcp_server.schemas import _STRICT, NoArgs, QueryText
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape
from mcp_server.tools.routing import MAX_ROUTED_SOURCES, route

CACHE_TTL_S = 1800.0
#: Fields every record (chunk) of a namespace carries, besides the optional language and package.
RECORD_FIELDS = ("document_id", "chunk_id", "title", "url", "path", "heading_path", "symbol_path", "start_line",
                 "end_line", "content_type", "chunk_kind", "kind", "attribution", "verified", "deprecated")

Namespace = Annotated[str, StringConstraints(min_length=1, max_length=63)]

_NAMESPACES = """
    select st.slug, st.chunks,
           exists (select 1 from quarry.documents d where d.source_id = s.id and d.language is not null),
           exists (select 1 from quarry.documents d where d.source_id = s.id and d.package is not null)
    from quarry.source_stats st join quarry.sources s on s.slug = st.slug
    order by st.slug
"""


@dataclass(frozen=True, slots=True)
class NamespaceList:
    namespaces: list[dict[str, Any]]
    expires_at: datetime

    def names(self) -> set[str]:
        return {namespace["name"] for namespace in self.namespaces}


class NamespaceCache:
    """The namespace list, read again once ``ttl_s`` has passed; ``get`` says whether it was a hit."""

    def __init__(self, ttl_s: float = CACHE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._entry: tuple[float, NamespaceList] | None = None
        self._lock = threading.Lock()

    def get(self, context: ToolContext) -> tuple[NamespaceList, bool]:
        now = self._clock()
        with self._lock:
            if self._entry is not None and self._entry[0] > now:
                return self._entry[1], True
        listed = _read(context, self.ttl_s)
        with self._lock:
            self._entry = (now + self.ttl_s, listed)
        return listed, False


def _read(context: ToolContext, ttl_s: float) -> NamespaceList:
    with context.backend.pool.connection() as conn:
        rows = conn.execute(_NAMESPACES).fetchall()
    namespaces = [{"name": slug, "record_count": chunks,
                   "metadata_fields": sorted([*RECORD_FIELDS, *(["language"] if language else []),
                                              *(["package"] if package else [])])}
                  for slug, chunks, language, package in rows]
    return NamespaceList(namespaces, datetime.now(UTC) + timedelta(seconds=ttl_s))


class RouterArgs(BaseModel):
    model_config = _STRICT

    user_query: QueryText
    top_n: int = Field(default=3, ge=1, le=MAX_ROUTED_SOURCES)


class SuggestArgs(BaseModel):
    model_config = _STRICT

    namespace: Namespace = Field(description="Exact namespace, as later calls will pass it")
    user_query: QueryText


#: What ``suggest_query_params`` recommends, in the contract's tool names.
CONTRACT_TOOL = {"count": "count", "query_documents": "query_documents", "advanced_search": "query"}


def namespace_tools(cache: NamespaceCache) -> list[ToolSpec[Any]]:
    def run_list(context: ToolContext, _: NoArgs) -> str:
        listed, hit = cache.get(context)
        return to_json({"status": "success", "cache_hit": hit, "cache_ttl_seconds": int(cache.ttl_s),
                        "expires_at_iso": listed.expires_at.isoformat(), "count": len(listed.namespaces),
                        "namespaces": listed.namespaces})

    def run_router(context: ToolContext, args: RouterArgs) -> str:
        _, hit = cache.get(context)
        ranked, degradation = route(context, args.user_query)
        best = recommended(ranked)
        suggestions = [{"namespace": source.signals.slug, "score": source.score, "rank": rank,
                        "signals": source.components}
                       for rank, source in enumerate(ranked[:args.top_n], 1)]
        return to_json({"status": "success", "cache_hit": hit, "user_query": args.user_query,
                        "suggestions": suggestions, "ordered_by": "score, highest first",
                        "recommended_namespace": best.signals.slug if best is not None else None,
                        **degradation.fields()})

    def run_suggest(context: ToolContext, args: SuggestArgs) -> str:
        listed, hit = cache.get(context)
        if args.namespace not in listed.names():
            return to_json({"status": "success", "cache_hit": hit, "namespace": args.namespace,
                            "namespace_found": False, "suggested_fields": [], "recommended_tool": None,
                            "use_count_tool": False, "metadata_filter": None,
                            "explanation": f"no namespace {args.namespace!r}; the namespaces are "
                                           f"{', '.join(sorted(listed.names()))}"})
        suggestion = suggest_query_params(context.backend.pool, args.namespace, args.user_query)
        metadata_filter = {field: {"$in": rule["any_of"]} for field, rule in suggestion.filters.items()
                           if field != "source_slug" and "any_of" in rule}
        return to_json({"status": "success", "cache_hit": hit, "namespace": args.namespace, "namespace_found": True,
                        "suggested_fields": sorted(metadata_filter), "metadata_filter": metadata_filter or None,
                        "recommended_tool": CONTRACT_TOOL[suggestion.recommended_tool],
                        "use_count_tool": suggestion.use_count_tool,
                        "explanation": "; ".join(suggestion.explanation),
                        "available_values": suggestion.available_values})

    return [
        ToolSpec(name="list_namespaces", title="List namespaces", arguments=NoArgs, run=run_list, cost=one_token,
                 description="Namespaces (sources) with record counts and metadata fields; cached about 30 "
                             "minutes (expires_at_iso).",
                 output_schema=shape({"status": "string", "cache_hit": "boolean", "namespaces": "array"})),
        ToolSpec(name="namespace_router", title="Route to a namespace", arguments=RouterArgs, run=run_router,
                 cost=one_token, description="Rank namespaces for a question (top_n 1-5) and recommend one.",
                 output_schema=shape({"status": "string", "suggestions": "array",
                                      "recommended_namespace": "string?"})),
        ToolSpec(name="suggest_query_params", title="Suggest query parameters", arguments=SuggestArgs,
                 run=run_suggest, cost=one_token,
                 description="Required before query, count and query_documents on a namespace: suggested "
                             "fields, metadata_filter and recommended_tool.",
                 output_schema=shape({"status": "string", "namespace_found": "boolean", "suggested_fields": "array",
                                      "recommended_tool": "string?", "use_count_tool": "boolean"})),
    ]


def suggested_namespace(arguments: BaseModel, text: str) -> str | None:
    """The namespace a suggestion opens the flow gate for: only one that was found."""
    return getattr(arguments, "namespace", None) if '"namespace_found":true' in text else None
