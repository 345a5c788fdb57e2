"""The BM25 text leg: scores against a Python reference, statistics kept exact."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import write_corpus

K1, B, CODE_B = 0.9, 0.4, 0.9  # code chunks normalise length harder (sql/018-text-index.sql)


@pytest.fixture()
def ingestor(pool: ConnectionPool, local_embedder: Embedder) -> Ingestor:
    return Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000)


def _assert_statistics_exact(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        stats = conn.execute("select chunk_count, total_length from quarry.text_stats").fetchone()
        actual = conn.execute(
            "select count(*), coalesce(sum(l), 0) from (select distinct chunk_id, chunk_length as l"
            " from quarry.text_postings) c"
        ).fetchone()
        wrong_frequencies = conn.execute(
            "select count(*) from quarry.text_terms t where t.chunk_frequency <>"
            " (select count(*) from quarry.text_postings p where p.term_id = t.id)"
        ).fetchone()
    assert stats is not None and actual is not None
    assert stats[0] == actual[0]
    assert stats[1] == pytest.approx(actual[1], rel=1e-5)
    assert wrong_frequencies == (0,)


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
        conn.execute("delete from quarry.text_postings where chunk_id = any(%s)", (chunk_ids,))
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
        # index_chunk_terms (what rebuild_text_index calls) inserts and counts in one call
        conn.execute("delete from quarry.text_postings where chunk_id = any(%s)", (chunk_ids,))
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
            " cross join lateral quarry.weighted_term_frequencies(c.search_vector) f"
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
        before = conn.execute("select count(*) from quarry.text_postings").fetchone()
        conn.execute("select quarry.rebuild_text_index()")
        after = conn.execute("select count(*) from quarry.text_postings").fetchone()
    assert before == after
    _assert_statistics_exact(pool)


def test_truncating_sources_empties_postings_and_statistics(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    ingestor.ingest(write_corpus(tmp_path), SourceSpec(slug="sample"))
    with pool.connection() as conn:
        conn.execute("truncate quarry.sources cascade")
        postings = conn.execute("select count(*) from quarry.text_postings").fetchone()
        stats = conn.execute("select chunk_count, total_length from quarry.text_stats").fetchone()
    assert postings == (0,) and stats == (0, 0)
