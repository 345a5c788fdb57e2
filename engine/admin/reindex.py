"""``quarry reindex``: rebuild derived data from the canonical records.

Canonical: documents (raw bytes), chunks, vectors. Derived, and rebuilt here:

- ``text``: every BM25 posting and statistic, from each chunk's text tokenized again
  (``quarry.rebuild_text_index``);
- ``facets``: ``quarry.facet_counts`` and ``quarry.facet_combinations`` from the documents, and
  the version facet counts (per source and combination, and their totals) from the version
  constraints;
- ``versions``: version constraints and manifests, re-extracted from each document's raw
  bytes (what an improved extractor needs, without re-parsing or re-embedding), and the
  version facet counts recounted from them;
- ``relations``: links and imports between documents, re-extracted from the raw bytes
  the same way (and how documents ingested before relations existed get theirs);
- ``vectors``: every HNSW index, rebuilt with ``REINDEX CONCURRENTLY`` so searches keep
  answering meanwhile.

Each part but ``vectors`` runs in one transaction: searches see the old or the new
derived data, never a mix, and keep answering from the old while it runs (the text index
is emptied by DELETE, not TRUNCATE, which would make every keyword search wait for it).
Run it after a crash that corrupted an index, after changing text-search configuration, or
after upgrading Quarry's extractors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any, Literal

from psycopg import sql
from psycopg_pool import ConnectionPool

from engine.corpus.links import store_relations
from engine.ingest.manifest_paths import manifest_kind
from engine.ingest.manifests import constraints_in_manifest
from engine.ingest.vector_indexes import restore_deferred_indexes
from engine.ingest.version_store import StatedVersions, store_versions
from engine.ingest.versions import constraints_in_document
from engine.store.db import autocommit

Part = Literal["text", "facets", "versions", "relations", "vectors"]
PARTS: tuple[Part, ...] = ("text", "facets", "versions", "relations", "vectors")
_VERSION_BATCH = 500


@dataclass(slots=True)
class ReindexSummary:
    parts: list[str]
    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def one_line(self) -> str:
        done = ", ".join(f"{part} {self.seconds[part]:.1f} s ({self.counts.get(part, 0)})" for part in self.parts)
        return f"quarry: reindexed {done}"


def reindex(pool: ConnectionPool, parts: Sequence[Part] = PARTS,
            progress: Callable[[str], None] | None = None) -> ReindexSummary:
    summary = ReindexSummary(list(parts))
    steps: dict[Part, Callable[[ConnectionPool], int]] = {
        "text": _text, "facets": _facets, "versions": _versions, "relations": _relations, "vectors": _vectors,
    }
    for part in parts:
        if progress is not None:
            progress(part)
        started = time.perf_counter()
        summary.counts[part] = steps[part](pool)
        summary.seconds[part] = time.perf_counter() - started
    return summary


def _text(pool: ConnectionPool) -> int:
    with pool.connection() as conn, conn.transaction():
        row = conn.execute("select quarry.rebuild_text_index()").fetchone()
    return int(row[0]) if row else 0


def _facets(pool: ConnectionPool) -> int:
    with pool.connection() as conn, conn.transaction():
        row = conn.execute("select quarry.rebuild_facet_counts()").fetchone()
    return int(row[0]) if row else 0


def _versions(pool: ConnectionPool) -> int:
    stored = 0
    with pool.connection() as conn, conn.transaction():
        conn.execute("delete from quarry.version_constraints")
        conn.execute("delete from quarry.manifests")
        with conn.cursor(name="reindex_documents") as documents:  # server-side: raw bytes add up
            documents.execute("select id, source_id, path, raw from quarry.documents order by source_id, path")
            while batch := documents.fetchmany(_VERSION_BATCH):
                stored += store_versions(conn, [_stated(row) for row in batch])
        conn.execute("select quarry.refresh_version_facet_counts()")  # what the new constraints marked stale
    return stored


def _stated(row: tuple[Any, ...]) -> StatedVersions:
    document_id, source_id, path, raw = row
    text = bytes(raw).decode("utf-8", errors="replace")
    kind = manifest_kind(path)
    constraints = (constraints_in_manifest(path, text) or []) if kind is not None else \
        constraints_in_document(path, text)
    return StatedVersions(document_id, source_id, path, kind, constraints)


def _relations(pool: ConnectionPool) -> int:
    stored = 0
    with pool.connection() as conn, conn.transaction():
        conn.execute("delete from quarry.relations")
        with conn.cursor(name="reindex_relations") as documents:  # server-side: raw bytes add up
            documents.execute("select source_id, id, path, raw from quarry.documents order by source_id, path")
            while batch := documents.fetchmany(_VERSION_BATCH):
                for source_id, rows in groupby(batch, key=itemgetter(0)):
                    stored += store_relations(conn, source_id, [(id_, path, bytes(raw)) for _, id_, path, raw in rows])
    return stored


def _vectors(pool: ConnectionPool) -> int:
    with pool.connection() as conn:
        # An HNSW index a killed bulk ingest left deferred is built first, from its recorded
        # definition: there is nothing to reindex until it exists.
        restore_deferred_indexes(conn)
        names = [str(name) for (name,) in conn.execute(
            "select quarry.space_index_name(name) from quarry.embedding_spaces order by name").fetchall()]
        conn.commit()
        with autocommit(conn):  # REINDEX CONCURRENTLY cannot run inside a transaction block
            for name in names:
                conn.execute(sql.SQL("reindex index concurrently {}").format(sql.Identifier("quarry", name)))
    return len(names)
