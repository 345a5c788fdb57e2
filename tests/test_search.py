from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import write_corpus
from tests.searching import search

RRF_K = 60


@pytest.fixture()
def corpus(pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path) -> ConnectionPool:
    ingestor = Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(tmp_path / "a"), SourceSpec(slug="sample"))
    ingestor.ingest(write_corpus(tmp_path / "b", {"notes.md": "# Notes\n\nPartial index notes.\n"}),
                    SourceSpec(slug="other"))
    return pool


@pytest.mark.parametrize("mode", ["hybrid", "fts", "vector"])
def test_each_mode_finds_the_partial_index_section(
    corpus: ConnectionPool, local_embedder: Embedder, mode: str
) -> None:
    hits = search(corpus, local_embedder, "how do I create a partial index", mode=mode, limit=3,
                  sources=["sample"])
    assert hits, mode
    assert hits[0].path == "docs/indexes.md"
    assert hits[0].heading_path == ["Indexes", "Partial indexes"]
    assert all(hit.source_slug == "sample" for hit in hits)
    if mode == "fts":
        assert all(hit.vector_rank is None for hit in hits)
    if mode == "vector":
        assert all(hit.fts_rank is None for hit in hits)


def test_fts_never_embeds_the_query(corpus: ConnectionPool) -> None:
    hits = search(corpus, None, "parse user id", mode="fts", limit=5)
    assert hits and hits[0].symbol_path == "src.users.parse_user_id"


def test_code_identifiers_match_their_words(corpus: ConnectionPool) -> None:
    hits = search(corpus, None, "parseUserId", mode="fts", limit=5)
    assert hits and hits[0].symbol_path == "src.users.parse_user_id"


def test_source_filter_applies_inside_each_leg(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    hits = search(corpus, local_embedder, "partial index", limit=50, sources=["other"])
    assert {hit.source_slug for hit in hits} == {"other"}
    assert len(hits) == 1  # the other source's single chunk, not an empty leg after post-filtering


def test_hybrid_fusion_matches_reciprocal_rank_fusion_of_the_legs(
    corpus: ConnectionPool, local_embedder: Embedder
) -> None:
    query = "restore the database from an archive"
    depth = 50
    fts = search(corpus, None, query, mode="fts", limit=depth, candidates=depth)
    vector = search(corpus, local_embedder, query, mode="vector", limit=depth, candidates=depth)
    hybrid = search(corpus, local_embedder, query, mode="hybrid", limit=depth, candidates=depth, rrf_k=RRF_K,
                    fusion="rrf", vector_weight=0.5, code_vector_weight=0.5)

    expected: dict[UUID, float] = {}
    for leg in (fts, vector):
        for rank, hit in enumerate(leg, 1):
            expected[hit.chunk_id] = expected.get(hit.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
    fts_ranks = {hit.chunk_id: rank for rank, hit in enumerate(fts, 1)}
    vector_ranks = {hit.chunk_id: rank for rank, hit in enumerate(vector, 1)}

    assert {hit.chunk_id for hit in hybrid} == set(expected)
    for hit in hybrid:
        assert hit.fused_score == pytest.approx(expected[hit.chunk_id])
        assert hit.fts_rank == fts_ranks.get(hit.chunk_id)
        assert hit.vector_rank == vector_ranks.get(hit.chunk_id)
    scores = [hit.fused_score for hit in hybrid]
    assert scores == sorted(scores, reverse=True)


def test_a_query_with_only_stopwords_returns_no_fts_hits(corpus: ConnectionPool) -> None:
    assert search(corpus, None, "the of and", mode="fts") == []




def test_facet_filters_any_of_and_none_of(corpus: ConnectionPool) -> None:
    code_only = search(corpus, None, "user id", mode="fts", limit=20, filters={"content_type": {"any_of": ["code"]}})
    assert code_only and {hit.content_type for hit in code_only} == {"code"}
    no_code = search(corpus, None, "user id index", mode="fts", limit=20,
                     filters={"content_type": {"none_of": ["code"]}})
    assert all(hit.content_type != "code" for hit in no_code)
    unverified = search(corpus, None, "partial index", mode="fts", filters={"verified": {"any_of": [True]}})
    assert unverified == []  # no source is verified


def test_several_queries_fuse_and_a_repeated_query_counts_once(
    corpus: ConnectionPool, local_embedder: Embedder
) -> None:
    single = search(corpus, local_embedder, ["partial index"], limit=20)
    repeated = search(corpus, local_embedder, ["partial index", "partial index"], limit=20)
    assert [(h.chunk_id, h.fused_score) for h in single] == [(h.chunk_id, h.fused_score) for h in repeated]
    both = search(corpus, local_embedder, ["partial index", "pg_dump archive"], limit=20)
    paths = [hit.path for hit in both[:4]]
    assert "docs/indexes.md" in paths and "docs/backup.md" in paths


def test_convex_fusion_weights_normalised_leg_scores_by_content(
    corpus: ConnectionPool, local_embedder: Embedder
) -> None:
    query = "parse a user id from a string"
    depth = 50
    fts = search(corpus, None, query, mode="fts", limit=depth, candidates=depth)
    vector = search(corpus, local_embedder, query, mode="vector", limit=depth, candidates=depth)
    hybrid = search(corpus, local_embedder, query, mode="hybrid", limit=depth, candidates=depth,
                    fusion="convex", vector_weight=0.4, code_vector_weight=0.8)

    best_text = max(hit.fts_score or 0.0 for hit in fts)
    distances = {hit.chunk_id: 1 - (hit.vector_similarity or 0.0) for hit in vector}
    nearest, farthest = min(distances.values()), max(distances.values())
    text_part = {hit.chunk_id: (hit.fts_score or 0.0) / best_text for hit in fts}
    vector_part = {chunk: (farthest - d) / (farthest - nearest) for chunk, d in distances.items()}
    for hit in hybrid:
        weight = 0.8 if hit.content_type == "code" else 0.4
        expected = (1 - weight) * text_part.get(hit.chunk_id, 0.0) + weight * vector_part.get(hit.chunk_id, 0.0)
        assert hit.fused_score == pytest.approx(expected, abs=1e-5)
    assert [hit.fused_score for hit in hybrid] == sorted((hit.fused_score for hit in hybrid), reverse=True)


@pytest.mark.parametrize("filtered", [False, True])
def test_the_vector_leg_scans_the_spaces_hnsw_index_and_returns_exact_distances(
    corpus: ConnectionPool, filtered: bool
) -> None:
    """nearest_chunks repeats the index's expression (half precision, dimension, space): else it sorts every vector."""
    filters = '{"sources": ["sample"]}' if filtered else None
    with corpus.connection() as conn:
        stored = conn.execute("select embedding from quarry.embeddings where space = 'text' limit 1").fetchone()
        assert stored is not None
        # a table this small is cheaper to sort: the HNSW scan must be the leg's only way to its order
        conn.execute("set local enable_seqscan = off; set local enable_bitmapscan = off; set local enable_sort = off")
        nearest = conn.execute(
            "select distance from quarry.nearest_chunks('text', %s, 3, quarry.resolve_version_filters(%s::jsonb))",
            (stored[0], filters)).fetchall()
        scans = conn.execute("select pg_stat_get_xact_numscans('quarry.embeddings_hnsw_text'::regclass)").fetchone()
        conn.rollback()
    assert scans is not None and scans[0] > 0  # counted in this transaction: the leg read the index
    assert nearest[0][0] < 1e-6  # the stored vector itself, at its exact (single-precision) distance


def test_the_hnsw_scan_depth_covers_the_leg_and_grows_with_the_index(corpus: ConnectionPool) -> None:
    """hnsw.ef_search: depth + 10, times 1 + 0.75 x log10(vectors / 10k) above 10k vectors, at most 1000."""
    with corpus.connection() as conn:
        depths = conn.execute(
            "select quarry.hnsw_scan_depth(depth, vectors) from (values (50, 0), (50, 100000), (50, 1000000),"
            " (50, 10000000), (300, 1000), (300, 1000000), (50, 316228)) as t (depth, vectors)").fetchall()
        conn.execute("analyze quarry.embeddings")  # the count is the planner's: autovacuum keeps it
        indexed = conn.execute("select quarry.indexed_vectors(array['text', 'code'])").fetchone()
        stored = conn.execute("select count(*) from quarry.embeddings where space = 'text'").fetchone()
        conn.execute("select * from quarry.hybrid_search(array['partial index'],"
                     " array[(select embedding from quarry.embeddings where space = 'text' limit 1)], 'vector', 5,"
                     " candidate_count => 120)")
        in_search = conn.execute("select current_setting('hnsw.ef_search')").fetchone()  # set for the transaction
        conn.rollback()
    assert [d for (d,) in depths] == [60, 105, 150, 195, 310, 775, 128]
    assert indexed is not None and stored is not None and indexed[0] == stored[0] > 0
    assert in_search == ("130",)
