"""Deferring HNSW maintenance while a bulk ingest loads a small embedding space.

Inserting one vector into an HNSW index is a graph search plus page updates (measured at 384
dimensions, m 16, ef_construction 128, half precision, into 8k vectors: ~1.1 ms of backend CPU
per row); building the graph in memory costs ~0.29 ms per vector of the whole space and runs
on parallel workers.
So when a load adds at least half as many vectors as a space holds (from there the build takes
less wall time than the inserts; from about as many, less CPU too) and the space stays small
enough for exact scans, its index is dropped concurrently before the load
(``quarry.defer_space_index`` records the definition) and built once when the load ends
(``quarry.restore_space_indexes``). Searches keep working meanwhile: the planner scans the
space exactly, tens of milliseconds at ``MAX_UNINDEXED`` vectors instead of a few.

Which spaces to defer is decided before the first batch, from an estimate of the chunks the
run adds (the bytes of files new to the source, at the corpus's bytes per chunk), and again
after every batch from what was written, so a run that turns out large defers from then on.
Every ingest that finishes restores every deferred index, including one a killed run left
behind. Where the role may not drop the index, nothing is deferred.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import Connection, sql
from psycopg_pool import ConnectionPool

from engine.store.db import autocommit

__all__ = ["MAX_UNINDEXED", "MIN_DEFERRED_LOAD", "DeferredIndexes", "restore_deferred_indexes"]

_logger = logging.getLogger(__name__)

#: A space is searched by exact scan while its index is deferred: never past this many vectors.
MAX_UNINDEXED = 50_000
#: Below this many new vectors, inserting into the index costs less than the DDL around a rebuild.
MIN_DEFERRED_LOAD = 256
#: Bytes of source file per chunk assumed before the corpus holds any.
_DEFAULT_BYTES_PER_CHUNK = 1_000


@dataclass
class _Space:
    name: str
    vectors_before: int = 0  # vectors the space held when the run started (counted up to MAX_UNINDEXED + 1)
    estimate: float = 0.0  # vectors the run was expected to add, from the bytes of its new files
    written: int = 0  # vectors the run added
    deferred: bool = False

    def worth_deferring(self) -> bool:
        """A large load for the space, which stays small enough to search by exact scan meanwhile."""
        load = max(self.estimate, self.written)
        return (load >= max(MIN_DEFERRED_LOAD, self.vectors_before / 2)
                and self.vectors_before + load <= MAX_UNINDEXED)

    def outgrown(self) -> bool:
        return self.vectors_before + self.written > MAX_UNINDEXED


def restore_deferred_indexes(conn: Connection[Any]) -> int:
    """Build every HNSW index a load deferred (``quarry.restore_space_indexes``); returns how many."""
    with conn.transaction():
        # a build takes as long as it takes: the pool's statement timeout is for queries
        conn.execute("select set_config('statement_timeout', '0', true)")
        row = conn.execute("select quarry.restore_space_indexes()").fetchone()
    return int(row[0]) if row else 0


class DeferredIndexes:
    """The HNSW indexes one ingest run defers, for the physical spaces it writes."""

    def __init__(self, pool: ConnectionPool, spaces: Iterable[str]) -> None:
        self._pool = pool
        self._spaces = {name: _Space(name) for name in spaces}
        self._allowed = True  # False once the role may not drop them, or a space outgrew exact scans
        self._counted = False

    def start(self, new_bytes: int) -> None:
        """Defer the spaces this run's new files (``new_bytes`` in all) will grow by at least half."""
        if new_bytes == 0:
            return  # nothing new: counted only if batches get written after all (changed files)
        with self._pool.connection() as conn:
            self._count(conn)
            if all(space.deferred or space.vectors_before > MAX_UNINDEXED for space in self._spaces.values()):
                return
            # octet_length reads the stored size, not the (toasted) bytes; the corpus is small here
            row = conn.execute("select (select count(*) from quarry.chunks),"
                               " (select coalesce(sum(octet_length(raw)), 0) from quarry.documents)").fetchone()
        chunks, corpus_bytes = (int(row[0]), int(row[1])) if row else (0, 0)
        bytes_per_chunk = corpus_bytes / chunks if chunks and corpus_bytes else _DEFAULT_BYTES_PER_CHUNK
        new_chunks = new_bytes / bytes_per_chunk
        for space in self._spaces.values():
            share = space.vectors_before / chunks if chunks else 1.0  # the code space: code chunks only
            space.estimate = new_chunks * share
            if not space.deferred and space.worth_deferring():
                self._defer(space)

    def after_batch(self, written: Mapping[str, int]) -> None:
        """Count a committed batch's vectors per space and act on the totals.

        A space this run has added enough to is deferred now; a deferred space that outgrew
        exact scans (its estimate was low) gets its index back at once, and nothing is
        deferred again in this run.
        """
        for name, count in written.items():
            space = self._spaces.get(name)
            if space is not None:
                space.written += count
        if not self._counted:
            with self._pool.connection() as conn:
                self._count(conn)
        if any(space.deferred and space.outgrown() for space in self._spaces.values()):
            self.restore()
            self._allowed = False
        for space in self._spaces.values():
            if not space.deferred and space.worth_deferring():
                self._defer(space)

    def _count(self, conn: Connection[Any]) -> None:
        """How many vectors each space held before this run (up to MAX_UNINDEXED + 1), and which are deferred."""
        for space in self._spaces.values():
            row = conn.execute(
                "select (select count(*) from (select from quarry.embeddings where space = %s limit %s) s),"
                " exists (select from quarry.deferred_vector_indexes where space = %s)",
                (space.name, MAX_UNINDEXED + 1 + space.written, space.name)).fetchone()
            assert row is not None
            space.vectors_before = max(0, int(row[0]) - space.written)
            space.deferred = space.deferred or bool(row[1])  # a killed or concurrent load's, built at the end
        self._counted = True

    def restore(self) -> int:
        """Build every deferred index (this run's and any a killed run left), on a pooled connection; returns
        how many were built."""
        with self._pool.connection() as conn:
            restored = restore_deferred_indexes(conn)
        for space in self._spaces.values():
            space.deferred = False
        return restored

    def restore_meanwhile(self) -> Future[int]:
        """``restore()`` on a pooled connection in a thread of its own, while the caller goes on; the caller
        waits for the future (which holds the build's error, if any) before it returns."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quarry-hnsw-restore")
        try:
            return executor.submit(self.restore)
        finally:
            executor.shutdown(wait=False)  # the thread ends with the build

    def _defer(self, space: _Space) -> None:
        if not self._allowed:
            return
        # From here on restore() has the space's index to build (or, if the drop below
        # fails, to check): it finds the definition recorded, whatever happens next.
        space.deferred = True
        with self._pool.connection() as conn:
            with conn.transaction():
                row = conn.execute("select quarry.defer_space_index(%s)", (space.name,)).fetchone()
            index = None if row is None else row[0]
            if index is None:
                return
            with autocommit(conn):  # DROP INDEX CONCURRENTLY runs outside a transaction
                try:
                    conn.execute("set lock_timeout = '5s'")
                    # Concurrently: searches are never blocked; it waits for the ones using the index.
                    drop = sql.SQL("drop index concurrently if exists {}").format(sql.Identifier("quarry", index))
                    conn.execute(drop)
                except (psycopg.errors.InsufficientPrivilege, psycopg.errors.LockNotAvailable) as error:
                    # The role may not drop it, or a transaction held it too long: rows keep going into
                    # the index (restore() rebuilds it if the drop stopped half way, leaving it invalid).
                    _logger.info("not deferring the HNSW index of space %s: %s", space.name, error)
                    self._allowed = not isinstance(error, psycopg.errors.InsufficientPrivilege)
                finally:
                    conn.execute("reset lock_timeout")
