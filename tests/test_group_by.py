"""Whole files as results: ``group_by="document"``, one ranking of documents from chunks for every caller."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.evaluation.runner import EvalSettings, evaluate_corpus
from engine.ingest.sources import SourceSpec
from engine.retrieval.grouping import SPANS_PER_DOCUMENT, SUPPORT_WEIGHT, documents_from_chunks
from engine.retrieval.hits import SearchHit
from engine.retrieval.pipeline import RankedHit
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import ingest_alone, write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.searching import search_outcome


def _ranked(document: int, fused: float, rank: int, *, rerank_score: float | None = None) -> RankedHit:
    hit = SearchHit(
        chunk_id=uuid.uuid4(), document_id=uuid.UUID(int=document), source_slug="s", source_name="S",
        source_kind="code_repo", attribution="official", verified=False, deprecated=False,
        changed_at=datetime(2026, 1, 1, tzinfo=UTC), path=f"f{document}.py", title=f"f{document}.py", url=None,
        heading_path=[], symbol_path=None, start_line=1, end_line=2, content="x", content_type="code",
        language="python", is_code=True, fused_score=fused, confidence=0.5, fts_rank=rank, vector_rank=rank,
        code_rank=None, fts_score=1.0, vector_similarity=0.5, code_similarity=None, version_match="unknown",
        trust={"score": 0.5, "factors": {}}, vector_weight_used=0.5, document_share=0.0)
    ranked = RankedHit(hit, rank, 0.5)
    if rerank_score is not None:
        ranked.reranked, ranked.rerank_score, ranked.confidence = True, rerank_score, rerank_score
    return ranked


def _order(scores: list[tuple[int, float]], **arguments: Any) -> list[int]:
    hits = [_ranked(document, fused, rank) for rank, (document, fused) in enumerate(scores, 1)]
    return [document.document_id.int for document in documents_from_chunks(hits, **arguments)]


def test_the_best_chunk_decides_and_the_next_ones_only_break_ties() -> None:
    assert SUPPORT_WEIGHT == 0.0  # measured: any blend of the next chunks cost some dev set
    # a file with many weaker matches does not pass a file with one better chunk, however close
    assert _order([(1, 0.90), (2, 0.80), (2, 0.79), (2, 0.78), (2, 0.77), (2, 0.76)]) == [1, 2]
    assert _order([(1, 0.80), (2, 0.795), (2, 0.79)]) == [1, 2]
    # an equal best chunk: the stronger next chunks (at most two of them) come first
    assert _order([(1, 0.80), (2, 0.80), (1, 0.10), (2, 0.50)]) == [2, 1]
    assert _order([(1, 0.80), (2, 0.80), (1, 0.30), (1, 0.30), (2, 0.50), (1, 0.30)]) == [1, 2]  # 0.6 > 0.5
    assert _order([(1, 0.80), (2, 0.80), (1, 0.20), (1, 0.20), (1, 0.20), (2, 0.50)]) == [2, 1]  # a third: no
    # a weight, as bench/ tries them, adds each of the next two chunks' scores at that weight
    assert _order([(1, 0.80), (2, 0.795), (2, 0.79)], support_weight=0.02) == [2, 1]
    many = [(3, 0.70), *([(3, 0.70)] * 10)]
    (document,) = documents_from_chunks([_ranked(d, s, r) for r, (d, s) in enumerate(many, 1)], support_weight=0.02)
    assert document.score == pytest.approx(0.70 * (1 + 2 * 0.02)) and len(document.chunks) == 11
    (document,) = documents_from_chunks([_ranked(d, s, r) for r, (d, s) in enumerate(many, 1)])
    assert document.score == pytest.approx(0.70)  # a document's score is its best chunk's
    # equal scores throughout keep the order of the documents' best chunks
    assert _order([(5, 0.5), (4, 0.5), (6, 0.5)]) == [5, 4, 6]


def test_reranked_chunks_rank_their_documents_ahead_on_their_own_scale() -> None:
    hits = [_ranked(1, 0.2, 1, rerank_score=0.4), _ranked(2, 0.9, 2, rerank_score=0.3), _ranked(3, 0.95, 3)]
    documents = documents_from_chunks(hits)
    assert [document.document_id.int for document in documents] == [1, 2, 3]
    assert [document.rank for document in documents] == [1, 2, 3] and documents[0].score == pytest.approx(0.4)


# --- through the pipeline, eval and MCP --------------------------------------------------------------------------

FILES = {
    "src/tokens.py": '''"""Tokenising text."""


def split_tokens(text: str) -> list[str]:
    """Split text into tokens on whitespace."""
    return text.split()


def count_tokens(text: str) -> int:
    """How many tokens a text has."""
    return len(split_tokens(text))


def longest_token(text: str) -> str:
    """The longest token of a text."""
    return max(split_tokens(text), key=len)
''',
    "src/parser.py": '''"""Parsing."""

from src.tokens import split_tokens


def parse(text: str) -> list[str]:
    """Parse text into tokens, then drop empty ones."""
    return [token for token in split_tokens(text) if token]
''',
    "docs/tokens.md": "# Tokens\n\nA token is a run of characters between spaces. Split text into tokens to count "
                      "words.\n\n## Counting\n\nCounting tokens tells how long a text is.\n",
    "docs/other.md": "# Backups\n\npg_dump writes an archive of one database.\n",
}
QUERY = "split text into tokens and count them"


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> ConnectionPool:
    ingest_alone(migrated_url, session_pool, local_embedder, write_corpus(tmp_path_factory.mktemp("grouped"), FILES),
                 SourceSpec(slug="grouped", kind="code_repo"))
    return session_pool


def test_documents_are_ranked_from_every_chunk_the_search_ranked(corpus: ConnectionPool,
                                                                 local_embedder: Embedder) -> None:
    retrieval = search_outcome(corpus, local_embedder, QUERY, group_by="document", limit=3)
    documents = retrieval.documents
    assert documents is not None and len(documents) == 3
    with corpus.connection() as conn:
        row = conn.execute("select count(*) from quarry.chunks").fetchone()
    assert row is not None and len(retrieval.hits) == row[0] < 30  # 30 deep (the rerank depth): every chunk here
    expected = documents_from_chunks(retrieval.hits)[:3]
    assert [d.document_id for d in documents] == [d.document_id for d in expected]
    assert len({document.document_id for document in documents}) == 3
    summary = retrieval.summary()
    assert summary["group_by"] == "document" and summary["result_count"] == 3
    assert summary["chunks_ranked"] == len(retrieval.hits)
    for row, document in zip(summary["results"], documents, strict=True):
        assert "content" not in row and row["rank"] == document.rank and row["path"] == document.best.hit.path
        mine = [ranked for ranked in retrieval.hits if ranked.hit.document_id == document.document_id]
        assert row["matched_chunks"] == len(mine)
        assert [span["chunk_id"] for span in row["spans"]] == [str(r.hit.chunk_id) for r in
                                                               mine[:SPANS_PER_DOCUMENT]]
        for span, ranked in zip(row["spans"], mine, strict=False):
            assert (span["start_line"], span["end_line"]) == (ranked.hit.start_line, ranked.hit.end_line)
            for mark in span.get("highlights", []):  # the query's words, inside the snippet
                word = span["snippet"][mark["start"]:mark["end"]].lower()
                assert re.fullmatch(r"(split|text|token|count)\w*", word), word
    assert any(span.get("highlights") for row in summary["results"] for span in row["spans"])


def test_vector_only_spans_show_the_chunks_opening(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    retrieval = search_outcome(corpus, local_embedder, QUERY, group_by="document", mode="vector", limit=2)
    rows = retrieval.summary()["results"]
    assert rows and all(span["snippet"] and "highlights" in span and not span["highlights"]
                        for row in rows for span in row["spans"])


def test_evaluation_ranks_documents_as_group_by_does(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    retrieval = search_outcome(corpus, local_embedder, QUERY, group_by="document", limit=200, chunk_depth=200,
                               per_document=None)
    second = retrieval.documents[1].best.hit.path if retrieval.documents else None
    assert second is not None
    backend = StaticBackend(Settings(database_url="postgresql://unused"), corpus,
                            dict.fromkeys(SPACES, local_embedder))
    report = evaluate_corpus(backend, {"q": QUERY}, {"q": {second: 1}}, EvalSettings())
    metrics = {metric.name: metric.value for metric in report.metrics}
    assert metrics["MRR@10"] == 0.5 and metrics["R@10"] == 1.0


@pytest.fixture(scope="module")
def mcp(corpus: ConnectionPool, migrated_url: str, local_embedder: Embedder) -> Iterator[McpSession]:
    backend = StaticBackend(Settings(database_url=migrated_url), corpus, dict.fromkeys(SPACES, local_embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def test_advanced_search_returns_files_and_query_documents_the_same_ones(mcp: McpSession) -> None:
    files = mcp.ok("advanced_search", {"queries": [QUERY], "group_by": "document", "limit": 3})
    assert files["group_by"] == "document" and files["result_count"] == 3
    paths = [row["path"] for row in files["results"]]
    assert len(set(paths)) == 3 and all(row["spans"] and "content" not in row for row in files["results"])
    whole = mcp.ok("query_documents", {"query_text": QUERY, "top_k": 3})
    assert [document["path"] for document in whole["documents"]] == paths
    assert [document["matched_chunks"] for document in whole["documents"]] == [
        row["matched_chunks"] for row in files["results"]]
    fast = mcp.ok("advanced_search", {"queries": [QUERY], "group_by": "document", "limit": 3, "preset": "fast"})
    assert [row["path"] for row in fast["results"]] == paths and fast["rerank_skipped_reason"]
    assert mcp.call("advanced_search", {"queries": [QUERY], "group_by": "file"}).error["code"] == "INVALID"


def test_a_token_budget_keeps_whole_files_best_first(mcp: McpSession) -> None:
    every = mcp.ok("advanced_search", {"queries": [QUERY], "group_by": "document", "limit": 4})
    budget = 900
    packed = mcp.ok("advanced_search", {"queries": [QUERY], "group_by": "document", "limit": 4,
                                        "max_tokens": budget})
    assert len(_compact(packed)) / 4 <= budget and packed["token_budget"]["used_tokens"] <= budget
    kept = len(packed["results"])
    assert 1 <= kept < 4 and packed["token_budget"]["omitted_results"] == 4 - kept and packed["truncated"]
    assert [row["path"] for row in packed["results"]] == [row["path"] for row in every["results"]][:kept]
    tight = mcp.ok("advanced_search", {"queries": [QUERY], "group_by": "document", "limit": 4, "max_tokens": 200})
    (best,) = tight["results"]  # the best file stays, with fewer spans
    assert best["path"] == every["results"][0]["path"] and best["truncated"] is True
    assert len(best["spans"]) == 1 and best["omitted_spans"] == len(every["results"][0]["spans"]) - 1


def _compact(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)
