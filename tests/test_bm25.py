"""The BM25 text leg: scores against a Python reference, statistics kept exact."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import FILES, write_corpus

K1, B, CODE_B = 0.9, 0.4, 0.9  # code chunks normalise length harder (sql/018-text-index.sql)


@pytest.fixture()
def ingestor(pool: ConnectionPool, local_embedder: Embedder) -> Ingestor:
    return Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000)


def _assert_statistics_exact(pool: ConnectionPool) -> None:
    """The statistics count chunk_terms, and the lists by term hold exactly its postings, in order."""
    with pool.connection() as conn:
        stats = conn.execute(
            "select chunk_count, total_length, postings, recent_postings from quarry.text_stats").fetchone()
        actual = conn.execute(
            "select count(*), coalesce(sum(chunk_length), 0), coalesce(sum(cardinality(term_ids)), 0),"
            " (select count(*) from quarry.text_postings) from quarry.chunk_terms").fetchone()
        wrong_frequencies = conn.execute(
            "select count(*) from quarry.text_terms t where t.chunk_frequency <>"
            " (select count(*) from quarry.chunk_terms c where t.id = any (c.term_ids))"
        ).fetchone()
        # each chunk's postings are in the lists by term once, with the same impact
        unlisted, listed_only = conn.execute(
            "with own as (select u.term_id, c.chunk_id, u.impact from quarry.chunk_terms c"
            "             cross join lateral unnest(c.term_ids, c.impacts) as u (term_id, impact)),"
            " listed as (select term_id, chunk_id, impact from quarry.text_index_postings)"
            " select (select count(*) from (select * from own except all select * from listed) a),"
            "        (select count(*) from (select * from listed except all select * from own) b)").fetchone()
        unordered_blocks = conn.execute(BLOCKS_OUT_OF_ORDER).fetchone()
        unindexed_chunks = conn.execute(
            "select count(*) from quarry.chunks c"
            " where quarry.chunk_search_vector(c) <> ''"
            " and not exists (select 1 from quarry.chunk_terms t where t.chunk_id = c.id)").fetchone()
    assert stats is not None and actual is not None
    assert (stats[0], stats[2], stats[3]) == (actual[0], actual[2], actual[3])
    assert stats[1] == pytest.approx(actual[1], rel=1e-5)
    assert wrong_frequencies == (0,)
    assert (unlisted, listed_only) == (0, 0)
    assert unordered_blocks == (0,)
    assert unindexed_chunks == (0,)


# Blocks breaking the layout bm25_top and the compaction rely on (sql/018): each sorted by
# impact then chunk id, both descending, keyed by its first posting, at most 64 postings, and
# every posting above the next block's key.
BLOCKS_OUT_OF_ORDER = """
with blocks as (
    select b.*, lead((b.top_impact, b.top_chunk_id)) over list as next_key
    from quarry.text_posting_blocks b
    window list as (partition by b.term_id order by b.top_impact desc, b.top_chunk_id desc)
)
select count(*) from blocks b
where (b.top_impact, b.top_chunk_id) <> (b.impacts[1], b.chunk_ids[1])
   or cardinality(b.chunk_ids) > 64
   or (b.impacts[cardinality(b.impacts)], b.chunk_ids[cardinality(b.chunk_ids)]) <= b.next_key
   or exists (select 1 from generate_series(2, cardinality(b.chunk_ids)) i
              where (b.impacts[i], b.chunk_ids[i]) >= (b.impacts[i - 1], b.chunk_ids[i - 1]))
"""


def test_statistics_follow_ingest_reingest_and_deletes(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path)
    ingestor.ingest(root, SourceSpec(slug="sample"))
    _assert_statistics_exact(pool)

    (root / "docs/backup.md").write_text("# Backup\n\nUse pg_basebackup.\n")
    (root / "README.txt").unlink()
    ingestor.ingest(root, SourceSpec(slug="sample"))
    _assert_statistics_exact(pool)

    with pool.connection() as conn:  # an admin deleting a source in psql
        conn.execute("delete from quarry.sources where slug = 'sample'")
    _assert_statistics_exact(pool)
    with pool.connection() as conn:
        assert conn.execute("select chunk_count from quarry.text_stats").fetchone() == (0,)


def test_postings_inserted_apart_are_counted_once_by_count_new_postings(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    ingestor.ingest(write_corpus(tmp_path), SourceSpec(slug="sample"))
    with pool.connection() as conn:
        before = conn.execute("select chunk_count, total_length from quarry.text_stats").fetchone()
        terms_before = conn.execute("select sum(chunk_frequency) from quarry.text_terms").fetchone()
        chunk_ids = [row[0] for row in conn.execute("select id from quarry.chunks order by id limit 3").fetchall()]
        # as a re-index of those chunks would: their postings removed (and uncounted) first
        conn.execute("delete from quarry.chunk_terms where chunk_id = any(%s)", (chunk_ids,))
        row = conn.execute("select quarry.insert_chunk_postings(%s)", (chunk_ids,)).fetchone()
        assert row is not None and row[0] > 0
        inserted = row[0]
        # not counted yet: the statistics still lack the three chunks
        stats = conn.execute("select chunk_count from quarry.text_stats").fetchone()
        assert stats is not None and before is not None and stats[0] == before[0] - 3
        assert conn.execute("select quarry.count_new_postings()").fetchone() == (inserted,)
        assert conn.execute("select quarry.count_new_postings()").fetchone() == (0,)  # counted once
        assert conn.execute("select chunk_count, total_length from quarry.text_stats").fetchone() == before
        assert conn.execute("select sum(chunk_frequency) from quarry.text_terms").fetchone() == terms_before
        # index_chunk_terms (for psql) inserts and counts in one call
        conn.execute("delete from quarry.chunk_terms where chunk_id = any(%s)", (chunk_ids,))
        conn.execute("select quarry.index_chunk_terms(%s)", (chunk_ids,))
        conn.commit()
    _assert_statistics_exact(pool)


def test_bm25_scores_match_a_reference_implementation(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    ingestor.ingest(write_corpus(tmp_path), SourceSpec(slug="sample"))
    query = "partial index expression predicate; parse a user id"  # matches prose and code chunks
    with pool.connection() as conn:
        rows = conn.execute(
            "select c.id, f.lexeme, f.term_frequency, c.is_code from quarry.chunks c"
            " cross join lateral quarry.weighted_term_frequencies(quarry.chunk_search_vector(c)) f"
        ).fetchall()
        lexemes = set(conn.execute("select quarry.query_lexemes(%s)", (query,)).fetchone()[0])  # type: ignore[index]
        got: dict[object, float] = dict(
            conn.execute("select chunk_id, score from quarry.bm25_top(%s, 100, 100000)", (query,)).fetchall()
        )

    frequencies: dict[object, Counter[str]] = {}
    length_weights: dict[object, float] = {}
    for chunk_id, lexeme, tf, is_code in rows:
        frequencies.setdefault(chunk_id, Counter())[lexeme] = tf
        length_weights[chunk_id] = CODE_B if is_code else B
    lengths = {chunk_id: sum(tfs.values()) for chunk_id, tfs in frequencies.items()}
    count = len(frequencies)
    average = sum(lengths.values()) / count
    expected: dict[object, float] = {}
    for chunk_id, tfs in frequencies.items():
        score = 0.0
        for lexeme in lexemes & set(tfs):
            df = sum(1 for other in frequencies.values() if lexeme in other)
            idf = math.log(1 + (count - df + 0.5) / (df + 0.5))
            tf = tfs[lexeme]
            b = length_weights[chunk_id]
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - b + b * lengths[chunk_id] / average))
        if score > 0:
            expected[chunk_id] = score

    assert {length_weights[chunk_id] for chunk_id in expected} == {B, CODE_B}  # both kinds scored
    assert set(got) == set(expected)
    for chunk_id, score in expected.items():
        assert got[chunk_id] == pytest.approx(score, rel=1e-4)


def test_cut_posting_lists_still_give_exact_scores(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    # Reading one posting per term, a chunk found through one term must still be scored with
    # its postings of the other query terms (summing only the postings read undercounts it).
    ingestor.ingest(write_corpus(tmp_path), SourceSpec(slug="sample"))
    query = "partial index expression predicate"
    with pool.connection() as conn:
        exact: dict[object, float] = dict(
            conn.execute("select chunk_id, score from quarry.bm25_top(%s, 100, 100000)", (query,)).fetchall()
        )
        cut = conn.execute("select chunk_id, score from quarry.bm25_top(%s, 3, 1)", (query,)).fetchall()
        cut_lists = conn.execute(
            "select count(*) from quarry.text_terms"
            " where lexeme = any(quarry.query_lexemes(%s)) and chunk_frequency > 1",
            (query,),
        ).fetchone()
    assert cut_lists is not None and cut_lists[0] >= 2  # the case under test: several lists are cut
    assert cut
    for chunk_id, score in cut:
        assert score == pytest.approx(exact[chunk_id], rel=1e-6)
    assert [score for _, score in cut] == sorted((score for _, score in cut), reverse=True)


def test_rebuild_reproduces_incremental_statistics(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    ingestor.ingest(write_corpus(tmp_path), SourceSpec(slug="sample"))
    with pool.connection() as conn:
        before = conn.execute("select count(*) from quarry.text_index_postings").fetchone()
        conn.execute("select quarry.rebuild_text_index()")
        after = conn.execute("select count(*) from quarry.text_index_postings").fetchone()
    assert before == after
    _assert_statistics_exact(pool)


def test_truncating_sources_empties_postings_and_statistics(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    ingestor.ingest(write_corpus(tmp_path), SourceSpec(slug="sample"))
    with pool.connection() as conn:
        conn.execute("truncate quarry.sources cascade")
        postings = conn.execute("select count(*) from quarry.text_index_postings").fetchone()
        stats = conn.execute("select chunk_count, total_length from quarry.text_stats").fetchone()
    assert postings == (0,) and stats == (0, 0)


def _notes(count: int, first: int = 0) -> dict[str, str]:
    """Notes sharing the term "alpha", at seven lengths: long lists with many equal impacts."""
    return {f"notes/n{i:04}.md": f"# Note {i}\n\nalpha {'beta ' * (i % 7)}word{i}\n"
            for i in range(first, first + count)}


def _alpha_top(pool: ConnectionPool, depth: int) -> tuple[list[object], list[object]]:
    """The top ``depth`` chunks of "alpha" as bm25_top reads its list, and as chunk_terms orders them."""
    with pool.connection() as conn:
        read = [row[0] for row in conn.execute(
            "select chunk_id from quarry.bm25_top('alpha', %s, %s) order by score desc, chunk_id desc",
            (depth, depth)).fetchall()]
        expected = [row[0] for row in conn.execute(
            "select c.chunk_id from quarry.chunk_terms c join quarry.text_terms t on t.lexeme = 'alpha'"
            " where t.id = any (c.term_ids)"
            " order by c.impacts[array_position(c.term_ids, t.id)] desc, c.chunk_id desc limit %s",
            (depth,)).fetchall()]
    return read, expected


def test_compaction_moves_rows_into_blocks_without_changing_a_score(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    # The first ingest rebuilds the index: "alpha" gets 300 postings, cut into ten blocks.
    ingestor.ingest(write_corpus(tmp_path / "first", _notes(300)), SourceSpec(slug="first"))
    # A second source is not most of the corpus: its postings stay rows (too few to compact).
    ingestor.ingest(write_corpus(tmp_path / "second", {**FILES, **_notes(200, first=300)}),
                    SourceSpec(slug="second"))
    queries = ["alpha", "alpha beta word7", "partial index expression predicate", "word42 beta"]

    def scores() -> list[list[tuple[object, float]]]:
        with pool.connection() as conn:
            return [conn.execute("select chunk_id, score from quarry.bm25_top(%s, 40, %s)", (query, depth)).fetchall()
                    for query in queries for depth in (5, 100, 750)]

    with pool.connection() as conn:
        rows = conn.execute("select recent_postings from quarry.text_stats").fetchone()
        blocks = conn.execute("select count(*) from quarry.text_posting_blocks b join quarry.text_terms t"
                              " on t.id = b.term_id where t.lexeme = 'alpha'").fetchone()
    assert rows is not None and rows[0] > 600 and blocks == (10,)
    _assert_statistics_exact(pool)
    before = scores()
    read, expected = _alpha_top(pool, 200)
    assert read == expected

    with pool.connection() as conn:  # every row into the blocks: "alpha"'s blocks split
        moved = conn.execute("select quarry.compact_text_postings(0, 0)").fetchone()
        conn.commit()
        assert moved == rows
        assert conn.execute("select count(*) from quarry.text_postings").fetchone() == (0,)
    _assert_statistics_exact(pool)
    assert scores() == before
    for depth in (1, 64, 100, 500):
        read, expected = _alpha_top(pool, depth)
        assert read == expected

    # Deletes remove postings from blocks (some emptied, some losing their first posting).
    for relative in {**FILES, **_notes(150, first=350)}:
        (tmp_path / "second" / relative).unlink()
    ingestor.ingest(tmp_path / "second", SourceSpec(slug="second"))
    _assert_statistics_exact(pool)
    read, expected = _alpha_top(pool, 400)
    assert read == expected
    with pool.connection() as conn:
        conn.execute("delete from quarry.sources where slug = 'first'")
    _assert_statistics_exact(pool)
    read, expected = _alpha_top(pool, 400)
    assert len(read) == 50 and read == expected


def test_compaction_waits_for_enough_rows(ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path) -> None:
    ingestor.ingest(write_corpus(tmp_path / "first", _notes(40)), SourceSpec(slug="first"))
    ingestor.ingest(write_corpus(tmp_path / "second", _notes(5, first=40)), SourceSpec(slug="second"))
    with pool.connection() as conn:
        rows = conn.execute("select recent_postings, postings from quarry.text_stats").fetchone()
        assert rows is not None and 0 < rows[0] < rows[1]
        # below min_postings, then below min_share of all postings: nothing moves
        assert conn.execute("select quarry.compact_text_postings(%s, 0)", (rows[0] + 1,)).fetchone() == (0,)
        assert conn.execute("select quarry.compact_text_postings(0, %s)",
                            (rows[0] / rows[1] + 0.01,)).fetchone() == (0,)
        assert conn.execute("select quarry.compact_text_postings(%s, 0)", (rows[0],)).fetchone() == (rows[0],)
        conn.commit()
        # note 42 ranks above every posting of the first 40 (as short, and a newer chunk): it joins
        # the term's first block rather than starting a block of its own
        assert conn.execute("select count(*) from quarry.text_posting_blocks b join quarry.text_terms t"
                            " on t.id = b.term_id where t.lexeme = 'alpha'").fetchone() == (1,)
    _assert_statistics_exact(pool)


def test_a_list_of_a_million_postings_is_cut_into_blocks(pool: ConnectionPool) -> None:
    # A term in every chunk of a 1M-chunk corpus: its pieces' bounds (piece number x list size)
    # pass 2^31. Synthetic postings in a transaction rolled back: blocks have no foreign keys.
    postings = 1_000_000
    with pool.connection() as conn, conn.transaction(force_rollback=True):
        conn.execute("select quarry.pool_postings()")
        conn.execute("insert into pg_temp.pooled_postings (term_id, chunk_id, impact)"
                     " select -1, gen_random_uuid(), n::real from generate_series(1, %s) n", (postings,))
        blocks = conn.execute("select quarry.write_posting_blocks()").fetchone()
        assert blocks == (postings // 32,)
        assert conn.execute("select sum(cardinality(chunk_ids)), min(cardinality(chunk_ids)),"
                            " max(cardinality(chunk_ids)) from quarry.text_posting_blocks"
                            " where term_id = -1").fetchone() == (postings, 32, 32)
        assert conn.execute(BLOCKS_OUT_OF_ORDER).fetchone() == (0,)


def test_counting_finds_the_documents_with_a_chunk_holding_every_selective_term(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    # quarry.count_candidate_documents' keyword leg reads postings (alembic 0023 dropped the stored
    # search vector it matched with a GIN index): in blocks after the first ingest, in rows after
    # the second; its answer is checked against each chunk's own lexemes.
    ingestor.ingest(write_corpus(tmp_path / "first", {**FILES, **_notes(30)}), SourceSpec(slug="first"))
    ingestor.ingest(write_corpus(tmp_path / "second", _notes(12, first=30)), SourceSpec(slug="second"))
    with pool.connection() as conn:
        assert conn.execute("select count(*) > 0 from quarry.text_postings").fetchone() == (True,)
        assert conn.execute("select count(*) > 0 from quarry.text_posting_blocks").fetchone() == (True,)
        chunk_lexemes: dict[object, list[set[str]]] = {}
        for document_id, lexemes in conn.execute(
                "select c.document_id, array(select lexeme from unnest(quarry.chunk_search_vector(c)))"
                " from quarry.chunks c").fetchall():
            chunk_lexemes.setdefault(document_id, []).append(set(lexemes))
    queries = ["alpha", "alpha word31", "word7 beta", "word35 alpha", "word3 word35", "partial index predicate",
               "parse user id", "expression index", "partial nonexistentword", "beta", "note 40"]

    def keyword_documents(query: str) -> set[object]:
        with pool.connection() as conn:
            return {row[0] for row in conn.execute(
                "select document_id from quarry.count_candidate_documents(%s) where keyword", (query,)).fetchall()}

    found_some = 0
    for query in queries:
        with pool.connection() as conn:
            row = conn.execute("select quarry.selective_lexemes(%s)", (query,)).fetchone()
        assert row is not None
        selective = set(row[0])
        expected = {document for document, chunks in chunk_lexemes.items()
                    if selective and any(selective <= lexemes for lexemes in chunks)}
        assert keyword_documents(query) == expected, query
        found_some += bool(expected)
    assert found_some >= 6


#: Filters, and whether each leaves a source out (so that bm25_top lists the chunks passing it).
FILTERS = [
    ({"source_slug": {"any_of": ["second"]}}, True),
    ({"source_slug": {"none_of": ["first"]}, "content_type": {"any_of": ["code"]}}, True),
    ({"source_slug": {"any_of": ["second"]}, "path": {"any_of": ["notes/n03*"]}}, True),
    ({"source_slug": {"any_of": ["first", "second"]}, "content_type": {"none_of": ["code"]}}, False),
    ({"content_type": {"any_of": ["markdown"]}}, False),
]


@pytest.mark.parametrize(("filters", "leaves_sources_out"), FILTERS)
def test_a_filter_scoped_to_few_chunks_ranks_as_the_check_per_posting(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path, filters: dict[str, object], leaves_sources_out: bool
) -> None:
    # Where a filter leaves sources out and theirs are few chunks, bm25_top lists the chunks that pass
    # it once and checks each posting against that list; above scoped_chunk_limit (0 here) each posting
    # looks its chunk up. Both read postings in blocks ("first", compacted) and in rows ("second").
    ingestor.ingest(write_corpus(tmp_path / "first", _notes(120)), SourceSpec(slug="first"))
    ingestor.ingest(write_corpus(tmp_path / "second", {**FILES, **_notes(80, first=300)}), SourceSpec(slug="second"))
    queries = ["alpha", "alpha beta word310", "partial index expression predicate", "parse user id"]
    with pool.connection() as conn:
        assert conn.execute("select count(*) from quarry.text_postings").fetchone() != (0,)  # rows, not only blocks
        # the scoped path runs where the filter leaves a source out, and only there
        assert conn.execute("select quarry.filter_scope(%s::jsonb, 50000) is not null",
                            (json.dumps(filters),)).fetchone() == (leaves_sources_out,)

        def top(query: str, depth: int, limit: int) -> list[tuple[object, float]]:
            return conn.execute("select chunk_id, score from quarry.bm25_top(%s, 30, %s, %s::jsonb,"
                                " scoped_chunk_limit => %s)", (query, depth, json.dumps(filters), limit)).fetchall()

        for query in queries:
            for depth in (3, 750):
                scoped, per_posting = top(query, depth, 50_000), top(query, depth, 0)
                assert scoped == per_posting, (query, depth)
        found = {chunk_id for query in queries for chunk_id, _ in top(query, 750, 50_000)}
        allowed = {row[0] for row in conn.execute(
            "select c.id from quarry.chunks c join quarry.sources s on s.id = c.source_id"
            " join quarry.documents d on d.id = c.document_id"
            " where quarry.facet_allows(%s::jsonb, 'source_slug', s.slug)"
            "   and quarry.chunk_allowed(%s::jsonb, c.content_type, c.language, c.package, c.deprecated)"
            "   and quarry.path_allows(%s::jsonb, d.path)", (json.dumps(filters),) * 3).fetchall()}
    assert found and found <= allowed
