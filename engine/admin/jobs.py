"""Durable jobs: every ingest, re-embed and reindex is recorded in ``quarry.jobs``.

A job row outlives the process that runs it: kind, source, the arguments it was
started with, status, progress, final counts, failed files, error and timings.

Lifecycle::

    queued ──start──> running ──> succeeded | failed | cancelled
       │                 └──(process died)──> interrupted
       └──cancel──> cancelled

A ``JobRun`` is one process's hold on a job. It keeps a pooled connection for the
run and, on it, the job's session advisory lock; Postgres drops that lock when the
session ends, however the process ended, so a ``running`` job whose lock is free is
interrupted (``quarry.job_status``), with no daemon or timeout involved. Interrupted
jobs are recorded as such when the next job of their kind and source starts, and are
shown as such by every listing meanwhile.

Progress costs one small ``update`` per batch, which also answers "was a cancel
requested?": a cancel is honoured between batches (what was written stays, and is
consistent), as ``JobCancelledError`` from ``JobRun.progress``.

Retrying a failed, interrupted or cancelled job queues a new job with the same
arguments (``retry_of`` names the original); ``quarry jobs retry`` runs it at once,
a retry queued from MCP waits for ``quarry jobs run``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg import Connection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError, NotFoundError, QuarryError
from engine.ids import uuid7
from engine.vocabulary import JOB_KINDS, JOB_STATUSES, MAX_JOBS_PAGE, JobKind, JobStatus

__all__ = [
    "RETRYABLE_STATUSES",
    "Job",
    "JobCancelledError",
    "JobDetail",
    "JobPage",
    "JobRun",
    "enqueue_retry",
    "enqueue_source_job",
    "list_jobs",
    "reap_interrupted",
    "request_cancel",
    "resolve_job_id",
    "show_job",
]

RETRYABLE_STATUSES: tuple[JobStatus, ...] = ("failed", "interrupted", "cancelled")

#: Failed files kept per job (a run where everything fails should not store a second corpus).
MAX_STORED_FAILURES = 1_000
_MAX_REASON_CHARS = 500
_MAX_ERROR_CHARS = 2_000
_CURSOR_TAG = b"qj1"


class JobCancelledError(QuarryError):
    """The job was cancelled (``quarry jobs cancel``) and stopped between batches."""

    code = "CANCELLED"


@dataclass(frozen=True, slots=True)
class Job:
    """A row of ``quarry.job_overview``: a job with its live status."""

    id: UUID
    number: int
    kind: str
    source: str | None
    status: str
    retry_of: UUID | None
    arguments: dict[str, Any]
    progress: dict[str, Any]
    counts: dict[str, Any]
    failure_count: int
    error: str | None
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    seconds: float | None
    host: str | None
    pid: int | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ids and timestamps as strings, seconds rounded."""
        row = asdict(self)
        for key, value in row.items():
            if isinstance(value, UUID | datetime):
                row[key] = str(value) if isinstance(value, UUID) else value.isoformat()
        row["seconds"] = None if self.seconds is None else round(self.seconds, 3)
        return row

    def one_line(self) -> str:
        took = "" if self.seconds is None else f" {self.seconds:.1f}s"
        what = self.source or self.arguments.get("space") or ",".join(self.arguments.get("parts", [])) or "-"
        done = self.counts or self.progress
        numbers = " ".join(f"{key}={value}" for key, value in done.items() if isinstance(value, int))
        return f"{self.number:>5}  {self.id}  {self.kind:<8} {self.status:<11} {what:<24}{took}  {numbers}".rstrip()


@dataclass(frozen=True, slots=True)
class JobDetail:
    job: Job
    failures: list[dict[str, str]]
    retried_by: list[UUID]

    def as_dict(self) -> dict[str, Any]:
        return {**self.job.as_dict(), "failures": self.failures, "retried_by": [str(i) for i in self.retried_by]}


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_cursor: str | None


# -- reading -----------------------------------------------------------------


def encode_cursor(last_id: UUID) -> str:
    """An opaque token naming 'the jobs older than this one'."""
    return base64.urlsafe_b64encode(_CURSOR_TAG + last_id.bytes).decode().rstrip("=")


def decode_cursor(cursor: str) -> UUID:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != len(_CURSOR_TAG) + 16 or not raw.startswith(_CURSOR_TAG):
        raise InvalidRequestError("cursor: not a cursor returned by a job listing; omit it to start at the newest")
    return UUID(bytes=raw[len(_CURSOR_TAG):])


def list_jobs(
    pool: ConnectionPool,
    *,
    cursor: str | None = None,
    limit: int = 20,
    status: str | None = None,
    kind: str | None = None,
    source: str | None = None,
) -> JobPage:
    """A page of jobs, newest first; ``next_cursor`` names the next page (None on the last)."""
    if not 1 <= limit <= MAX_JOBS_PAGE:
        raise InvalidRequestError(f"limit: must be between 1 and {MAX_JOBS_PAGE}")
    if status is not None and status not in JOB_STATUSES:
        raise InvalidRequestError(f"status: must be one of {', '.join(JOB_STATUSES)}")
    if kind is not None and kind not in JOB_KINDS:
        raise InvalidRequestError(f"kind: must be one of {', '.join(JOB_KINDS)}")
    before = None if cursor is None else decode_cursor(cursor)
    with pool.connection() as conn, conn.cursor(row_factory=class_row(Job)) as rows:
        found = rows.execute("select * from quarry.list_jobs(%s, %s, %s, %s, %s)",
                             (before, limit + 1, status, kind, source)).fetchall()
    page = found[:limit]
    return JobPage(page, encode_cursor(page[-1].id) if len(found) > limit else None)


def show_job(pool: ConnectionPool, job_id: UUID) -> JobDetail:
    with pool.connection() as conn:
        with conn.cursor(row_factory=class_row(Job)) as rows:
            job = rows.execute("select * from quarry.job_overview where id = %s", (job_id,)).fetchone()
        if job is None:
            raise NotFoundError(f"no job with id {job_id}")
        failures_row = conn.execute("select failures from quarry.jobs where id = %s", (job_id,)).fetchone()
        retries = conn.execute("select id from quarry.jobs where retry_of = %s order by id", (job_id,)).fetchall()
    failures = list(failures_row[0]) if failures_row is not None else []
    return JobDetail(job, failures, [row[0] for row in retries])


def resolve_job_id(pool: ConnectionPool, text: str) -> UUID:
    """A job id from what a person typed: the UUID, or the job's short number."""
    if text.isdigit():
        with pool.connection() as conn:
            row = conn.execute("select id from quarry.jobs where number = %s", (int(text),)).fetchone()
        if row is None:
            raise NotFoundError(f"no job number {text}")
        return UUID(str(row[0]))
    try:
        return UUID(text)
    except ValueError:
        raise InvalidRequestError(f"not a job id or number: {text!r}") from None


# -- requests (also allowed to the search server's login, with an admin key) ---
# ``api_key``: the caller's admin key, which the definer function checks itself; None for a
# login that may write jobs on its own (the owner role). Without either the database raises
# psycopg.errors.InsufficientPrivilege.


def request_cancel(pool: ConnectionPool, job_id: UUID, *, api_key: str | None = None) -> str:
    """Cancel a job; returns its status after the request.

    ``cancelled``: it was queued and will not run. ``cancelling``: it runs, and stops
    after its current batch. Anything else: it had already finished (or died:
    ``interrupted``), and nothing changed.
    """
    with pool.connection() as conn:
        try:
            row = conn.execute("select quarry.request_job_cancel(%s, %s)", (job_id, api_key)).fetchone()
        except psycopg.errors.NoDataFound:
            raise NotFoundError(f"no job with id {job_id}") from None
    assert row is not None
    return str(row[0])


def enqueue_retry(pool: ConnectionPool, job_id: UUID, *, api_key: str | None = None) -> UUID:
    """Queue a re-run of a failed, interrupted or cancelled job; returns the queued job's id.

    Idempotent while the retry waits: asking again returns the job already queued.
    """
    with pool.connection() as conn:
        try:
            row = conn.execute("select quarry.enqueue_job_retry(%s, %s, %s)", (job_id, uuid7(), api_key)).fetchone()
        except psycopg.errors.NoDataFound:
            raise NotFoundError(f"no job with id {job_id}") from None
        except psycopg.errors.InvalidParameterValue as error:
            raise InvalidRequestError(error.diag.message_primary or "this job cannot be retried") from None
    assert row is not None
    return UUID(str(row[0]))


def enqueue_source_job(pool: ConnectionPool, kind: Literal["ingest", "remove_source"], source: str,
                       arguments: Mapping[str, Any], *, api_key: str | None = None) -> tuple[UUID, bool]:
    """Queue an ingest or a removal of ``source`` (MCP's admin tools); returns (job id, whether it is new).

    A job of that kind already waiting for the source is returned instead of a second one.
    """
    new_id = uuid7()
    with pool.connection() as conn:
        try:
            row = conn.execute("select quarry.enqueue_source_job(%s, %s, %s, %s, %s)",
                               (kind, source, Jsonb(dict(arguments)), new_id, api_key)).fetchone()
        except psycopg.errors.InvalidParameterValue as error:
            raise InvalidRequestError(error.diag.message_primary or "this job cannot be queued") from None
    assert row is not None
    queued = UUID(str(row[0]))
    return queued, queued == new_id


def reap_interrupted(pool: ConnectionPool, *, kind: str | None = None, source: str | None = None) -> int:
    """Record every running job whose process is gone as interrupted; returns how many."""
    with pool.connection() as conn:
        row = conn.execute("select quarry.reap_interrupted_jobs(%s, %s)", (kind, source)).fetchone()
    return int(row[0]) if row is not None else 0


# -- running -----------------------------------------------------------------


class JobRun:
    """This process's hold on one job: its lock, its progress, its outcome.

    Make one with ``create`` (a new job) or ``claim`` (a queued one), call ``start``
    when the work begins, ``progress`` after each batch, and end with ``succeed`` or
    ``end_with(error)``; each of those releases the job. Used as a context manager, an
    exception ends the job with that error.
    """

    def __init__(self, pool: ConnectionPool, conn: Connection[Any], job_id: UUID, number: int, kind: str,
                 source: str | None, arguments: Mapping[str, Any]) -> None:
        self._pool = pool
        self._conn: Connection[Any] | None = conn
        self.id = job_id
        self.number = number
        self.kind = kind
        self.source = source
        self.arguments = dict(arguments)

    @classmethod
    def create(cls, pool: ConnectionPool, kind: JobKind, source: str | None, arguments: Mapping[str, Any],
               *, retry_of: UUID | None = None) -> JobRun:
        """Record a new job (queued) owned by this process."""
        conn = _hold(pool)
        try:
            job_id = uuid7()
            with conn.transaction():
                row = conn.execute(
                    "insert into quarry.jobs (id, kind, source, arguments, retry_of) values (%s, %s, %s, %s, %s)"
                    " returning number",
                    (job_id, kind, source, Jsonb(dict(arguments)), retry_of),
                ).fetchone()
                assert row is not None
                conn.execute("select quarry.try_lock_job(%s)", (row[0],))  # a new number: always free
        except BaseException:
            _release(pool, conn)
            raise
        return cls(pool, conn, job_id, int(row[0]), kind, source, arguments)

    @classmethod
    def claim(cls, pool: ConnectionPool, job_id: UUID | None = None) -> JobRun | None:
        """Take a queued job (this one, or the oldest) no other process holds; None when there is none."""
        conn = _hold(pool)
        try:
            with conn.transaction():
                candidates = conn.execute(
                    "select id, number, kind, source, arguments from quarry.jobs"
                    " where status = 'queued' and (%(id)s::uuid is null or id = %(id)s)"
                    " order by id for update skip locked limit 20",
                    {"id": job_id},
                ).fetchall()
                for found_id, number, kind, source, arguments in candidates:
                    taken = conn.execute("select quarry.try_lock_job(%s)", (number,)).fetchone()
                    if taken is not None and taken[0]:
                        return cls(pool, conn, found_id, int(number), kind, source, arguments)
        except BaseException:
            _release(pool, conn)
            raise
        _release(pool, conn)
        return None

    def start(self) -> None:
        """The work begins: status running. Records dead runs of the same kind and source as interrupted.

        Raises ``JobCancelledError`` when the job was cancelled while it waited.
        """
        conn = self._held()
        try:
            with conn.transaction():
                conn.execute("select quarry.reap_interrupted_jobs(%s, %s)", (self.kind, self.source))
                started = conn.execute(
                    "update quarry.jobs set status = 'running', started_at = now(), heartbeat_at = now(),"
                    " host = %s, pid = %s, backend_pid = pg_backend_pid() where id = %s and status = 'queued'"
                    " returning id",
                    (socket.gethostname(), os.getpid(), self.id),
                ).fetchone()
        except BaseException:
            self.close()
            raise
        if started is None:
            self.close()
            raise JobCancelledError(f"job {self.id} was cancelled before it started")

    def progress(self, values: Mapping[str, Any]) -> None:
        """Record progress (one small update); raises ``JobCancelledError`` if a cancel was requested."""
        row = self._held().execute(
            "update quarry.jobs set progress = %s, heartbeat_at = now() where id = %s"
            " returning cancel_requested_at is not null",
            (Jsonb(dict(values)), self.id),
        ).fetchone()
        if row is not None and row[0]:
            raise JobCancelledError(f"job {self.id} was cancelled")

    def succeed(self, counts: Mapping[str, Any], failures: Sequence[tuple[str, str]] = ()) -> None:
        self._finish("succeeded", counts, failures, None)

    def end_with(self, error: BaseException, counts: Mapping[str, Any] | None = None,
                 failures: Sequence[tuple[str, str]] = ()) -> None:
        """Record how the job ended: cancelled, interrupted (Ctrl-C, exit) or failed with this error."""
        if self._conn is None:
            return
        status: JobStatus
        if isinstance(error, JobCancelledError):
            status = "cancelled"
        elif not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: the process is stopping
            status = "interrupted"
        else:
            status = "failed"
        detail = str(error) if isinstance(error, QuarryError) else f"{type(error).__name__}: {error}"
        try:
            self._finish(status, counts or {}, failures, detail[:_MAX_ERROR_CHARS] or type(error).__name__)
        except psycopg.Error:
            self.close()  # the database is what failed: the job reads as interrupted once our session is gone

    def _finish(self, status: JobStatus, counts: Mapping[str, Any], failures: Sequence[tuple[str, str]],
                error: str | None) -> None:
        stored = [{"path": path, "reason": reason[:_MAX_REASON_CHARS]}
                  for path, reason in failures[:MAX_STORED_FAILURES]]
        try:
            self._held().execute(
                "update quarry.jobs set status = %s, counts = %s, failures = %s, error = %s,"
                " finished_at = now(), heartbeat_at = now() where id = %s",
                (status, Jsonb(dict(counts)), Jsonb(stored), error, self.id),
            )
        finally:
            self.close()

    def close(self) -> None:
        """Release the job (its lock and connection); a job left running then reads as interrupted."""
        conn, self._conn = self._conn, None
        if conn is not None:
            # a broken connection holds no lock any more (and the pool discards it)
            with contextlib.suppress(psycopg.Error):
                conn.execute("select quarry.unlock_job(%s)", (self.number,))
            _release(self._pool, conn)

    def _held(self) -> Connection[Any]:
        if self._conn is None:
            raise RuntimeError(f"job {self.id} is no longer held by this process")
        return self._conn

    def __enter__(self) -> JobRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: object) -> None:
        if error is not None:
            self.end_with(error)
        self.close()


def _hold(pool: ConnectionPool) -> Connection[Any]:
    """A pooled connection for the run's lifetime, in autocommit: each progress update is one round trip."""
    conn = pool.getconn()
    conn.autocommit = True
    return conn


def _release(pool: ConnectionPool, conn: Connection[Any]) -> None:
    if not conn.closed:
        with contextlib.suppress(psycopg.Error):
            conn.autocommit = False
    pool.putconn(conn)
