"""Whole documents: a document's chunks merged back into one text, in document order.

Chunks are cut without overlap (``engine.ingest.parsers.packing``), so joining them
with blank lines restores the document's text (HTML: its extracted text). A document
longer than ``max_chunks`` chunks is merged from its first ``max_chunks``; the result
says how many it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from psycopg_pool import ConnectionPool

#: Chunks merged per document by default, and at most.
DEFAULT_CHUNKS_PER_DOCUMENT = 200
MAX_CHUNKS_PER_DOCUMENT = 500


@dataclass(frozen=True, slots=True)
class MergedDocument:
    document_id: UUID
    content: str
    #: Chunks the document has, and how many of them ``content`` holds.
    chunk_count: int
    merged_chunks: int


def merged_documents(pool: ConnectionPool, document_ids: Sequence[UUID],
                     max_chunks: int = DEFAULT_CHUNKS_PER_DOCUMENT) -> dict[UUID, MergedDocument]:
    """The merged text of each document (missing ids are absent from the result)."""
    if not 1 <= max_chunks <= MAX_CHUNKS_PER_DOCUMENT:
        raise ValueError(f"max_chunks must be between 1 and {MAX_CHUNKS_PER_DOCUMENT}")
    parts: dict[UUID, list[str]] = {}
    totals: dict[UUID, int] = {}
    with pool.connection() as conn:
        rows = conn.execute("select document_id, content, total_chunks from quarry.document_chunks(%s, %s)",
                            (list(document_ids), max_chunks))
        for document_id, content, total in rows:
            parts.setdefault(document_id, []).append(content)
            totals[document_id] = total
    return {document_id: MergedDocument(document_id, "\n\n".join(chunks), totals[document_id], len(chunks))
            for document_id, chunks in parts.items()}
