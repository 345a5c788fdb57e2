"""Routing: which sources a natural-language intent should be asked, best first.

Three signals per source, each in [0, 1], from one SQL call (``quarry.source_signals``):

- ``description``: the share of the query's terms found in the source's display name,
  slug and ``metadata.description``;
- ``fts``: the source's BM25 score over the query's top chunks, relative to the best source;
- ``centroid``: cosine similarity of the query to the mean of the source's text vectors
  (a bounded sample), relative to the best source.

The score is their weighted mean over the signals available (no query vector: no
centroid). A source is *recommended* only with evidence beyond the centroid's relative
score: a keyword hit, a name match, or an absolute centroid similarity of at least
``CENTROID_EVIDENCE``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgvector import Vector
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.embed.base import TEXT_SPACE

WEIGHTS = {"description": 0.2, "fts": 0.4, "centroid": 0.4}
#: Top chunks whose BM25 statistics are attributed to their sources.
FTS_DEPTH = 200
#: Vectors per source averaged into its centroid, at most (the first by chunk id).
CENTROID_SAMPLE = 500
#: Absolute centroid similarity that counts as evidence on its own (local model scale).
CENTROID_EVIDENCE = 0.3


@dataclass(frozen=True, slots=True)
class SourceSignals:
    slug: str
    display_name: str
    kind: str
    description: str | None
    documents: int
    description_match: float
    fts_hits: int
    fts_score: float
    centroid_similarity: float | None


@dataclass(frozen=True, slots=True)
class RankedSource:
    signals: SourceSignals
    score: float
    #: Per signal, its value in [0, 1] as weighed into ``score``.
    components: dict[str, float]
    has_evidence: bool


def rank_sources(pool: ConnectionPool, query: str, *, query_vector: list[float] | None = None) -> list[RankedSource]:
    """Every source, ranked for ``query`` (best first; ties by slug)."""
    with pool.connection() as conn, conn.cursor(row_factory=class_row(SourceSignals)) as cursor:
        cursor.execute("select * from quarry.source_signals(%s, %b, %s, %s, %s)",  # %b: binary vector
                       (query, Vector(query_vector) if query_vector is not None else None, FTS_DEPTH,
                        CENTROID_SAMPLE, TEXT_SPACE))
        rows = cursor.fetchall()
    best_fts = max((row.fts_score for row in rows), default=0.0)
    best_centroid = max((row.centroid_similarity or 0.0 for row in rows), default=0.0)
    ranked = []
    for row in rows:
        components = {"description": round(row.description_match, 4),
                      "fts": round(row.fts_score / best_fts, 4) if best_fts > 0 else 0.0}
        if row.centroid_similarity is not None and best_centroid > 0:
            components["centroid"] = round(max(0.0, row.centroid_similarity) / best_centroid, 4)
        weight = sum(WEIGHTS[name] for name in components)
        score = sum(WEIGHTS[name] * value for name, value in components.items()) / weight
        evidence = (row.fts_hits > 0 or row.description_match > 0
                    or (row.centroid_similarity or 0.0) >= CENTROID_EVIDENCE)
        ranked.append(RankedSource(row, round(score, 4), components, evidence))
    ranked.sort(key=lambda source: (-source.score, source.signals.slug))
    return ranked


def recommended(ranked: list[RankedSource]) -> RankedSource | None:
    """The best source when it has evidence of its own; None means: search every source."""
    return ranked[0] if ranked and ranked[0].has_evidence and ranked[0].score > 0 else None
