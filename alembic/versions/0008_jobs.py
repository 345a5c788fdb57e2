"""Durable jobs: every ingest, re-embed and reindex is a row that outlives its process.

A running job's process holds a session advisory lock keyed by the job's ``number``
(``quarry.job_lock_held``); when the process dies, Postgres drops the lock with the
session, so a ``running`` row whose lock is free is an interrupted job, found without a
daemon. ``arguments`` keeps what the job was started with (path, source spec, flags),
so ``retry`` re-runs it; a retry is a new row pointing at the job it retries.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.jobs (
            id uuid primary key,                                  -- UUIDv7: sorts by creation time
            number bigint generated always as identity unique,    -- short handle; advisory-lock key
            kind text not null check (kind in ('ingest', 'reembed', 'reindex')),
            source text,                                          -- source slug; null for corpus-wide work
            arguments jsonb not null default '{}',                -- what a retry runs again
            status text not null default 'queued'
                check (status in ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
            retry_of uuid references quarry.jobs (id) on delete set null,
            progress jsonb not null default '{}',                 -- updated at most once per batch
            counts jsonb not null default '{}',                   -- final counts, when finished
            failures jsonb not null default '[]',                 -- [{path, reason}] of files that failed
            error text,                                           -- why a job failed or stopped
            cancel_requested_at timestamptz,
            created_at timestamptz not null default now(),
            started_at timestamptz,
            heartbeat_at timestamptz,
            finished_at timestamptz,
            host text,                                            -- where the process runs
            pid integer,                                          -- its operating-system process id
            backend_pid integer,                                  -- its Postgres backend
            check ((status in ('queued', 'running')) = (finished_at is null))
        )
    """)
    op.execute("create index jobs_queue_idx on quarry.jobs (id) where status = 'queued'")
    op.execute("create index jobs_active_idx on quarry.jobs (kind, source) where status = 'running'")
    op.execute("create index jobs_source_idx on quarry.jobs (source, id)")
    # One pending retry per job: enqueueing twice returns the retry already waiting.
    op.execute("create unique index jobs_pending_retry_idx on quarry.jobs (retry_of) "
               "where status in ('queued', 'running')")


def downgrade() -> None:
    op.execute("drop table if exists quarry.jobs")
