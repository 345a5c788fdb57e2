"""``search`` and ``advanced_search``: hybrid retrieval, reranking, confidence, trust and honest degradation.

The retrieval itself (embedding, the SQL call, reranking, degradation) is
``engine.retrieval.pipeline``, as for every surface; this module turns it into the two tools' responses,
shaped by ``advanced_search``'s ``preset`` (see ``mcp_server.tools.presets``).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from engine.retrieval.pipeline import retrieve
from engine.retrieval.request import NO_RERANK_REQUESTED, SearchRequest
from engine.retrieval.version_hint import has_version_rule, version_hint
from mcp_server.bounds import bounded_json, response_limit
from mcp_server.schemas import AdvancedSearchArgs, SearchArgs
from mcp_server.token_budget import pack
from mcp_server.tools import ToolContext, ToolSpec
from mcp_server.tools.outputs import shape
from mcp_server.tools.presets import FAST_NO_RERANK, Preset, shape_results

__all__ = ["ADVANCED_SEARCH", "SEARCH", "ordering", "run_advanced_search", "run_search", "search_payload"]


def run_search(context: ToolContext, args: SearchArgs) -> str:
    return _execute(context, SearchRequest((args.query,), args.mode, args.code_mode, args.limit),
                    max_tokens=args.max_tokens)


def run_advanced_search(context: ToolContext, args: AdvancedSearchArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    fast = args.preset == "fast"
    request = SearchRequest(tuple(args.queries), args.mode, args.code_mode, args.limit, rerank=args.rerank and not fast,
                            rerank_instructions=args.rerank_instructions, filters=filters or None,
                            version_match=args.version_match, per_document=args.per_document,
                            no_rerank_reason=FAST_NO_RERANK if fast else NO_RERANK_REQUESTED, group_by=args.group_by)
    return _execute(context, request, args.preset, args.max_tokens)


def _execute(context: ToolContext, request: SearchRequest, preset: Preset = "detailed",
             max_tokens: int | None = None) -> str:
    payload, texts = search_payload(context, request, preset)
    if max_tokens is not None:
        pack(payload, payload["results"], max_tokens)
    return bounded_json(payload, texts, droppable=[payload["results"]], dropped_key="omitted_results",
                        limit=response_limit(max_tokens))


def search_payload(context: ToolContext, request: SearchRequest,
                   preset: Preset = "detailed") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The search response before the size bound, and the dicts whose ``content`` the bound may cut."""
    retrieval = retrieve(context.backend, request)
    payload = retrieval.summary()
    notes = retrieval.notes()
    # a document row carries spans, not content: a preset shapes chunk rows only (fast still skips reranking)
    texts = shape_results(context, preset, payload["results"]) if retrieval.documents is None else []
    if preset != "detailed":
        payload["preset"] = preset
    if request.filters:
        payload["filters"] = request.filters
        if not retrieval.hits and request.version_match == "strict" and has_version_rule(request.filters):
            payload["version_hint"] = version_hint(context.backend.pool, request.filters)
            notes.append("strict version matching left nothing; version_hint lists the versions that are indexed "
                         "for the requested languages / packages (no other version was substituted)")
    payload |= ordering(payload["results"], reranked=payload["reranked"], grouped=retrieval.documents is not None)
    if not payload["confidence_monotone"]:
        notes.append(CONFIDENCE_NOTE)
    payload["notes"] = notes
    payload["truncated"] = False
    return payload, texts


#: Why a lower row can show a higher confidence: quarry.retrieval_confidence blends half the fused score with
#: half the best cosine similarity (an absolute signal), while rows are ordered by the fused score alone.
CONFIDENCE_NOTE = ("confidence is not monotone in rank here: rows are ordered by fused score, while confidence "
                   "also weighs absolute semantic similarity, so a row with weaker keyword evidence can show a "
                   "higher confidence than the one above it")


def ordering(rows: list[dict[str, Any]], *, reranked: bool, grouped: bool) -> dict[str, Any]:
    """``ordered_by`` (what the rows are sorted by) and whether ``confidence`` falls with rank."""
    if grouped:
        ordered_by = "score (document: its best chunk's score plus a little per further matching chunk)"
    elif reranked:
        ordered_by = "rerank_score (confidence), then fused order past the reranked rows"
    else:
        ordered_by = "fused_score (keyword and vector legs fused)"
    confidences = [row["confidence"] for row in rows if isinstance(row.get("confidence"), int | float)]
    monotone = all(earlier >= later for earlier, later in pairwise(confidences))
    return {"ordered_by": ordered_by, "confidence_monotone": monotone}


def _distinct_queries(args: AdvancedSearchArgs) -> int:
    return len(set(args.queries))


RESULTS_SHAPE = shape({"results": "array", "ordered_by": "string", "confidence_monotone": "boolean",
                      "truncated": "boolean"})

SEARCH = ToolSpec(
    name="search",
    title="Search documentation and code",
    description=(
        "Search docs and code with one query; start here. Chunks best first (ordered_by) with content, path, "
        "url, confidence, trust_score."
    ),
    arguments=SearchArgs,
    run=run_search,
    cost=lambda _: 1,
    output_schema=RESULTS_SHAPE,
)

ADVANCED_SEARCH = ToolSpec(
    name="advanced_search",
    title="Search with several queries and filters",
    description=(
        "search with several phrasings, facet filters (values: facets), version matching, rerank "
        "instructions, presets, group_by=document."
    ),
    arguments=AdvancedSearchArgs,
    run=run_advanced_search,
    cost=_distinct_queries,
    output_schema=RESULTS_SHAPE,
    full_filters=True,
)
