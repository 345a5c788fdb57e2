"""Search: embed the queries, run ``quarry.search_hits`` (one statement), return typed hits."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pgvector import Vector
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder, Vectors

SearchMode = Literal["hybrid", "fts", "vector"]
Fusion = Literal["rrf", "convex"]
FacetValue = str | bool
#: ``{"language": {"any_of": ["python"]}, "kind": {"none_of": ["standalone"]}}``
Filters = Mapping[str, Mapping[str, Sequence[FacetValue]]]


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
    fused_score: float
    fts_rank: int | None
    vector_rank: int | None
    fts_score: float | None
    vector_similarity: float | None


def filters_json(filters: Filters | None) -> str | None:
    """Filters as the jsonb ``quarry.hybrid_search`` evaluates; booleans become 'true'/'false'."""
    if not filters:
        return None

    def text(value: FacetValue) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else value

    return json.dumps({
        facet: {rule: [text(value) for value in values] for rule, values in rules.items()}
        for facet, rules in filters.items()
    })


def search(
    pool: ConnectionPool,
    embedder: Embedder | None,
    queries: str | Sequence[str],
    *,
    query_vectors: Vectors | None = None,
    mode: SearchMode = "hybrid",
    limit: int = 10,
    sources: Sequence[str] | None = None,
    filters: Filters | None = None,
    space: str = "text",
    rrf_k: int = 60,
    candidates: int = 50,
    fusion: Fusion = "convex",
    vector_weight: float = 0.45,
    code_vector_weight: float = 0.8,
) -> list[SearchHit]:
    """Ranked chunks for one or more distinct queries; ``fts`` mode never calls the embedder.

    ``query_vectors`` (one row per query, in order) skips the embedder: callers that
    embed first to handle a model failure, or benchmarks that embed once, pass them.
    """
    texts = [queries] if isinstance(queries, str) else list(dict.fromkeys(queries))
    embeddings: list[Vector] | None = None
    if mode != "fts":
        if query_vectors is None:
            if embedder is None:
                raise ValueError(f"{mode} search needs an embedder or query vectors")
            query_vectors = embedder.embed_queries(texts)
        if len(query_vectors) != len(texts):
            raise ValueError(f"got {len(query_vectors)} query vectors for {len(texts)} distinct queries")
        embeddings = [Vector(vector) for vector in query_vectors]
    combined: dict[str, Any] = dict(filters or {})
    if sources:
        combined["source_slug"] = {"any_of": list(sources)}
    with pool.connection() as conn, conn.cursor(row_factory=class_row(SearchHit)) as cursor:
        cursor.execute(
            "select * from quarry.search_hits(%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s)",
            (texts, embeddings, mode, limit, filters_json(combined), space, max(candidates, limit), rrf_k,
             fusion, vector_weight, code_vector_weight),
        )
        return cursor.fetchall()


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
    if hit.vector_similarity is None:
        return round(0.5 * relative, 4)
    absolute = (hit.vector_similarity - _UNRELATED_SIMILARITY) / (_CLOSE_SIMILARITY - _UNRELATED_SIMILARITY)
    return round(0.5 * relative + 0.5 * min(1.0, max(0.0, absolute)), 4)
