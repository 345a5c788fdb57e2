"""What the parser hands the writer: documents, their chunks' embedding inputs, and how they are written.

A ``Segment`` is a run of parsed documents; the writer looks up which of its embedding
inputs already have a vector (per ``ModelGroup``), merges segments that need no model
into one transaction, and writes a batch with the COPY helpers here. Stored vectors are
copied in SQL (``quarry.insert_reused_vectors``); only the model's new ones are sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgvector import HalfVector
from psycopg import Connection

from engine.embed.base import Embedder
from engine.ingest.model import PARSER_VERSION, ParsedDocument
from engine.ingest.parsers.tokens import count_tokens
from engine.ingest.sources import document_url
from engine.ingest.versions import VersionConstraint

if TYPE_CHECKING:  # numpy (~80 ms) is imported by what embeds: a re-ingest that changed nothing needs none
    import numpy as np

__all__ = ["EMBEDDINGS_COPY", "EMBEDDINGS_COPY_TYPES", "ModelGroup", "PendingDocument", "Segment",
           "chunk_embedding_input", "copy_chunks", "copy_documents", "embedding_input", "input_hash", "needs_model",
           "stored_vector", "write_vectors"]


@dataclass(slots=True)
class PendingDocument:
    """A changed file, parsed, waiting to be written."""

    path: str
    raw: bytes
    content_hash: bytes
    parsed: ParsedDocument
    replaces: UUID | None  # id of the stored version this one replaces
    constraints: list[VersionConstraint] = field(default_factory=list)
    manifest_kind: str | None = None  # set when the file is a dependency manifest


@dataclass(slots=True)
class Segment:
    """Documents handed from the parser to the writer, with their chunks' embedding inputs.

    ``stored`` holds, per model group, the input hashes that already have a vector (looked
    up by the writer); written together, segments are concatenated.
    """

    documents: list[PendingDocument]
    inputs: list[str]
    hashes: list[bytes]
    is_code: list[bool]
    stored: dict[int, set[bytes]] = field(default_factory=dict)

    @classmethod
    def of(cls, documents: list[PendingDocument]) -> Segment:
        inputs = [embedding_input(doc.parsed, i) for doc in documents for i in range(len(doc.parsed.chunks))]
        return cls(documents, inputs, [input_hash(text) for text in inputs],
                   [chunk.is_code for doc in documents for chunk in doc.parsed.chunks])

    def extend(self, other: Segment) -> None:
        self.documents += other.documents
        self.inputs += other.inputs
        self.hashes += other.hashes
        self.is_code += other.is_code
        for group, hashes in other.stored.items():
            self.stored.setdefault(group, set()).update(hashes)


@dataclass(frozen=True, slots=True)
class ModelGroup:
    """Physical spaces whose vectors are interchangeable: one embedder object serves them all.

    Its model runs once per input for all of them, and a vector stored in any of them is
    reused for the others.
    """

    number: int
    embedder: Embedder
    spaces: dict[str, bool]  # physical space -> holds code chunks only

    def wanted(self, segment: Segment) -> list[int]:
        """The chunks (indexes into the segment) some space of the group holds a vector for."""
        code_only = all(self.spaces.values())
        return [i for i, is_code in enumerate(segment.is_code) if is_code or not code_only]

    def holds(self, space: str, segment: Segment, index: int) -> bool:
        """Whether ``space`` (one of the group's) holds a vector for chunk ``index``."""
        return segment.is_code[index] or not self.spaces[space]


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


#: Writing vectors to quarry.embeddings (binary COPY): chunk id, space, input hash, vector.
EMBEDDINGS_COPY = "copy quarry.embeddings (chunk_id, space, input_hash, embedding) from stdin with (format binary)"
EMBEDDINGS_COPY_TYPES = ["uuid", "text", "bytea", "halfvec"]


def stored_vector(vector: np.ndarray) -> HalfVector:
    """A vector as quarry.embeddings stores it: in half precision, as the HNSW graphs hold it (alembic 0024)."""
    return HalfVector(vector)


def input_hash(text: str) -> bytes:
    """Key under which a vector of this embedding input is stored and reused."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def needs_model(groups: Sequence[ModelGroup], segment: Segment) -> bool:
    """Whether some chunk of the (looked up) segment has no stored vector in a space that holds it."""
    return any(segment.hashes[i] not in segment.stored[group.number] for group in groups for i in group.wanted(segment))


def copy_documents(conn: Connection[Any], source_id: int, base_url: str | None, url_template: str | None,
                   urls: Mapping[str, str], documents: Sequence[PendingDocument],
                   document_ids: Sequence[UUID]) -> None:
    """COPY the documents' rows (binary), under the ids given; ``urls`` overrides the source's URL rule per path."""
    with conn.cursor().copy(
        "copy quarry.documents (id, source_id, path, title, url, content_hash, raw, content_type,"
        " language, parser_version) from stdin with (format binary)"
    ) as copy:
        copy.set_types(["uuid", "int8", "text", "text", "text", "bytea", "bytea", "text", "text", "int4"])
        for doc_id, doc in zip(document_ids, documents, strict=True):
            copy.write_row((
                doc_id, source_id, doc.path, doc.parsed.title,
                urls.get(doc.path) or document_url(base_url, url_template, doc.path), doc.content_hash, doc.raw,
                doc.parsed.content_type, doc.parsed.language, PARSER_VERSION,
            ))


def copy_chunks(conn: Connection[Any], source_id: int, documents: Sequence[PendingDocument],
                document_ids: Sequence[UUID], chunk_ids: Sequence[UUID]) -> None:
    """COPY the documents' chunks (binary), in order, under the ids given."""
    with conn.cursor().copy(
        "copy quarry.chunks (id, document_id, source_id, ordinal, content, title, heading_path,"
        " symbol_path, is_code, content_type, language, start_line, end_line, start_byte, end_byte,"
        " token_estimate, document_chunks) from stdin with (format binary)"
    ) as copy:
        copy.set_types(["uuid", "uuid", "int8", "int4", "text", "text", "text[]", "text", "bool",
                        "text", "text", "int4", "int4", "int4", "int4", "int4", "int4"])
        ids = iter(chunk_ids)
        for doc_id, doc in zip(document_ids, documents, strict=True):
            for ordinal, chunk in enumerate(doc.parsed.chunks):
                copy.write_row((
                    next(ids), doc_id, source_id, ordinal, chunk.content, doc.parsed.title,
                    list(chunk.heading_path), chunk.symbol_path, chunk.is_code,
                    doc.parsed.content_type, doc.parsed.language, chunk.start_line, chunk.end_line,
                    chunk.start_byte, chunk.end_byte, count_tokens(chunk.content), len(doc.parsed.chunks),
                ))


def write_vectors(conn: Connection[Any], groups: Sequence[ModelGroup], batch: Segment,
                  chunk_ids: Sequence[UUID], fresh: Mapping[int, Mapping[bytes, np.ndarray]]) -> dict[str, int]:
    """Every chunk's vector in every space holding it: stored ones copied in SQL, the model's sent; per space, rows."""
    reused: list[tuple[int, UUID, str, bytes]] = []
    written: dict[str, int] = {}
    with conn.cursor().copy(EMBEDDINGS_COPY) as copy:
        copy.set_types(EMBEDDINGS_COPY_TYPES)
        for group in groups:
            halves: dict[bytes, HalfVector] = {}  # one conversion per vector, whichever spaces hold it
            stored, made = batch.stored[group.number], fresh[group.number]
            for space in group.spaces:
                for index in group.wanted(batch):
                    if not group.holds(space, batch, index):
                        continue
                    digest = batch.hashes[index]
                    if digest in stored:
                        reused.append((group.number, chunk_ids[index], space, digest))
                    else:
                        if digest not in halves:
                            halves[digest] = stored_vector(made[digest])
                        copy.write_row((chunk_ids[index], space, digest, halves[digest]))
                    written[space] = written.get(space, 0) + 1
    if reused:
        row = conn.execute("select quarry.insert_reused_vectors(%s, %s, %s, %s)",
                           [list(column) for column in zip(*reused, strict=True)]).fetchone()
        if row is None or row[0] != len(reused):  # never expected: staging checked every hash
            raise RuntimeError(f"stored {row[0] if row else 0} of {len(reused)} reused vectors")
    return written
