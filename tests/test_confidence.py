from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from engine.search import SearchHit, fused_confidence

HIT = SearchHit(
    chunk_id=uuid4(), document_id=uuid4(), source_slug="s", source_name="S", source_kind="docs_site",
    attribution="official", verified=False, deprecated=False, changed_at=datetime.now(UTC), path="a.md",
    title="A", url=None, heading_path=[], symbol_path=None, start_line=1, end_line=2, content="x",
    content_type="markdown", language=None, is_code=False, fused_score=1.0, fts_rank=1, vector_rank=1,
    code_rank=None, fts_score=3.0, vector_similarity=0.7, code_similarity=None, version_match="unknown",
    trust={"score": 1.0, "factors": {}},
)


def test_top_hit_of_an_unrelated_query_is_not_fully_confident() -> None:
    strong = fused_confidence(HIT, legs=2, queries=1, rrf_k=60)
    unrelated = fused_confidence(replace(HIT, vector_similarity=0.1), legs=2, queries=1, rrf_k=60)
    keyword_only = fused_confidence(replace(HIT, vector_similarity=None, vector_rank=None), legs=2, queries=1,
                                    rrf_k=60)
    assert strong == 1.0
    assert unrelated == 0.5
    assert keyword_only == 0.5


def test_rrf_confidence_is_relative_to_the_best_attainable_score() -> None:
    best = replace(HIT, fused_score=2 / 61)
    assert fused_confidence(best, fusion="rrf", legs=2, queries=1, rrf_k=60) == 1.0
    assert fused_confidence(replace(best, fused_score=1 / 61), fusion="rrf", legs=2, queries=1,
                            rrf_k=60) == pytest.approx(0.5)
