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

from engine.embed.base import Embedder

SearchMode = Literal["hybrid", "fts", "vector"]
Fusion = Literal["rrf", "convex", "convex_ceiling"]
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
    mode: SearchMode = "hybrid",
    limit: int = 10,
    sources: Sequence[str] | None = None,
    filters: Filters | None = None,
    space: str = "text",
    rrf_k: int = 60,
    candidates: int = 50,
    fusion: Fusion = "convex",
    vector_weight: float = 0.45,
    code_vector_weight: float = 0.7,
) -> list[SearchHit]:
    """Ranked chunks for one or more queries (fused by RRF); ``fts`` mode never calls the embedder."""
    texts = [queries] if isinstance(queries, str) else list(dict.fromkeys(queries))
    embeddings: list[Vector] | None = None
    if mode != "fts":
        if embedder is None:
            raise ValueError(f"{mode} search needs an embedder")
        embeddings = [Vector(vector) for vector in embedder.embed_queries(texts)]
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


def fused_confidence(hit: SearchHit, *, legs: int, queries: int, rrf_k: int) -> float:
    """The fused score calibrated to [0, 1]: 1.0 means ranked first in every leg for every query.

    RRF scores depend on k and on how many lists were fused, so raw values are not
    comparable across requests; dividing by the best attainable score makes them so.
    """
    best = legs * queries / (rrf_k + 1)
    return round(min(1.0, hit.fused_score / best), 4) if best > 0 else 0.0
