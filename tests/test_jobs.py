"""Durable jobs: the row every ingest / re-embed / reindex leaves, its live status, cancel, retry,
the ``quarry jobs`` command functions and the MCP ``jobs`` tool (served as the read-only role)."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.admin.jobs import (
    JobCancelledError,
    JobRun,
    enqueue_retry,
    list_jobs,
    reap_interrupted,
    request_cancel,
    show_job,
)
from engine.admin.reembed import reembed_space
from engine.cli.jobs import add_jobs_arguments, reindex_as_job, run_jobs
from engine.config import Settings
from engine.embed.base import CODE_SPACE, SPACES, Embedder, Vectors
from engine.errors import InvalidRequestError, NotFoundError, ProviderError
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.runtime import Runtime
from engine.store import api_keys
from engine.store.db import open_pool
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.test_ingest_crash import StandIn, _write_big_corpus
from tests.test_reembed import HashedWords

SOURCE = SourceSpec(slug="jobs-test")


class FailingEmbedder:
    """The local model's name and dimension, but every call fails (a provider outage)."""

    def __init__(self, model: Embedder) -> None:
        self.model_name = model.model_name
        self.dimension = model.dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        raise ProviderError("HTTP 503")

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        raise ProviderError("HTTP 503")


@pytest.fixture()
def jobs_pool(pool: ConnectionPool) -> ConnectionPool:
    """The emptied test database, without jobs left by other tests."""
    with pool.connection() as conn:
        conn.execute("delete from quarry.jobs")
    return pool


def _stored_status(pool: ConnectionPool, job_id: uuid.UUID) -> str:
    with pool.connection() as conn:
        row = conn.execute("select status from quarry.jobs where id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_an_ingest_records_a_job_with_progress_counts_and_timings(
    jobs_pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path)
    (root / "broken.md").write_bytes(b"# Broken\n\n\xff\xfe\n")
    Ingestor(jobs_pool, {"text": local_embedder}, max_file_bytes=1_000_000).ingest(root, SOURCE)

    [job] = list_jobs(jobs_pool).jobs
    assert (job.kind, job.source, job.status) == ("ingest", "jobs-test", "succeeded")
    assert job.arguments == {"path": str(root.resolve()), "source": {"slug": "jobs-test"}, "wait": False,
                             "since": None}
    assert job.counts["added"] == 4 and job.counts["failed"] == 1 and job.counts["chunks_written"] > 0
    assert job.progress["chunks_written"] == job.counts["chunks_written"]  # one batch: progress after it
    assert job.started_at is not None and job.finished_at is not None and job.seconds is not None
    assert job.finished_at >= job.started_at >= job.created_at and job.pid is not None
    detail = show_job(jobs_pool, job.id)
    assert [failure["path"] for failure in detail.failures] == ["broken.md"] and job.failure_count == 1


def test_a_job_whose_process_died_reads_as_interrupted_and_the_next_run_records_it(
    jobs_pool: ConnectionPool, migrated_url: str, local_embedder: Embedder, tmp_path: Path
) -> None:
    other = open_pool(migrated_url, Settings(database_url=migrated_url), min_size=1, max_size=2)
    try:
        dying = JobRun.create(other, "ingest", SOURCE.slug, {"path": str(tmp_path), "source": {"slug": "jobs-test"}})
        dying.start()
        dying.progress({"chunks_written": 256})
        assert list_jobs(jobs_pool).jobs[0].status == "running"
        with jobs_pool.connection() as conn:  # the process dies: its session ends with it
            conn.execute("select pg_terminate_backend(backend_pid, 5000) from quarry.jobs where id = %s", (dying.id,))
        listed = list_jobs(jobs_pool).jobs[0]
        assert listed.status == "interrupted" and listed.finished_at == listed.heartbeat_at
        assert _stored_status(jobs_pool, dying.id) == "running"  # only read so far, nothing written
        dying.close()  # the broken connection goes back to its pool, which discards it
    finally:
        other.close()

    Ingestor(jobs_pool, {"text": local_embedder}, max_file_bytes=1_000_000).ingest(write_corpus(tmp_path), SOURCE)
    assert _stored_status(jobs_pool, dying.id) == "interrupted"
    assert "stopped before it finished" in (show_job(jobs_pool, dying.id).job.error or "")
    assert reap_interrupted(jobs_pool) == 0


def test_cancel_stops_a_running_ingest_between_batches_and_keeps_what_it_wrote(
    jobs_pool: ConnectionPool, tmp_path: Path
) -> None:
    root = _write_big_corpus(tmp_path)
    ingestor = Ingestor(jobs_pool, dict.fromkeys(SPACES, StandIn()), max_file_bytes=2_000_000)
    requested: list[str] = []

    def cancel_after_the_first_batch(state: Any) -> None:
        if state.chunks_written and not requested:
            [running] = list_jobs(jobs_pool, status="running").jobs
            requested.append(request_cancel(jobs_pool, running.id))

    with pytest.raises(JobCancelledError):
        ingestor.ingest(root, SOURCE, progress=cancel_after_the_first_batch)

    assert requested == ["cancelling"]
    [job] = list_jobs(jobs_pool).jobs
    assert job.status == "cancelled" and job.cancel_requested and job.counts["chunks_written"] > 0
    with jobs_pool.connection() as conn:
        written = conn.execute("select count(*) from quarry.chunks").fetchone()
        finished = conn.execute("select last_ingested_at from quarry.sources").fetchone()
    assert written == (job.counts["chunks_written"],)  # the first batch stays; nothing after it
    assert finished == (None,)  # the run did not finish: no deletions, no "last ingested" stamp
    assert request_cancel(jobs_pool, job.id) == "cancelled"  # finished already: nothing changes

    queued = JobRun.create(jobs_pool, "reindex", None, {"parts": ["facets"]})
    assert request_cancel(jobs_pool, queued.id) == "cancelled"  # not started: cancelled at once
    with pytest.raises(JobCancelledError):
        queued.start()
    queued.close()  # a run holds a pooled connection until it ends
    with pytest.raises(NotFoundError):
        request_cancel(jobs_pool, uuid.uuid4())


def test_retry_requeues_once_and_quarry_jobs_retry_runs_it(
    jobs_pool: ConnectionPool, migrated_url: str, model_cache: Path, local_embedder: Embedder, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_corpus(tmp_path)
    failing = FailingEmbedder(local_embedder)
    with pytest.raises(ProviderError, match="HTTP 503"):
        Ingestor(jobs_pool, dict.fromkeys(SPACES, failing), max_file_bytes=1_000_000).ingest(root, SOURCE)
    [failed] = list_jobs(jobs_pool).jobs
    assert failed.status == "failed" and "HTTP 503" in (failed.error or "")

    queued = enqueue_retry(jobs_pool, failed.id)
    assert enqueue_retry(jobs_pool, failed.id) == queued  # asking twice queues it once
    retry = show_job(jobs_pool, queued).job
    assert (retry.status, retry.retry_of, retry.arguments) == ("queued", failed.id, failed.arguments)
    assert show_job(jobs_pool, failed.id).retried_by == [queued]

    parser = argparse.ArgumentParser()
    add_jobs_arguments(parser.add_subparsers(dest="command"))
    settings = Settings(database_url=migrated_url, model_cache=model_cache, text_model="local", code_model="local")
    with Runtime(settings) as runtime:
        # The queued retry runs with the original arguments, under the queued job's id.
        assert run_jobs(runtime, parser.parse_args(["jobs", "retry", str(failed.number), "--json"])) == 0
        outcome = json.loads(capsys.readouterr().out)
        assert outcome["job_id"] == str(queued) and outcome["summary"]["added"] == 4
        assert _stored_status(jobs_pool, queued) == "succeeded"

        with pytest.raises(InvalidRequestError, match="only failed, interrupted or cancelled"):
            run_jobs(runtime, parser.parse_args(["jobs", "retry", str(queued)]))

        assert run_jobs(runtime, parser.parse_args(["jobs", "list", "--json", "--limit", "1"])) == 0
        page = json.loads(capsys.readouterr().out)
        assert [job["id"] for job in page["jobs"]] == [str(queued)] and page["next_cursor"]
        assert run_jobs(runtime, parser.parse_args(["jobs", "list", "--cursor", page["next_cursor"]])) == 0
        assert str(failed.id) in capsys.readouterr().out
        assert run_jobs(runtime, parser.parse_args(["jobs", "show", str(failed.id)])) == 0
        shown = capsys.readouterr().out
        assert "HTTP 503" in shown and f"retried by: {queued}" in shown
        assert run_jobs(runtime, parser.parse_args(["jobs", "cancel", str(queued), "--json"])) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "succeeded"

        # `quarry jobs run` runs what MCP queued: a cancelled re-embed, re-queued.
        cancelled = JobRun.create(jobs_pool, "reembed", None, {"space": "text"})
        request_cancel(jobs_pool, cancelled.id)
        cancelled.close()
        enqueue_retry(jobs_pool, cancelled.id)
        assert run_jobs(runtime, parser.parse_args(["jobs", "run", "--json"])) == 0
        ran = json.loads(capsys.readouterr().out)
        assert ran["kind"] == "reembed" and ran["summary"]["already_current"]
        assert list_jobs(jobs_pool, kind="reembed", status="succeeded").jobs


def test_reembed_and_reindex_record_jobs(jobs_pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path) -> None:
    Ingestor(jobs_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path), SOURCE)
    reembed_space(jobs_pool, CODE_SPACE, HashedWords())  # the generation test_reembed fills too: code_g2, 64 dims
    reindex_as_job(jobs_pool, ["facets"])
    jobs = {job.kind: job for job in list_jobs(jobs_pool).jobs}
    assert jobs["reembed"].status == "succeeded" and jobs["reembed"].arguments == {"space": "code"}
    assert jobs["reembed"].counts["embedded"] > 0 and jobs["reembed"].progress["embedded"] > 0
    assert jobs["reindex"].status == "succeeded" and jobs["reindex"].arguments == {"parts": ["facets"]}
    assert "facets_count" in jobs["reindex"].counts


def test_listing_pages_with_an_opaque_cursor_and_filters(jobs_pool: ConnectionPool) -> None:
    made = []
    for number in range(5):
        run = JobRun.create(jobs_pool, "reindex", None, {"parts": ["facets"], "n": number})
        run.start()
        run.succeed({"n": number})
        made.append(run.id)
    seen: list[uuid.UUID] = []
    cursor = None
    while True:
        page = list_jobs(jobs_pool, cursor=cursor, limit=2)
        seen += [job.id for job in page.jobs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == made[::-1]  # newest first, each job once
    assert list_jobs(jobs_pool, status="failed").jobs == []
    assert len(list_jobs(jobs_pool, kind="reindex", status="succeeded").jobs) == 5
    for bad in ("not-a-cursor", "qj1"):
        with pytest.raises(InvalidRequestError, match="cursor"):
            list_jobs(jobs_pool, cursor=bad)


def test_the_read_only_role_can_cancel_and_queue_retries_but_write_nothing_else(
    jobs_pool: ConnectionPool, reader_pool: ConnectionPool
) -> None:
    run = JobRun.create(jobs_pool, "reindex", None, {"parts": ["facets"]})
    run.start()
    run.end_with(RuntimeError("boom"))
    assert list_jobs(reader_pool).jobs[0].status == "failed"
    queued = enqueue_retry(reader_pool, run.id)
    assert request_cancel(reader_pool, queued) == "cancelled"
    with reader_pool.connection() as conn:
        for statement in ("update quarry.jobs set status = 'queued'",
                          "insert into quarry.jobs (id, kind, arguments) values (gen_random_uuid(), 'ingest', '{}')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
            conn.rollback()


# -- the MCP tool --------------------------------------------------------------


@pytest.fixture()
def jobs_mcp(jobs_pool: ConnectionPool, reader_pool: ConnectionPool, migrated_url: str) -> Iterator[McpSession]:
    """The HTTP app as the read-only role."""
    backend = StaticBackend(Settings(database_url=migrated_url), reader_pool)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def test_the_mcp_jobs_tool_lists_shows_cancels_and_queues_retries(
    jobs_mcp: McpSession, jobs_pool: ConnectionPool
) -> None:
    failed = JobRun.create(jobs_pool, "ingest", SOURCE.slug, {"path": "/srv/docs", "source": {"slug": "jobs-test"}})
    failed.start()
    failed.end_with(RuntimeError("disk full"), {"added": 3}, [("a.md", "invalid UTF-8")])
    for number in range(3):
        done = JobRun.create(jobs_pool, "reindex", None, {"parts": ["facets"], "n": number})
        done.start()
        done.succeed({"n": number})

    first = jobs_mcp.ok("jobs", {"action": "list", "limit": 3})
    assert first["returned"] == 3 and first["next_cursor"]
    rest = jobs_mcp.ok("jobs", {"action": "list", "cursor": first["next_cursor"]})
    assert [job["job_id"] for job in rest["jobs"]] == [str(failed.id)] and rest["next_cursor"] is None
    assert rest["jobs"][0]["status"] == "failed" and "host" not in rest["jobs"][0]
    assert jobs_mcp.ok("jobs", {"action": "list", "source": "jobs-test", "status": "failed"})["returned"] == 1

    shown = jobs_mcp.ok("jobs", {"action": "show", "job_id": str(failed.id)})["job"]
    assert shown["error"] == "RuntimeError: disk full" and shown["counts"] == {"added": 3}
    assert shown["failures"] == [{"path": "a.md", "reason": "invalid UTF-8"}]
    assert shown["arguments"]["path"] == "/srv/docs"

    retried = jobs_mcp.ok("jobs", {"action": "retry", "job_id": str(failed.id)})
    assert retried["status"] == "queued" and "quarry jobs run" in retried["note"]
    assert retried["retry_of"] == str(failed.id)
    cancelled = jobs_mcp.ok("jobs", {"action": "cancel", "job_id": retried["job_id"]})
    assert cancelled["status"] == "cancelled"

    not_retryable = jobs_mcp.call("jobs", {"action": "retry", "job_id": first["jobs"][0]["job_id"]})
    assert not_retryable.error["code"] == "INVALID" and "succeeded" in not_retryable.error["message"]
    assert jobs_mcp.call("jobs", {"action": "show", "job_id": str(uuid.uuid4())}).error["code"] == "NOT_FOUND"
    assert jobs_mcp.call("jobs", {"action": "list", "cursor": "bogus"}).error["code"] == "INVALID"


@pytest.mark.parametrize(("arguments", "path", "code"), [
    ({}, "action", "INVALID"),
    ({"action": "delete"}, "action", "INVALID"),
    ({"action": "show"}, "job_id", "INVALID"),
    ({"action": "list", "job_id": "0190b7f2-6b6e-7d3a-9c1e-2f4a5b6c7d8e"}, "job_id", "INVALID"),
    ({"action": "cancel", "job_id": "0190b7f2-6b6e-7d3a-9c1e-2f4a5b6c7d8e", "status": "failed"}, "status", "INVALID"),
    ({"action": "list", "limit": 51}, "limit", "LIMIT"),
    ({"action": "list", "limit": "5"}, "limit", "INVALID"),
    ({"action": "list", "status": "exploded"}, "status", "INVALID"),
    ({"action": "list", "source": "Not A Slug"}, "source", "INVALID"),
    ({"action": "list", "force": True}, "force", "INVALID"),
])
def test_the_mcp_jobs_tool_rejects_bad_arguments(
    jobs_mcp: McpSession, arguments: dict[str, Any], path: str, code: str
) -> None:
    error = jobs_mcp.call("jobs", arguments).error
    assert error["code"] == code and [problem["path"] for problem in error["problems"]] == [path]


def test_cancel_and_retry_need_an_admin_key(jobs_pool: ConnectionPool, reader_pool: ConnectionPool,
                                            migrated_url: str) -> None:
    job = JobRun.create(jobs_pool, "ingest", SOURCE.slug, {"path": "/srv/docs", "source": {"slug": "jobs-test"}})
    job.close()  # a queued job nobody holds; a run would keep a pooled connection until it ends
    search_key = api_keys.create_key(jobs_pool, f"jobs-search-{uuid.uuid4().hex[:8]}", ["search"])
    admin_key = api_keys.create_key(jobs_pool, f"jobs-admin-{uuid.uuid4().hex[:8]}", ["admin"])
    backend = StaticBackend(Settings(database_url=migrated_url), reader_pool)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False))
    with serving(app) as url:
        for key, allowed in ((search_key, False), (admin_key, True)):
            headers = {"Authorization": f"Bearer {key.secret}"}
            with mcp_session(http_transport(url + "/mcp", headers)) as session:
                assert not session.call("jobs", {"action": "list"}).is_error
                reply = session.call("jobs", {"action": "cancel", "job_id": str(job.id)})
                if allowed:
                    assert reply.body["status"] == "cancelled"
                else:
                    assert reply.error["code"] == "UNAUTHORIZED" and "admin" in reply.error["message"]
