"""The writer threads' side of an ingest: segments merged into batches, embedded and written.

``engine.ingest.pipeline`` parses on its own thread and hands segments to a ``BatchWriter``
through ``engine.ingest.write_behind``. Each writer thread merges consecutive segments whose
vectors are all stored already, runs the model on the inputs that have none, and writes each
batch in one transaction: chunks, vectors, relations and BM25 postings first, then, holding
``quarry.lock_corpus_statistics`` until it commits, documents, versions and the postings'
count into the term statistics. Kept apart from the orchestration because this is the part
that runs on several threads at once: what the writers share is in ``WriteTarget``, with the
locks that guard it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg import Connection
from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.corpus.links import store_relations
from engine.ids import uuid7
from engine.ingest.batch import ModelGroup, Segment, copy_chunks, copy_documents, needs_model, write_vectors
from engine.ingest.summary import IngestProgress, IngestSummary, ProgressCallback, job_counts, report_progress
from engine.ingest.vector_indexes import DeferredIndexes
from engine.ingest.version_store import StatedVersions, store_versions

if TYPE_CHECKING:  # numpy (~80 ms) is imported by what embeds: a re-ingest that changed nothing needs none
    import numpy as np

__all__ = ["WRITE_CHUNKS", "BatchWriter", "WriteTarget"]

#: Consecutive segments whose vectors are all stored already are written together, up to
#: this many chunks per transaction: per-transaction work (term statistics, triggers,
#: commit) is then paid once per 2,048 chunks instead of once per 256.
WRITE_CHUNKS = 2048
#: Foreign keys the writers check at commit (alembic 0013): chunks and relations are written
#: before their documents, which wait for the statistics lock.
_DEFERRED_DOCUMENT_KEYS = "set constraints quarry.chunks_document_id_fkey, quarry.relations_document_id_fkey deferred"


def _check_lock_session(lock_conn: Connection[Any]) -> None:
    """Fail before a batch if the session holding the source's lock died (e.g. a database restart).

    Batches go through other pooled connections, which reconnect by themselves; without this
    round trip an ingest could write a batch after its lock vanished with its session, and a
    second ingest of the source could interleave with it.
    """
    lock_conn.execute("select 1")


class _WritingClock:
    """Wall seconds during which at least one writer was in a write transaction (they overlap)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writing = 0
        self._since = 0.0
        self.seconds = 0.0

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._lock:
            if self._writing == 0:
                self._since = time.perf_counter()
            self._writing += 1
        try:
            yield
        finally:
            with self._lock:
                self._writing -= 1
                if self._writing == 0:
                    self.seconds += time.perf_counter() - self._since


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """What the writer threads write into, and report to, during one run."""

    source_id: int
    base_url: str | None
    url_template: str | None
    #: Citation URLs a fetcher knows per document path (a page's final URL), over the source's template.
    urls: Mapping[str, str]
    groups: list[ModelGroup]
    lock_conn: Connection[Any]
    job: JobRun
    indexes: DeferredIndexes
    state: IngestProgress
    progress: ProgressCallback | None
    summary: IngestSummary
    #: Leave the BM25 postings to the rebuild that closes the run (a first ingest: the text index was empty).
    postings_deferred: bool = False
    # The summary, deferred indexes and job are updated by one writer at a time.
    bookkeeping: threading.Lock = field(default_factory=threading.Lock)
    # A batch the model embeds is written by one writer at a time, looked up again under this
    # lock: text two batches share is embedded once, and the model has the cores to itself.
    # Reentrant: staging may embed again (vectors deleted meanwhile) while it is held.
    model: threading.RLock = field(default_factory=threading.RLock)
    clock: _WritingClock = field(default_factory=_WritingClock)


class BatchWriter:
    """Writes the parser's segments into a source, on each writer thread that calls ``write_segments``."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def write_segments(self, target: WriteTarget, segments: Iterator[Segment]) -> None:
        """Write the parser's segments in order: alone when the model embeds some of it, else merged."""
        following: Segment | None = None
        while True:
            batch = following or next(segments, None)
            following = None
            if batch is None:
                return
            self._look_up_stored(target.groups, batch)
            while not needs_model(target.groups, batch) and len(batch.inputs) < WRITE_CHUNKS:
                following = next(segments, None)
                if following is None:
                    break
                self._look_up_stored(target.groups, following)
                if needs_model(target.groups, following) or len(batch.inputs) + len(following.inputs) > WRITE_CHUNKS:
                    break
                batch.extend(following)
                following = None
            self._write_batch(target, batch)
            with target.bookkeeping:
                report_progress(target.progress, target.state, target.summary)
                target.job.progress(job_counts(target.state, target.summary))  # stops here when cancelled

    def _look_up_stored(self, groups: Sequence[ModelGroup], segment: Segment, *, again: bool = False) -> None:
        """Which of the segment's embedding inputs have a vector already, per model group (hashes only)."""
        if (segment.stored and not again) or not groups:
            return  # looked up already (a segment carried over to the next batch)
        with self._pool.connection() as conn:
            for group in groups:
                hashes = list({segment.hashes[i] for i in group.wanted(segment)})
                rows = conn.execute(
                    "select distinct input_hash from quarry.embeddings where space = any(%s) and input_hash = any(%s)",
                    (list(group.spaces), hashes),
                ).fetchall() if hashes else []
                segment.stored[group.number] = {bytes(digest) for (digest,) in rows}

    def _embed(self, target: WriteTarget, group: ModelGroup, batch: Segment,
               digests: set[bytes]) -> dict[bytes, np.ndarray]:
        """Run the group's model on the inputs with these hashes, each once."""
        if not digests:
            return {}
        first = {}
        for index, digest in enumerate(batch.hashes):
            if digest in digests and digest not in first:
                first[digest] = index
        with target.model:
            started = time.perf_counter()
            vectors = group.embedder.embed_documents([batch.inputs[i] for i in first.values()])
            target.summary.embed_seconds += time.perf_counter() - started
            target.summary.vectors_embedded += len(first)
        return dict(zip(first, vectors, strict=True))

    def _write_batch(self, target: WriteTarget, batch: Segment) -> None:
        _check_lock_session(target.lock_conn)
        embeds = needs_model(target.groups, batch)
        with target.model if embeds else nullcontext():
            if embeds:  # another writer may have stored some of its vectors since they were looked up
                self._look_up_stored(target.groups, batch, again=True)
            fresh = {group.number: self._embed(target, group, batch, {batch.hashes[i] for i in group.wanted(batch)}
                                               - batch.stored[group.number])
                     for group in target.groups}
            with target.clock.writing():
                written = self._write_transaction(target, batch, fresh)
        documents = batch.documents
        with target.bookkeeping:
            summary = target.summary
            summary.chunks_written += len(batch.inputs)
            summary.vectors_reused += sum(1 for group in target.groups for i in group.wanted(batch)
                                          if batch.hashes[i] in batch.stored[group.number])
            for doc in documents:
                if doc.replaces is None:
                    summary.added += 1
                else:
                    summary.updated += 1
            target.indexes.after_batch(written)

    def _write_transaction(self, target: WriteTarget, batch: Segment,
                           fresh: dict[int, dict[bytes, np.ndarray]]) -> dict[str, int]:
        """Write one batch in one transaction; returns the vectors written per space.

        The rows no other batch touches come first, postings included, while the other writer
        may hold the statistics lock; the documents, whose triggers count facets, and the
        postings' count into the term statistics come last, under it
        (``quarry.lock_corpus_statistics``, held to commit). With ``postings_deferred`` the chunks
        get no postings: the batch marks the index deferred instead (``quarry.defer_chunk_postings``).
        """
        documents = batch.documents
        document_ids = [uuid7() for _ in documents]
        chunk_ids = [uuid7() for _ in batch.inputs]
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(_DEFERRED_DOCUMENT_KEYS)
            # Before anything is deleted: the documents this batch replaces hold most of its vectors.
            self._stage_stored_vectors(conn, target, batch, fresh)
            copy_chunks(conn, target.source_id, documents, document_ids, chunk_ids)
            written = write_vectors(conn, target.groups, batch, chunk_ids, fresh)
            store_relations(conn, target.source_id, [(doc_id, doc.path, doc.raw)
                                                     for doc_id, doc in zip(document_ids, documents, strict=True)])
            if target.postings_deferred:
                conn.execute("select quarry.defer_chunk_postings()")
            else:
                conn.execute("select quarry.insert_chunk_postings(%s)", (chunk_ids,))
            conn.execute("select quarry.lock_corpus_statistics()")
            replaced = [doc.replaces for doc in documents if doc.replaces is not None]
            if replaced:
                conn.execute("select quarry.delete_documents(%s)", (replaced,))
            copy_documents(conn, target.source_id, target.base_url, target.url_template, target.urls, documents,
                           document_ids)
            store_versions(conn, [StatedVersions(doc_id, target.source_id, doc.path, doc.manifest_kind,
                                                 doc.constraints)
                                  for doc_id, doc in zip(document_ids, documents, strict=True)])
            if not target.postings_deferred:
                conn.execute("select quarry.count_new_postings()")
        return written

    def _stage_stored_vectors(self, conn: Connection[Any], target: WriteTarget, batch: Segment,
                              fresh: dict[int, dict[bytes, np.ndarray]]) -> None:
        """Copy aside the stored vectors the batch reuses; embeds any deleted since they were looked up."""
        for group in target.groups:
            stored = batch.stored[group.number]
            if not stored:
                continue
            row = conn.execute("select quarry.stage_reused_vectors(%s, %s, %s)",
                               (group.number, list(group.spaces), list(stored))).fetchone()
            if row is not None and row[0] == len(stored):
                continue
            # Another run deleted some of them meanwhile (rare): the model makes them again.
            still = {bytes(digest) for (digest,) in conn.execute(
                "select quarry.staged_input_hashes(%s)", (group.number,)).fetchall()}
            fresh[group.number].update(self._embed(target, group, batch, stored - still))
            batch.stored[group.number] = still
