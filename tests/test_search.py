from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.retrieval.hits import SearchHit
from tests.corpus import write_corpus
from tests.searching import search, search_outcome

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
    fts = search(corpus, None, query, mode="fts", limit=depth, candidates=depth, per_document=None)
    vector = search(corpus, local_embedder, query, mode="vector", limit=depth, candidates=depth, per_document=None)
    hybrid = search(corpus, local_embedder, query, mode="hybrid", limit=depth, candidates=depth, per_document=None,
                    rrf_k=RRF_K, fusion="rrf", vector_weight=0.5, code_vector_weight=0.5)

    evidence: dict[str, dict[UUID, float]] = {"fts": {}, "vector": {}}
    for name, leg in (("fts", fts), ("vector", vector)):
        for rank, hit in enumerate(leg, 1):
            evidence[name][hit.chunk_id] = 2.0 / (RRF_K + rank)
    expected = fused_with_documents(corpus, evidence, set(), (0.5, 0.5))
    fts_ranks = {hit.chunk_id: rank for rank, hit in enumerate(fts, 1)}
    vector_ranks = {hit.chunk_id: rank for rank, hit in enumerate(vector, 1)}

    assert {hit.chunk_id for hit in hybrid} == set(expected)
    for hit in hybrid:
        assert hit.fused_score == pytest.approx(expected[hit.chunk_id])
        assert hit.fts_rank == fts_ranks.get(hit.chunk_id)
        assert hit.vector_rank == vector_ranks.get(hit.chunk_id)
    scores = [hit.fused_score for hit in hybrid]
    assert scores == sorted(scores, reverse=True)


def _normalised_legs(fts: list[SearchHit], vector: list[SearchHit]) -> tuple[dict[str, dict[UUID, float]], set[UUID]]:
    """Each leg's evidence as convex fusion normalises it (BM25 over the best, distance min-max); the code chunks."""
    best_text = max(hit.fts_score or 0.0 for hit in fts)
    distances = {hit.chunk_id: 1 - (hit.vector_similarity or 0.0) for hit in vector}
    nearest, farthest = min(distances.values()), max(distances.values())
    evidence = {"fts": {hit.chunk_id: (hit.fts_score or 0.0) / best_text for hit in fts},
                "vector": {chunk: (farthest - d) / (farthest - nearest) for chunk, d in distances.items()}}
    return evidence, {hit.chunk_id for hit in vector if hit.content_type == "code"}


def fused_with_documents(pool: ConnectionPool, evidence: dict[str, dict[UUID, float]], code: set[UUID],
                         weights: tuple[float, float], damping: float = 1.0) -> dict[UUID, float]:
    """The fusion rule written out: each chunk's mix of its legs' evidence (vector weight ``weights``: prose,
    code), blended with its document's best evidence per leg by (n - 1) / (n - 1 + 15) for a document of n
    chunks, weighed as code when one of its candidate chunks is code."""
    candidates = list(evidence["fts"].keys() | evidence["vector"].keys())
    documents = _documents(pool, candidates)
    best: dict[tuple[str, UUID], float] = {}
    for leg, values in evidence.items():
        for chunk, value in values.items():
            key = (leg, documents[chunk][1])
            best[key] = max(best.get(key, 0.0), value)
    holding_code = {documents[chunk][1] for chunk in candidates if chunk in code}
    expected = {}
    for chunk in candidates:
        share, document = documents[chunk]
        w = weights[chunk in code] * damping
        w_page = weights[document in holding_code] * damping
        own = (1 - w) * evidence["fts"].get(chunk, 0.0) + w * evidence["vector"].get(chunk, 0.0)
        page = (1 - w_page) * best.get(("fts", document), 0.0) + w_page * best.get(("vector", document), 0.0)
        expected[chunk] = (1 - share) * own + share * page
    return expected


def _documents(pool: ConnectionPool, chunks: list[UUID]) -> dict[UUID, tuple[float, UUID]]:
    """chunk -> (its document's evidence share, the document)."""
    with pool.connection() as conn:
        rows = conn.execute(
            "select c.id, c.document_id, (select count(*) from quarry.chunks o where o.document_id = c.document_id)"
            " from quarry.chunks c where c.id = any(%s)", (chunks,)).fetchall()
    return {chunk: ((count - 1) / (count - 1 + 15), document) for chunk, document, count in rows}


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
    fts = search(corpus, None, query, mode="fts", limit=depth, candidates=depth, per_document=None)
    vector = search(corpus, local_embedder, query, mode="vector", limit=depth, candidates=depth, per_document=None)
    hybrid = search(corpus, local_embedder, query, mode="hybrid", limit=depth, candidates=depth, per_document=None,
                    fusion="convex", vector_weight=0.4, code_vector_weight=0.8)

    evidence, code = _normalised_legs(fts, vector)
    expected = fused_with_documents(corpus, evidence, code, (0.4, 0.8))
    assert any(share > 0 for share, _ in _documents(corpus, list(expected)).values())
    for hit in hybrid:
        assert hit.fused_score == pytest.approx(expected[hit.chunk_id], abs=1e-5)
        assert hit.vector_weight_used == pytest.approx(0.8 if hit.chunk_id in code else 0.4)
    assert [hit.fused_score for hit in hybrid] == sorted((hit.fused_score for hit in hybrid), reverse=True)


LONG_QUERY = ("Indexes speed up queries on large tables. A partial index is built over a subset of a table; the subset"
              " is defined by a conditional expression called the predicate of the partial index. pg_dump writes a"
              " consistent snapshot of one database to a script or archive file. Continuous archiving of the"
              " write-ahead log allows restoring to any moment.")


def test_a_long_query_leans_on_the_keyword_leg_and_on_code(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    depth = 50
    with corpus.connection() as conn:
        row = conn.execute("select quarry.long_query_damping(%s, 20), count(*) from quarry.text_terms"
                           " where lexeme = any(quarry.query_lexemes(%s)) and chunk_frequency > 0",
                           (LONG_QUERY, LONG_QUERY)).fetchone()
    assert row is not None
    damping, known = row
    assert known > 20 and damping == pytest.approx(20 / known)

    fts = search(corpus, None, LONG_QUERY, mode="fts", limit=depth, candidates=depth, per_document=None)
    vector = search(corpus, local_embedder, LONG_QUERY, mode="vector", limit=depth, candidates=depth, per_document=None)
    hybrid = search(corpus, local_embedder, LONG_QUERY, mode="hybrid", limit=depth, candidates=depth, per_document=None,
                    fusion="convex", vector_weight=0.4, code_vector_weight=0.8)
    evidence, code = _normalised_legs(fts, vector)
    expected = fused_with_documents(corpus, evidence, code, (0.4, 0.8), damping)
    for hit in hybrid:
        assert hit.vector_weight_used == pytest.approx((0.8 if hit.chunk_id in code else 0.4) * damping, abs=1e-6)
        prose_factor = 1.0 if hit.chunk_id in code else 0.8  # such a query asks which code to change
        assert hit.fused_score == pytest.approx(expected[hit.chunk_id] * prose_factor, abs=1e-5)


@pytest.mark.parametrize("filtered", [False, True])
def test_the_vector_leg_scans_the_spaces_hnsw_index_and_returns_exact_distances(
    corpus: ConnectionPool, filtered: bool
) -> None:
    """nearest_chunks repeats the index's expression (half precision, dimension, space): else it sorts every vector."""
    filters = '{"sources": ["sample"]}' if filtered else None
    with corpus.connection() as conn:
        stored = conn.execute("select embedding::vector from quarry.embeddings where space = 'text' limit 1").fetchone()
        assert stored is not None
        # a table this small is cheaper to sort: the HNSW scan must be the leg's only way to its order
        conn.execute("set local enable_seqscan = off; set local enable_bitmapscan = off; set local enable_sort = off")
        nearest = conn.execute(
            "select distance from quarry.nearest_chunks('text', %s, 3, quarry.resolve_version_filters(%s::jsonb))",
            (stored[0], filters)).fetchall()
        scans = conn.execute("select pg_stat_get_xact_numscans('quarry.embeddings_hnsw_text'::regclass)").fetchone()
        conn.rollback()
    assert scans is not None and scans[0] > 0  # counted in this transaction: the leg read the index
    assert nearest[0][0] < 1e-6  # the stored vector itself, at its exact distance


def test_the_hnsw_scan_depth_covers_the_leg_and_grows_with_the_index(corpus: ConnectionPool) -> None:
    """hnsw.ef_search: depth + 10, times 1 + 0.75 x log10(vectors / 10k) above 10k vectors plus 0.5 x
    log10(vectors / 100k) above 100k, at most 1000."""
    with corpus.connection() as conn:
        depths = conn.execute(
            "select quarry.hnsw_scan_depth(depth, vectors) from (values (50, 0), (50, 100000), (50, 1000000),"
            " (50, 10000000), (300, 1000), (300, 1000000), (50, 316228)) as t (depth, vectors)").fetchall()
        conn.execute("analyze quarry.embeddings")  # the count is the planner's: autovacuum keeps it
        indexed = conn.execute("select quarry.indexed_vectors(array['text', 'code'])").fetchone()
        stored = conn.execute("select count(*) from quarry.embeddings where space = 'text'").fetchone()
        conn.execute("select * from quarry.hybrid_search(array['partial index'],"
                     " array[(select embedding::vector from quarry.embeddings where space = 'text' limit 1)],"
                     " 'vector', 5, candidate_count => 120)")
        in_search = conn.execute("select current_setting('hnsw.ef_search')").fetchone()  # set for the transaction
        conn.rollback()
    assert [d for (d,) in depths] == [60, 105, 180, 255, 310, 930, 143]
    assert indexed is not None and stored is not None and indexed[0] == stored[0] > 0
    assert in_search == ("130",)


def test_a_page_fills_at_most_two_places_unless_asked(pool: ConnectionPool, local_embedder: Embedder,
                                                      tmp_path: Path) -> None:
    sections = "\n\n".join(f"## Vacuum step {step}\n\nVacuum reclaims dead tuples; step {step} of tuning autovacuum."
                           for step in range(1, 7))
    files = {"docs/vacuum.md": f"# Vacuum\n\n{sections}\n",
             "docs/analyze.md": "# Analyze\n\nANALYZE and autovacuum keep planner statistics fresh after vacuum.\n",
             "docs/backup.md": "# Backup\n\npg_dump writes an archive.\n"}
    Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path / "c", files), SourceSpec(slug="vacuum"))

    capped = search_outcome(pool, local_embedder, "tuning autovacuum to reclaim dead tuples", limit=5)
    paths = [ranked.hit.path for ranked in capped.hits]
    assert paths.count("docs/vacuum.md") == 2 and "docs/analyze.md" in paths
    assert [ranked.rank for ranked in capped.hits] == list(range(1, len(paths) + 1))
    assert any("left out (at most 2 per document;" in note for note in capped.notes())

    every = search(pool, local_embedder, "tuning autovacuum to reclaim dead tuples", limit=5, per_document=None)
    assert [hit.path for hit in every].count("docs/vacuum.md") >= 4
    one = search(pool, local_embedder, "tuning autovacuum to reclaim dead tuples", limit=5, per_document=1)
    assert len({hit.document_id for hit in one}) == len(one) == 3


@pytest.mark.parametrize(("glob", "matching", "not_matching"), [
    ("docs/**", ["docs/indexes.md", "docs/a/b.md"], ["src/docs/x.md", "docs"]),
    ("*.py", ["src/users.py", "users.py", "a/b/c.py"], ["src/users.pyi", "src/users.py/x"]),
    ("src/*.py", ["src/users.py"], ["src/a/users.py", "lib/src/users.py"]),
    ("**/tests/**", ["tests/test_a.py", "pkg/tests/a/b.py"], ["pkg/tests.py", "tests"]),
    ("a+b(1).md", ["a+b(1).md", "x/a+b(1).md"], ["aab1.md"]),
    ("test_?.py", ["t/test_a.py"], ["t/test_ab.py"]),
])
def test_path_globs_match_as_gitignore_does(pool: ConnectionPool, glob: str, matching: list[str],
                                            not_matching: list[str]) -> None:
    with pool.connection() as conn:
        for path in matching + not_matching:
            row = conn.execute("select %s ~ quarry.glob_regex(%s)", (path, glob)).fetchone()
            assert row is not None and row[0] is (path in matching), (glob, path)


def test_path_and_symbol_filters_apply_inside_each_leg(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    query = "parse a user id, or restore from an archive"
    docs = search(corpus, local_embedder, query, limit=20, per_document=None, filters={"path": {"any_of": ["docs/**"]}})
    assert docs and {hit.path for hit in docs} <= {"docs/indexes.md", "docs/backup.md"}
    code = search(corpus, local_embedder, query, limit=20, filters={"path": {"any_of": ["*.py"]}})
    assert code and {hit.path for hit in code} == {"src/users.py"}
    no_docs = search(corpus, None, query, mode="fts", limit=20, per_document=None,
                     filters={"path": {"none_of": ["docs/**"]}})
    assert no_docs and not any(hit.path.startswith("docs/") for hit in no_docs)

    store = search(corpus, local_embedder, "load a user", limit=20, per_document=None,
                   filters={"symbol": {"any_of": ["UserStore"]}})
    assert {hit.symbol_path for hit in store} <= {"src.users.UserStore", "src.users.UserStore.load"} and store
    exact = search(corpus, None, "user id", mode="fts", limit=20, filters={"symbol": {"any_of": ["parse_user_id"]}})
    assert [hit.symbol_path for hit in exact] == ["src.users.parse_user_id"]
    assert search(corpus, None, "user id", mode="fts", filters={"symbol": {"any_of": ["UserStor"]}}) == []
    with corpus.connection() as conn:
        counted = conn.execute("select quarry.count_filtered_documents(%s::jsonb)",
                               ('{"path": {"any_of": ["docs/**"]}, "source_slug": {"any_of": ["sample"]}}',)
                               ).fetchone()
        with_symbol = conn.execute("select quarry.count_filtered_documents(%s::jsonb)",
                                   ('{"symbol": {"any_of": ["UserStore.load"]}}',)).fetchone()
    assert counted == (2,) and with_symbol == (1,)


@pytest.mark.parametrize("mode", ["hybrid", "fts", "vector"])
def test_the_databases_per_document_cap_is_the_reranked_paths_cap(
    corpus: ConnectionPool, local_embedder: Embedder, mode: str
) -> None:
    # The cap has two implementations: quarry.search_hits applies it when the fused order is final, the
    # pipeline's _capped_per_document after a reranker reorders. Over the same fused rows they must agree.
    from engine.retrieval.hits import search_hits
    from engine.retrieval.pipeline import PER_DOCUMENT_ROOM, RankedHit, _capped_per_document

    capped_somewhere = False
    for query in ("partial index", "parse user id", "how do I create a partial index", "notes", "zzzz nothing"):
        vectors = None if mode == "fts" else local_embedder.embed_queries([query])
        for per_document in (1, 2, 3):
            for limit in (1, 2, 3, 5):
                common: dict[str, object] = {"mode": mode, "limit": limit * PER_DOCUMENT_ROOM, "text_vectors": vectors,
                                             "code_mode": "on", "version_match": "permissive"}
                capped = search_hits(corpus, [query], **common, per_document=per_document,  # type: ignore[arg-type]
                                     page_size=limit)
                fused = search_hits(corpus, [query], **common)  # type: ignore[arg-type]
                expected, passed_over = _capped_per_document(
                    [RankedHit(hit, rank, hit.confidence) for rank, hit in enumerate(fused.hits, 1)], per_document,
                    limit)
                case = (query, per_document, limit)
                assert [hit.chunk_id for hit in capped.hits] == [ranked.hit.chunk_id for ranked in expected], case
                assert capped.passed_over == passed_over, case
                capped_somewhere |= passed_over > 0
    assert capped_somewhere, "no case left a chunk out: the comparison would prove nothing"
