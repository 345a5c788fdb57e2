"""The retrieval pipeline every surface calls: request in, ranked and explained hits out.

    SearchRequest
      -> check version ranges                 (INVALID naming the argument)
      -> embed the queries per space          (a failing model drops its leg: degraded)
      -> quarry.search_hits, one statement    (legs, filters, fusion, confidence, trust)
      -> rerank the top candidates            (a failing reranker keeps the fused order)
      -> group_by="document": rank documents  (engine.retrieval.grouping)
      -> Retrieval: at most ``limit`` RankedHits (or RankedDocuments), what ran and what degraded

MCP tools, ``quarry search``, ``quarry eval`` and bench/ call ``retrieve`` and shape its
result; none re-implements a step or a default.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.corpus.facets import VERSION_FACETS
from engine.embed.base import CODE_SPACE, TEXT_SPACE, Embedder
from engine.errors import InvalidRequestError, NotFoundError, UnavailableError, new_error_id
from engine.rerank.base import Reranker
from engine.retrieval.degradation import Degradation, embed_queries, leg_of
from engine.retrieval.empty_answers import nothing_to_search
from engine.retrieval.grouping import CHUNKS_PER_DOCUMENT, RankedDocument, documents_from_chunks
from engine.retrieval.highlights import Highlighter, Highlights
from engine.retrieval.hits import HitPage, SearchHit, search_hits
from engine.retrieval.request import MAX_DEPTH, CodeMode, Filters, SearchMode, SearchRequest, filters_json
from engine.retrieval.reranking import NO_RERANKER, RerankOutcome, rerank

if TYPE_CHECKING:  # numpy (~80 ms) is imported by what embeds, not by every search: fts needs none
    from engine.embed.base import Vectors

logger = logging.getLogger("quarry.search")


class RetrievalBackend(Protocol):
    """What retrieval needs from a running Quarry (``engine.runtime.Runtime`` is the real one)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def pool(self) -> ConnectionPool: ...

    @property
    def embedders(self) -> Mapping[str, Embedder]:
        """Embedder per space; reading it may load a model, and may raise if the model cannot load."""
        ...

    @property
    def reranker(self) -> Reranker | None:
        """The configured reranker, or None when there is none (offline without a local model)."""
        ...


@dataclass(slots=True)
class RankedHit:
    """A hit at its place in the answer: ``confidence`` is the rerank score when reranked."""

    hit: SearchHit
    rank: int
    confidence: float
    reranked: bool = False
    rerank_score: float | None = None
    #: Its rank before reranking, when reranked.
    fused_rank: int | None = None
    #: Where its content holds the query's terms (None: the keyword leg did not run).
    highlights: Highlights | None = None

    def as_row(self) -> dict[str, Any]:
        """The result row every surface returns (MCP ``search``, ``quarry search --json``)."""
        hit = self.hit
        row: dict[str, Any] = {
            "rank": self.rank,
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
            "confidence": self.confidence,
            "trust_score": hit.trust["score"],
            "confidence_factors": hit.trust["factors"],
            "version_match": hit.version_match,
            "fts_rank": hit.fts_rank,
            "vector_rank": hit.vector_rank,
            "code_rank": hit.code_rank,
            "fusion": {"vector_weight": _rounded(hit.vector_weight_used),
                       "document_share": _rounded(hit.document_share)},
            "reranked": self.reranked,
        }
        if self.reranked:
            row["rerank_score"] = self.rerank_score
            row["fused_rank"] = self.fused_rank
        if self.highlights is not None:
            row["highlights"] = [{"start": start, "end": end} for start, end in self.highlights.spans]
            row["snippet"] = self.highlights.snippet
        row["content"] = hit.content
        return row


@dataclass(slots=True)
class Retrieval:
    """Ranked hits (best first, at most ``request.limit``) and how they were produced.

    With ``group_by="document"``, ``documents`` holds at most ``request.limit`` documents and ``hits``
    every chunk ranked to find them.
    """

    request: SearchRequest
    queries: list[str]
    hits: list[RankedHit]
    mode_used: SearchMode
    code_mode_used: CodeMode
    vector_spaces: list[str]
    rerank: RerankOutcome
    degradation: Degradation
    #: What a reader of the results should know about how they were searched.
    search_notes: list[str] = field(default_factory=list)
    documents: list[RankedDocument] | None = None

    @property
    def rerank_skipped_reason(self) -> str | None:
        if self.rerank.attempted:
            return None
        return NO_RERANKER if self.request.rerank else self.request.no_rerank_reason

    def status(self) -> dict[str, Any]:
        """The fields every retrieving response reports: reranking and degradation."""
        return {
            "reranked": any(hit.reranked for hit in self.hits),
            "rerank_skipped_reason": self.rerank_skipped_reason,
            **self.degradation.fields(),
        }

    def notes(self) -> list[str]:
        notes = list(self.search_notes)
        if self.request.rerank_instructions is not None and not self.rerank.attempted:
            notes.append(f"rerank_instructions were not used: {self.rerank_skipped_reason}")
        if self.rerank.note:
            notes.append(self.rerank.note)
        return notes

    def summary(self) -> dict[str, Any]:
        """The search response every surface shares: result rows, what ran, what degraded."""
        request = self.request
        grouped = self.documents is not None
        rows = [document.as_row() for document in self.documents or ()] if grouped else [
            hit.as_row() for hit in self.hits]
        return {
            "results": rows,
            "result_count": len(rows),
            **({"group_by": "document", "chunks_ranked": len(self.hits)} if grouped else {}),
            "query_count": len(self.queries),
            "mode": request.mode,
            "mode_used": self.mode_used,
            "code_mode": request.code_mode,
            "code_mode_used": self.code_mode_used,
            "vector_spaces": self.vector_spaces,
            **self.status(),
            "version_match": request.version_match,
        }


def retrieve(backend: RetrievalBackend, request: SearchRequest) -> Retrieval:
    """Embed, search, rerank: the top ``request.limit`` hits, with what degraded on the way."""
    check_version_ranges(backend.pool, request.filters)
    queries = request.distinct_queries
    degradation = Degradation()
    notes: list[str] = []
    mode: SearchMode = request.mode
    code_mode: CodeMode = request.code_mode if mode != "fts" else "off"
    text_vectors = code_vectors = None
    if mode != "fts":
        if code_mode != "exclusive":
            text_vectors = embed_queries(backend, TEXT_SPACE, queries, degradation)
        if code_mode == "on" and _one_model_for_both_spaces(backend):
            # the local default: the query is embedded once; its failure is already reported
            code_vectors = text_vectors
            if text_vectors is None:
                degradation.shares_failure("code", of="vector")
        elif code_mode != "off":
            code_vectors = embed_queries(backend, CODE_SPACE, queries, degradation)
        if text_vectors is None and code_vectors is None:
            if mode == "vector":
                error_id = new_error_id()
                logger.warning("vector search impossible %s: %s", error_id, "; ".join(degradation.reasons))
                raise UnavailableError("the embedding model failed, so a vector-only search cannot run; retry "
                                       "with mode='hybrid' or mode='fts'; " + "; ".join(degradation.reasons),
                                       error_id=error_id)
            mode = "fts"
        code_mode = code_mode if code_vectors is not None else "off"
    reranker = backend.reranker if request.rerank else None
    grouped = request.group_by == "document"
    depth = request.limit if reranker is None else max(request.limit, _rerank_depth(request.limit))
    if grouped:
        depth = request.chunk_depth or min(MAX_DEPTH, max(RERANK_CANDIDATES, request.limit * CHUNKS_PER_DOCUMENT))
    elif request.per_document is not None:
        # room to fill the page after the cap: the legs rank 50 candidates either way
        depth = min(MAX_DEPTH, max(depth, request.limit * PER_DOCUMENT_ROOM))
    ranking = request.ranking
    if ranking.rrf_k is None and backend.settings.rrf_k is not None:
        ranking = replace(ranking, rrf_k=backend.settings.rrf_k)
    # Without a reranker the fused order is final, so the database applies the per-document cap and sends
    # only the page; a reranker reorders the candidates first, so then the cap is applied here.
    capped_in_sql = request.per_document is not None and not grouped and reranker is None
    page = search_hits(
        backend.pool, queries, mode=mode, limit=depth, text_vectors=text_vectors, code_vectors=code_vectors,
        code_mode=code_mode, version_match=request.version_match, filters=filters_json(request.combined_filters()),
        query_model=_model_name(backend, TEXT_SPACE, text_vectors),
        code_query_model=_model_name(backend, CODE_SPACE, code_vectors), overrides=ranking.arguments(),
        per_document=request.per_document if capped_in_sql else None,
        page_size=request.limit if capped_in_sql else None)
    for failure in page.failed_legs:
        degradation.leg_failed(failure)
    if "code" in page.redundant_legs:
        notes.append(SHARED_MODEL_NOTE)
    hits = [RankedHit(hit, rank, hit.confidence) for rank, hit in enumerate(page.hits, 1)]
    outcome = RerankOutcome()
    if reranker is not None:
        # documents are ranked from every chunk: the reranker reorders its candidates, dropping none
        candidates = hits[:_rerank_depth(depth if grouped else request.limit)]
        outcome = rerank(reranker, request, queries, candidates, degradation, keep_all=grouped)
        if outcome.reordered is not None:
            hits[:len(outcome.reordered_from)] = outcome.reordered
    if grouped:
        for rank, hit in enumerate(hits, 1):
            hit.rank = rank
        highlighter = Highlighter(page.lexemes) if mode != "vector" and hits else None
        documents = documents_from_chunks(hits, highlighter=highlighter)[:request.limit]
        if not hits:
            notes.extend(_why_nothing_found(backend.pool, request))
        return Retrieval(request, queries, hits, mode, code_mode, _spaces(page, text_vectors, code_vectors), outcome,
                         degradation, notes, documents)
    if request.per_document is not None:
        hits, left_out = ((hits, page.passed_over) if capped_in_sql
                          else _capped_per_document(hits, request.per_document, request.limit))
        if left_out:
            chunks = "1 more chunk of a document" if left_out == 1 else f"{left_out} more chunks of documents"
            notes.append(f"{chunks} already listed left out (at most {request.per_document} per document; "
                         "per_document: null lifts the cap, get_document reads one whole)")
    hits = hits[:request.limit]
    for rank, hit in enumerate(hits, 1):
        hit.rank = rank
    if mode != "vector" and hits:
        highlighter = Highlighter(page.lexemes)
        for hit in hits:
            hit.highlights = highlighter.highlight(hit.hit.content)
    if not hits:
        notes.extend(_why_nothing_found(backend.pool, request))
    return Retrieval(request, queries, hits, mode, code_mode, _spaces(page, text_vectors, code_vectors), outcome,
                     degradation, notes)


def _spaces(page: HitPage, text_vectors: Vectors | None, code_vectors: Vectors | None) -> list[str]:
    """The vector spaces whose legs ran."""
    failed = {failure.leg for failure in page.failed_legs} | set(page.redundant_legs)
    return [space for space, vectors in ((TEXT_SPACE, text_vectors), (CODE_SPACE, code_vectors))
            if vectors is not None and leg_of(space) not in failed]


#: quarry.hybrid_search leaves the code leg out when one model serves both spaces: every code chunk is in the
#: text space with the same vector, and a second leg normalised among code chunks only would lift code into
#: prose questions (docs/BENCHMARKS.md, decisions: one model, no code leg).
SHARED_MODEL_NOTE = ("one model embeds both the text and the code space, so code chunks were ranked by the text "
                     "space's vector leg (a separate code leg would repeat it)")
#: Fused candidates handed to the reranker at least: enough to reorder, few enough for its latency budget.
RERANK_CANDIDATES = 30
#: Candidates reranked at most; deeper rows (an evaluation's 200 chunks) follow in fused order.
MAX_RERANKED = 50


#: Rows fetched per result wanted when results are capped per document.
PER_DOCUMENT_ROOM = 4


def _capped_per_document(hits: list[RankedHit], per_document: int, limit: int) -> tuple[list[RankedHit], int]:
    """The first ``limit`` hits in order with at most ``per_document`` of each document, and how many were
    passed over on the way."""
    seen: dict[UUID, int] = {}
    kept: list[RankedHit] = []
    passed_over = 0
    for ranked in hits:
        if len(kept) == limit:
            break
        document = ranked.hit.document_id
        seen[document] = seen.get(document, 0) + 1
        if seen[document] <= per_document:
            kept.append(ranked)
        else:
            passed_over += 1
    return kept, passed_over


def _why_nothing_found(pool: ConnectionPool, request: SearchRequest) -> list[str]:
    """A note when the corpus, not the query, explains an empty answer (see engine.retrieval.empty_answers)."""
    named = request.combined_filters().get("source_slug", {}).get("any_of", [])
    try:
        reason = nothing_to_search(pool, [str(slug) for slug in named] if not isinstance(named, str) else [named])
    except NotFoundError as unknown:
        reason = str(unknown)
    return [reason] if reason is not None else []


def _rerank_depth(limit: int) -> int:
    return max(RERANK_CANDIDATES, min(limit, MAX_RERANKED))


def _one_model_for_both_spaces(backend: RetrievalBackend) -> bool:
    try:
        embedders = backend.embedders
        return embedders[CODE_SPACE] is embedders[TEXT_SPACE]
    except Exception:  # the model cannot load: embed_queries reports it
        return False


def _model_name(backend: RetrievalBackend, space: str, vectors: Vectors | None) -> str | None:
    return backend.embedders[space].model_name if vectors is not None else None


def check_version_ranges(pool: ConnectionPool, filters: Filters | None) -> None:
    """Reject a version_satisfies the SQL parser refuses, as INVALID naming its path (never echoing it)."""
    for facet in VERSION_FACETS:
        requested = (filters or {}).get(facet, {}).get("version_satisfies")
        if not isinstance(requested, str):
            continue
        try:
            with pool.connection() as conn:
                conn.execute("select quarry.version_range(%s)", (requested,))
        except psycopg.errors.InvalidParameterValue:
            argument = f"filters.{facet}.version_satisfies"
            raise InvalidRequestError(f"invalid arguments: {argument}: {_RANGE_RULE}", argument=argument,
                                      rule=_RANGE_RULE) from None


_RANGE_RULE = ("must be a node-semver range such as '^0.17', '>=0.8 <0.9', '~1.2.3', '1.2.x || 2' or '1.0 - 2.0' "
               "(comparators <, <=, >, >=, =; ^ and ~; x-ranges; hyphen ranges; || between alternatives)")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
