"""Retrieval shared by the search tools: embed, search, rerank, degrade honestly.

Query embeddings are computed here, per space, before the SQL call, so a failing model
is seen for what it is: its vector leg drops out and the response says so
(``degraded``, ``degradation_reason``, ``hybrid_leg_failed``); a search with no leg
left fails with ``UNAVAILABLE``. A leg that errors inside SQL is dropped there and
reported the same way. A failed rerank keeps the fused order (``reranked: false``);
no configured reranker is not a failure, and the response says why it was skipped.
``search``/``advanced_search``, ``query_documents``, ``count``, ``route_sources`` and
``guided_query`` all go through ``retrieve`` or ``embed_queries``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg

from engine.embed.base import CODE_SPACE, TEXT_SPACE, Vectors
from engine.errors import ProviderError
from engine.facets import VERSION_FACETS
from engine.search import CodeMode, Filters, SearchHit, VersionMatchMode, fused_confidence, search
from mcp_server.envelope import Problem, ToolFailure, new_error_id
from mcp_server.tools import ToolContext

logger = logging.getLogger("quarry.mcp")

#: Fused candidates handed to the reranker: enough to reorder, few enough for its latency budget.
RERANK_CANDIDATES = 30
#: Characters of a chunk the reranker sees (with its title and headings in front).
RERANK_DOCUMENT_CHARS = 4_000
NO_RERANKER = ("no reranker is configured on this server (set VOYAGE_API_KEY, or QUARRY_RERANKER="
               "cross-encoder:/path/to/model); results keep the fused retrieval order")


@dataclass(frozen=True, slots=True)
class SearchPlan:
    queries: list[str]
    mode: Literal["hybrid", "fts", "vector"]
    code_mode: CodeMode
    limit: int
    rerank: bool
    rerank_instructions: str | None
    filters: Filters | None
    version_match: VersionMatchMode
    #: Why reranking was not asked for, when ``rerank`` is False (``rerank_skipped_reason``).
    no_rerank_reason: str = "rerank=false was requested"


@dataclass(slots=True)
class Degradation:
    reasons: list[str] = field(default_factory=list)
    failed_legs: list[str] = field(default_factory=list)

    def leg_failed(self, leg: str, reason: str) -> None:
        self.failed_legs.append(leg)
        self.reasons.append(reason)


@dataclass(slots=True)
class Retrieval:
    """Ranked result rows (best first, at most ``plan.limit``) and how they were produced."""

    plan: SearchPlan
    queries: list[str]
    results: list[dict[str, Any]]
    mode_used: str
    code_mode_used: CodeMode
    vector_spaces: list[str]
    rerank_attempted: bool
    rerank_note: str | None
    degradation: Degradation

    @property
    def rerank_skipped_reason(self) -> str | None:
        if self.rerank_attempted:
            return None
        return NO_RERANKER if self.plan.rerank else self.plan.no_rerank_reason

    def status(self) -> dict[str, Any]:
        """The response fields every retrieving tool reports: reranking and degradation."""
        return {
            "reranked": any(row["reranked"] for row in self.results),
            "rerank_skipped_reason": self.rerank_skipped_reason,
            "degraded": bool(self.degradation.reasons),
            "degradation_reason": "; ".join(self.degradation.reasons) or None,
            "hybrid_leg_failed": leg_summary(self.degradation.failed_legs),
        }


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


def retrieve(context: ToolContext, plan: SearchPlan) -> Retrieval:
    """Embed, search, rerank: the top ``plan.limit`` result rows, with what degraded on the way."""
    backend = context.backend
    check_version_ranges(context, plan.filters)
    queries = list(dict.fromkeys(plan.queries))
    degradation = Degradation()
    mode = plan.mode
    code_mode: CodeMode = plan.code_mode if mode != "fts" else "off"
    text_vectors = code_vectors = None
    if mode != "fts":
        if code_mode != "exclusive":
            text_vectors = embed_queries(context, TEXT_SPACE, queries, degradation)
        if code_mode != "off":
            embedders = backend.embedders
            if code_mode == "on" and embedders[CODE_SPACE] is embedders[TEXT_SPACE]:
                # one model serves both spaces (the local default): the query is embedded once
                code_vectors = text_vectors
                if text_vectors is None:
                    degradation.failed_legs.append("code")  # the same failure, already reported
            else:
                code_vectors = embed_queries(context, CODE_SPACE, queries, degradation)
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
    results = [result_row(rank, hit, legs=max(1, legs), queries=len(queries), rrf_k=rrf_k)
               for rank, hit in enumerate(outcome.hits, 1)]
    rerank_note = _rerank(context, plan, queries[0], outcome.hits, results, degradation) if rerank else None
    results = results[:plan.limit]
    for rank, row in enumerate(results, 1):
        row["rank"] = rank
    spaces = [space for space, vectors in ((TEXT_SPACE, text_vectors), (CODE_SPACE, code_vectors))
              if vectors is not None and _leg_of(space) not in outcome.failed_legs]
    return Retrieval(plan, queries, results, mode, code_mode, spaces, rerank, rerank_note, degradation)


def _model_name(context: ToolContext, space: str, vectors: Vectors | None) -> str | None:
    return context.backend.embedders[space].model_name if vectors is not None else None


def embed_queries(context: ToolContext, space: str, queries: list[str], degradation: Degradation) -> Vectors | None:
    """Query vectors in ``space``, or None (recorded in ``degradation``) when the model fails."""
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


def _rerank(context: ToolContext, plan: SearchPlan, query: str, hits: list[SearchHit], results: list[dict[str, Any]],
            degradation: Degradation) -> str | None:
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
    if plan.rerank_instructions is not None and not reranker.follows_instructions:
        note += "; this reranker cannot follow rerank_instructions, so they were not applied"
    return note


def _rerank_text(hit: SearchHit) -> str:
    context = hit.symbol_path or " > ".join([hit.title, *hit.heading_path[1:]] if hit.heading_path else [hit.title])
    return f"{context}\n{hit.content}"[:RERANK_DOCUMENT_CHARS]


def _leg_of(space: str) -> str:
    return "vector" if space == TEXT_SPACE else "code"


def leg_summary(failed_legs: list[str]) -> str | None:
    """hybrid_leg_failed: "fts", "vector" (the general vector leg, or every vector leg), "code" (only
    the code-space leg); legs joined by '+' when the keyword leg and a vector leg both failed."""
    legs = set(failed_legs)
    if {"vector", "code"} <= legs:
        legs -= {"code"}
    ordered = [leg for leg in ("fts", "vector", "code") if leg in legs]
    return "+".join(ordered) or None


def result_row(rank: int, hit: SearchHit, *, legs: int, queries: int, rrf_k: int) -> dict[str, Any]:
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
