"""``search`` and ``advanced_search``: hybrid retrieval, reranking, confidence, trust and honest degradation.

Query embeddings are computed here, per space, before the SQL call, so a failing model
is seen for what it is: its vector leg drops out and the response says so
(``degraded``, ``degradation_reason``, ``hybrid_leg_failed``); a search with no leg
left fails with ``UNAVAILABLE``. A leg that errors inside SQL is dropped there and
reported the same way. A failed rerank keeps the fused order (``reranked: false``);
no configured reranker is not a failure, and the response says why it was skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg

from engine.embed.base import CODE_SPACE, TEXT_SPACE, Vectors
from engine.errors import ProviderError
from engine.facets import VERSION_FACETS
from engine.search import CodeMode, Filters, SearchHit, VersionMatchMode, fused_confidence, search, version_hint
from mcp_server.bounds import bounded_json
from mcp_server.envelope import Problem, ToolFailure, new_error_id
from mcp_server.schemas import AdvancedSearchArgs, SearchArgs
from mcp_server.tools import ToolContext, ToolSpec

logger = logging.getLogger("quarry.mcp")

#: Fused candidates handed to the reranker: enough to reorder, few enough for its latency budget.
RERANK_CANDIDATES = 30
#: Characters of a chunk the reranker sees (with its title and headings in front).
RERANK_DOCUMENT_CHARS = 4_000
_NO_RERANKER = ("no reranker is configured on this server (set VOYAGE_API_KEY, or QUARRY_RERANKER="
                "cross-encoder:/path/to/model); results keep the fused retrieval order")


@dataclass(frozen=True, slots=True)
class _Plan:
    queries: list[str]
    mode: Literal["hybrid", "fts", "vector"]
    code_mode: CodeMode
    limit: int
    rerank: bool
    rerank_instructions: str | None
    filters: Filters | None
    version_match: VersionMatchMode


@dataclass(slots=True)
class _Degradation:
    reasons: list[str] = field(default_factory=list)
    failed_legs: list[str] = field(default_factory=list)

    def leg_failed(self, leg: str, reason: str) -> None:
        self.failed_legs.append(leg)
        self.reasons.append(reason)


def run_search(context: ToolContext, args: SearchArgs) -> str:
    return _execute(context, _Plan([args.query], args.mode, args.code_mode, args.limit, True, None, None,
                                   "permissive"))


def run_advanced_search(context: ToolContext, args: AdvancedSearchArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    return _execute(context, _Plan(list(args.queries), args.mode, args.code_mode, args.limit, args.rerank,
                                   args.rerank_instructions, filters or None, args.version_match))


def check_version_ranges(context: ToolContext, filters: Filters | None) -> None:
    """Reject a version_satisfies the SQL parser refuses, as INVALID naming its path (never echoing it)."""
    for facet in VERSION_FACETS:
        requested = (filters or {}).get(facet, {}).get("version_satisfies")
        if not isinstance(requested, str):
            continue
        try:
            with context.backend.pool.connection() as conn:
                conn.execute("select quarry.version_range(%s)", (requested,))
        except psycopg.errors.InvalidParameterValue:
            raise ToolFailure("INVALID", f"invalid arguments: filters.{facet}.version_satisfies: {_RANGE_RULE}",
                              problems=[Problem(f"filters.{facet}.version_satisfies", _RANGE_RULE)]) from None


_RANGE_RULE = ("must be a node-semver range such as '^0.17', '>=0.8 <0.9', '~1.2.3', '1.2.x || 2' or '1.0 - 2.0' "
               "(comparators <, <=, >, >=, =; ^ and ~; x-ranges; hyphen ranges; || between alternatives)")


def _execute(context: ToolContext, plan: _Plan) -> str:
    backend = context.backend
    check_version_ranges(context, plan.filters)
    queries = list(dict.fromkeys(plan.queries))
    degradation = _Degradation()
    mode = plan.mode
    code_mode: CodeMode = plan.code_mode if mode != "fts" else "off"
    text_vectors = code_vectors = None
    if mode != "fts":
        if code_mode != "exclusive":
            text_vectors = _embed_queries(context, TEXT_SPACE, queries, degradation)
        if code_mode != "off":
            code_vectors = _embed_queries(context, CODE_SPACE, queries, degradation)
        if text_vectors is None and code_vectors is None:
            if mode == "vector":
                error_id = new_error_id()
                logger.warning("vector search impossible %s: %s", error_id, "; ".join(degradation.reasons))
                raise ToolFailure("UNAVAILABLE", "the embedding model failed, so a vector-only search cannot run; "
                                  "retry with mode='hybrid' or mode='fts'; " + "; ".join(degradation.reasons),
                                  error_id=error_id)
            mode = "fts"
        code_mode = code_mode if code_vectors is not None else "off"
    rrf_k = backend.settings.rrf_k
    rerank = plan.rerank and backend.reranker is not None
    depth = max(plan.limit, RERANK_CANDIDATES) if rerank else plan.limit
    outcome = search(backend.pool, None, queries, query_vectors=text_vectors, code_vectors=code_vectors,
                     code_mode=code_mode, mode=mode, limit=depth, filters=plan.filters,
                     version_match=plan.version_match, rrf_k=rrf_k,
                     query_model=_model_name(context, TEXT_SPACE, text_vectors),
                     code_query_model=_model_name(context, CODE_SPACE, code_vectors))
    for leg, reason in outcome.failed_legs.items():
        degradation.leg_failed(leg, reason)
    legs = (mode != "vector") + (text_vectors is not None) + (code_vectors is not None) - len(outcome.failed_legs)
    results = [_result(rank, hit, legs=max(1, legs), queries=len(queries), rrf_k=rrf_k)
               for rank, hit in enumerate(outcome.hits, 1)]
    rerank_note = _rerank(context, plan, queries[0], outcome.hits, results, degradation) if rerank else None
    results = results[:plan.limit]
    for rank, row in enumerate(results, 1):
        row["rank"] = rank

    notes: list[str] = []
    if plan.rerank_instructions is not None and not rerank:
        notes.append("rerank_instructions were not used: " + (_NO_RERANKER if plan.rerank else "rerank=false"))
    if rerank_note:
        notes.append(rerank_note)
    payload: dict[str, Any] = {
        "results": results,
        "result_count": len(results),
        "query_count": len(queries),
        "mode": plan.mode,
        "mode_used": mode,
        "code_mode": plan.code_mode,
        "code_mode_used": code_mode,
        "vector_spaces": [space for space, vectors in ((TEXT_SPACE, text_vectors), (CODE_SPACE, code_vectors))
                          if vectors is not None and _leg_of(space) not in outcome.failed_legs],
        "reranked": any(row["reranked"] for row in results),
        "rerank_skipped_reason": None if rerank else (_NO_RERANKER if plan.rerank else "rerank=false was requested"),
        "degraded": bool(degradation.reasons),
        "degradation_reason": "; ".join(degradation.reasons) or None,
        "hybrid_leg_failed": _leg_summary(degradation.failed_legs),
        "version_match": plan.version_match,
    }
    if plan.filters:
        payload["filters"] = plan.filters
        if not results and plan.version_match == "strict" and _has_version_rule(plan.filters):
            payload["version_hint"] = version_hint(backend.pool, plan.filters)
            notes.append("strict version matching left nothing; version_hint lists the versions that are indexed "
                         "for the requested languages / packages (no other version was substituted)")
    payload["notes"] = notes
    payload["truncated"] = False
    return bounded_json(payload, results, droppable=[results], dropped_key="omitted_results")


def _model_name(context: ToolContext, space: str, vectors: Vectors | None) -> str | None:
    return context.backend.embedders[space].model_name if vectors is not None else None


def _embed_queries(context: ToolContext, space: str, queries: list[str], degradation: _Degradation) -> Vectors | None:
    try:
        return context.backend.embedders[space].embed_queries(queries)
    except Exception as error:  # any model failure: the other legs can still answer
        leg = _leg_of(space)
        if isinstance(error, ProviderError):
            reason = f"query_embedding_failed ({space} space): {error.reason}"
        else:
            error_id = new_error_id()
            logger.warning("query embedding failed %s", error_id, exc_info=error)
            reason = f"query_embedding_failed ({space} space): {type(error).__name__}, error_id {error_id}"
        degradation.leg_failed(leg, reason + f"; the {leg} leg was left out")
        return None


def _rerank(context: ToolContext, plan: _Plan, query: str, hits: list[SearchHit], results: list[dict[str, Any]],
            degradation: _Degradation) -> str | None:
    reranker = context.backend.reranker
    assert reranker is not None
    if not hits:
        return None
    documents = [_rerank_text(hit) for hit in hits]
    try:
        scored = reranker.rerank(query, documents, instructions=plan.rerank_instructions, top_k=plan.limit)
    except ProviderError as error:
        degradation.reasons.append(f"rerank_failed: {error.reason}; results keep the fused order")
        return None
    except Exception as error:
        error_id = new_error_id()
        logger.warning("rerank failed %s", error_id, exc_info=error)
        degradation.reasons.append(f"rerank_failed: {type(error).__name__}, error_id {error_id}; "
                                   "results keep the fused order")
        return None
    reordered = []
    for item in scored:
        row = results[item.index]
        row["reranked"] = True
        row["rerank_score"] = round(item.relevance_score, 4)
        row["fused_rank"] = row["rank"]
        row["confidence"] = round(item.relevance_score, 4)
        reordered.append(row)
    results[:] = reordered
    note = f"reranked by {reranker.model_name}"
    if len(set(plan.queries)) > 1:
        note += " against the first query"
    if plan.rerank_instructions is not None and not getattr(reranker, "follows_instructions", True):
        note += "; this reranker cannot follow rerank_instructions, so they were not applied"
    return note


def _rerank_text(hit: SearchHit) -> str:
    context = hit.symbol_path or " > ".join([hit.title, *hit.heading_path[1:]] if hit.heading_path else [hit.title])
    return f"{context}\n{hit.content}"[:RERANK_DOCUMENT_CHARS]


def _leg_of(space: str) -> str:
    return "vector" if space == TEXT_SPACE else "code"


def _leg_summary(failed_legs: list[str]) -> str | None:
    """hybrid_leg_failed: "fts", "vector" (the general vector leg, or every vector leg), "code" (only
    the code-space leg); legs joined by '+' when the keyword leg and a vector leg both failed."""
    legs = set(failed_legs)
    if {"vector", "code"} <= legs:
        legs -= {"code"}
    ordered = [leg for leg in ("fts", "vector", "code") if leg in legs]
    return "+".join(ordered) or None


def _has_version_rule(filters: Filters) -> bool:
    return any("version_satisfies" in filters.get(facet, {}) for facet in ("language_target", "sdk_dependency"))


def _result(rank: int, hit: SearchHit, *, legs: int, queries: int, rrf_k: int) -> dict[str, Any]:
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
        "trust_score": hit.trust["score"],
        "confidence_factors": hit.trust["factors"],
        "version_match": hit.version_match,
        "fts_rank": hit.fts_rank,
        "vector_rank": hit.vector_rank,
        "code_rank": hit.code_rank,
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
        "'vector' is semantic-only. code_mode='on' (default) also searches the code embedding space, "
        "'exclusive' searches only code, 'off' only the general space. Returns up to `limit` (1-50) chunks, "
        "best first, each with chunk_id and document_id, content, source, path, title, url, heading_path or "
        "symbol_path, line span, confidence (0-1: rerank score when reranked, else calibrated retrieval "
        "strength), trust_score with confidence_factors, and per-leg ranks. For several phrasings, filters "
        "(source, language, package, version) or rerank instructions use advanced_search. To read around a "
        "result use get_chunk (neighbours) or get_document."
    ),
    arguments=SearchArgs,
    run=run_search,
    cost=lambda _: 1,
)

ADVANCED_SEARCH = ToolSpec(
    name="advanced_search",
    title="Search with several queries, filters and version matching",
    description=(
        "Search with 1-10 phrasings of the same need (fused; a repeated query counts once) and optional facet "
        "filters. Call `facets` first to learn valid filter values (source slugs, languages, packages). "
        "filters: {\"<facet>\": {\"any_of\": [...], \"none_of\": [...]}}; facets are ANDed, any_of values ORed, "
        "none_of values excluded. Facets: source_slug, language, package (open sets); kind (docs_site, "
        "code_repo, standalone, mixed), attribution (official, maintainer, community, unknown), content_type "
        "(markdown, rst, html, text, code), verified and deprecated (booleans); and the version facets "
        "language_target and sdk_dependency, which also take version_satisfies (a node-semver range), e.g. "
        "{\"sdk_dependency\": {\"any_of\": [\"react\"], \"version_satisfies\": \"^18\"}}. version_match='strict' "
        "keeps only content whose constraints satisfy the range (when nothing is left, version_hint lists the "
        "indexed versions; no other version is substituted); 'permissive' (default) drops breaking mismatches and "
        "ranks unknown or near misses lower. rerank and rerank_instructions (<= 400 characters) steer the "
        "reranker when one is configured; the response says whether reranking ran. Results have the same fields "
        "as `search`, plus version_match per result."
    ),
    arguments=AdvancedSearchArgs,
    run=run_advanced_search,
    cost=_distinct_queries,
)
