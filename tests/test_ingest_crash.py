"""Crash safety: a real ``quarry ingest`` killed with SIGKILL at several points, then rerun, ends
with exactly the corpus of an uninterrupted run; two ingests of one source never interleave.

The uninterrupted reference runs first, in process, with a fast stand-in embedder (documents,
chunks and BM25 postings do not depend on the model); the database is then emptied and the
killed runs use the real CLI and the local model. Each kill lands at a different phase:
while the next batch is embedded, inside a write transaction, and after the last batch
(while the run finishes: deletions, BM25 rebuild, job bookkeeping).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.admin.jobs import list_jobs
from engine.embed.base import CODE_SPACE, TEXT_SPACE
from engine.ingest.batch import chunk_embedding_input
from engine.ingest.pipeline import INGEST_LOCK_CLASS, Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import write_corpus
from tests.test_bm25 import _assert_statistics_exact
from tests.test_reembed import HashedWords

REPO = Path(__file__).resolve().parents[1]
SLUG = "crash"
WORDS = ["index", "table", "query", "partial", "expression", "predicate", "vacuum", "analyze", "replica", "snapshot",
         "backup", "restore", "archive", "wal", "checkpoint", "buffer", "cache", "planner", "join", "hash", "merge",
         "nested", "loop", "sequence", "trigger", "function", "view", "schema", "role", "grant", "lock",
         "transaction", "commit", "rollback", "isolation", "serializable"]
EXIT_BUSY = 4


class StandIn(HashedWords):
    """A fast stand-in for the local model, of its dimension (vector indexes outlive a test's truncate)."""

    model_name = "hashed-words-384"
    dimension = 384


def _markdown(number: int) -> str:
    pick = random.Random(number)
    parts = [f"# Topic {number}\n"]
    for section in range(8):
        parts.append(f"\n## Section {number}.{section} {pick.choice(WORDS)}\n\n")
        for _ in range(2):
            parts.append(" ".join(pick.choice(WORDS) for _ in range(pick.randint(40, 90))) + ".\n\n")
    return "".join(parts)


def _python(number: int) -> str:
    pick = random.Random(1000 + number)
    parts = [f'"""Module {number}."""\n\n']
    for index in range(6):
        body = "\n".join(f"    {pick.choice(WORDS)}_{k} = {k} * {pick.randint(1, 9)}"
                         for k in range(pick.randint(3, 12)))
        summary = " ".join(pick.choice(WORDS) for _ in range(12))
        parts.append(f"def {pick.choice(WORDS)}_{index}_{number}(value: int) -> int:\n"
                     f'    """{summary}."""\n{body}\n    return value\n\n\n')
    return "".join(parts)


def _write_big_corpus(root: Path) -> Path:
    """Three write batches: 256 chunks of prose, the same pages copied elsewhere, ~175 chunks of code.

    The copies' vectors are reused by input hash, so the model embeds about 430 chunks in all:
    the test stays fast, and one batch (the copies) is pure writing.
    """
    pages = {f"topic_{n:03}.md": _markdown(n) for n in range(32)}
    files = {f"docs/{part}/{name}": text for part in ("first", "second") for name, text in pages.items()}
    files |= {f"src/module_{n:02}.py": _python(n) for n in range(25)}
    return write_corpus(root, files)


def _env(database_url: str, model_cache: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("QUARRY_") and key not in ("VOYAGE_API_KEY", "DATABASE_URL")}
    return env | {"DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache),
                  "QUARRY_TEXT_MODEL": "local", "QUARRY_CODE_MODEL": "local"}


def _ingest_command(root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli", "ingest", str(root), "--source", SLUG, "--json", *extra]


Probe = Callable[[psycopg.Connection[Any]], bool]


def _chunks_over(count: int) -> Probe:
    def probe(conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute("select count(*) from quarry.chunks").fetchone()
        return row is not None and row[0] > count
    return probe


def _in_write_transaction(conn: psycopg.Connection[Any]) -> bool:
    """Another session is inside a batch's write transaction (documents, chunks, postings or vectors)."""
    row = conn.execute(
        "select exists (select 1 from pg_stat_activity where datname = current_database()"
        " and pid <> pg_backend_pid() and xact_start is not null"
        " and query ~* '^\\s*(copy quarry\\.(documents|chunks|embeddings)"
        "|select quarry\\.(insert_chunk_postings|count_new_postings))')"
    ).fetchone()
    return bool(row and row[0])


def _all_written_but_running(total: int) -> Probe:
    def probe(conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute("select (select count(*) from quarry.chunks),"
                           " exists (select 1 from quarry.jobs where status = 'running')").fetchone()
        return row is not None and row[0] >= total and bool(row[1])
    return probe


def _run_and_kill(url: str, env: dict[str, str], root: Path, probe: Probe) -> dict[str, Any]:
    """Start an ingest, SIGKILL it the moment ``probe`` holds; what the database showed then."""
    started = time.monotonic()
    process = subprocess.Popen(_ingest_command(root), cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    killed = False
    with psycopg.connect(url, autocommit=True) as conn:
        while process.poll() is None and time.monotonic() - started < 120:
            if probe(conn):
                os.kill(process.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.003)
        process.wait(timeout=30)
        chunks = conn.execute("select count(*) from quarry.chunks").fetchone()
        finished = conn.execute("select last_ingested_at is not null from quarry.sources where slug = %s",
                                (SLUG,)).fetchone()
        # The killed process's sessions end when Postgres notices the closed sockets: wait for
        # its locks to go, so the next run neither fails BUSY nor sees the job alive.
        deadline = time.monotonic() + 10
        while conn.execute("select count(*) from pg_locks where locktype = 'advisory' and classid in (%s, %s)",
                           (INGEST_LOCK_CLASS, 0x514A)).fetchone() != (0,):
            assert time.monotonic() < deadline, "the killed ingest's locks were never released"
            time.sleep(0.01)
    return {"killed": killed, "returncode": process.returncode, "chunks_at_kill": chunks[0] if chunks else None,
            "finish_committed": bool(finished and finished[0]),
            "seconds": round(time.monotonic() - started, 2),
            "stderr": process.stderr.read().decode()[-2000:] if process.stderr else ""}


def _snapshot(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Everything an ingest derives from the files, keyed by content rather than by generated ids."""
    return {
        "documents": conn.execute(
            "select d.path, d.content_hash, md5(d.raw), d.title, d.url, d.content_type, d.language,"
            " d.parser_version from quarry.documents d order by d.path").fetchall(),
        "chunks": conn.execute(
            "select d.path, c.ordinal, c.content, c.title, c.heading_path, c.symbol_path, c.is_code, c.start_line,"
            " c.end_line, c.start_byte, c.end_byte, c.token_estimate"
            " from quarry.chunks c join quarry.documents d on d.id = c.document_id"
            " order by d.path, c.ordinal").fetchall(),
        "postings": conn.execute(
            "select d.path, c.ordinal, t.lexeme, ct.chunk_length, round(p.impact::numeric, 4)"
            " from quarry.text_index_postings p join quarry.text_terms t on t.id = p.term_id"
            " join quarry.chunk_terms ct on ct.chunk_id = p.chunk_id"
            " join quarry.chunks c on c.id = p.chunk_id join quarry.documents d on d.id = c.document_id"
            " order by 1, 2, 3").fetchall(),
        "terms": conn.execute("select lexeme, chunk_frequency from quarry.text_terms where chunk_frequency > 0"
                              " order by lexeme").fetchall(),
        "text_stats": conn.execute("select chunk_count, round(total_length::numeric, 1)"
                                   " from quarry.text_stats").fetchall(),
        "facets": conn.execute("select facet, value, documents from quarry.facet_counts"
                               " order by 1, 2").fetchall(),
        "versions": conn.execute(
            "select d.path, v.facet, v.name, v.range_text from quarry.version_constraints v"
            " join quarry.documents d on d.id = v.document_id order by 1, 2, 3, 4").fetchall(),
        "manifests": conn.execute("select d.path, m.kind, m.scope from quarry.manifests m"
                                  " join quarry.documents d on d.id = m.document_id order by 1").fetchall(),
    }


def _assert_no_orphans_and_one_vector_per_chunk_per_space(conn: psycopg.Connection[Any]) -> None:
    spaces = dict(conn.execute("select serves, name from quarry.embedding_spaces where serves is not null"))
    assert set(spaces) == {TEXT_SPACE, CODE_SPACE}
    assert conn.execute("select count(*) from quarry.embeddings where space <> all(%s)",
                        (list(spaces.values()),)).fetchone() == (0,)
    wrong = conn.execute(
        """
        select c.id, c.is_code,
               (select count(*) from quarry.embeddings e where e.chunk_id = c.id and e.space = %(text)s),
               (select count(*) from quarry.embeddings e where e.chunk_id = c.id and e.space = %(code)s)
        from quarry.chunks c
        where (select count(*) from quarry.embeddings e where e.chunk_id = c.id and e.space = %(text)s) <> 1
           or (select count(*) from quarry.embeddings e where e.chunk_id = c.id and e.space = %(code)s)
              <> c.is_code::int
        """,
        {"text": spaces[TEXT_SPACE], "code": spaces[CODE_SPACE]},
    ).fetchall()
    assert wrong == []
    orphans = conn.execute(
        """
        select (select count(*) from quarry.text_index_postings p where not exists
                    (select 1 from quarry.chunks c where c.id = p.chunk_id)),
               (select count(*) from quarry.chunks c where not exists
                    (select 1 from quarry.chunk_terms p where p.chunk_id = c.id)
                          and quarry.chunk_search_vector(c) <> ''),
               (select count(*) from quarry.documents d where not exists
                    (select 1 from quarry.chunks c where c.document_id = d.id)),
               (select count(*) from quarry.chunks c where c.source_id <> (select id from quarry.sources
                    where slug = %s)),
               (select count(*) from (select document_id, ordinal from quarry.chunks
                    group by 1, 2 having count(*) > 1) duplicated)
        """,
        (SLUG,),
    ).fetchone()
    assert orphans == (0, 0, 0, 0, 0)
    # Every vector is stored under the hash of its own chunk's embedding input: no vector of an
    # earlier, killed version of a chunk survived under a new one.
    rows = conn.execute(
        "select e.input_hash, d.title, c.heading_path, c.symbol_path, c.content from quarry.embeddings e"
        " join quarry.chunks c on c.id = e.chunk_id join quarry.documents d on d.id = c.document_id").fetchall()
    mismatched = [row for row in rows
                  if bytes(row[0]) != hashlib.sha256(chunk_embedding_input(*row[1:]).encode()).digest()]
    assert mismatched == []


@pytest.fixture()
def clean_jobs(database_url: str) -> str:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("delete from quarry.jobs")
    return database_url


@pytest.mark.slow
def test_killed_ingests_converge_to_the_uninterrupted_corpus(
    clean_jobs: str, pool: ConnectionPool, model_cache: Path, tmp_path: Path
) -> None:
    url = clean_jobs
    root = _write_big_corpus(tmp_path / "corpus")
    stand_in = StandIn()
    reference = Ingestor(pool, {TEXT_SPACE: stand_in, CODE_SPACE: stand_in}, max_file_bytes=2_000_000).ingest(
        root, SourceSpec(slug=SLUG))
    total = reference.chunks_written
    assert 512 < total <= 768, total  # three write batches
    with psycopg.connect(url, autocommit=True) as conn:
        expected = _snapshot(conn)
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
        conn.execute("delete from quarry.jobs")

    env = _env(url, model_cache)
    kill_points: list[tuple[str, Probe]] = [
        ("after batch 1, embedding batch 2", _chunks_over(0)),
        ("inside batch 2's write transaction", _in_write_transaction),
        ("after batch 2, embedding batch 3", _chunks_over(300)),
        ("after the last batch, while finishing", _all_written_but_running(total)),
    ]
    outcomes = {}
    for name, probe in kill_points:
        outcomes[name] = _run_and_kill(url, env, root, probe)
    started = time.monotonic()
    final = subprocess.run(_ingest_command(root), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    outcomes["final run"] = {"returncode": final.returncode, "seconds": round(time.monotonic() - started, 2)}
    print(json.dumps(outcomes, indent=1))

    for name, outcome in outcomes.items():
        if name != "final run":
            assert outcome["killed"], f"{name}: the ingest finished before the kill point ({outcome})"
            assert outcome["returncode"] == -signal.SIGKILL, outcome
    assert final.returncode == 0, final.stderr
    summary = json.loads(final.stdout)
    assert summary["failed"] == [] and summary["deleted"] == 0

    with psycopg.connect(url, autocommit=True) as conn:
        actual = _snapshot(conn)
        for part in expected:
            assert actual[part] == expected[part], f"{part} differs from the uninterrupted run"
        _assert_no_orphans_and_one_vector_per_chunk_per_space(conn)
        stored = [status for (status,) in conn.execute("select status from quarry.jobs order by id")]
    _assert_statistics_exact(pool)

    # Every killed run is recorded as interrupted (by the next run of the source); the last succeeded.
    assert stored == ["interrupted"] * len(kill_points) + ["succeeded"]
    listed = list_jobs(pool, source=SLUG).jobs
    assert [job.status for job in listed] == ["succeeded"] + ["interrupted"] * len(kill_points)
    assert all(job.error and "stopped before it finished" in job.error for job in listed[1:])
    assert listed[0].counts["added"] + listed[0].counts["unchanged"] == 89 and listed[0].counts["failed"] == 0
    assert all(job.progress.get("chunks_written", 0) <= outcomes[name]["chunks_at_kill"]
               for job, (name, _) in zip(reversed(listed[1:]), kill_points, strict=True))


def test_a_second_ingest_of_a_busy_source_fails_fast_or_waits(
    clean_jobs: str, model_cache: Path, tmp_path: Path
) -> None:
    url = clean_jobs
    root = write_corpus(tmp_path / "corpus")
    env = _env(url, model_cache)
    with psycopg.connect(url, autocommit=True) as conn:
        source_id = conn.execute("insert into quarry.sources (slug, display_name) values (%s, %s) returning id",
                                 (SLUG, SLUG)).fetchone()
        assert source_id is not None
        # This session plays the running ingest: it holds the source's ingest lock.
        conn.execute("select pg_advisory_lock(%s, %s)", (INGEST_LOCK_CLASS, source_id[0]))

        started = time.monotonic()
        busy = subprocess.run(_ingest_command(root), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert busy.returncode == EXIT_BUSY and "busy" in busy.stderr, busy.stderr
        assert time.monotonic() - started < 30

        waiting = subprocess.Popen(_ingest_command(root, "--wait"), cwd=REPO, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while conn.execute("select count(*) from pg_locks where locktype = 'advisory' and not granted"
                               " and classid = %s", (INGEST_LOCK_CLASS,)).fetchone() != (1,):
                assert waiting.poll() is None, waiting.stderr.read() if waiting.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.05)
            # Queued behind the lock: it has written nothing.
            assert conn.execute("select count(*) from quarry.documents").fetchone() == (0,)
            conn.execute("select pg_advisory_unlock(%s, %s)", (INGEST_LOCK_CLASS, source_id[0]))
            out, err = waiting.communicate(timeout=120)
        finally:
            if waiting.poll() is None:
                waiting.kill()
        assert waiting.returncode == 0, err
        assert json.loads(out)["added"] == 4
        # The refused ingest left no job; the waiting one is the only job and it succeeded.
        assert conn.execute("select status from quarry.jobs").fetchall() == [("succeeded",)]
