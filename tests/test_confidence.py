"""quarry.retrieval_confidence: the one definition of a hit's confidence (psql, CLI and MCP read it)."""

from __future__ import annotations

import pytest
from psycopg_pool import ConnectionPool


def _confidence(pool: ConnectionPool, fused: float, similarity: float | None, code_similarity: float | None = None,
                fusion: str = "convex", legs: int = 2, queries: int = 1, rrf_k: int = 60) -> float:
    with pool.connection() as conn:
        row = conn.execute("select quarry.retrieval_confidence(%s, %s, %s, %s, %s, %s, %s)",
                           (fused, similarity, code_similarity, fusion, legs, queries, rrf_k)).fetchone()
    assert row is not None
    return float(row[0])


def test_top_hit_of_an_unrelated_query_is_not_fully_confident(pool: ConnectionPool) -> None:
    assert _confidence(pool, 1.0, 0.7) == 1.0
    assert _confidence(pool, 1.0, 0.1) == 0.5  # the top fused hit, but nothing like the query
    assert _confidence(pool, 1.0, None) == 0.5  # only the keyword leg found it
    assert _confidence(pool, 1.0, 0.1, code_similarity=0.7) == 1.0  # the better vector view counts


def test_rrf_confidence_is_relative_to_the_best_attainable_score(pool: ConnectionPool) -> None:
    assert _confidence(pool, 2 / 61, 0.5, fusion="rrf") == 1.0
    assert _confidence(pool, 1 / 61, 0.5, fusion="rrf") == pytest.approx(0.5)
