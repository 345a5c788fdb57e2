"""``quarry ingest``: bring one source in Postgres in line with a directory tree (or a single file).

Incremental by construction: an unchanged file costs a hash comparison; a changed
file is re-parsed and replaced atomically (old rows deleted and new ones written in
the same transaction); a file gone from the tree is deleted. Vectors are reused for
any chunk text embedded before (renames, moves, untouched sections), so only new
text pays for the model. Documents are written in batches, each its own
transaction: an interrupted run keeps what it finished, and rerunning completes it.

Parsing and writing overlap (``engine.ingest.write_behind``): this thread walks and
parses (``engine.ingest.changed_files``) while writer threads (``engine.ingest.batch_writer``)
embed what is new and write, so Python and the Postgres backends keep both cores busy.
Two writers write two batches at once, on two connections: each writes its chunks
(tsvector, GIN), vectors, relations and BM25 postings first, then, holding
``quarry.lock_corpus_statistics`` until it commits, its documents (facet counts),
versions and the postings' count into the term statistics, the rows every batch shares.
Reused vectors never leave the server: a batch copies them from the stored rows by content
hash in SQL. A load large for its embedding space defers the space's HNSW index and builds
it once at the end (``engine.ingest.vector_indexes``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, wait
from itertools import accumulate
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.embed.base import CODE_SPACE, Embedder
from engine.errors import BusyError
from engine.fetch.fetching import Fetcher
from engine.fetch.tree import FetchedTree
from engine.ingest.batch import ModelGroup, PendingDocument, Segment
from engine.ingest.batch_writer import WRITE_CHUNKS, BatchWriter, WriteTarget
from engine.ingest.changed_files import StoredDocument, is_ingested, prepare_document
from engine.ingest.changes import ChangeSet
from engine.ingest.sources import SourceSpec
from engine.ingest.summary import IngestProgress, IngestSummary, ProgressCallback, job_counts, report_progress
from engine.ingest.vector_indexes import DeferredIndexes
from engine.ingest.walk import Candidate, SkippedFile, list_tree, read_tree
from engine.ingest.write_behind import WriteBehind
from engine.store.db import autocommit

__all__ = ["INGEST_LOCK_CLASS", "Ingestor"]

#: Advisory-lock class for "ingesting source <id>" (the second key is the source id).
INGEST_LOCK_CLASS = 0x5149  # "QI"

#: Chunks per segment the parser hands to the writer. A segment the model must embed is
#: written in its own transaction: an interruption loses little model work, and the
#: progress display moves every few seconds (the local model embeds ~80 chunks/s).
_BATCH_CHUNKS = 256
#: Segments the parser may run ahead of the writers (enough to fill one merged write).
_WRITE_AHEAD = WRITE_CHUNKS // _BATCH_CHUNKS
#: Batches written at once, each on its own connection. Two: one batch's chunks and postings
#: are written while the other's are, and while it holds the statistics lock (waiting for it
#: took 0.16 s of the 7.4 s two writers spent per round). On the PostgreSQL manual with every
#: vector reused (bench/ingest_throughput.py, 2 cores, interleaved): writing took ~4.7 s of
#: wall time instead of ~6.1 s on one writer, 1,228 instead of 1,009 chunks/s in all; the
#: cores are then busy (~1.85 of 2), so a third writer would find none idle.
_WRITERS = 2
#: Connections one run holds at most besides its writers: the source's lock and the job's.
_HELD_CONNECTIONS = 2


def _start_job(pool: ConnectionPool, job: JobRun | None, where: Path | Fetcher, source: SourceSpec,
               wait_for_lock: bool, since: str | None) -> JobRun:
    """The job this ingest runs as (``job`` when a worker claimed a queued one), started.

    Its arguments are what a retry needs: the folder, or the location and how to fetch it.
    """
    located: dict[str, object] = {"path": str(where)} if isinstance(where, Path) else where.arguments
    arguments = {**located, "source": source.model_dump(exclude_none=True), "wait": wait_for_lock,
                 "since": since}
    run = job or JobRun.create(pool, "ingest", source.slug, arguments)
    run.start()
    return run


def _restore_quietly(indexes: DeferredIndexes) -> None:
    """After a failed run, build the indexes it deferred if the database lets us (the next run would)."""
    try:
        indexes.restore()
    except Exception as error:  # the database may be what failed
        logging.getLogger(__name__).warning("deferred HNSW indexes left for the next ingest to build: %s", error)


class Ingestor:
    """Ingests directory trees (or single files) into sources, embedding every chunk in each given space."""

    def __init__(
        self, pool: ConnectionPool, embedders: Mapping[str, Embedder], *, max_file_bytes: int
    ) -> None:
        self._pool = pool
        self._embedders = dict(embedders)
        self._max_file_bytes = max_file_bytes
        self._batches = BatchWriter(pool)

    def ingest(
        self,
        where: Path | Fetcher,
        source: SourceSpec,
        *,
        wait_for_lock: bool = False,
        progress: ProgressCallback | None = None,
        changed: ChangeSet | None = None,
        job: JobRun | None = None,
    ) -> IngestSummary:
        """Bring ``source`` in line with the tree at ``where``, the one file it names, or what it fetches.

        A file is ingested as a tree holding only itself: its document's path is its name.
        A ``Fetcher`` (a website, a package, a git remote) fetches under the source's lock,
        inside the job: its failures are the run's failures, and a page that failed to fetch
        keeps its stored document. With ``changed`` (from ``changed_since``, or the fetcher's
        git diff) only the paths git reported are read or deleted; without it every file is
        compared with its stored hash.
        The run is recorded as a job (``engine.admin.jobs``), or runs as ``job`` when given.
        """
        started = time.perf_counter()
        summary = IngestSummary(source=source.slug)
        if isinstance(where, Path):
            where = where.resolve()
            if not where.is_dir() and not where.is_file():
                raise NotADirectoryError(f"not a directory nor a file: {where}")
        # The run's own connection holds the source's (session) lock and runs in autocommit: each write step
        # on it is a transaction of its own, and its reads (the writers' session checks) leave none open, so
        # the session is never idle in a transaction for the length of a run.
        with self._pool.connection() as lock_conn, autocommit(lock_conn):
            source_id, base_url, url_template, last_revision = self._upsert_source(lock_conn, source, where)
            self._lock_source(lock_conn, source_id, source.slug, wait_for_lock)
            run: JobRun | None = None
            writer: WriteBehind[Segment] | None = None
            indexes: DeferredIndexes | None = None
            restoring: Future[int] | None = None
            state = IngestProgress()
            try:
                run = _start_job(self._pool, job, where, source, wait_for_lock,
                                 None if changed is None else changed.rev)
                fetched = None
                if not isinstance(where, Path):
                    fetched = self._fetch(where, last_revision, run, state, progress, summary)
                if fetched is not None:
                    self._take_fetched(lock_conn, source, source_id, fetched, summary)
                    changed = changed or fetched.changed
                root = fetched.root if fetched is not None else where
                assert isinstance(root, Path)
                if changed is not None:
                    summary.since, summary.changed_paths = changed.rev, len(changed.paths)
                    if changed.touches_ignore_rules:
                        changed = None  # new ignore rules can drop or admit files git did not report
                groups = self._model_groups()
                stored = self._stored_documents(source_id)
                only = None if changed is None else changed.modified
                indexes = DeferredIndexes(self._pool, [space for group in groups for space in group.spaces])
                listing = fetched.listing if fetched is not None and fetched.listing is not None else list_tree(
                    root, is_supported=is_ingested, max_file_bytes=self._max_file_bytes, only=only)
                indexes.start(sum(item.size for item in listing
                                  if isinstance(item, Candidate) and item.relative_path not in stored))
                state.bytes_through = tuple(accumulate(
                    item.size if isinstance(item, Candidate) else 0 for item in listing))
                report_progress(progress, state, summary)  # what there is to read, before the first file
                urls = {} if fetched is None else fetched.urls
                target = WriteTarget(source_id, base_url, url_template, urls, groups, lock_conn, run, indexes,
                                      state, progress, summary, postings_deferred=self._first_ingest(lock_conn))
                writer = WriteBehind(lambda segments: self._batches.write_segments(target, segments),
                                     depth=_WRITE_AHEAD, name=f"quarry-ingest-{source.slug}", threads=self._writers())
                seen = self._parse_tree(listing, stored, writer, state, progress, summary)
                writer.close()  # a writer's error, if one failed, is raised here
                summary.write_seconds += target.clock.seconds
                # The deferred HNSW indexes are built on another connection while _finish rebuilds the
                # text index on this one: each is one backend's work, so on two cores the end of a run
                # takes the longer of the two, not their sum (the PostgreSQL manual: 1.7 s and 3.1 s).
                restoring = indexes.restore_meanwhile()
                # A file that failed to parse is in `seen`: its stored version stays. With `changed`
                # the walk saw only changed files, so only the paths git reported can be gone.
                affected = stored.keys() if changed is None else changed.paths
                kept: set[str] = set()
                if fetched is not None:  # counted after the files, so progress counts only the listing's
                    summary.failed.extend(fetched.failed)
                    summary.skipped.extend(fetched.skipped)
                    kept = fetched.kept
                gone = [doc.id for path, doc in stored.items()
                        if path not in seen and path in affected and path not in kept]
                revision = None if fetched is None or fetched.revision is None else (
                    fetched.revision, where.revision_key if isinstance(where, Fetcher) else "")
                self._finish(lock_conn, source_id, gone, summary, revision)
                waited = time.perf_counter()
                restoring.result()  # a failed build fails the run; its index stays recorded for the next
                summary.write_seconds += time.perf_counter() - waited
            except BaseException as error:
                if writer is not None:
                    writer.abandon()  # the batch being written commits or rolls back whole
                if restoring is not None:
                    wait([restoring])  # never two builds at once: this one ends first
                if indexes is not None:
                    _restore_quietly(indexes)
                if run is not None:
                    run.end_with(error, job_counts(None, summary), summary.failed)
                raise
            finally:
                lock_conn.execute("select pg_advisory_unlock(%s, %s)", (INGEST_LOCK_CLASS, source_id))
        summary.total_seconds = time.perf_counter() - started
        run.succeed(job_counts(None, summary), summary.failed)
        return summary

    def _writers(self) -> int:
        """Concurrent batch writers: two when the pool has a connection for each besides the run's own."""
        return _WRITERS if self._pool.max_size >= _HELD_CONNECTIONS + _WRITERS else 1

    def _parse_tree(
        self,
        listing: list[Candidate | SkippedFile],
        stored: Mapping[str, StoredDocument],
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
            report_progress(progress, state, summary)
            if isinstance(item, SkippedFile):
                summary.skipped.append((item.relative_path, item.reason))
                continue
            seen.add(item.relative_path)
            document = prepare_document(item, stored.get(item.relative_path), summary)
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
        self, conn: Connection[Any], source: SourceSpec, where: Path | Fetcher
    ) -> tuple[int, str | None, str | None, str | None]:
        """Create or update the source; returns its id, base URL, URL template and last ingested git commit.

        The location and how it is fetched are recorded (``metadata.location``, ``metadata.fetch``)
        so a refresh needs only the source's name; the commit is the last ingest's only when that
        ingest read the same repository (``metadata.revision_of``), at whatever ref.
        """
        location = str(where) if isinstance(where, Path) else where.location.shown
        revision_key = None if isinstance(where, Path) else where.revision_key
        default_kind = None if isinstance(where, Path) else where.location.default_kind
        fetch = {} if isinstance(where, Path) else where.options.as_arguments()
        with conn.transaction():
            row = conn.execute(
                """
                with before as (select metadata from quarry.sources where slug = %(slug)s)
                insert into quarry.sources (slug, display_name, kind, attribution, base_url, url_template, root_path,
                                            metadata)
                values (%(slug)s, coalesce(%(display_name)s, %(slug)s), coalesce(%(kind)s, %(default_kind)s, 'mixed'),
                        coalesce(%(attribution)s, 'unknown'), %(base_url)s, %(url_template)s, %(root)s,
                        jsonb_build_object('location', %(location)s::text, 'fetch', %(fetch)s::jsonb))
                on conflict (slug) do update set
                    display_name = coalesce(%(display_name)s, sources.display_name),
                    kind = coalesce(%(kind)s, sources.kind),
                    attribution = coalesce(%(attribution)s, sources.attribution),
                    base_url = coalesce(%(base_url)s, sources.base_url),
                    url_template = coalesce(%(url_template)s, sources.url_template),
                    root_path = coalesce(%(root)s, sources.root_path),
                    metadata = sources.metadata
                               || jsonb_build_object('location', %(location)s::text, 'fetch', %(fetch)s::jsonb),
                    updated_at = now()
                returning id, base_url, url_template,
                          (select b.metadata ->> 'revision' from before b
                           where b.metadata ->> 'revision_of' = %(revision_key)s)
                """,
                {**source.model_dump(), "default_kind": default_kind, "location": location, "fetch": Jsonb(fetch),
                 "revision_key": revision_key,
                 "root": location if default_kind is None else None},
            ).fetchone()
            if source.version is not None:
                conn.execute("select quarry.set_source_version(%s, %s)", (source.slug, source.version))
        assert row is not None
        return int(row[0]), row[1], row[2], row[3]

    def _fetch(self, fetcher: Fetcher, last_revision: str | None, run: JobRun, state: IngestProgress,
               progress: ProgressCallback | None, summary: IngestSummary) -> FetchedTree:
        """Fetch the location, showing what the fetcher says and recording it on the job."""

        def said(line: str) -> None:
            state.fetching = line
            report_progress(progress, state, summary)

        said(f"fetching {fetcher.location.shown}")
        fetched = fetcher.fetch(last_revision, said)
        state.fetching = ""
        run.progress({"fetched": fetched.report})
        return fetched

    @staticmethod
    def _take_fetched(conn: Connection[Any], source: SourceSpec, source_id: int, fetched: FetchedTree,
                      summary: IngestSummary) -> None:
        """Record what only the fetch knows: what it did, the folder, the exact version fetched."""
        summary.fetched = fetched.report
        with conn.transaction():
            conn.execute("update quarry.sources set root_path = %s where id = %s", (str(fetched.root), source_id))
            if source.version is None and fetched.version is not None:  # the user's --source-version wins
                conn.execute("select quarry.set_source_version(%s, %s)", (source.slug, fetched.version))

    def _lock_source(self, conn: Connection[Any], source_id: int, slug: str, wait: bool) -> None:
        # Session-level advisory lock: two ingests of one source never interleave.
        if wait:
            conn.execute("select pg_advisory_lock(%s, %s)", (INGEST_LOCK_CLASS, source_id))
        else:
            row = conn.execute("select pg_try_advisory_lock(%s, %s)", (INGEST_LOCK_CLASS, source_id)).fetchone()
            if row is None or not row[0]:
                raise BusyError(f"another ingest of source {slug!r} is running")

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

    def _stored_documents(self, source_id: int) -> dict[str, StoredDocument]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "select path, id, content_hash, parser_version from quarry.documents where source_id = %s",
                (source_id,),
            ).fetchall()
        return {path: StoredDocument(doc_id, bytes(digest), version) for path, doc_id, digest, version in rows}

    def _finish(self, conn: Connection[Any], source_id: int, gone: Iterable[UUID], summary: IngestSummary,
                revision: tuple[str, str] | None) -> None:
        """Delete what is gone and mark the source ingested; ``revision``: (git commit read, its repository)."""
        gone_ids = list(gone)
        # One transaction, BM25 rebuild included: a run killed before it commits leaves
        # last_ingested_at as it was, so the rerun still sees (and rebuilds for) every
        # chunk written since the last completed ingest.
        with conn.transaction():
            rebuild = self._text_index_needs_rebuild(conn, source_id, gone_ids)
            # the postings, rebuilt or compacted, are taken before the statistics lock (the deletion and the
            # refresh take it), as batches take them
            conn.execute("select quarry.lock_text_index(%s)", (rebuild,))
            if gone_ids:
                conn.execute("select quarry.delete_documents(%s)", (gone_ids,))
            # The git commit this ingest read: the next one diffs against it (only once it completed).
            commit, repository = revision or (None, None)
            conn.execute("update quarry.sources set last_ingested_at = now(),"
                         " metadata = case when %(commit)s::text is null then metadata - 'revision' - 'revision_of'"
                         " else metadata || jsonb_build_object('revision', %(commit)s::text,"
                         "                                     'revision_of', %(repository)s::text) end"
                         " where id = %(id)s", {"commit": commit, "repository": repository, "id": source_id})
            started = time.perf_counter()
            # What this run's writes marked stale (a manifest governs every document below it, so
            # writes mark the source rather than adjust counts) is recounted while it commits.
            conn.execute("select quarry.refresh_version_facet_counts(array[%s]::bigint[])", (source_id,))
            if rebuild:
                # chunks written with posting rows keep the rows' frequencies; those a first ingest left
                # without postings are tokenized here
                conn.execute("select quarry.rebuild_text_index(reuse_row_frequencies => true)")
            else:  # the postings written as rows join their terms' blocks once they are many
                conn.execute("select quarry.compact_text_postings()")
            summary.write_seconds += time.perf_counter() - started
        summary.deleted += len(gone_ids)

    @staticmethod
    def _text_index_needs_rebuild(conn: Connection[Any], source_id: int, gone: Sequence[UUID]) -> bool:
        """Whether chunks lack postings, or the chunks written since the source's last completed ingest are most
        of the corpus once the ``gone`` documents are deleted.

        A first ingest leaves its chunks' postings to this rebuild (``postings_deferred``, set by the
        batches that did; a killed run's chunks are indexed by the next ingest to finish). Otherwise
        BM25 impacts use the average chunk length known when each batch was written; when most of the
        corpus is new, early batches saw an unrepresentative average, so every impact is recomputed
        once from the final one. Counted from the documents rather than from this run, so the chunks
        an interrupted run wrote before this one finished its work count too.
        """
        row = conn.execute(
            """
            select (select count(*) from quarry.chunks c join quarry.documents d on d.id = c.document_id
                    where d.source_id = s.id and d.changed_at > coalesce(s.last_ingested_at, '-infinity')
                      and d.id <> all (%(gone)s::uuid[])),
                   -- (from chunks, not chunk_terms: a lock on the postings is taken after this, in its mode)
                   t.chunk_count - (select count(*) from quarry.chunks c where c.document_id = any (%(gone)s::uuid[])),
                   t.postings_deferred
            from quarry.sources s, quarry.text_stats t where s.id = %(source)s
            """,
            {"source": source_id, "gone": list(gone)},
        ).fetchone()
        return row is not None and (row[2] or int(row[0]) * 2 > int(row[1]) > 0)

    @staticmethod
    def _first_ingest(conn: Connection[Any]) -> bool:
        """Whether the text index is empty: this run's postings are then written once, by the rebuild closing it.

        Each batch would otherwise tokenize its chunks and write postings only for the rebuild to write them
        all again from the final statistics (0.09 s per 256 chunks of the PostgreSQL manual, while the model
        waits). Decided when the run starts, so the rebuild at its end is one it would run anyway.
        """
        row = conn.execute("select chunk_count = 0 from quarry.text_stats").fetchone()
        return bool(row and row[0])



