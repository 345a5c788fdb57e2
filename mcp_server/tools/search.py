"""``search`` and ``advanced_search``: hybrid retrieval with confidence, trust and honest degradation.

The query embedding is computed here, before the SQL call, so a failing model is
seen for what it is: a hybrid search then runs its keyword leg alone and says so
(``degraded``, ``degradation_reason``, ``hybrid_leg_failed: "vector"``); a
vector-only search has nothing left to run and fails with ``UNAVAILABLE``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from engine.embed.base import Vectors
from engine.search import Filters, SearchHit, fused_confidence, search
from engine.trust import TrustInputs, trust_score
from mcp_server.bounds import bounded_json
from mcp_server.envelope import ToolFailure, new_error_id
from mcp_server.schemas import AdvancedSearchArgs, SearchArgs
from mcp_server.tools import ToolContext, ToolSpec

logger = logging.getLogger("quarry.mcp")

#: The only embedding space the engine has today; a separate code space comes later.
TEXT_SPACE = "text"

_CODE_MODE_NOTE = (
    "code_mode has no effect yet: there is no separate code embedding space, so the vector leg uses the "
    "general 'text' space for on, off and exclusive alike"
)
_VERSION_NOTE = (
    "version_match has no effect yet: version constraints are not extracted, so every result's "
    "version_match factor is 'unknown'"
)
_NO_RERANKER = "no reranker is configured on this server; results keep the fused retrieval order"


@dataclass(frozen=True, slots=True)
class _Plan:
    queries: list[str]
    mode: Literal["hybrid", "fts", "vector"]
    code_mode: str
    limit: int
    rerank: bool
    rerank_instructions: str | None
    filters: Filters | None
    version_match: str | None


@dataclass(slots=True)
class _Degradation:
    reason: str | None = None
    leg_failed: Literal["fts", "vector"] | None = None


def run_search(context: ToolContext, args: SearchArgs) -> str:
    return _execute(context, _Plan([args.query], args.mode, args.code_mode, args.limit, True, None, None, None))


def run_advanced_search(context: ToolContext, args: AdvancedSearchArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    return _execute(context, _Plan(list(args.queries), args.mode, args.code_mode, args.limit, args.rerank,
                                   args.rerank_instructions, filters or None, args.version_match))


def _execute(context: ToolContext, plan: _Plan) -> str:
    backend = context.backend
    queries = list(dict.fromkeys(plan.queries))
    degradation = _Degradation()
    mode = plan.mode
    query_vectors: Vectors | None = None
    if mode != "fts":
        try:
            query_vectors = backend.embedders[TEXT_SPACE].embed_queries(queries)
        except Exception as error:  # any model failure: the keyword leg can still answer
            error_id = new_error_id()
            logger.warning("query embedding failed %s", error_id, exc_info=error)
            if mode == "vector":
                raise ToolFailure("UNAVAILABLE", "the embedding model failed, so a vector-only search cannot run; "
                                  "retry with mode='hybrid' or mode='fts'", error_id=error_id) from None
            mode = "fts"
            degradation = _Degradation(
                f"the query embedding failed ({type(error).__name__}, error_id {error_id}); "
                "results come from the keyword leg alone", "vector")
    rrf_k = backend.settings.rrf_k
    hits = search(backend.pool, None, queries, query_vectors=query_vectors, mode=mode, limit=plan.limit,
                  filters=plan.filters, space=TEXT_SPACE, rrf_k=rrf_k)
    legs = 2 if mode == "hybrid" else 1
    results = [_result(rank, hit, legs=legs, queries=len(queries), rrf_k=rrf_k) for rank, hit in enumerate(hits, 1)]

    notes: list[str] = []
    if mode != "fts":
        notes.append(_CODE_MODE_NOTE)
    if plan.version_match is not None:
        notes.append(_VERSION_NOTE)
    if plan.rerank_instructions is not None:
        notes.append("rerank_instructions were not used: " + (_NO_RERANKER if plan.rerank else "rerank=false"))
    payload: dict[str, Any] = {
        "results": results,
        "result_count": len(results),
        "query_count": len(queries),
        "mode": plan.mode,
        "mode_used": mode,
        "code_mode": plan.code_mode,
        "vector_spaces": [TEXT_SPACE] if mode != "fts" else [],
        "reranked": False,
        "rerank_skipped_reason": _NO_RERANKER if plan.rerank else "rerank=false was requested",
        "degraded": degradation.reason is not None,
        "degradation_reason": degradation.reason,
        "hybrid_leg_failed": degradation.leg_failed,
    }
    if plan.version_match is not None:
        payload["version_match"] = plan.version_match
        payload["filters"] = plan.filters or {}
    payload["notes"] = notes
    payload["truncated"] = False
    return bounded_json(payload, results, droppable=[results], dropped_key="omitted_results")


def _result(rank: int, hit: SearchHit, *, legs: int, queries: int, rrf_k: int) -> dict[str, Any]:
    trust, factors = trust_score(TrustInputs(
        attribution=hit.attribution, verified=hit.verified, deprecated=hit.deprecated,
        source_kind=hit.source_kind, changed_at=hit.changed_at,
    ))
    return {
        "rank": rank,
        "chunk_id": str(hit.chunk_id),
        "document_id": str(hit.document_id),
        "title": hit.title,
        "path": hit.path,
        "url": hit.url,
        "heading_path": hit.heading_path,
        "symbol_path": hit.symbol_path,
        "start_line": hit.start_line,
        "end_line": hit.end_line,
        "content_type": hit.content_type,
        "language": hit.language,
        "source": {"slug": hit.source_slug, "display_name": hit.source_name, "kind": hit.source_kind},
        "confidence": fused_confidence(hit, legs=legs, queries=queries, rrf_k=rrf_k),
        "trust_score": trust,
        "confidence_factors": factors,
        "fts_rank": hit.fts_rank,
        "vector_rank": hit.vector_rank,
        "reranked": False,
        "content": hit.content,
    }


def _distinct_queries(args: AdvancedSearchArgs) -> int:
    return len(set(args.queries))


SEARCH = ToolSpec(
    name="search",
    title="Search documentation and code",
    description=(
        "Search the indexed documentation and source code with one query: a question, an error message, an "
        "API or identifier name, or keywords. Start here. mode='hybrid' (default) fuses keyword and semantic "
        "ranking and suits almost everything; 'fts' is keyword-only (exact identifiers, no embedding call); "
        "'vector' is semantic-only. Returns up to `limit` (1-50) chunks, best first, each with chunk_id and "
        "document_id, content, source, path, title, url, heading_path or symbol_path, line span, confidence "
        "(0-1, retrieval strength), trust_score with confidence_factors, and per-leg ranks. For several "
        "phrasings or filters (source, language, package, kind) use advanced_search. To read around a result "
        "use get_chunk (neighbours) or get_document."
    ),
    arguments=SearchArgs,
    run=run_search,
    cost=lambda _: 1,
)

ADVANCED_SEARCH = ToolSpec(
    name="advanced_search",
    title="Search with several queries and filters",
    description=(
        "Search with 1-10 phrasings of the same need (fused by reciprocal rank; a repeated query counts once) "
        "and optional facet filters. Call `facets` first to learn valid filter values (source slugs, languages, "
        "packages). filters: {\"<facet>\": {\"any_of\": [...], \"none_of\": [...]}}; facets are ANDed, any_of "
        "values ORed, none_of values excluded. Facets: source_slug, language, package (open sets); kind "
        "(docs_site, code_repo, standalone, mixed), attribution (official, maintainer, community, unknown), "
        "content_type (markdown, rst, html, text, code), verified and deprecated (booleans). rerank and "
        "rerank_instructions (<= 400 characters) steer the reranker when one is configured; the response says "
        "whether reranking ran. Results have the same fields as `search`."
    ),
    arguments=AdvancedSearchArgs,
    run=run_advanced_search,
    cost=_distinct_queries,
)
