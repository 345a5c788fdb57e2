"""The psql admin surface, executed through psycopg against a real database, each change
checked through a search (which reads the same columns: nothing is cached)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgvector import Vector
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.retrieval.hits import SearchHit
from engine.store.db import READER_ROLE, open_pool
from tests.corpus import write_corpus
from tests.searching import search

QUERY = "partial index"


@pytest.fixture()
def corpus(pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path) -> ConnectionPool:
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(tmp_path / "sample"), SourceSpec(slug="sample", kind="docs_site"))
    ingestor.ingest(write_corpus(tmp_path / "mirror"), SourceSpec(slug="mirror", kind="docs_site"))
    return pool


def _hits(pool: ConnectionPool, query: str = QUERY) -> list[SearchHit]:
    return search(pool, None, query, mode="fts", limit=20)


def _first(hits: list[SearchHit], slug: str, path: str = "docs/indexes.md") -> tuple[int, SearchHit]:
    return next((rank, hit) for rank, hit in enumerate(hits) if hit.source_slug == slug and hit.path == path)


def _sql(pool: ConnectionPool, statement: str, *params: Any) -> Any:
    with pool.connection() as conn:
        row = conn.execute(statement, params).fetchone()
        return row[0] if row else None


def test_upsert_source_adds_and_updates_only_the_given_fields(corpus: ConnectionPool) -> None:
    source_id = _sql(corpus, "select id from quarry.upsert_source('pg-docs', display_name => 'PostgreSQL docs', "
                             "kind => 'docs_site', attribution => 'official', version => '17.x')")
    updated = _sql(corpus, "select id from quarry.upsert_source('pg-docs', base_url => 'https://example.com/')")
    assert updated == source_id
    with corpus.connection() as conn:
        row = conn.execute("select display_name, kind, attribution, base_url, version from quarry.sources "
                           "where slug = 'pg-docs'").fetchone()
    assert row == ("PostgreSQL docs", "docs_site", "official", "https://example.com/", "17.x")
    with pytest.raises(psycopg.errors.CheckViolation):
        _sql(corpus, "select * from quarry.upsert_source('x', kind => 'wiki')")
    with pytest.raises(psycopg.errors.NoDataFound, match="no source with slug absent"):
        _sql(corpus, "select quarry.set_verified('absent')")


def test_attribution_and_verification_raise_trust_in_the_next_search(corpus: ConnectionPool) -> None:
    _, before = _first(_hits(corpus), "sample")
    _sql(corpus, "select * from quarry.upsert_source('sample', attribution => 'official')")
    _sql(corpus, "select quarry.set_verified('sample')")
    _, after = _first(_hits(corpus), "sample")
    assert after.trust["factors"]["verified"]["raw"] is True and after.verified
    assert after.trust["factors"]["attribution"]["raw"] == "official"
    assert after.trust["score"] > before.trust["score"]


def test_deprecating_a_source_demotes_its_hits_and_shows_the_factor(corpus: ConnectionPool) -> None:
    rank_sample, _ = _first(_hits(corpus), "sample")
    rank_mirror, _ = _first(_hits(corpus), "mirror")
    assert abs(rank_sample - rank_mirror) == 1  # identical documents rank side by side
    _sql(corpus, "select quarry.deprecate_source('sample')")
    hits = _hits(corpus)
    rank, deprecated = _first(hits, "sample")
    _, kept = _first(hits, "mirror")
    assert rank > _first(hits, "mirror")[0]
    assert deprecated.fused_score == pytest.approx(kept.fused_score * 0.5, rel=1e-6)
    factor = deprecated.trust["factors"]["deprecation"]
    assert factor["raw"] is True and factor["value"] == 0 and deprecated.trust["score"] <= 0.2
    _sql(corpus, "select quarry.deprecate_source('sample', false)")
    assert _first(_hits(corpus), "sample")[1].trust["factors"]["deprecation"]["raw"] is False


def test_deprecating_one_document_marks_its_chunks(corpus: ConnectionPool) -> None:
    _sql(corpus, "select quarry.deprecate_document('mirror', 'docs/indexes.md')")
    _, hit = _first(_hits(corpus), "mirror")
    assert hit.deprecated and hit.trust["score"] <= 0.2
    filtered = search(corpus, None, QUERY, mode="fts", filters={"deprecated": {"any_of": [False]}})
    assert ("mirror", "docs/indexes.md") not in {(h.source_slug, h.path) for h in filtered}
    with pytest.raises(psycopg.errors.NoDataFound, match="has no document"):
        _sql(corpus, "select quarry.deprecate_document('mirror', 'nope.md')")


def test_trust_weights_are_one_table_the_next_search_reads(corpus: ConnectionPool) -> None:
    _sql(corpus, "select quarry.set_trust_weight('attribution', 0)")
    try:
        _, hit = _first(_hits(corpus), "sample")
        assert hit.trust["factors"]["attribution"]["weight"] == 0
        assert hit.trust["factors"]["attribution"]["contribution"] == 0
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown trust factor"):
            _sql(corpus, "select quarry.set_trust_weight('popularity', 1)")
    finally:
        _sql(corpus, "select quarry.set_trust_weight('attribution', 0.35)")


def test_trust_follows_its_formula_in_psql_and_in_search(corpus: ConnectionPool) -> None:
    # a year-old official, verified docs page with an exact version match: every factor but
    # freshness (one half-life: 0.5) is 1, so trust = 1 - 0.15 * 0.5 with the default weights
    trust = _sql(corpus, "select quarry.trust_factors('official', true, false, 'docs_site', "
                         "now() - interval '365 days', 'exact', now())")
    assert trust["score"] == pytest.approx(0.925)
    assert trust["factors"]["freshness"] == {"raw": 365.0, "value": 0.5, "weight": 0.15, "contribution": 0.075}
    capped = _sql(corpus, "select quarry.trust_factors('official', true, true, 'docs_site', now(), 'exact')")
    assert capped["score"] == 0.2 and capped["factors"]["deprecation"]["value"] == 0
    # search_hits computes trust inline with the weights read once: the same numbers as psql's
    for hit in _hits(corpus)[:5]:
        expected = _sql(corpus, "select quarry.trust_factors(%s, %s, %s, %s, %s, %s)", hit.attribution,
                        hit.verified, hit.deprecated, hit.source_kind, hit.changed_at, hit.version_match)
        assert hit.trust["score"] == pytest.approx(expected["score"], abs=1e-3)
        assert hit.trust["factors"].keys() == expected["factors"].keys()
        assert hit.trust["factors"]["attribution"] == expected["factors"]["attribution"]


def test_search_text_and_explain_work_from_psql(corpus: ConnectionPool) -> None:
    with corpus.connection() as conn:
        rows = conn.execute("select rank, source, path, location, score, trust, chunk_id "
                            "from quarry.search_text('partial index', 3)").fetchall()
        assert [row[0] for row in rows] == [1, 2, 3] and rows[0][2] == "docs/indexes.md"
        steps = dict(conn.execute("select step, detail from quarry.explain(%s, 'partial index')",
                                  (rows[0][6],)).fetchall())
    assert list(steps) == ["chunk", "fts", "vector", "fusion", "trust"]
    assert steps["fts"]["rank"] == 1 and steps["fts"]["bm25"] == pytest.approx(rows[0][4], rel=1e-5)
    assert "query_embedding" in steps["vector"]["note"]
    assert steps["trust"]["score"] == pytest.approx(float(rows[0][5]))


def test_explain_reports_the_vector_rank_given_an_embedding(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    vector = local_embedder.embed_queries([QUERY])[0]
    hit = search(corpus, local_embedder, QUERY, mode="vector", limit=1)[0]
    with corpus.connection() as conn:
        steps = dict(conn.execute("select step, detail from quarry.explain(%s, %s, %s)",
                                  (hit.chunk_id, QUERY, Vector(vector))).fetchall())
    assert steps["vector"]["rank"] == 1 and steps["vector"]["similarity"] == pytest.approx(hit.vector_similarity,
                                                                                           abs=1e-3)


def test_explain_shows_the_fusion_hybrid_search_applied(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    long_query = " ".join(["partial index predicate subset conditional expression table", "pg_dump snapshot archive",
                           "continuous archiving write-ahead log restoring moment scalar function columns",
                           "consistent script database queries large speed"])
    for query in (QUERY, long_query):
        hits = search(corpus, local_embedder, query, limit=5)
        for hit in hits:
            with corpus.connection() as conn:
                steps = dict(conn.execute("select step, detail from quarry.explain(%s, %s)",
                                          (hit.chunk_id, query)).fetchall())
            fusion = steps["fusion"]
            assert fusion["vector_weight"] == pytest.approx(hit.vector_weight_used, abs=1e-4), query
            assert fusion["document_share"] == pytest.approx(hit.document_share, abs=1e-4), query
        long = query == long_query
        assert (fusion["long_query_damping"] < 1) == long and ("note" in fusion and fusion["note"] is not None) == long


def test_explain_ranks_a_chunk_beyond_pgvectors_default_scan_depth(
    pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path
) -> None:
    """pgvector returns at most hnsw.ef_search rows (40 by default): explain must scan as deep as it reports."""
    root = tmp_path / "many"
    root.mkdir()
    for page in range(60):
        (root / f"page{page:02}.md").write_text(f"# Page {page}\n\nNote {page} on topic {page * 7 % 13}.\n")
    Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        root, SourceSpec(slug="many"))
    vector = Vector(local_embedder.embed_queries([QUERY])[0])
    with pool.connection() as conn:
        ranked = conn.execute("select chunk_id from quarry.embeddings where space = 'text'"
                              " order by embedding::vector <=> %s, chunk_id", (vector,)).fetchall()
        assert len(ranked) >= 60
        # the HNSW scan, as on a corpus too large to sort: a table this small is cheaper to sort
        conn.execute("set local enable_seqscan = off; set local enable_bitmapscan = off; set local enable_sort = off")
        steps = dict(conn.execute("select step, detail from quarry.explain(%s, %s, %s)",
                                  (ranked[49][0], QUERY, vector)).fetchall())
    assert steps["vector"]["rank"] == 50 and steps["vector"]["note"] is None


def test_source_stats_report_vectors_per_space_and_freshness(corpus: ConnectionPool) -> None:
    with corpus.connection() as conn:
        row = conn.execute("select documents, chunks, embeddings, last_ingested_at, median_age_days "
                           "from quarry.source_stats where slug = 'sample'").fetchone()
    assert row is not None
    documents, chunks, embeddings, last_ingested_at, median_age_days = row
    assert documents == 4 and embeddings["text"] == chunks and 0 < embeddings["code"] < chunks
    assert last_ingested_at is not None and median_age_days == 0


def test_the_search_servers_role_reads_but_cannot_write_the_corpus(corpus: ConnectionPool,
                                                                   database_url: str) -> None:
    reader = open_pool(database_url, Settings(database_url=database_url), role=READER_ROLE, min_size=1, max_size=1)
    try:
        assert _hits(reader)  # searching works
        with reader.connection() as conn:
            assert conn.execute("select current_user").fetchone() == (READER_ROLE,)
            conn.execute("select * from quarry.facet_values()").fetchall()
        for statement in ("delete from quarry.chunks", "update quarry.sources set verified = true",
                          "insert into quarry.trust_weights values ('attribution', 1)",
                          "select quarry.set_verified('sample')"):
            with reader.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    finally:
        reader.close()


def test_the_search_servers_role_can_authenticate_and_meter_keys(pool: ConnectionPool, database_url: str) -> None:
    from engine.store.api_keys import create_key

    created = create_key(pool, "reader-check")
    reader = open_pool(database_url, Settings(database_url=database_url), role=READER_ROLE, min_size=1, max_size=1)
    try:
        with reader.connection() as conn:
            # A verdict for the presented key, never its hash; metering charges only that key's bucket.
            assert conn.execute("select verdict, key_id from quarry.verify_api_key(%s)",
                                (created.secret,)).fetchone() == ("ok", created.id)
            conn.execute("select * from quarry.take_rate_tokens(%s, 1, 60, 10)", (created.secret,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select quarry.revoke_api_key('reader-check')")
    finally:
        reader.close()
