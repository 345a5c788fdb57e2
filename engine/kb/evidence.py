"""Evidence: exact bytes, named by their SHA-256, whose text (when it is text) is indexed.

The bytes are stored as given, never parsed, decompressed or re-encoded. Whether they are
text comes from the media type the client declares, never from a file name or sniffing;
``encoding`` says how to decode them for the index (``auto``: a UTF-8 or UTF-16 byte order
mark, else UTF-8). Indexing itself is ``engine.kb.indexing``.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, get_args
from uuid import UUID, uuid4

from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError
from engine.kb.records import utc

__all__ = ["ENCODINGS", "EVIDENCE_ID_PATTERN", "MAX_EVIDENCE_BYTES", "Encoding", "EvidenceRow", "FoundEvidence",
           "PathDenied", "StoredEvidence", "UndecodableText", "decoded_text", "evidence_id", "evidence_rows",
           "find_evidence", "index_extension", "is_text_media_type", "read_range", "resolve_evidence_path",
           "store_evidence"]

EVIDENCE_ID_PATTERN = r"^e_[0-9a-f]{64}$"
#: The largest evidence accepted: one row's bytes, read back in bounded ranges.
MAX_EVIDENCE_BYTES = 64 * 1024 * 1024

Encoding = Literal["auto", "utf-8", "utf-16le", "utf-16be", "latin-1"]
ENCODINGS: tuple[Encoding, ...] = get_args(Encoding)

_TEXT_APPLICATION_TYPES = frozenset({
    "application/json", "application/xml", "application/javascript", "application/x-ndjson",
    "application/json-seq", "application/yaml", "application/x-yaml", "application/toml", "message/http",
})
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")


def evidence_id(content: bytes) -> str:
    return "e_" + hashlib.sha256(content).hexdigest()


def is_text_media_type(media_type: str) -> bool:
    """Whether evidence of this media type has text to index."""
    if not _MEDIA_TYPE.match(media_type):
        raise InvalidRequestError(f"media_type: {media_type!r} is not a type/subtype media type",
                                  argument="media_type")
    return (media_type.startswith("text/") or media_type in _TEXT_APPLICATION_TYPES
            or (media_type.startswith("application/") and media_type.endswith(("+json", "+xml"))))


def index_extension(media_type: str) -> str:
    """The file extension the ingest parser reads this text as (markdown, HTML, or plain text)."""
    if media_type in ("text/markdown", "text/x-markdown"):
        return ".md"
    if media_type == "text/html":
        return ".html"
    return ".txt"


class UndecodableText(ValueError):
    """The bytes are not text in the declared (or detected) encoding."""


def decoded_text(content: bytes, encoding: Encoding) -> str:
    """The text of ``content`` for the index; raises ``UndecodableText`` naming why not."""
    if encoding == "auto":
        if content.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
            raise UndecodableText("UTF-32 is not a supported encoding")
        if content.startswith(codecs.BOM_UTF8):
            encoding, content = "utf-8", content[len(codecs.BOM_UTF8):]
        elif content.startswith(codecs.BOM_UTF16_LE):
            encoding, content = "utf-16le", content[2:]
        elif content.startswith(codecs.BOM_UTF16_BE):
            encoding, content = "utf-16be", content[2:]
        else:
            encoding = "utf-8"
    try:
        return content.decode(encoding)
    except UnicodeDecodeError as error:
        raise UndecodableText(f"not {encoding} text at byte {error.start}") from None


class PathDenied(Exception):
    """A path outside the evidence root, through a link, or with no root configured."""


def resolve_evidence_path(root: Path | None, path: str) -> Path:
    """``path`` under ``root``: relative to it, or absolute inside it; no symbolic link below the root."""
    if root is None:
        raise PathDenied("reading evidence from a path needs QUARRY_KB_ROOT (the folder evidence may be read from)")
    if "\x00" in path or not path.strip():
        raise PathDenied("path: empty, or holds a NUL byte")
    base, given = root.resolve(), Path(path)
    if ".." in given.parts:
        raise PathDenied(f"path: {path!r} may not use '..'")
    relative = given
    if given.is_absolute():
        # The root may be named through an alias (a linked folder): both spellings lead inside it.
        inside = [given.relative_to(alias) for alias in (root, base) if given.is_relative_to(alias)]
        if not inside:
            raise PathDenied(f"path: {path!r} is outside the evidence root")
        relative = inside[0]
    walked = base
    for part in relative.parts:
        walked = walked / part
        if walked.is_symlink():
            raise PathDenied(f"path: {path!r} goes through a symbolic link")
    if not walked.is_file():
        raise PathDenied(f"path: {path!r} is not a file under the evidence root")
    return walked


@dataclass(frozen=True, slots=True)
class StoredEvidence:
    id: str
    created: bool
    index_state: str
    job_id: UUID | None
    media_type: str
    encoding: str
    size: int


def store_evidence(pool: ConnectionPool, content: bytes, media_type: str, encoding: Encoding, origin: str | None,
                   *, api_key: str | None) -> StoredEvidence:
    """Store the bytes (once: the same bytes again change nothing) and queue the indexing of their text."""
    if len(content) > MAX_EVIDENCE_BYTES:
        raise InvalidRequestError(f"evidence may take at most {MAX_EVIDENCE_BYTES} bytes; this is {len(content)}",
                                  argument="content")
    identifier = evidence_id(content)
    with pool.connection() as conn:
        row = conn.execute("select quarry.kb_store_evidence(%s, %s, %s, %s, %s, %s, %s, %s)",
                           (api_key, identifier, content, media_type, encoding, origin,
                            is_text_media_type(media_type), uuid4())).fetchone()
    assert row is not None
    stored = row[0]
    return StoredEvidence(identifier, stored["created"], stored["index_state"],
                          UUID(stored["job_id"]) if stored["job_id"] else None, stored["media_type"],
                          stored["encoding"], stored["size"])


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    id: str
    media_type: str
    encoding: str
    size: int
    origin: str | None
    index_state: str
    index_error: str | None
    created_at: datetime
    linked_records: int

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": "evidence", "media_type": self.media_type, "encoding": self.encoding,
                "size": self.size, "source": self.origin, "index_state": self.index_state,
                "index_error": self.index_error, "created_at": utc(self.created_at),
                "linked_records": self.linked_records}


def evidence_rows(pool: ConnectionPool, ids: Sequence[str]) -> list[EvidenceRow]:
    """What is known of these evidence ids, in the order given (absent ones left out)."""
    with pool.connection() as conn:
        rows = {row[0]: EvidenceRow(*row)
                for row in conn.execute("select * from quarry.kb_evidence_rows(%s)", (list(ids),)).fetchall()}
    return [rows[identifier] for identifier in ids if identifier in rows]


@dataclass(frozen=True, slots=True)
class FoundEvidence:
    id: str
    media_type: str
    size: int
    origin: str | None
    index_state: str
    created_at: datetime
    #: The first indexed chunk that matched the query (None without one).
    matched: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": "evidence", "media_type": self.media_type, "size": self.size,
                "source": self.origin, "index_state": self.index_state, "created_at": utc(self.created_at)}


def find_evidence(pool: ConnectionPool, *, literal: str | None, words: Sequence[str] | None, after: str | None,
                  limit: int) -> list[FoundEvidence]:
    with pool.connection() as conn:
        rows = conn.execute("select * from quarry.kb_find_evidence(%s, %s, %s, %s)",
                            (literal, list(words) if words is not None else None, after, limit)).fetchall()
    return [FoundEvidence(*row) for row in rows]


def read_range(pool: ConnectionPool, identifier: str, offset: int, length: int) -> tuple[bytes, int, str] | None:
    """Bytes ``[offset, offset+length)`` of the evidence, its size and media type; None if there is none."""
    with pool.connection() as conn:
        row = conn.execute("select * from quarry.kb_evidence_range(%s, %s, %s)",
                           (identifier, offset, length)).fetchone()
    if row is None:
        return None
    return bytes(row[0]), int(row[1]), str(row[2])
