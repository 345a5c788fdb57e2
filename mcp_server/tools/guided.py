"""``guided_query``: route, suggest, then count or search, in one call with a ``decision_trace``.

1. The source: ``source`` when given, else the one ``filters.source_slug.any_of`` names,
   else ``route_sources``' recommendation (none: every source is searched).
2. With a source, ``suggest_query_params`` proposes filters; the caller's filters win
   on every facet they set.
3. The tool: ``preferred_tool`` when not ``auto``; with ``auto``, ``count`` when the
   suggestion says so, the ``full`` preset when it recommends whole documents, else
   ``detailed``. ``fast``, ``detailed`` and ``full`` are ``advanced_search`` presets.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from engine.errors import InvalidRequestError
from engine.retrieval.request import NO_RERANK_REQUESTED, SearchRequest
from engine.retrieval.routing import recommended
from engine.retrieval.suggestions import Suggestion, suggest_query_params
from mcp_server.bounds import bounded_json
from mcp_server.limits import MAX_RESULTS
from mcp_server.schemas import _STRICT, Filters, QueryText
from mcp_server.tools import ToolContext, ToolSpec
from mcp_server.tools.count import count_payload
from mcp_server.tools.outputs import shape
from mcp_server.tools.presets import FAST_NO_RERANK, Preset
from mcp_server.tools.routing import ranked_row, route
from mcp_server.tools.search import search_payload

PreferredTool = Literal["auto", "count", "fast", "detailed", "full"]
SourceSlug = Annotated[str, StringConstraints(min_length=1, max_length=63)]
DEFAULT_TOP_K = 5
RANKED_IN_TRACE = 3


class GuidedQueryArgs(BaseModel):
    model_config = _STRICT

    user_query: QueryText
    source: SourceSlug | None = Field(default=None, description="Omit to let routing choose.")
    filters: Filters | None = Field(default=None)
    top_k: int | None = Field(default=None, ge=1, le=MAX_RESULTS, description=f"Default {DEFAULT_TOP_K}.")
    preferred_tool: PreferredTool = Field(default="auto", description="count, or an advanced_search preset.")


def run_guided_query(context: ToolContext, args: GuidedQueryArgs) -> str:
    caller_filters = args.filters.as_engine_filters() if args.filters is not None else {}
    named = [str(slug) for slug in (caller_filters.get("source_slug") or {}).get("any_of") or []]
    if args.source is not None and named:
        raise InvalidRequestError("source: give the source either as source or as filters.source_slug, not both")
    trace: dict[str, Any] = {"input_source": args.source, "routed_source": None, "ranked_sources": []}
    notes: list[str] = []
    selected: str | None = args.source or (named[0] if len(named) == 1 else None)
    degraded: list[str] = []
    if selected is None and not named:
        ranked, degradation = route(context, args.user_query)
        degraded += degradation.reasons
        best = recommended(ranked)
        selected = best.signals.slug if best is not None else None
        trace["routed_source"] = selected
        trace["ranked_sources"] = [{"slug": row["slug"], "score": row["score"], "signals": row["signals"]}
                                   for row in (ranked_row(rank, source)
                                               for rank, source in enumerate(ranked[:RANKED_IN_TRACE], 1))]
    trace["selected_source"] = selected
    suggestion = suggest_query_params(context.backend.pool, selected, args.user_query) if selected else None
    filters: dict[str, Any] = {**(suggestion.filters if suggestion else {}), **caller_filters}
    trace["suggested_filters"] = suggestion.filters if suggestion else None
    trace["suggested_fields"] = sorted(suggestion.filters) if suggestion else []
    tool = _select_tool(args.preferred_tool, suggestion)
    trace["selected_tool"] = "count" if tool == "count" else "advanced_search"
    trace["preset"] = None if tool == "count" else tool
    trace["explanation"] = _explain(args, selected, suggestion, tool, named)
    trace["filters"] = filters or None
    texts: list[dict[str, Any]] = []
    droppable: list[list[Any]] = []
    if tool == "count":
        result = count_payload(context, args.user_query, filters or None)
        trace["rerank"] = {"reranked": False, "skipped_reason": "count does not rank"}
        droppable.append(result["sample"])
    else:
        fast = tool == "fast"
        request = SearchRequest((args.user_query,), limit=args.top_k or DEFAULT_TOP_K, rerank=not fast,
                                filters=filters or None,
                                no_rerank_reason=FAST_NO_RERANK if fast else NO_RERANK_REQUESTED)
        result, texts = search_payload(context, request, tool)
        trace["rerank"] = {"reranked": result["reranked"], "skipped_reason": result["rerank_skipped_reason"]}
        droppable.append(result["results"])
    if degraded:
        notes.append("routing: " + "; ".join(degraded) + " (the centroid signal was left out)")
    payload: dict[str, Any] = {"decision_trace": trace, "result": result, "notes": notes, "truncated": False}
    return bounded_json(payload, texts, droppable=droppable, dropped_key="omitted_results")


def _select_tool(preferred: PreferredTool, suggestion: Suggestion | None) -> Literal["count"] | Preset:
    if preferred != "auto":
        return preferred
    if suggestion is not None and suggestion.use_count_tool:
        return "count"
    if suggestion is not None and suggestion.recommended_tool == "query_documents":
        return "full"
    return "detailed"


def _explain(args: GuidedQueryArgs, selected: str | None, suggestion: Suggestion | None, tool: str,
             named: list[str]) -> str:
    if args.source is not None:
        parts = [f"source '{selected}' was given"]
    elif named:
        parts = ["the source came from filters.source_slug"]
    elif selected is not None:
        parts = [f"routing recommended '{selected}'"]
    else:
        parts = ["routing found no source with evidence, so every source is searched"]
    if suggestion is not None:
        parts += suggestion.explanation
    if args.preferred_tool != "auto":
        parts.append(f"preferred_tool={args.preferred_tool!r} was requested")
    else:
        parts.append("count was chosen" if tool == "count" else f"advanced_search with preset {tool!r} was chosen")
    return "; ".join(parts)


GUIDED_QUERY = ToolSpec(
    name="guided_query",
    title="Ask a question in one call",
    description="One call: choose the source, apply suggested filters, count or search; with decision_trace.",
    arguments=GuidedQueryArgs,
    run=run_guided_query,
    cost=lambda _: 2,
    output_schema=shape({"decision_trace": "object", "result": "object"}),
)
