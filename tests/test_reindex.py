"""``quarry reindex`` rebuilds derived data from the canonical records, exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import FILES, write_corpus

REPO = Path(__file__).resolve().parents[1]
EXTRA = {
    "package.json": json.dumps({"dependencies": {"react": "^18.2.0"}}),
    "guide/compact.md": "# Counter\n\n```compact\npragma language_version >= 0.16;\n```\n",
    "guide/links.md": "# Links\n\nSee [the indexes page](../docs/indexes.md) and [Postgres](https://www.postgresql.org/).\n",
}

SNAPSHOTS = {
    "postings": "select t.lexeme, p.chunk_id, round(p.impact::numeric, 5) from quarry.text_index_postings p "
                "join quarry.text_terms t on t.id = p.term_id where t.chunk_frequency > 0 order by 1, 2",
    "chunk terms": "select chunk_id, chunk_length, term_ids, impacts from quarry.chunk_terms order by 1",
    "terms": "select lexeme, chunk_frequency from quarry.text_terms where chunk_frequency > 0 order by 1",
    "stats": "select chunk_count, total_length from quarry.text_stats",
    "facets": "select source_id, facet, value, documents from quarry.facet_counts order by 1, 2, 3",
    "facet combinations": "select source_id, content_type, language, package, deprecated, documents"
                          " from quarry.facet_combinations order by 1, 2, 3, 4, 5",
    "version facets": "select source_id, combination, facet, name, documents from quarry.version_facet_combinations"
                      " order by 1, 2, 3, 4",
    "version totals": "select facet, name, documents from quarry.version_facet_totals order by 1, 2",
    "combination totals": "select combination, facet, name, documents from quarry.version_facet_combination_totals"
                          " order by 1, 2, 3",
    "source totals": "select source_id, facet, name, documents from quarry.version_facet_source_totals"
                     " order by 1, 2, 3",
    "versions": "select document_id, facet, name, range_text, raw, origin from quarry.version_constraints "
                "order by 1, 2, 3, 4, 6",
    "manifests": "select document_id, kind, scope from quarry.manifests order by 1",
    "relations": "select document_id, relation, target, candidates, anchored, line from quarry.relations "
                 "order by 1, 2, 3",
}


def _snapshot(pool: ConnectionPool) -> dict[str, list[tuple[Any, ...]]]:
    with pool.connection() as conn:
        return {name: conn.execute(query).fetchall() for name, query in SNAPSHOTS.items()}


@pytest.mark.parametrize("seeded", [False, True], ids=["first-ingest", "most-of-the-corpus"])
def test_reindex_restores_every_derived_table(pool: ConnectionPool, database_url: str, local_embedder: Embedder,
                                              tmp_path: Path, seeded: bool) -> None:
    """The ingest's own index equals a reindex's: a first ingest's (postings written once, at its end), and,
    ``seeded``, one of most of the corpus (its batches write posting rows; the rebuild closing it keeps their
    term frequencies instead of tokenizing the chunks again)."""
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    if seeded:
        ingestor.ingest(write_corpus(tmp_path / "seed", {"seed.md": "# Seed\n\nOne page indexed first.\n"}),
                        SourceSpec(slug="seed"))
    ingestor.ingest(write_corpus(tmp_path / "docs", {**FILES, **EXTRA}), SourceSpec(slug="sample"))
    before = _snapshot(pool)
    assert all(before.values()), {name: len(rows) for name, rows in before.items()}

    with pool.connection() as conn:  # damage every derived table
        conn.execute("delete from quarry.chunk_terms where chunk_id in "
                     "(select id from quarry.chunks order by id limit 3)")
        conn.execute("update quarry.text_posting_blocks set impacts = array_fill(0::real, array[cardinality(impacts)])"
                     " where term_id in (select id from quarry.text_terms order by id limit 20)")
        conn.execute("update quarry.text_stats set total_length = total_length + 999")
        conn.execute("update quarry.facet_counts set documents = documents + 7")
        conn.execute("update quarry.version_facet_combinations set documents = documents + 2")
        conn.execute("update quarry.facet_combinations set documents = documents + 4")
        conn.execute("update quarry.version_facet_combination_totals set documents = documents + 1")
        conn.execute("update quarry.version_facet_totals set documents = documents + 3")
        conn.execute("update quarry.version_facet_source_totals set documents = documents + 5")
        conn.execute("delete from quarry.version_constraints")
        conn.execute("delete from quarry.manifests")
        conn.execute("delete from quarry.relations")
    assert _snapshot(pool) != before

    env = {**os.environ, "DATABASE_URL": database_url}
    result = subprocess.run([sys.executable, "-m", "engine.cli", "reindex", "--json"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["parts"] == ["text", "facets", "versions", "relations", "vectors"]
    assert summary["counts"]["vectors"] == 2  # the two HNSW indexes (text, code)
    assert _snapshot(pool) == before
    with pool.connection() as conn:
        invalid = conn.execute("select count(*) from pg_index i join pg_class c on c.oid = i.indexrelid "
                               "join pg_namespace n on n.oid = c.relnamespace "
                               "where n.nspname = 'quarry' and not i.indisvalid").fetchone()
    assert invalid == (0,)


def test_recounting_facets_waits_for_a_document_writer_without_deadlock(database_url: str) -> None:
    """quarry.rebuild_facet_counts takes the statistics lock before the counts table, as writers of documents do.

    A batch holds the statistics lock and has yet to write its documents (whose triggers write the counts) when
    a reindex recounts the facets. Took the other way round, the two waited for each other until Postgres
    cancelled one.
    """
    with psycopg.connect(database_url, autocommit=True) as conn:  # a source: its version facets are recounted too
        conn.execute("insert into quarry.sources (slug, display_name) values ('one', 'One')")
    errors: list[BaseException] = []

    def recount() -> None:
        try:
            with psycopg.connect(database_url) as conn:
                conn.execute("select quarry.rebuild_facet_counts()")
        except BaseException as error:
            errors.append(error)

    with psycopg.connect(database_url) as batch:
        batch.execute("select quarry.lock_corpus_statistics()")
        recounting = threading.Thread(target=recount)
        recounting.start()
        waiting = None
        for _ in range(600):  # until the recount waits (for the lock the batch holds)
            with psycopg.connect(database_url, autocommit=True) as conn:
                waiting = conn.execute("select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
                                       " and query like '%rebuild_facet_counts%'").fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.05)
        assert waiting and waiting[0], "the recount never waited"
        batch.execute("lock table quarry.facet_counts in row exclusive mode")  # the documents' triggers' writes
        batch.commit()
        recounting.join(60)
    assert not recounting.is_alive() and errors == []


def test_keyword_searches_answer_from_the_committed_postings_while_they_are_rebuilt(
        pool: ConnectionPool, database_url: str, local_embedder: Embedder, tmp_path: Path) -> None:
    """A text rebuild (``quarry reindex``, the end of an ingest that wrote most of the corpus) takes minutes at
    1M chunks: meanwhile keyword searches answer from the postings committed before it, without waiting for it,
    and see the rebuilt ones once it commits."""
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(tmp_path / "docs", FILES), SourceSpec(slug="sample"))
    searches = {
        "bm25_top": "select chunk_id, score from quarry.bm25_top('partial index predicate', 10)",
        "count": "select count(*) from quarry.count_candidate_documents('partial index predicate') where keyword",
        "postings": "select count(*) from quarry.text_index_postings",
    }
    with pool.connection() as conn:
        before = {name: conn.execute(query).fetchall() for name, query in searches.items()}
    assert before["bm25_top"] and before["count"] != [(0,)], before

    with psycopg.connect(database_url) as rebuilding:
        rebuilding.execute("select quarry.rebuild_text_index()")  # not committed yet
        with psycopg.connect(database_url, autocommit=True) as searching:
            searching.execute("set lock_timeout = '2s'")  # a search that waited for the rebuild fails
            during = {name: searching.execute(query).fetchall() for name, query in searches.items()}
        rebuilding.commit()
    assert during == before
    with pool.connection() as conn:  # the same corpus: the rebuilt postings answer the same
        assert {name: conn.execute(query).fetchall() for name, query in searches.items()} == before
