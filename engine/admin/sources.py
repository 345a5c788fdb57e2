"""Removing a source: every document, chunk, vector and posting it has, in one transaction.

Runs as a job (kind ``remove_source``), so a removal queued from MCP is shown and retried like
an ingest. It waits for a running ingest of the source (the ingest's advisory lock) instead of
racing it, and a failure rolls back whole: the source is either gone or as it was. The
fetcher's cache for the source (a website mirror) goes after the commit; losing it costs only a
refetch, should the same slug be ingested again.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.errors import NotFoundError
from engine.ingest.pipeline import INGEST_LOCK_CLASS

__all__ = ["RemovedSource", "remove_source"]


@dataclass(frozen=True, slots=True)
class RemovedSource:
    source: str
    documents: int

    def one_line(self) -> str:
        return f"{self.source}: removed with its {self.documents} documents"


def remove_source(pool: ConnectionPool, slug: str, fetch_dir: Path, *, job: JobRun | None = None) -> RemovedSource:
    """Delete the source ``slug`` and all it holds; raises ``NotFoundError`` when there is none."""
    with job or JobRun.create(pool, "remove_source", slug, {}) as run:
        run.start()
        with pool.connection() as conn:
            found = conn.execute("select id from quarry.sources where slug = %s", (slug,)).fetchone()
            if found is None:
                raise NotFoundError(f"no source named {slug!r}")
            with conn.transaction():
                # Transaction-scoped: held until the removal commits, released however it ends.
                conn.execute("select pg_advisory_xact_lock(%s, %s)", (INGEST_LOCK_CLASS, found[0]))
                try:
                    row = conn.execute("select quarry.remove_source(%s)", (slug,)).fetchone()
                except psycopg.errors.NoDataFound:  # removed by someone else meanwhile
                    raise NotFoundError(f"no source named {slug!r}") from None
        removed = RemovedSource(slug, int(row[0]) if row is not None else 0)
        shutil.rmtree(fetch_dir / "web" / slug, ignore_errors=True)
        run.succeed({"documents_removed": removed.documents})
    return removed
