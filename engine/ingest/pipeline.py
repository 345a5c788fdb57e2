"""``quarry ingest``: bring one source in Postgres in line with a directory tree.

Incremental by construction: an unchanged file costs a hash comparison; a changed
file is re-parsed and replaced atomically (old rows deleted and new ones written in
the same transaction); a file gone from the tree is deleted. Vectors are reused for
any chunk text embedded before (renames, moves, untouched sections), so only new
text pays for the model. Documents are written in batches, each its own
transaction: an interrupted run keeps what it finished, and rerunning completes it.

Parsing and writing overlap (``engine.ingest.write_behind``): this thread walks and
parses while writer threads embed what is new and write, so Python and the Postgres
backends keep both cores busy. Two writers write two batches at once, on two connections:
each writes its chunks (tsvector, GIN), vectors, relations and BM25 postings first, then,
holding ``quarry.lock_corpus_statistics`` until it commits, its documents (facet counts),
versions and the postings' count into the term statistics, the rows every batch shares.
Reused vectors never leave the server: a batch copies them from the stored rows by content
hash in SQL. A load large for its embedding space defers the space's HNSW index and builds
it once at the end (``engine.ingest.vector_indexes``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
from psycopg import Connection
from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.corpus.links import store_relations
from engine.embed.base import CODE_SPACE, Embedder
from engine.errors import BusyError
from engine.ids import uuid7
from engine.ingest.batch import (
    ModelGroup,
    PendingDocument,
    Segment,
    chunk_embedding_input,
    copy_chunks,
    copy_documents,
    embedding_input,
    input_hash,
    needs_model,
    write_vectors,
)
from engine.ingest.changes import ChangeSet
from engine.ingest.manifests import constraints_in_manifest, manifest_kind
from engine.ingest.model import PARSER_VERSION
from engine.ingest.parsers import ParseError, is_supported, parse_document
from engine.ingest.sources import SourceSpec
from engine.ingest.summary import IngestProgress, IngestSummary, ProgressCallback
from engine.ingest.vector_indexes import DeferredIndexes
from engine.ingest.version_store import StatedVersions, store_versions
from engine.ingest.versions import constraints_in_document
from engine.ingest.walk import Candidate, FoundFile, SkippedFile, list_tree, read_tree
from engine.ingest.write_behind import WriteBehind

__all__ = ["INGEST_LOCK_CLASS", "IngestProgress", "IngestSummary", "Ingestor", "ProgressCallback",
           "chunk_embedding_input", "embedding_input", "input_hash"]

#: Advisory-lock class for "ingesting source <id>" (the second key is the source id).
INGEST_LOCK_CLASS = 0x5149  # "QI"

#: Chunks per segment the parser hands to the writer. A segment the model must embed is
#: written in its own transaction: an interruption loses little model work, and the
#: progress display moves every few seconds (the local model embeds ~80 chunks/s).
_BATCH_CHUNKS = 256
#: Consecutive segments whose vectors are all stored already are written together, up to
#: this many chunks per transaction: per-transaction work (term statistics, triggers,
#: commit) is then paid once per 2,048 chunks instead of once per 256.
_WRITE_CHUNKS = 2048
#: Segments the parser may run ahead of the writers (enough to fill one merged write).
_WRITE_AHEAD = _WRITE_CHUNKS // _BATCH_CHUNKS
#: Batches written at once, each on its own connection. Two: one batch's chunks and postings
#: are written while the other's are, and while it holds the statistics lock (waiting for it
#: took 0.16 s of the 7.4 s two writers spent per round). On the PostgreSQL manual with every
#: vector reused (bench/ingest_throughput.py, 2 cores, interleaved): writing took ~4.7 s of
#: wall time instead of ~6.1 s on one writer, 1,228 instead of 1,009 chunks/s in all; the
#: cores are then busy (~1.85 of 2), so a third writer would find none idle.
_WRITERS = 2
#: Connections one run holds at most besides its writers: the source's lock and the job's.
_HELD_CONNECTIONS = 2
#: Foreign keys the writers check at commit (alembic 0013): chunks and relations are written
#: before their documents, which wait for the statistics lock.
_DEFERRED_DOCUMENT_KEYS = "set constraints quarry.chunks_document_id_fkey, quarry.relations_document_id_fkey deferred"

@dataclass(frozen=True, slots=True)
class _StoredDocument:
    id: UUID
    content_hash: bytes
    parser_version: int


def _is_ingested(relative_path: str) -> bool:
    return is_supported(relative_path) or manifest_kind(relative_path) is not None


_progress_lock = threading.Lock()  # the parser and the writer both report progress


def _report(progress: ProgressCallback | None, state: IngestProgress, summary: IngestSummary) -> None:
    if progress is not None:
        with _progress_lock:
            state.chunks_written = summary.chunks_written
            state.vectors_embedded = summary.vectors_embedded
            progress(state)


def _start_job(pool: ConnectionPool, job: JobRun | None, root: Path, source: SourceSpec, wait_for_lock: bool,
               since: str | None) -> JobRun:
    """The job this ingest runs as (``job`` when a worker claimed a queued one), started."""
    arguments = {"path": str(root), "source": source.model_dump(exclude_none=True), "wait": wait_for_lock,
                  "since": since}
    run = job or JobRun.create(pool, "ingest", source.slug, arguments)
    run.start()
    return run


def _job_counts(state: IngestProgress | None, summary: IngestSummary) -> dict[str, int]:
    """What a job row shows: progress after a batch (with ``state``), final counts without."""
    counts = {"added": summary.added, "updated": summary.updated, "unchanged": summary.unchanged,
              "deleted": summary.deleted, "chunks_written": summary.chunks_written,
              "vectors_embedded": summary.vectors_embedded, "vectors_reused": summary.vectors_reused,
              "skipped": len(summary.skipped), "failed": len(summary.failed)}
    return counts if state is None else {"files_seen": state.files_seen, **counts}


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
class _WriteTarget:
    """What the writer threads write into, and report to, during one run."""

    source_id: int
    base_url: str | None
    url_template: str | None
    groups: list[ModelGroup]
    lock_conn: Connection[Any]
    job: JobRun
    indexes: DeferredIndexes
    state: IngestProgress
    progress: ProgressCallback | None
    summary: IngestSummary
    # The summary, deferred indexes and job are updated by one writer at a time.
    bookkeeping: threading.Lock = field(default_factory=threading.Lock)
    # A batch the model embeds is written by one writer at a time, looked up again under this
    # lock: text two batches share is embedded once, and the model has the cores to itself.
    # Reentrant: staging may embed again (vectors deleted meanwhile) while it is held.
    model: threading.RLock = field(default_factory=threading.RLock)
    clock: _WritingClock = field(default_factory=_WritingClock)


def _restore_quietly(indexes: DeferredIndexes) -> None:
    """After a failed run, build the indexes it deferred if the database lets us (the next run would)."""
    try:
        indexes.restore()
    except Exception as error:  # the database may be what failed
        logging.getLogger(__name__).warning("deferred HNSW indexes left for the next ingest to build: %s", error)


class Ingestor:
    """Ingests directory trees into sources, embedding every chunk in each given space."""

    def __init__(
        self, pool: ConnectionPool, embedders: Mapping[str, Embedder], *, max_file_bytes: int
    ) -> None:
        self._pool = pool
        self._embedders = dict(embedders)
        self._max_file_bytes = max_file_bytes

    def ingest(
        self,
        root: Path,
        source: SourceSpec,
        *,
        wait_for_lock: bool = False,
        progress: ProgressCallback | None = None,
        changed: ChangeSet | None = None,
        job: JobRun | None = None,
    ) -> IngestSummary:
        """Bring ``source`` in line with the tree at ``root``.

        With ``changed`` (from ``changed_since``) only the paths git reported are read
        or deleted; without it every file is compared with its stored hash.
        The run is recorded as a job (``engine.admin.jobs``), or runs as ``job`` when given.
        """
        started = time.perf_counter()
        summary = IngestSummary(source=source.slug)
        if changed is not None:
            summary.since, summary.changed_paths = changed.rev, len(changed.paths)
            if changed.touches_ignore_rules:
                changed = None  # new ignore rules can drop or admit files git did not report
        root = root.resolve()
        if not root.is_dir():
            raise NotADirectoryError(f"not a directory: {root}")
        with self._pool.connection() as lock_conn:
            source_id, base_url, url_template = self._upsert_source(lock_conn, source, root)
            self._lock_source(lock_conn, source_id, source.slug, wait_for_lock)
            run: JobRun | None = None
            writer: WriteBehind[Segment] | None = None
            indexes: DeferredIndexes | None = None
            try:
                run = _start_job(self._pool, job, root, source, wait_for_lock, summary.since)
                groups = self._model_groups()
                stored = self._stored_documents(source_id)
                only = None if changed is None else changed.modified
                indexes = DeferredIndexes(self._pool, [space for group in groups for space in group.spaces])
                listing = list_tree(root, is_supported=_is_ingested, max_file_bytes=self._max_file_bytes, only=only)
                indexes.start(sum(item.size for item in listing
                                  if isinstance(item, Candidate) and item.relative_path not in stored))
                state = IngestProgress()
                target = _WriteTarget(source_id, base_url, url_template, groups, lock_conn, run, indexes, state,
                                      progress, summary)
                writer = WriteBehind(lambda segments: self._write_segments(target, segments), depth=_WRITE_AHEAD,
                                     name=f"quarry-ingest-{source.slug}", threads=self._writers())
                seen = self._parse_tree(listing, stored, writer, state, progress, summary)
                writer.close()  # a writer's error, if one failed, is raised here
                summary.write_seconds += target.clock.seconds
                restoring = time.perf_counter()
                indexes.restore(lock_conn)
                summary.write_seconds += time.perf_counter() - restoring
                # A file that failed to parse is in `seen`: its stored version stays. With `changed`
                # the walk saw only changed files, so only the paths git reported can be gone.
                affected = stored.keys() if changed is None else changed.paths
                gone = [doc.id for path, doc in stored.items() if path not in seen and path in affected]
                self._finish(lock_conn, source_id, gone, summary)
            except BaseException as error:
                if writer is not None:
                    writer.abandon()  # the batch being written commits or rolls back whole
                if indexes is not None:
                    _restore_quietly(indexes)
                if run is not None:
                    run.end_with(error, _job_counts(None, summary), summary.failed)
                raise
            finally:
                lock_conn.execute("select pg_advisory_unlock(%s, %s)", (INGEST_LOCK_CLASS, source_id))
                lock_conn.commit()
        summary.total_seconds = time.perf_counter() - started
        run.succeed(_job_counts(None, summary), summary.failed)
        return summary

    def _writers(self) -> int:
        """Concurrent batch writers: two when the pool has a connection for each besides the run's own."""
        return _WRITERS if self._pool.max_size >= _HELD_CONNECTIONS + _WRITERS else 1

    def _parse_tree(
        self,
        listing: list[Candidate | SkippedFile],
        stored: Mapping[str, _StoredDocument],
        writer: WriteBehind[Segment],
        state: IngestProgress,
        progress: ProgressCallback | None,
        summary: IngestSummary,
    ) -> set[str]:
        """Read and parse the listed files, handing segments of changed ones to ``writer``; returns the paths seen."""
        seen: set[str] = set()
        pending: list[PendingDocument] = []
        pending_chunks = 0
        for item in read_tree(listing):
            writer.check()  # stop parsing as soon as the writer failed
            state.files_seen += 1
            state.current_path = item.relative_path
            _report(progress, state, summary)
            if isinstance(item, SkippedFile):
                summary.skipped.append((item.relative_path, item.reason))
                continue
            seen.add(item.relative_path)
            document = self._prepare(item, stored.get(item.relative_path), summary)
            if document is None:
                continue
            pending.append(document)
            pending_chunks += len(document.parsed.chunks)
            if pending_chunks >= _BATCH_CHUNKS:
                writer.submit(Segment.of(pending))
                pending, pending_chunks = [], 0
        if pending:
            writer.submit(Segment.of(pending))
        return seen

    # -- steps ---------------------------------------------------------------

    def _upsert_source(
        self, conn: Connection[Any], source: SourceSpec, root: Path
    ) -> tuple[int, str | None, str | None]:
        row = conn.execute(
            """
            insert into quarry.sources (slug, display_name, kind, attribution, base_url, url_template, root_path)
            values (%(slug)s, coalesce(%(display_name)s, %(slug)s), coalesce(%(kind)s, 'mixed'),
                    coalesce(%(attribution)s, 'unknown'), %(base_url)s, %(url_template)s, %(root)s)
            on conflict (slug) do update set
                display_name = coalesce(%(display_name)s, sources.display_name),
                kind = coalesce(%(kind)s, sources.kind),
                attribution = coalesce(%(attribution)s, sources.attribution),
                base_url = coalesce(%(base_url)s, sources.base_url),
                url_template = coalesce(%(url_template)s, sources.url_template),
                root_path = %(root)s,
                updated_at = now()
            returning id, base_url, url_template
            """,
            {**source.model_dump(), "root": str(root)},
        ).fetchone()
        if source.version is not None:
            conn.execute("select quarry.set_source_version(%s, %s)", (source.slug, source.version))
        conn.commit()
        assert row is not None
        return int(row[0]), row[1], row[2]

    def _lock_source(self, conn: Connection[Any], source_id: int, slug: str, wait: bool) -> None:
        # Session-level advisory lock: two ingests of one source never interleave.
        if wait:
            conn.execute("select pg_advisory_lock(%s, %s)", (INGEST_LOCK_CLASS, source_id))
        else:
            row = conn.execute("select pg_try_advisory_lock(%s, %s)", (INGEST_LOCK_CLASS, source_id)).fetchone()
            if row is None or not row[0]:
                conn.rollback()
                raise BusyError(f"another ingest of source {slug!r} is running")
        conn.commit()

    def _model_groups(self) -> list[ModelGroup]:
        """Find (or register) the generation serving each logical space, grouped by the embedder serving it."""
        groups: list[ModelGroup] = []
        with self._pool.connection() as conn:
            for space, embedder in self._embedders.items():
                row = conn.execute(
                    "select quarry.ensure_embedding_space(%s, %s, %s)",
                    (space, embedder.model_name, embedder.dimension),
                ).fetchone()
                assert row is not None
                group = next((group for group in groups if group.embedder is embedder), None)
                if group is None:
                    group = ModelGroup(len(groups), embedder, {})
                    groups.append(group)
                group.spaces[str(row[0])] = space == CODE_SPACE
        return groups

    def _stored_documents(self, source_id: int) -> dict[str, _StoredDocument]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "select path, id, content_hash, parser_version from quarry.documents where source_id = %s",
                (source_id,),
            ).fetchall()
        return {path: _StoredDocument(doc_id, bytes(digest), version) for path, doc_id, digest, version in rows}

    def _prepare(
        self, item: FoundFile, stored: _StoredDocument | None, summary: IngestSummary
    ) -> PendingDocument | None:
        content_hash = hashlib.sha256(item.raw).digest()
        if stored is not None and stored.content_hash == content_hash and stored.parser_version == PARSER_VERSION:
            summary.unchanged += 1
            return None
        started = time.perf_counter()
        try:
            parsed = parse_document(item.relative_path, item.raw)
        except ParseError as error:
            summary.failed.append((item.relative_path, str(error)))
            return None
        finally:
            summary.parse_seconds += time.perf_counter() - started
        document = PendingDocument(item.relative_path, item.raw, content_hash, parsed,
                                    None if stored is None else stored.id)
        text = item.raw.decode("utf-8", errors="replace")
        skipped: list[tuple[str, str]] = []
        document.manifest_kind = manifest_kind(item.relative_path)
        if document.manifest_kind is not None:
            document.constraints = constraints_in_manifest(item.relative_path, text, skipped=skipped) or []
        else:
            document.constraints = constraints_in_document(item.relative_path, text, skipped=skipped)
        summary.skipped.extend((f"{item.relative_path}: version constraint {what}", reason)
                               for what, reason in skipped)
        return document

    # -- the writer threads --------------------------------------------------

    def _write_segments(self, target: _WriteTarget, segments: Iterator[Segment]) -> None:
        """Write the parser's segments in order: alone when the model embeds some of it, else merged."""
        following: Segment | None = None
        while True:
            batch = following or next(segments, None)
            following = None
            if batch is None:
                return
            self._look_up_stored(target.groups, batch)
            while not needs_model(target.groups, batch) and len(batch.inputs) < _WRITE_CHUNKS:
                following = next(segments, None)
                if following is None:
                    break
                self._look_up_stored(target.groups, following)
                if needs_model(target.groups, following) or len(batch.inputs) + len(following.inputs) > _WRITE_CHUNKS:
                    break
                batch.extend(following)
                following = None
            self._write_batch(target, batch)
            with target.bookkeeping:
                _report(target.progress, target.state, target.summary)
                target.job.progress(_job_counts(target.state, target.summary))  # stops here when cancelled

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

    def _embed(self, target: _WriteTarget, group: ModelGroup, batch: Segment,
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

    def _write_batch(self, target: _WriteTarget, batch: Segment) -> None:
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

    def _write_transaction(self, target: _WriteTarget, batch: Segment,
                           fresh: dict[int, dict[bytes, np.ndarray]]) -> dict[str, int]:
        """Write one batch in one transaction; returns the vectors written per space.

        The rows no other batch touches come first, postings included, while the other writer
        may hold the statistics lock; the documents, whose triggers count facets, and the
        postings' count into the term statistics come last, under it
        (``quarry.lock_corpus_statistics``, held to commit).
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
            conn.execute("select quarry.insert_chunk_postings(%s)", (chunk_ids,))
            conn.execute("select quarry.lock_corpus_statistics()")
            replaced = [doc.replaces for doc in documents if doc.replaces is not None]
            if replaced:
                conn.execute("select quarry.delete_documents(%s)", (replaced,))
            copy_documents(conn, target.source_id, target.base_url, target.url_template, documents, document_ids)
            store_versions(conn, [StatedVersions(doc_id, target.source_id, doc.path, doc.manifest_kind,
                                                 doc.constraints)
                                  for doc_id, doc in zip(document_ids, documents, strict=True)])
            conn.execute("select quarry.count_new_postings()")
        return written

    def _stage_stored_vectors(self, conn: Connection[Any], target: _WriteTarget, batch: Segment,
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

    def _finish(self, conn: Connection[Any], source_id: int, gone: Iterable[UUID], summary: IngestSummary) -> None:
        gone_ids = list(gone)
        # One transaction, BM25 rebuild included: a run killed before it commits leaves
        # last_ingested_at as it was, so the rerun still sees (and rebuilds for) every
        # chunk written since the last completed ingest.
        with conn.transaction():
            if gone_ids:
                conn.execute("select quarry.delete_documents(%s)", (gone_ids,))
            rebuild = self._text_index_needs_rebuild(conn, source_id)
            conn.execute("update quarry.documents set checked_at = now() where source_id = %s", (source_id,))
            conn.execute("update quarry.sources set last_ingested_at = now() where id = %s", (source_id,))
            if rebuild:
                started = time.perf_counter()
                conn.execute("select quarry.rebuild_text_index()")
                summary.write_seconds += time.perf_counter() - started
        summary.deleted += len(gone_ids)

    @staticmethod
    def _text_index_needs_rebuild(conn: Connection[Any], source_id: int) -> bool:
        """Whether the chunks written since the source's last completed ingest are most of the corpus.

        BM25 impacts use the average chunk length known when each batch was written; after
        a first ingest, early batches saw an unrepresentative average, so every impact is
        recomputed once from the final one. Counted from the documents rather than from this
        run, so the chunks an interrupted run wrote before this one finished its work count too.
        """
        row = conn.execute(
            """
            select (select count(*) from quarry.chunks c join quarry.documents d on d.id = c.document_id
                    where d.source_id = s.id and d.changed_at > coalesce(s.last_ingested_at, '-infinity')),
                   (select t.chunk_count from quarry.text_stats t)
            from quarry.sources s where s.id = %s
            """,
            (source_id,),
        ).fetchone()
        return row is not None and int(row[0]) * 2 > int(row[1]) > 0



