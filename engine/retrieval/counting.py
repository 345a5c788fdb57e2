"""Counting: how many documents a query is about, or, for a query that names no subject, how many pass the filters.

A document counts when one of its chunks holds every *selective* term of the query
(the keyword leg) or is among the nearest chunks with cosine similarity at least
``similarity_floor`` (the vector leg): the hybrid candidates, deduplicated by
document. Each leg reads at most ``bound`` rows, so the count is exact below the
bound and ``truncated`` at it. Terms are selective unless they only describe the
wanted answer ("documents", "how many", "mention") or occur in most chunks; a query
with no selective term ("document") counts the documents passing the filters,
exactly (``method="metadata"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from pgvector import Vector
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.embed.base import TEXT_SPACE
from engine.retrieval.request import Filters, filters_json

CountMethod = Literal["hybrid", "keyword", "metadata"]

#: Documents per leg, at most; the HNSW scan depth caps the vector leg at 1000 chunks.
COUNT_BOUND = 1000
#: Cosine similarity a chunk needs to count as being about the query. The local model
#: gives ~0.2 for unrelated text and ~0.7 for a close paraphrase (see quarry.retrieval_confidence).
SIMILARITY_FLOOR = 0.5


@dataclass(frozen=True, slots=True)
class CandidateDocument:
    document_id: UUID
    keyword: bool
    similarity: float | None
    truncated: bool


@dataclass(frozen=True, slots=True)
class DocumentCount:
    """``count`` documents; ``truncated`` when a leg reached ``bound`` (there may be more)."""

    count: int
    method: CountMethod
    truncated: bool
    bound: int | None
    selective_terms: list[str]
    keyword_documents: int | None = None
    vector_documents: int | None = None
    #: The first matches, documents both legs found first, then by similarity.
    sample: tuple[UUID, ...] = ()


def selective_terms(pool: ConnectionPool, query: str) -> list[str]:
    """The stemmed query terms that narrow the corpus (see the module docstring)."""
    with pool.connection() as conn:
        row = conn.execute("select quarry.selective_lexemes(%s)", (query,)).fetchone()
    return list(row[0]) if row is not None else []


def count_documents(
    pool: ConnectionPool,
    query: str,
    *,
    embed: Callable[[str], list[float] | None] | None = None,
    filters: Filters | None = None,
    bound: int = COUNT_BOUND,
    similarity_floor: float = SIMILARITY_FLOOR,
    sample_size: int = 5,
) -> DocumentCount:
    """How many documents ``query`` is about under ``filters``.

    ``embed`` gives the query's text-space vector (None when the model failed: the count
    is then keyword-only); it is called only for a query with selective terms.
    """
    terms = selective_terms(pool, query)
    if not terms:
        with pool.connection() as conn:
            row = conn.execute("select quarry.count_filtered_documents(%s::jsonb)", (filters_json(filters),)).fetchone()
        return DocumentCount(int(row[0]) if row is not None else 0, "metadata", False, None, [])
    query_vector = embed(query) if embed is not None else None
    with pool.connection() as conn, conn.cursor(row_factory=class_row(CandidateDocument)) as cursor:
        cursor.execute(
            "select * from quarry.count_candidate_documents(%s, %b, %s::jsonb, %s, %s, %s)",  # %b: binary vector
            (query, Vector(query_vector) if query_vector is not None else None, filters_json(filters),
             similarity_floor, bound, TEXT_SPACE),
        )
        candidates = cursor.fetchall()
    keyword = sum(candidate.keyword for candidate in candidates)
    vector = sum(candidate.similarity is not None for candidate in candidates)
    return DocumentCount(
        count=len(candidates),
        method="hybrid" if query_vector is not None else "keyword",
        truncated=bool(candidates) and candidates[0].truncated,
        bound=bound,
        selective_terms=terms,
        keyword_documents=keyword,
        vector_documents=vector if query_vector is not None else None,
        sample=tuple(candidate.document_id for candidate in candidates[:sample_size]),
    )
