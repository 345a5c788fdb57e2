"""The bulk write path: writing behind the parser, vectors reused in SQL, HNSW deferred on large loads."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from engine.admin.reindex import reindex
from engine.config import Settings
from engine.embed.base import CODE_SPACE, SPACES, TEXT_SPACE
from engine.ingest.batch import Segment
from engine.ingest.batch_writer import BatchWriter
from engine.ingest.pipeline import INGEST_LOCK_CLASS, Ingestor
from engine.ingest.sources import SourceSpec
from engine.ingest.summary import IngestProgress
from engine.ingest.write_behind import WriteBehind
from engine.store.db import open_pool
from tests.test_bm25 import _assert_statistics_exact
from tests.test_ingest_crash import (
    StandIn,
    _assert_no_orphans_and_one_vector_per_chunk_per_space,
    _snapshot,
    _write_big_corpus,
)

SLUG = "crash"  # the helpers shared with the crash test check this source


def _index_state(conn: psycopg.Connection[Any], space: str) -> tuple[bool | None, int]:
    """Whether the space's HNSW index is valid (None: absent), and how many deferrals are recorded."""
    row = conn.execute(
        "select (select i.indisvalid from pg_index i"
        "        where i.indexrelid = to_regclass('quarry.' || quarry.space_index_name(%s))),"
        " (select count(*) from quarry.deferred_vector_indexes)", (space,)).fetchone()
    assert row is not None
    return row[0], int(row[1])


def _leave_text_index_deferred(database_url: str) -> None:
    """What a load killed before its end leaves behind: the text space's index recorded as deferred, and dropped."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        [(index,)] = conn.execute("select quarry.defer_space_index('text')").fetchall()
        conn.execute(sql.SQL("drop index {}").format(sql.Identifier("quarry", index)))


def test_write_behind_consumes_in_order_and_hands_the_writer_error_to_the_caller() -> None:
    consumed: list[int] = []
    writer: WriteBehind[int] = WriteBehind(consumed.extend, depth=2, name="test-writer")
    for number in range(10):
        writer.submit(number)
    writer.close()
    assert consumed == list(range(10))

    def fail_on_three(items: Iterator[int]) -> None:
        for item in items:
            if item == 3:
                raise ValueError("cannot write 3")

    failing: WriteBehind[int] = WriteBehind(fail_on_three, depth=1, name="test-failing")
    with pytest.raises(ValueError, match="cannot write 3"):
        for number in range(100):  # the queue fills after the failure: submit must not hang
            failing.submit(number)
        failing.close()
    failing.abandon()  # after a failure too: returns at once

    started, release = threading.Event(), threading.Event()
    written: list[int] = []

    def slow(items: Iterator[int]) -> None:
        for item in items:
            started.set()
            release.wait(5)
            written.append(item)

    abandoned: WriteBehind[int] = WriteBehind(slow, depth=4, name="test-abandoned")
    for number in range(4):
        abandoned.submit(number)
    started.wait(5)
    release.set()
    abandoned.abandon()  # the item being written finishes; the queued ones are dropped
    assert written == [0]


def test_two_writers_consume_each_item_once_at_the_same_time_and_stop_together_on_an_error() -> None:
    both_writing = threading.Barrier(2, timeout=5)
    consumed: list[int] = []
    lock = threading.Lock()

    def record(items: Iterator[int]) -> None:
        for item in items:
            if item < 2:
                both_writing.wait()  # raises (and fails the test) unless the other writer holds an item too
            with lock:
                consumed.append(item)

    writers: WriteBehind[int] = WriteBehind(record, depth=2, name="test-writers", threads=2)
    for number in range(50):
        writers.submit(number)
    writers.close()
    assert sorted(consumed) == list(range(50))

    taken: list[int] = []

    def fail_on_three(items: Iterator[int]) -> None:
        for item in items:
            with lock:
                taken.append(item)
            if item == 3:
                raise ValueError("cannot write 3")

    failing: WriteBehind[int] = WriteBehind(fail_on_three, depth=1, name="test-failing", threads=2)
    with pytest.raises(ValueError, match="cannot write 3"):
        for number in range(100):  # the queue fills after the failure: submit must not hang
            failing.submit(number)
        failing.close()
    failing.abandon()  # after a failure too: returns at once
    assert max(taken) < 10  # the other writer stopped too, after at most the item it held


def test_concurrent_ingests_replacing_documents_keep_every_statistic_exact(
    database_url: str, pool: ConnectionPool, tmp_path: Path
) -> None:
    """Two runs (as two processes would, each with its own pool and two writers) add and replace
    documents at once: the shared statistics rows are updated under quarry.lock_corpus_statistics,
    so nothing deadlocks, and term, corpus and facet counts end as a recount finds them."""
    stand_in = StandIn()
    roots = {slug: _write_big_corpus(tmp_path / slug) for slug in ("left", "right")}
    for slug, root in roots.items():  # names both sources' documents inherit: totals both runs update
        (root / "package.json").write_text(json.dumps({"dependencies": {"react": "^18", slug: "^1"}}))
        (root / "docs/second/package.json").write_text(json.dumps({"dependencies": {"react": "^19"}}))

    def ingest_all() -> None:
        errors: list[BaseException] = []

        def run(slug: str) -> None:
            own = open_pool(database_url, Settings(database_url=database_url), min_size=1, max_size=4)
            try:
                Ingestor(own, dict.fromkeys(SPACES, stand_in), max_file_bytes=2_000_000).ingest(
                    roots[slug], SourceSpec(slug=slug))
            except BaseException as error:
                errors.append(error)
            finally:
                own.close()

        threads = [threading.Thread(target=run, args=(slug,)) for slug in roots]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []

    ingest_all()
    for root in roots.values():  # every page changes, with words no page had: replacements adding terms
        for number, page in enumerate(sorted(root.rglob("*.md"))):
            page.write_text(page.read_text() + f"\nAdded zyxword{number} and qwvterm{number % 7}.\n")
    ingest_all()
    _assert_statistics_exact(pool)
    with psycopg.connect(database_url) as conn:
        counts = ("select source_id, facet, value, documents from quarry.facet_counts order by 1, 2, 3",
                  "select source_id, combination, facet, name, documents from quarry.version_facet_combinations"
                  " order by 1, 2, 3, 4",
                  "select facet, name, documents from quarry.version_facet_totals order by 1, 2",
                  "select combination, facet, name, documents from quarry.version_facet_combination_totals"
                  " order by 1, 2, 3",
                  "select source_id, facet, name, documents from quarry.version_facet_source_totals"
                  " order by 1, 2, 3",
                  "select source_id, content_type, language, package, deprecated, documents"
                  " from quarry.facet_combinations order by 1, 2, 3, 4, 5")
        kept = [conn.execute(query).fetchall() for query in counts]
        documents = conn.execute("select count(*) from quarry.documents").fetchone()
        stale = conn.execute("select count(*) from quarry.version_facets_stale").fetchone()
        conn.execute("select quarry.rebuild_facet_counts()")
        recounted = [conn.execute(query).fetchall() for query in counts]
        conn.rollback()
        assert kept == recounted and all(kept) and stale == (0,)
        assert documents is not None  # every document of both sources has react
        assert ("sdk_dependency", "react", documents[0]) in kept[2]
        _assert_no_orphans_and_one_vector_per_chunk_per_space(conn)


def test_a_large_load_defers_the_hnsw_index_and_builds_it_when_it_ends(
    pool: ConnectionPool, database_url: str, tmp_path: Path
) -> None:
    root = _write_big_corpus(tmp_path / "corpus")
    seen_during_load: list[tuple[bool | None, int]] = []

    def during(state: IngestProgress) -> None:
        if state.chunks_written and not seen_during_load:
            with pool.connection() as conn:
                seen_during_load.append(_index_state(conn, TEXT_SPACE))

    stand_in = StandIn()
    summary = Ingestor(pool, dict.fromkeys(SPACES, stand_in), max_file_bytes=2_000_000).ingest(
        root, SourceSpec(slug=SLUG), progress=during)
    assert summary.chunks_written > 512 and summary.failed == []
    assert seen_during_load == [(None, 2)]  # the empty spaces' indexes were dropped for the load
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _index_state(conn, TEXT_SPACE) == (True, 0) and _index_state(conn, CODE_SPACE) == (True, 0)
        _assert_no_orphans_and_one_vector_per_chunk_per_space(conn)
        # the rebuilt index finds a stored vector itself (or its copy: the corpus holds each page twice)
        row = conn.execute("select embedding::vector from quarry.embeddings where space = 'text' limit 1").fetchone()
        assert row is not None
        nearest = conn.execute("select distance from quarry.nearest_chunks('text', %s, 1)", (row[0],)).fetchone()
        assert nearest is not None and nearest[0] < 1e-6
    _assert_statistics_exact(pool)


def test_an_index_a_killed_load_left_deferred_is_built_by_the_next_ingest(
    pool: ConnectionPool, database_url: str, tmp_path: Path
) -> None:
    stand_in = StandIn()
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, stand_in), max_file_bytes=2_000_000)
    root = _write_big_corpus(tmp_path / "corpus")
    ingestor.ingest(root, SourceSpec(slug=SLUG))
    _leave_text_index_deferred(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _index_state(conn, TEXT_SPACE) == (None, 1)
    small = tmp_path / "small"
    small.mkdir()
    (small / "note.md").write_text("# Note\n\nOne small page.\n")
    ingestor.ingest(small, SourceSpec(slug="small"))  # far too small to defer anything itself
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _index_state(conn, TEXT_SPACE) == (True, 0)
        definition = conn.execute("select pg_get_indexdef(to_regclass('quarry.embeddings_hnsw_text'))").fetchone()
    assert definition is not None
    assert "ef_construction='128'" in definition[0] and "WHERE (space = 'text'" in definition[0]


def test_an_index_build_failing_at_a_runs_end_fails_the_run_and_is_left_for_the_next(
    pool: ConnectionPool, database_url: str, tmp_path: Path
) -> None:
    """The build runs beside the run's last transaction (``DeferredIndexes.restore_meanwhile``): its error
    still fails the run, and the deferral stays recorded for the next ingest to build."""
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000)
    small = tmp_path / "small"
    small.mkdir()
    (small / "note.md").write_text("# Note\n\nOne small page.\n")
    ingestor.ingest(small, SourceSpec(slug="small"))  # the spaces exist from here
    _leave_text_index_deferred(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        [(definition,)] = conn.execute("select definition from quarry.deferred_vector_indexes").fetchall()
        conn.execute("update quarry.deferred_vector_indexes set definition = 'select 1 / 0'")
    (small / "note.md").write_text("# Note\n\nOne small page, edited.\n")
    with pytest.raises(psycopg.errors.DivisionByZero):
        ingestor.ingest(small, SourceSpec(slug="small"))
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _index_state(conn, TEXT_SPACE) == (None, 1)
        [(status,)] = conn.execute("select status from quarry.jobs where kind = 'ingest'"
                                   " order by created_at desc limit 1").fetchall()
        assert status == "failed"
        conn.execute("update quarry.deferred_vector_indexes set definition = %s", (definition,))
    ingestor.ingest(small, SourceSpec(slug="small"))
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _index_state(conn, TEXT_SPACE) == (True, 0)


def test_a_runs_last_transaction_commits_while_its_index_build_waits(
    pool: ConnectionPool, database_url: str, tmp_path: Path
) -> None:
    """The run's last transaction (text index rebuilt, source marked ingested) commits on its own while the
    deferred index build beside it waits: here for a transaction holding the vectors' table, in a real run
    for another run's batch, which may itself wait for this run's text index lock."""
    root = _write_big_corpus(tmp_path / "corpus")
    holder = psycopg.connect(database_url)

    def hold_the_vectors(state: IngestProgress) -> None:
        if state.chunks_written and holder.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            # after the load deferred the index (its concurrent drop waits for every holder of the table)
            holder.execute("lock table quarry.embeddings in row exclusive mode")

    ingested: list[Any] = []
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            Ingestor(pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000).ingest(
                root, SourceSpec(slug=SLUG), progress=hold_the_vectors)
        except BaseException as error:
            errors.append(error)

    run = threading.Thread(target=ingest)
    run.start()
    try:
        with psycopg.connect(database_url, autocommit=True) as watcher:
            deadline = time.monotonic() + 60  # the run alone takes a few seconds
            while not ingested and run.is_alive() and time.monotonic() < deadline:
                ingested = [row[0] for row in watcher.execute(
                    "select last_ingested_at from quarry.sources where slug = %s and last_ingested_at is not null",
                    (SLUG,))]
                time.sleep(0.05)
            waiting = _index_state(watcher, TEXT_SPACE)
    finally:
        holder.rollback()
        holder.close()
        run.join(60)
    assert errors == [] and not run.is_alive()
    assert ingested and waiting == (None, 2)  # committed while the build still waited for the holder
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _index_state(conn, TEXT_SPACE) == (True, 0)


def test_the_session_holding_a_runs_lock_is_never_left_in_a_transaction(
    pool: ConnectionPool, database_url: str, tmp_path: Path
) -> None:
    """Between its statements the run's own connection (the one holding the source's lock) is idle, not idle in a
    transaction: a server's idle_in_transaction_session_timeout would otherwise end it, and the lock with it,
    in a run whose batches take longer than the timeout."""
    root = _write_big_corpus(tmp_path / "corpus")
    states: list[str] = []

    def lock_session_state(state: IngestProgress) -> None:
        if not state.chunks_written:
            return
        with psycopg.connect(database_url, autocommit=True) as conn:
            states.extend(row[0] for row in conn.execute(
                "select a.state from pg_locks l join pg_stat_activity a on a.pid = l.pid"
                " where l.locktype = 'advisory' and l.classid = %s and l.granted", (INGEST_LOCK_CLASS,)))

    Ingestor(pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000).ingest(
        root, SourceSpec(slug=SLUG), progress=lock_session_state)
    assert states and "idle in transaction" not in states  # "active" when a writer's session check runs


def test_reindex_builds_an_index_a_killed_load_left_deferred(pool: ConnectionPool, database_url: str,
                                                               tmp_path: Path) -> None:
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000)
    ingestor.ingest(_write_big_corpus(tmp_path / "corpus"), SourceSpec(slug=SLUG))
    _leave_text_index_deferred(database_url)
    reindex(pool, ["vectors"])
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _index_state(conn, TEXT_SPACE) == (True, 0)


def test_a_copy_of_a_corpus_reuses_every_vector_in_sql_and_matches_its_twin(
    pool: ConnectionPool, database_url: str, tmp_path: Path
) -> None:
    stand_in = StandIn()
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, stand_in), max_file_bytes=2_000_000)
    root = _write_big_corpus(tmp_path / "corpus")
    first = ingestor.ingest(root, SourceSpec(slug=SLUG))
    second = ingestor.ingest(root, SourceSpec(slug="copy"))
    assert second.chunks_written == first.chunks_written and second.vectors_embedded == 0
    assert second.vectors_reused == second.chunks_written
    with psycopg.connect(database_url, autocommit=True) as conn:
        differing = conn.execute(
            """
            select count(*) from quarry.embeddings e
            join quarry.chunks c on c.id = e.chunk_id join quarry.documents d on d.id = c.document_id
            join quarry.sources s on s.id = d.source_id and s.slug = 'copy'
            join quarry.documents d2 on d2.path = d.path
                 and d2.source_id = (select id from quarry.sources where slug = %s)
            join quarry.chunks c2 on c2.document_id = d2.id and c2.ordinal = c.ordinal
            join quarry.embeddings e2 on e2.chunk_id = c2.id and e2.space = e.space
            where e2.embedding <> e.embedding or e2.input_hash <> e.input_hash
            """, (SLUG,)).fetchone()
        counts = conn.execute("select s.slug, count(e.*) from quarry.embeddings e join quarry.chunks c"
                              " on c.id = e.chunk_id join quarry.sources s on s.id = c.source_id"
                              " group by 1 order by 1").fetchall()
    assert differing == (0,)
    assert counts[0][1] == counts[1][1]  # as many vectors (text and code) in each source


def test_a_vector_deleted_after_the_lookup_is_embedded_instead(
    pool: ConnectionPool, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = StandIn()
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, stand_in), max_file_bytes=2_000_000)
    root = _write_big_corpus(tmp_path / "corpus")
    reference = ingestor.ingest(root, SourceSpec(slug=SLUG))
    with psycopg.connect(database_url, autocommit=True) as conn:
        expected = _snapshot(conn)
        conn.execute("truncate quarry.sources cascade")

    # Each segment's lookup claims every input has a stored vector: none has, as if another
    # run deleted them between the lookup and the write.
    def everything_stored(self: BatchWriter, groups: Any, segment: Segment) -> None:
        for group in groups:
            segment.stored[group.number] = set(segment.hashes)

    monkeypatch.setattr(BatchWriter, "_look_up_stored", everything_stored)
    summary = ingestor.ingest(root, SourceSpec(slug=SLUG))
    assert summary.chunks_written == reference.chunks_written and summary.vectors_embedded > 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        actual = _snapshot(conn)
        assert actual == expected
        _assert_no_orphans_and_one_vector_per_chunk_per_space(conn)


def test_a_first_ingest_writes_postings_at_its_end_and_a_killed_ones_are_written_by_the_next_ingest(
    pool: ConnectionPool, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into an empty text index, batches leave their chunks' postings to the rebuild closing the run.

    Killed after its first batch, the run leaves committed chunks without postings and the index marked
    deferred; the next ingest to finish, of another (small) source, indexes them.
    """
    root = _write_big_corpus(tmp_path / "corpus")
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000)
    write_transaction = BatchWriter._write_transaction
    batches = 0

    def killed_after_the_first_batch(self: BatchWriter, target: Any, batch: Segment, fresh: Any) -> dict[str, int]:
        nonlocal batches
        with target.bookkeeping:
            batches += 1
            if batches > 1:
                raise KeyboardInterrupt  # as a killed run stops: nothing more is written
        return write_transaction(self, target, batch, fresh)

    monkeypatch.setattr(BatchWriter, "_write_transaction", killed_after_the_first_batch)
    with pytest.raises(KeyboardInterrupt):
        ingestor.ingest(root, SourceSpec(slug=SLUG))
    monkeypatch.undo()

    def index_state() -> tuple[bool, int, int]:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute("select (select postings_deferred from quarry.text_stats),"
                               " (select count(*) from quarry.chunks),"
                               " (select count(*) from quarry.chunk_terms)").fetchone()
        assert row is not None
        return bool(row[0]), int(row[1]), int(row[2])

    deferred, chunks, indexed = index_state()
    assert deferred and chunks >= 256 and indexed == 0
    small = tmp_path / "small"
    small.mkdir()
    (small / "note.md").write_text("# Note\n\nOne small page.\n")
    ingestor.ingest(small, SourceSpec(slug="small"))  # its rebuild indexes every chunk, the killed run's too
    deferred, chunks, indexed = index_state()
    assert not deferred and indexed == chunks
    _assert_statistics_exact(pool)
    # the rerun of the killed source finds its committed documents unchanged and indexes the rest at its end
    summary = ingestor.ingest(root, SourceSpec(slug=SLUG))
    assert summary.chunks_written > 0
    deferred, chunks, indexed = index_state()
    assert not deferred and indexed == chunks
    _assert_statistics_exact(pool)


def test_an_ingest_rebuilding_the_text_index_waits_for_a_batch_holding_its_postings_without_deadlock(
    pool: ConnectionPool, database_url: str, tmp_path: Path
) -> None:
    """The closing rebuild takes the text index before the statistics lock, as every batch writing postings does.

    Another run's batch holds the text tables (it wrote postings) and has yet to take the statistics lock when
    this run closes with a rebuild (a first ingest). Took the other way round (the facet refresh or a deletion
    first), the two waited for each other until Postgres cancelled one: a CI job failing on a deadlock.
    """
    root = tmp_path / "small"
    root.mkdir()
    (root / "page.md").write_text("# Page\n\nA first ingest of one page, closed by a rebuild.\n")
    (root / "package.json").write_text(json.dumps({"dependencies": {"react": "^18"}}))  # a refresh to run
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            Ingestor(pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000).ingest(
                root, SourceSpec(slug="first"))
        except BaseException as error:
            errors.append(error)

    with psycopg.connect(database_url) as batch:  # as another run's batch, between its postings and its count
        batch.execute("lock table quarry.text_postings in row exclusive mode")
        running = threading.Thread(target=ingest)
        running.start()
        waiting = None
        for _ in range(600):  # until the run waits for the table the batch holds
            with psycopg.connect(database_url, autocommit=True) as conn:
                waiting = conn.execute(
                    "select count(*) from pg_locks l join pg_class c on c.oid = l.relation"
                    " where not l.granted and c.relname = 'text_postings'").fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.05)
        assert waiting and waiting[0], "the run never waited for the text index"
        batch.execute("select quarry.lock_corpus_statistics()")  # what the batch takes next, then commits
        batch.commit()
        running.join(60)
    assert not running.is_alive() and errors == []
    _assert_statistics_exact(pool)


def test_an_ingest_closing_without_a_rebuild_waits_for_another_runs_rebuild_without_deadlock(
    pool: ConnectionPool, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingest's closing transaction takes the text index before the statistics lock, rebuild or not.

    Another run's rebuild has taken the text index (and will take the statistics lock) as this run starts its
    closing transaction, which deletes a document that is gone (under the statistics lock, then its postings).
    """
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000)
    ingestor.ingest(_write_big_corpus(tmp_path / "corpus"), SourceSpec(slug=SLUG))  # the small run is no rebuild
    root = tmp_path / "small"
    root.mkdir()
    (root / "page.md").write_text("# Page\n\nA small ingest: its postings are compacted, not rebuilt.\n")
    (root / "gone.md").write_text("# Gone\n\nA page the next run finds deleted.\n")
    ingestor.ingest(root, SourceSpec(slug="small"))
    (root / "gone.md").unlink()
    finishing, rebuilding = threading.Event(), threading.Event()
    finish = Ingestor._finish

    def finish_once_the_other_run_rebuilds(self: Ingestor, *args: Any, **kwargs: Any) -> None:
        finishing.set()
        assert rebuilding.wait(60)
        finish(self, *args, **kwargs)

    monkeypatch.setattr(Ingestor, "_finish", finish_once_the_other_run_rebuilds)
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            ingestor.ingest(root, SourceSpec(slug="small"))
        except BaseException as error:
            errors.append(error)

    running = threading.Thread(target=ingest)
    running.start()
    assert finishing.wait(60)
    with psycopg.connect(database_url) as other:  # the other run's closing rebuild, from its start
        other.execute("select quarry.lock_text_index(rebuilding => true)")
        rebuilding.set()
        waiting = None
        for _ in range(600):  # until this run waits for the text index
            with psycopg.connect(database_url, autocommit=True) as conn:
                waiting = conn.execute(
                    "select count(*) from pg_locks l join pg_class c on c.oid = l.relation"
                    " where not l.granted and c.relname in ('chunk_terms', 'text_postings', 'text_posting_blocks')"
                ).fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.05)
        assert waiting and waiting[0], "the run never waited for the text index"
        other.execute("select quarry.rebuild_text_index()")  # takes the statistics lock, then commits
        other.commit()
    running.join(60)
    assert not running.is_alive() and errors == []
    _assert_statistics_exact(pool)
