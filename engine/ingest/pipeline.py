"""``quarry ingest``: bring one source in Postgres in line with a directory tree.

Incremental by construction: an unchanged file costs a hash comparison; a changed
file is re-parsed and replaced atomically (old rows deleted and new ones written in
the same transaction); a file gone from the tree is deleted. Vectors are reused for
any chunk text embedded before (renames, moves, untouched sections), so only new
text pays for the model. Documents are written in batches, each its own
transaction: an interrupted run keeps what it finished, and rerunning completes it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
from psycopg import Connection
from psycopg_pool import ConnectionPool

from engine.embed.base import CODE_SPACE, Embedder
from engine.errors import BusyError
from engine.ids import uuid7
from engine.ingest.changes import ChangeSet
from engine.ingest.manifests import constraints_in_manifest, manifest_kind
from engine.ingest.model import PARSER_VERSION, ParsedDocument
from engine.ingest.parsers import ParseError, is_supported, parse_document
from engine.ingest.parsers.packing import count_tokens
from engine.ingest.sources import SourceSpec, document_url
from engine.ingest.version_store import StatedVersions, store_versions
from engine.ingest.versions import VersionConstraint, constraints_in_document
from engine.ingest.walk import FoundFile, SkippedFile, walk_tree
from engine.jobs import JobRun
from engine.relations import store_relations

#: Advisory-lock class for "ingesting source <id>" (the second key is the source id).
INGEST_LOCK_CLASS = 0x5149  # "QI"

#: Chunks per write transaction: big enough to amortise round trips, small enough
#: that an interruption loses little work and the progress display moves every few
#: seconds (the local model embeds ~80 chunks/s).
_BATCH_CHUNKS = 256

ProgressCallback = Callable[["IngestProgress"], None]


@dataclass
class IngestProgress:
    """What a progress display shows; reported per file and after every written batch."""

    files_seen: int = 0
    current_path: str = ""
    chunks_written: int = 0
    vectors_embedded: int = 0


@dataclass
class IngestSummary:
    source: str
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks_written: int = 0
    vectors_embedded: int = 0
    vectors_reused: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    parse_seconds: float = 0.0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0
    total_seconds: float = 0.0
    since: str | None = None  # the git revision of an incremental (--since) run
    changed_paths: int | None = None  # how many paths git reported changed since it

    def one_line(self) -> str:
        scope = "" if self.since is None else f" since {self.since} ({self.changed_paths} paths changed)"
        return (
            f"{self.source}{scope}: {self.added} added, {self.updated} updated, {self.unchanged} unchanged, "
            f"{self.deleted} deleted, {len(self.skipped)} skipped, {len(self.failed)} failed; "
            f"{self.chunks_written} chunks, {self.vectors_embedded} embedded, "
            f"{self.vectors_reused} reused; {self.total_seconds:.1f}s "
            f"(parse {self.parse_seconds:.1f}s, embed {self.embed_seconds:.1f}s, write {self.write_seconds:.1f}s)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "since": self.since, "changed_paths": self.changed_paths,
            "added": self.added, "updated": self.updated,
            "unchanged": self.unchanged, "deleted": self.deleted,
            "chunks_written": self.chunks_written, "vectors_embedded": self.vectors_embedded,
            "vectors_reused": self.vectors_reused,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "failed": [{"path": p, "reason": r} for p, r in self.failed],
            "seconds": {"parse": round(self.parse_seconds, 3), "embed": round(self.embed_seconds, 3),
                        "write": round(self.write_seconds, 3), "total": round(self.total_seconds, 3)},
        }


@dataclass(frozen=True, slots=True)
class _StoredDocument:
    id: UUID
    content_hash: bytes
    parser_version: int


@dataclass(slots=True)
class _PendingDocument:
    path: str
    raw: bytes
    content_hash: bytes
    parsed: ParsedDocument
    replaces: UUID | None  # id of the stored version this one replaces
    constraints: list[VersionConstraint] = field(default_factory=list)
    manifest_kind: str | None = None  # set when the file is a dependency manifest


def _is_ingested(relative_path: str) -> bool:
    return is_supported(relative_path) or manifest_kind(relative_path) is not None


def _report(progress: ProgressCallback | None, state: IngestProgress, summary: IngestSummary) -> None:
    if progress is not None:
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


def embedding_input(parsed: ParsedDocument, chunk_index: int) -> str:
    """The text a chunk is embedded as: its content with the context a reader would see.

    Docs get their title and heading path (the title once, though it is usually the
    first heading too). Code that contains its own definition gets nothing: module
    paths are file-system words no query uses, and measured on CoSQA they cost the
    vector leg 0.016 nDCG@10. Code without its name in view (a split symbol's later
    pieces) keeps the symbol's name within its module.
    """
    chunk = parsed.chunks[chunk_index]
    return chunk_embedding_input(parsed.title, chunk.heading_path, chunk.symbol_path, chunk.content)


def chunk_embedding_input(title: str, heading_path: Sequence[str], symbol_path: str | None, content: str) -> str:
    """``embedding_input`` from a chunk's stored fields (what re-embedding reads back)."""
    if symbol_path is not None:
        name = symbol_path.rsplit(".", 1)[-1]
        return content if name in content else f"{name}\n{content}"
    headings = list(heading_path)
    if headings and headings[0] == title:
        headings = headings[1:]
    context = " > ".join((title, *headings))
    return f"{context}\n{content}"


def _check_lock_session(lock_conn: Connection[Any]) -> None:
    """Fail before a batch if the session holding the source's lock died (e.g. a database restart).

    Batches go through other pooled connections, which reconnect by themselves; without this
    round trip an ingest could write a batch after its lock vanished with its session, and a
    second ingest of the source could interleave with it.
    """
    lock_conn.execute("select 1")


def input_hash(text: str) -> bytes:
    """Key under which a vector of this embedding input is stored and reused."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class Ingestor:
    """Ingests directory trees into sources, embedding every chunk in each given space."""

    def __init__(
        self, pool: ConnectionPool, embedders: Mapping[str, Embedder], *, max_file_bytes: int
    ) -> None:
        self._pool = pool
        self._embedders = dict(embedders)
        self._max_file_bytes = max_file_bytes
        self._physical_spaces: dict[str, str] = {}  # logical space -> the generation serving it

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
        The run is recorded as a job (``engine.jobs``), or runs as ``job`` when given.
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
            try:
                run = _start_job(self._pool, job, root, source, wait_for_lock, summary.since)
                self._register_spaces()
                stored = self._stored_documents(source_id)
                seen: set[str] = set()
                pending: list[_PendingDocument] = []
                pending_chunks = 0
                state = IngestProgress()
                only = None if changed is None else changed.modified
                for item in walk_tree(root, is_supported=_is_ingested, max_file_bytes=self._max_file_bytes, only=only):
                    state.files_seen += 1
                    state.current_path = item.relative_path
                    if progress is not None:
                        progress(state)
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
                        _check_lock_session(lock_conn)
                        self._write_batch(source_id, base_url, url_template, pending, summary)
                        pending, pending_chunks = [], 0
                        _report(progress, state, summary)
                        run.progress(_job_counts(state, summary))  # stops here when cancelled
                if pending:
                    _check_lock_session(lock_conn)
                    self._write_batch(source_id, base_url, url_template, pending, summary)
                    _report(progress, state, summary)
                    run.progress(_job_counts(state, summary))
                # A file that failed to parse is in `seen`: its stored version stays. With `changed`
                # the walk saw only changed files, so only the paths git reported can be gone.
                affected = stored.keys() if changed is None else changed.paths
                gone = [doc.id for path, doc in stored.items() if path not in seen and path in affected]
                self._finish(lock_conn, source_id, gone, summary)
            except BaseException as error:
                if run is not None:
                    run.end_with(error, _job_counts(None, summary), summary.failed)
                raise
            finally:
                lock_conn.execute("select pg_advisory_unlock(%s, %s)", (INGEST_LOCK_CLASS, source_id))
                lock_conn.commit()
        summary.total_seconds = time.perf_counter() - started
        run.succeed(_job_counts(None, summary), summary.failed)
        return summary

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

    def _register_spaces(self) -> None:
        """Find (or register) the generation serving each logical space: vectors are written there."""
        with self._pool.connection() as conn:
            for space, embedder in self._embedders.items():
                row = conn.execute(
                    "select quarry.ensure_embedding_space(%s, %s, %s)",
                    (space, embedder.model_name, embedder.dimension),
                ).fetchone()
                assert row is not None
                self._physical_spaces[space] = str(row[0])

    def _stored_documents(self, source_id: int) -> dict[str, _StoredDocument]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "select path, id, content_hash, parser_version from quarry.documents where source_id = %s",
                (source_id,),
            ).fetchall()
        return {path: _StoredDocument(doc_id, bytes(digest), version) for path, doc_id, digest, version in rows}

    def _prepare(
        self, item: FoundFile, stored: _StoredDocument | None, summary: IngestSummary
    ) -> _PendingDocument | None:
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
        document = _PendingDocument(item.relative_path, item.raw, content_hash, parsed,
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

    def _vectors_for(
        self, space: str, embedder: Embedder, inputs: Sequence[str], hashes: Sequence[bytes], summary: IngestSummary
    ) -> list[np.ndarray]:
        """A vector per input: reused where this space embedded the same text before, else embedded now."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "select distinct on (input_hash) input_hash, embedding from quarry.embeddings "
                "where space = %s and input_hash = any(%s)",
                (space, list(set(hashes))),
            ).fetchall()
        known: dict[bytes, np.ndarray] = {bytes(h): v.to_numpy().astype(np.float32) for h, v in rows}
        missing = [i for i, h in enumerate(hashes) if h not in known]
        summary.vectors_reused += len(hashes) - len(missing)
        if missing:
            started = time.perf_counter()
            fresh = embedder.embed_documents([inputs[i] for i in missing])
            summary.embed_seconds += time.perf_counter() - started
            summary.vectors_embedded += len(missing)
            for position, index in enumerate(missing):
                known[hashes[index]] = fresh[position]
        return [known[h] for h in hashes]

    def _space_vectors(
        self, inputs: Sequence[str], hashes: Sequence[bytes], is_code: Sequence[bool], summary: IngestSummary
    ) -> dict[str, dict[int, np.ndarray]]:
        """Per physical space, a vector per chunk index it holds: every chunk, or code chunks only for code.

        Spaces served by the same embedder object share its vectors: the model runs once.
        """
        computed: list[tuple[Embedder, dict[int, np.ndarray]]] = []
        vectors: dict[str, dict[int, np.ndarray]] = {}
        for space, embedder in self._embedders.items():
            wanted = [i for i in range(len(inputs)) if space != CODE_SPACE or is_code[i]]
            shared = next((done for owner, done in computed if owner is embedder), None)
            if shared is not None and all(i in shared for i in wanted):
                vectors[space] = {i: shared[i] for i in wanted}
                continue
            physical = self._physical_spaces[space]
            fresh = self._vectors_for(physical, embedder, [inputs[i] for i in wanted],
                                      [hashes[i] for i in wanted], summary)
            vectors[space] = dict(zip(wanted, fresh, strict=True))
            computed.append((embedder, vectors[space]))
        return {self._physical_spaces[space]: space_vectors for space, space_vectors in vectors.items()}

    def _write_batch(
        self,
        source_id: int,
        base_url: str | None,
        url_template: str | None,
        documents: list[_PendingDocument],
        summary: IngestSummary,
    ) -> None:
        inputs = [embedding_input(doc.parsed, i) for doc in documents for i in range(len(doc.parsed.chunks))]
        hashes = [input_hash(text) for text in inputs]
        is_code = [chunk.is_code for doc in documents for chunk in doc.parsed.chunks]
        vectors = self._space_vectors(inputs, hashes, is_code, summary)
        started = time.perf_counter()
        with self._pool.connection() as conn, conn.transaction():
            replaced = [doc.replaces for doc in documents if doc.replaces is not None]
            if replaced:
                conn.execute("select quarry.delete_documents(%s)", (replaced,))
            document_ids = [uuid7() for _ in documents]
            chunk_ids = [uuid7() for _ in inputs]
            with conn.cursor().copy(
                "copy quarry.documents (id, source_id, path, title, url, content_hash, raw, content_type,"
                " language, parser_version) from stdin with (format binary)"
            ) as copy:
                copy.set_types(["uuid", "int8", "text", "text", "text", "bytea", "bytea", "text", "text", "int4"])
                for doc_id, doc in zip(document_ids, documents, strict=True):
                    copy.write_row((
                        doc_id, source_id, doc.path, doc.parsed.title,
                        document_url(base_url, url_template, doc.path), doc.content_hash, doc.raw,
                        doc.parsed.content_type, doc.parsed.language, PARSER_VERSION,
                    ))
            with conn.cursor().copy(
                "copy quarry.chunks (id, document_id, source_id, ordinal, content, title, heading_path,"
                " symbol_path, is_code, content_type, language, start_line, end_line, start_byte, end_byte,"
                " token_estimate) from stdin with (format binary)"
            ) as copy:
                copy.set_types(["uuid", "uuid", "int8", "int4", "text", "text", "text[]", "text", "bool",
                                "text", "text", "int4", "int4", "int4", "int4", "int4"])
                ids = iter(chunk_ids)
                for doc_id, doc in zip(document_ids, documents, strict=True):
                    for ordinal, chunk in enumerate(doc.parsed.chunks):
                        copy.write_row((
                            next(ids), doc_id, source_id, ordinal, chunk.content, doc.parsed.title,
                            list(chunk.heading_path), chunk.symbol_path, chunk.is_code,
                            doc.parsed.content_type, doc.parsed.language, chunk.start_line, chunk.end_line,
                            chunk.start_byte, chunk.end_byte, count_tokens(chunk.content),
                        ))
            conn.execute("select quarry.index_chunk_terms(%s)", (chunk_ids,))
            store_versions(conn, [StatedVersions(doc_id, source_id, doc.path, doc.manifest_kind, doc.constraints)
                                  for doc_id, doc in zip(document_ids, documents, strict=True)])
            store_relations(conn, source_id, [(doc_id, doc.path, doc.raw)
                                              for doc_id, doc in zip(document_ids, documents, strict=True)])
            with conn.cursor().copy(
                "copy quarry.embeddings (chunk_id, space, input_hash, embedding) from stdin with (format binary)"
            ) as copy:
                copy.set_types(["uuid", "text", "bytea", "vector"])
                for space, space_vectors in vectors.items():
                    for index, vector in space_vectors.items():
                        copy.write_row((chunk_ids[index], space, hashes[index], vector))
        summary.write_seconds += time.perf_counter() - started
        summary.chunks_written += len(inputs)
        for doc in documents:
            if doc.replaces is None:
                summary.added += 1
            else:
                summary.updated += 1

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



