"""A hybrid search's legs on two connections at once rank exactly as the one statement does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.retrieval import hits
from engine.retrieval.hits import HitPage, search_hits
from engine.store.db import configure_connection, open_pool
from tests.corpus import FILES, write_corpus


@pytest.fixture()
def corpus(pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path) -> ConnectionPool:
    Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path / "corpus", FILES), SourceSpec(slug="sample"))
    return pool


@pytest.fixture()
def legs_taken_at_once(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each search ran its legs at once (the test corpus is far below the size where that pays)."""
    taken: list[bool] = []
    at_once = hits._legs_at_once

    def recorded(*args: Any) -> dict[str, object]:
        given = at_once(*args)
        taken.append(bool(given))
        return given

    monkeypatch.setattr(hits, "_legs_at_once", recorded)
    return taken


def _search(pool: ConnectionPool, embedder: Embedder, queries: list[str], *, at_once: bool,
            monkeypatch: pytest.MonkeyPatch, **options: Any) -> HitPage:
    monkeypatch.setattr(hits, "LEGS_AT_ONCE_MIN_VECTORS", 0 if at_once else float("inf"))
    vectors = embedder.embed_queries(queries)
    arguments: dict[str, Any] = {"mode": "hybrid", "limit": 12, "text_vectors": vectors, "code_vectors": vectors,
                                 "code_mode": "on", "version_match": "permissive",
                                 "query_model": embedder.model_name, "code_query_model": embedder.model_name,
                                 **options}
    return search_hits(pool, queries, **arguments)


CASES: list[tuple[list[str], dict[str, Any]]] = [
    (["how do I create a partial index"], {}),
    (["parse a user id"], {"code_mode": "off", "code_vectors": None, "code_query_model": None}),
    (["partial index predicate", "restore a database to a moment"], {}),  # two queries, fused
    (["backup archive file"], {"filters": '{"content_type": {"any_of": ["markdown"]}}'}),
    (["index on an expression"], {"per_document": 1, "page_size": 3}),
    (["user id"], {"code_mode": "exclusive", "text_vectors": None, "query_model": None}),
    (["partial index"], {"query_model": "another-model"}),  # the vector leg sits out, and says so
]


@pytest.mark.parametrize(("queries", "options"), CASES)
def test_legs_at_once_rank_as_the_one_statement(corpus: ConnectionPool, local_embedder: Embedder,
                                                legs_taken_at_once: list[bool], monkeypatch: pytest.MonkeyPatch,
                                                queries: list[str], options: dict[str, Any]) -> None:
    one_statement = _search(corpus, local_embedder, queries, at_once=False, monkeypatch=monkeypatch, **options)
    at_once = _search(corpus, local_embedder, queries, at_once=True, monkeypatch=monkeypatch, **options)
    assert legs_taken_at_once == [True]
    assert one_statement.hits, "a case that finds nothing compares nothing"
    assert at_once == one_statement  # every field of every hit: scores, ranks, confidence, trust, legs left out


def test_both_legs_count_when_run_at_once(corpus: ConnectionPool, local_embedder: Embedder,
                                          legs_taken_at_once: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    page = _search(corpus, local_embedder, ["partial index predicate"], at_once=True, monkeypatch=monkeypatch)
    assert legs_taken_at_once == [True]
    assert any(hit.fts_rank is not None for hit in page.hits)
    assert any(hit.vector_rank is not None for hit in page.hits)


def test_without_a_second_connection_the_one_statement_answers(corpus: ConnectionPool, migrated_url: str,
                                                                local_embedder: Embedder,
                                                                legs_taken_at_once: list[bool],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    single = open_pool(migrated_url, Settings(database_url=migrated_url), min_size=1, max_size=1)
    try:
        alone = _search(single, local_embedder, ["partial index"], at_once=True, monkeypatch=monkeypatch)
    finally:
        single.close()
    expected = _search(corpus, local_embedder, ["partial index"], at_once=False, monkeypatch=monkeypatch)
    assert legs_taken_at_once == [False]
    assert alone == expected and alone.hits


def test_a_leg_erroring_at_once_leaves_it_out_as_the_one_statement_does(
        corpus: ConnectionPool, migrated_url: str, local_embedder: Embedder, legs_taken_at_once: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the vector legs cannot get their lock: at once they fail, and the one statement runs without them
    guarded = ConnectionPool(migrated_url, min_size=2, max_size=2, open=True, configure=_with_lock_timeout)
    holder = psycopg.connect(migrated_url)
    try:
        holder.execute("lock table quarry.embeddings in access exclusive mode")
        page = _search(guarded, local_embedder, ["partial index"], at_once=True, monkeypatch=monkeypatch)
    finally:
        holder.rollback()
        holder.close()
        guarded.close()
    assert legs_taken_at_once == [False]
    assert [(failure.leg, failure.reason) for failure in page.failed_legs] == [("vector", "error")]
    assert page.hits and page.hits[0].path == "docs/indexes.md"
    assert all(hit.vector_rank is None for hit in page.hits)


def _with_lock_timeout(conn: psycopg.Connection[Any]) -> None:
    configure_connection(conn, 15_000)
    conn.execute("set lock_timeout = '200ms'")
    conn.commit()
