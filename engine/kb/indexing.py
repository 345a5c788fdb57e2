"""Indexing evidence text: the ``kb_index`` job, which the ordinary ingest pipeline does the work of.

Each pending text evidence is decoded and written to a mirror folder (``QUARRY_HOME/fetch/kb``,
a cache rebuilt from ``quarry.kb_evidence``) as ``evidence/<id>.<ext>``; the ingest then reads
just those files (and forgets the files of deleted evidence) into the ``kb`` standalone source,
chunking, embedding and indexing them like any document, so search, grep and facets find
evidence through the one retrieval pipeline. Evidence whose bytes do not decode, or that the
ingest skips or fails, is marked ``failed`` with the reason; its raw bytes stay.
"""

from __future__ import annotations

from collections.abc import Mapping

from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.config import Settings
from engine.embed.base import Embedder
from engine.ingest.changes import ChangeSet
from engine.ingest.sources import SourceSpec
from engine.ingest.summary import IngestSummary
from engine.kb.evidence import UndecodableText, decoded_text, index_extension

__all__ = ["KB_SOURCE", "index_evidence"]

KB_SOURCE = SourceSpec(slug="kb", kind="standalone", display_name="Knowledge base evidence")
_EVIDENCE_FOLDER = "evidence"


def index_evidence(pool: ConnectionPool, embedders: Mapping[str, Embedder], settings: Settings,
                   job: JobRun) -> IngestSummary:
    """Index every pending evidence's text (the ``kb_index`` job ``job``); returns the ingest's summary."""
    from engine.ingest.pipeline import Ingestor

    mirror = settings.fetch_dir / "kb"
    folder = mirror / _EVIDENCE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    with pool.connection() as conn:
        pending = conn.execute("select * from quarry.kb_pending_evidence()").fetchall()
        present = {row[0] for row in conn.execute("select * from quarry.kb_indexable_evidence()").fetchall()}
    written: dict[str, str] = {}  # path -> evidence id
    undecodable: dict[str, str] = {}
    for identifier, content, media_type, encoding in pending:
        try:
            text = decoded_text(bytes(content), encoding)
        except UndecodableText as error:
            undecodable[identifier] = str(error)
            continue
        path = f"{_EVIDENCE_FOLDER}/{identifier}{index_extension(media_type)}"
        (mirror / path).write_text(text, encoding="utf-8")
        written[path] = identifier
    gone = set()
    for stale in folder.iterdir():
        if stale.name.split(".", 1)[0] not in present:
            stale.unlink()
            gone.add(f"{_EVIDENCE_FOLDER}/{stale.name}")
    changed = ChangeSet(rev="kb", commit="kb", modified=set(written), deleted=gone)
    ingestor = Ingestor(pool, embedders, max_file_bytes=settings.max_file_bytes)
    summary = ingestor.ingest(mirror, KB_SOURCE, wait_for_lock=True, changed=changed, job=job)
    refused = {path: reason for path, reason in (*summary.skipped, *summary.failed) if path in written}
    with pool.connection() as conn, conn.transaction():
        conn.execute("select quarry.kb_mark_indexed(%s, 'ready', null)",
                     ([identifier for path, identifier in written.items() if path not in refused],))
        for path, reason in refused.items():
            conn.execute("select quarry.kb_mark_indexed(%s, 'failed', %s)", ([written[path]], reason))
        for identifier, reason in undecodable.items():
            conn.execute("select quarry.kb_mark_indexed(%s, 'failed', %s)", ([identifier], reason))
    return summary
