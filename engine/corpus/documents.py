"""Reading stored documents: metadata with chunks page by page, a chunk with its neighbours, raw bytes.

Pages are bounded by a chunk count and a content budget, so one page of a huge
document stays small; the next page is named by an opaque cursor that encodes the
document, the first ordinal still to read and, when a page ended inside that chunk
(a caller's token budget), the character of its content to resume at. Byte reads
return the exact stored bytes of a range, bounded in length.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError, NotFoundError

#: Chunks on one ``get_document`` page, at most.
PAGE_CHUNKS = 50
#: UTF-8 bytes of chunk content on one page: a page ends before the chunk that would
#: cross it (a single larger chunk still gets its own page).
PAGE_CONTENT_BYTES = 131_072
#: Chunks on each side of ``get_chunk``'s chunk, at most.
MAX_NEIGHBOURS = 20
#: Bytes one ``read_document_bytes`` call returns, at most.
MAX_BYTE_RANGE = 65_536

_CURSOR_TAG = b"qd1"


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """A document's metadata and where it comes from."""

    document_id: UUID
    source_slug: str
    source_name: str
    source_kind: str
    path: str
    title: str
    url: str | None
    content_type: str
    language: str | None
    package: str | None
    deprecated: bool
    size_bytes: int
    chunk_count: int
    first_seen_at: datetime
    changed_at: datetime


@dataclass(frozen=True, slots=True)
class StoredChunk:
    chunk_id: UUID
    ordinal: int
    heading_path: list[str]
    symbol_path: str | None
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    content: str
    #: Characters of the chunk's content a previous page returned (0: the whole chunk is here).
    resumed_from_char: int = 0

    @property
    def content_is_bytes(self) -> bool:
        """Whether ``content`` is the document's bytes [start_byte, end_byte) (not so for HTML's extracted text)."""
        return len(self.content.encode()) == self.end_byte - self.start_byte

    def rest_from(self, char: int) -> StoredChunk:
        """The chunk from character ``char`` of its content on, its spans moved there when they can be."""
        if char <= 0:
            return self
        kept, rest = self.content[:char], self.content[char:]
        start_line, start_byte = self.start_line, self.start_byte
        if self.content_is_bytes:
            start_line += kept.count("\n")
            start_byte += len(kept.encode())
        return StoredChunk(self.chunk_id, self.ordinal, self.heading_path, self.symbol_path, start_line,
                           self.end_line, start_byte, self.end_byte, rest, self.resumed_from_char + char)


@dataclass(frozen=True, slots=True)
class DocumentPage:
    document: DocumentInfo
    chunks: list[StoredChunk]
    remaining_chunks: int
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ChunkWithNeighbours:
    document: DocumentInfo
    chunk: StoredChunk
    before: list[StoredChunk]
    after: list[StoredChunk]


@dataclass(frozen=True, slots=True)
class ByteRange:
    document_id: UUID
    offset: int
    data: bytes
    total_bytes: int
    document_sha256: str  # of the whole stored file, as ingestion hashed it

    @property
    def end_of_document(self) -> bool:
        return self.offset + len(self.data) >= self.total_bytes

    @property
    def sha256(self) -> str:
        """Of the returned range: a client checks the bytes it decoded against it."""
        return hashlib.sha256(self.data).hexdigest()


_DOCUMENT_INFO = """
    select d.id as document_id, s.slug as source_slug, s.display_name as source_name, s.kind as source_kind,
           d.path, d.title, d.url, d.content_type, d.language, d.package,
           d.deprecated or s.deprecated as deprecated, octet_length(d.raw) as size_bytes,
           (select count(*) from quarry.chunks c where c.document_id = d.id)::int as chunk_count,
           d.first_seen_at, d.changed_at
    from quarry.documents d
    join quarry.sources s on s.id = d.source_id
    where d.id = %s
"""

_CHUNK_COLUMNS = """
    c.id as chunk_id, c.ordinal, c.heading_path, c.symbol_path, c.start_line, c.end_line,
    c.start_byte, c.end_byte, c.content
"""


@dataclass(frozen=True, slots=True)
class _PageRow:
    chunk_id: UUID
    ordinal: int
    heading_path: list[str]
    symbol_path: str | None
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    content: str
    from_here: int

    def stored(self) -> StoredChunk:
        return StoredChunk(self.chunk_id, self.ordinal, self.heading_path, self.symbol_path, self.start_line,
                           self.end_line, self.start_byte, self.end_byte, self.content)


def encode_cursor(document_id: UUID, ordinal: int, char: int = 0) -> str:
    """An opaque token naming 'this document, from this chunk ordinal (and character of its content) on'."""
    raw = _CURSOR_TAG + document_id.bytes + ordinal.to_bytes(4, "big") + (char.to_bytes(4, "big") if char else b"")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, document_id: UUID) -> tuple[int, int]:
    """The ordinal and character a cursor resumes at; rejects tokens not minted for this document."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) not in (len(_CURSOR_TAG) + 20, len(_CURSOR_TAG) + 24) or not raw.startswith(_CURSOR_TAG):
        raise InvalidRequestError("cursor: not a cursor returned by get_document; omit it to start at the beginning")
    if UUID(bytes=raw[3:19]) != document_id:
        raise InvalidRequestError("cursor: this cursor belongs to another document")
    return int.from_bytes(raw[19:23], "big"), int.from_bytes(raw[23:], "big")


def document_info(pool: ConnectionPool, document_id: UUID) -> DocumentInfo:
    with pool.connection() as conn, conn.cursor(row_factory=class_row(DocumentInfo)) as cursor:
        found = cursor.execute(_DOCUMENT_INFO, (document_id,)).fetchone()
    if found is None:
        raise NotFoundError("document_id: no document has this id")
    return found


def get_document(
    pool: ConnectionPool,
    document_id: UUID,
    cursor: str | None = None,
    *,
    page_chunks: int = PAGE_CHUNKS,
    page_content_bytes: int = PAGE_CONTENT_BYTES,
) -> DocumentPage:
    """A document's metadata and one page of its chunks in order, with a cursor to the next page.

    A cursor naming a character inside a chunk starts the page with the rest of that chunk
    (``resumed_from_char``).
    """
    start, char = (0, 0) if cursor is None else decode_cursor(cursor, document_id)
    document = document_info(pool, document_id)
    with pool.connection() as conn, conn.cursor(row_factory=class_row(_PageRow)) as rows:
        # The window count runs before LIMIT: it counts every chunk from `start` on.
        rows.execute(
            "select" + _CHUNK_COLUMNS + ", count(*) over ()::int as from_here"
            " from quarry.chunks c where c.document_id = %s and c.ordinal >= %s order by c.ordinal limit %s",
            (document_id, start, page_chunks),
        )
        fetched = rows.fetchall()
    page: list[StoredChunk] = []
    used = 0
    for row in fetched:
        chunk = row.stored().rest_from(char if row.ordinal == start else 0)
        size = len(chunk.content.encode())
        if page and used + size > page_content_bytes:
            break
        used += size
        page.append(chunk)
    remaining = (fetched[0].from_here - len(page)) if fetched else 0
    next_cursor = encode_cursor(document_id, page[-1].ordinal + 1) if remaining > 0 and page else None
    return DocumentPage(document, page, remaining, next_cursor)


def get_chunk(pool: ConnectionPool, chunk_id: UUID, before: int = 0, after: int = 0) -> ChunkWithNeighbours:
    """A chunk, up to ``before`` chunks preceding it and ``after`` following it, in document order."""
    if not (0 <= before <= MAX_NEIGHBOURS and 0 <= after <= MAX_NEIGHBOURS):
        raise InvalidRequestError(f"before and after must be between 0 and {MAX_NEIGHBOURS}")
    with pool.connection() as conn:
        target = conn.execute(
            "select document_id, ordinal from quarry.chunks where id = %s", (chunk_id,)
        ).fetchone()
        if target is None:
            raise NotFoundError("chunk_id: no chunk has this id")
        document_id, ordinal = target
        with conn.cursor(row_factory=class_row(StoredChunk)) as rows:
            rows.execute(
                "select" + _CHUNK_COLUMNS + " from quarry.chunks c"
                " where c.document_id = %s and c.ordinal between %s and %s order by c.ordinal",
                (document_id, ordinal - before, ordinal + after),
            )
            window = rows.fetchall()
    document = document_info(pool, document_id)
    position = next(index for index, chunk in enumerate(window) if chunk.chunk_id == chunk_id)
    return ChunkWithNeighbours(document, window[position], window[:position], window[position + 1:])


def read_document_bytes(pool: ConnectionPool, document_id: UUID, offset: int, length: int) -> ByteRange:
    """Exactly the stored bytes ``[offset, offset + length)`` of a document (shorter at its end)."""
    if offset < 0 or not 1 <= length <= MAX_BYTE_RANGE:
        raise InvalidRequestError(f"offset must be >= 0 and length between 1 and {MAX_BYTE_RANGE}")
    with pool.connection() as conn:
        # the start clamped to one past the end: offset + 1 may not fit the 32-bit position substring takes
        found = conn.execute(
            "select octet_length(raw), substring(raw from least(%s::bigint, octet_length(raw) + 1)::int for %s),"
            " content_hash from quarry.documents where id = %s",
            (offset + 1, length, document_id),
        ).fetchone()
    if found is None:
        raise NotFoundError("document_id: no document has this id")
    total, data, content_hash = found
    if offset > total:
        raise InvalidRequestError(f"offset: past the end of the document, which has {total} bytes")
    return ByteRange(document_id, offset, bytes(data), total, bytes(content_hash).hex())
