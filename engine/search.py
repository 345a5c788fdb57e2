"""Search: embed the queries, run ``quarry.search_hits`` (one statement), return typed hits."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import psycopg
from pgvector import Vector
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.db import autocommit
from engine.embed.base import CODE_SPACE, TEXT_SPACE, Embedder, Vectors

SearchMode = Literal["hybrid", "fts", "vector"]
Fusion = Literal["rrf", "convex"]
CodeMode = Literal["on", "off", "exclusive"]
VersionMatchMode = Literal["strict", "permissive"]
VersionMatch = Literal["exact", "compatible", "unknown", "mismatch"]
Leg = Literal["fts", "vector", "code"]

FacetValue = str | bool
#: ``{"language": {"any_of": ["python"]}, "sdk_dependency": {"any_of": ["react"], "version_satisfies": "^18"}}``
Filters = Mapping[str, Mapping[str, Sequence[FacetValue] | str]]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked chunk, with where it comes from and how each leg ranked it."""

    chunk_id: UUID
    document_id: UUID
    source_slug: str
    source_name: str
    source_kind: str
    attribution: str
    verified: bool
    deprecated: bool
    changed_at: datetime
    path: str
    title: str
    url: str | None
    heading_path: list[str]
    symbol_path: str | None
    start_line: int
    end_line: int
    content: str
    content_type: str
    language: str | None
    is_code: bool
    fused_score: float
    fts_rank: int | None
    vector_rank: int | None
    code_rank: int | None
    fts_score: float | None
    vector_similarity: float | None
    code_similarity: float | None
    version_match: VersionMatch
    #: ``{"score": 0.82, "factors": {"attribution": {"raw", "value", "weight", "contribution"}, ...}}``
    trust: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """Ranked hits, and the retrieval legs left out (``hybrid_leg_failed``) with why.

    A leg that errored inside SQL reports a generic reason (the database's message is
    logged, not returned); a leg skipped because its space holds another model than the
    queries were embedded with reports that mismatch, which an operator can act on.
    """

    hits: list[SearchHit]
    failed_legs: dict[Leg, str] = field(default_factory=dict)


def filters_json(filters: Filters | None) -> str | None:
    """Filters as the jsonb ``quarry.hybrid_search`` evaluates; booleans become 'true'/'false'."""
    if not filters:
        return None

    def text(value: FacetValue) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else value

    return json.dumps({
        facet: {rule: values if isinstance(values, str) else [text(value) for value in values]
                for rule, values in rules.items()}
        for facet, rules in filters.items()
    })


#: Fusion's vector weights, the defaults of quarry.hybrid_search: prose chosen on SciFact by
#: cross-validation (bench/fusion_weights.py), code on CoSQA's dev split (docs/BENCHMARKS.md).
PROSE_VECTOR_WEIGHT = 0.40
CODE_VECTOR_WEIGHT = 0.8


def search(
    pool: ConnectionPool,
    embedder: Embedder | None,
    queries: str | Sequence[str],
    *,
    query_vectors: Vectors | None = None,
    code_embedder: Embedder | None = None,
    code_vectors: Vectors | None = None,
    code_mode: CodeMode = "off",
    mode: SearchMode = "hybrid",
    limit: int = 10,
    sources: Sequence[str] | None = None,
    filters: Filters | None = None,
    version_match: VersionMatchMode = "permissive",
    query_model: str | None = None,
    code_query_model: str | None = None,
    space: str = TEXT_SPACE,
    rrf_k: int = 60,
    candidates: int = 50,
    fusion: Fusion = "convex",
    vector_weight: float = PROSE_VECTOR_WEIGHT,
    code_vector_weight: float = CODE_VECTOR_WEIGHT,
) -> SearchOutcome:
    """Ranked chunks for one or more distinct queries; ``fts`` mode never calls an embedder.

    ``query_vectors`` / ``code_vectors`` (one row per distinct query, in order) skip the
    embedders: callers that embed first to handle a model failure, or benchmarks that
    embed once, pass them. ``code_mode`` on adds a vector leg over the code space,
    exclusive replaces the text vector leg with it, off ignores it. ``query_model`` /
    ``code_query_model`` name the models behind given vectors (the embedders' names are
    used otherwise): a space embedded by another model sits out instead of ranking noise.
    """
    texts = [queries] if isinstance(queries, str) else list(dict.fromkeys(queries))
    vector_search = mode != "fts"
    text_vectors = query_vectors
    if vector_search and code_mode != "exclusive" and text_vectors is None:
        text_vectors = _embed(embedder, texts, mode, space)
    if vector_search and code_mode != "off" and code_vectors is None:
        shared = code_embedder is embedder and text_vectors is not None and query_vectors is None
        code_vectors = text_vectors if shared else _embed(code_embedder, texts, mode, CODE_SPACE)
    combined: dict[str, Any] = dict(filters or {})
    if sources:
        combined["source_slug"] = {"any_of": list(sources)}
    failed: dict[Leg, str] = {}
    with pool.connection() as conn:
        def on_notice(notice: psycopg.errors.Diagnostic) -> None:
            message = notice.message_primary or ""
            if message.startswith(_LEG_FAILED):
                leg = message.removeprefix(_LEG_FAILED)
                logger.warning("search leg %s failed in the database: %s", leg, notice.message_detail)
                failed[leg] = f"the {leg} leg failed in the database and was left out"  # type: ignore[index]
            elif message.startswith(_LEG_SKIPPED):
                failed[message.removeprefix(_LEG_SKIPPED)] = (  # type: ignore[index]
                    f"{notice.message_detail}; the leg was left out")

        conn.add_notice_handler(on_notice)
        # One read statement: in autocommit it is its own transaction, without BEGIN and COMMIT round trips.
        try:
            with autocommit(conn), conn.cursor(row_factory=class_row(SearchHit)) as cursor:
                cursor.execute(
                    # %b: vectors travel as binary floats (text made the client print and the
                    # server parse 384 decimals each: 0.45 ms of a ~4 ms search)
                    "select * from quarry.search_hits(%s, %b, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %b, %s, %s,"
                    " %s, %s)",
                    (texts, _as_vectors(text_vectors if vector_search else None, texts), mode, limit,
                     filters_json(combined), space, max(candidates, limit), rrf_k, fusion, vector_weight,
                     code_vector_weight, _as_vectors(code_vectors if vector_search else None, texts),
                     code_mode if vector_search else "off", version_match,
                     query_model or (embedder.model_name if embedder is not None else None),
                     code_query_model or (code_embedder.model_name if code_embedder is not None else None)),
                )
                hits = cursor.fetchall()
        finally:
            conn.remove_notice_handler(on_notice)
    return SearchOutcome(hits, failed)


_LEG_FAILED = "quarry: hybrid_leg_failed="
_LEG_SKIPPED = "quarry: hybrid_leg_skipped="
logger = logging.getLogger("quarry.search")


def _embed(embedder: Embedder | None, texts: list[str], mode: str, space: str) -> Vectors:
    if embedder is None:
        raise ValueError(f"{mode} search needs an embedder or query vectors for the {space} space")
    return embedder.embed_queries(texts)


def _as_vectors(vectors: Vectors | None, texts: list[str]) -> list[Vector] | None:
    if vectors is None:
        return None
    if len(vectors) != len(texts):
        raise ValueError(f"got {len(vectors)} query vectors for {len(texts)} distinct queries")
    return [Vector(vector) for vector in vectors]


def version_hint(pool: ConnectionPool, filters: Filters, limit: int = 20) -> list[dict[str, Any]]:
    """Versions indexed for the packages / languages a filter's version rules name (for an empty strict search)."""
    with pool.connection() as conn:
        rows = conn.execute("select * from quarry.version_hint(%s::jsonb, %s)", (filters_json(filters), limit))
        return [{"facet": facet, "name": name or None, "versions": range_text, "as_written": written,
                 "documents": documents}
                for facet, name, range_text, written, documents in rows.fetchall()]


#: Cosine similarities of the local model: ~0.2 for unrelated text, ~0.7 for a close paraphrase.
_UNRELATED_SIMILARITY, _CLOSE_SIMILARITY = 0.2, 0.7


def fused_confidence(hit: SearchHit, *, fusion: Fusion = "convex", legs: int, queries: int, rrf_k: int) -> float:
    """How much the retrieval evidence supports a hit, in [0, 1] (the result's ``confidence``).

    Fused scores are relative: the convex fusion normalises each leg by its best hit, so
    the top hit of any query scores near 1 even when nothing relevant exists. Confidence
    therefore blends the fused score (0.5) with an absolute signal, the query-chunk
    cosine similarity mapped from [0.2, 0.7] to [0, 1] (0.5); a hit only the keyword leg
    found lacks that evidence and stays at or below 0.5. RRF scores are instead divided
    by the best attainable value (first in every leg for every query).
    """
    if fusion == "rrf":
        best = legs * queries / (rrf_k + 1)
        return round(min(1.0, hit.fused_score / best), 4) if best > 0 else 0.0
    relative = min(1.0, max(0.0, hit.fused_score))
    similarities = [s for s in (hit.vector_similarity, hit.code_similarity) if s is not None]
    if not similarities:
        return round(0.5 * relative, 4)
    absolute = (max(similarities) - _UNRELATED_SIMILARITY) / (_CLOSE_SIMILARITY - _UNRELATED_SIMILARITY)
    return round(0.5 * relative + 0.5 * min(1.0, max(0.0, absolute)), 4)
