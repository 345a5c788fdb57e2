"""``get_document``, ``get_chunk`` and ``read_document_bytes``: reading around a search result."""

from __future__ import annotations

import base64
from typing import Any

from engine.corpus.documents import (
    MAX_BYTE_RANGE,
    PAGE_CHUNKS,
    DocumentInfo,
    StoredChunk,
    get_chunk,
    get_document,
    read_document_bytes,
)
from mcp_server.bounds import bounded_json, wire_size
from mcp_server.envelope import to_json
from mcp_server.limits import MAX_RESPONSE_BYTES
from mcp_server.schemas import GetChunkArgs, GetDocumentArgs, ReadDocumentBytesArgs
from mcp_server.tools import ToolContext, ToolSpec, one_token


def _document(info: DocumentInfo) -> dict[str, Any]:
    return {
        "document_id": str(info.document_id),
        "title": info.title,
        "path": info.path,
        "url": info.url,
        "source": {"slug": info.source_slug, "display_name": info.source_name, "kind": info.source_kind},
        "content_type": info.content_type,
        "language": info.language,
        "package": info.package,
        "deprecated": info.deprecated,
        "size_bytes": info.size_bytes,
        "chunk_count": info.chunk_count,
        "first_seen_at": info.first_seen_at.isoformat(),
        "changed_at": info.changed_at.isoformat(),
    }


def _chunk(chunk: StoredChunk) -> dict[str, Any]:
    return {
        "chunk_id": str(chunk.chunk_id),
        "ordinal": chunk.ordinal,
        "heading_path": chunk.heading_path,
        "symbol_path": chunk.symbol_path,
        "start_line": chunk.start_line,
        "end_line": chunk.end_line,
        "start_byte": chunk.start_byte,
        "end_byte": chunk.end_byte,
        "content": chunk.content,
    }


def run_get_document(context: ToolContext, args: GetDocumentArgs) -> str:
    page = get_document(context.backend.pool, args.document_id, args.cursor)
    chunks = [_chunk(chunk) for chunk in page.chunks]
    payload: dict[str, Any] = {
        "document": _document(page.document),
        "chunks": chunks,
        "returned_chunks": len(chunks),
        "remaining_chunks": page.remaining_chunks,
        "next_cursor": page.next_cursor,
        "truncated": False,
    }
    # No chunk is ever dropped here: the cursor already points past this page.
    return bounded_json(payload, chunks)


def run_get_chunk(context: ToolContext, args: GetChunkArgs) -> str:
    found = get_chunk(context.backend.pool, args.chunk_id, args.before, args.after)
    before = [_chunk(chunk) for chunk in found.before]
    target = _chunk(found.chunk)
    after = [_chunk(chunk) for chunk in found.after]
    payload: dict[str, Any] = {
        "document": _document(found.document),
        "chunk": target,
        "before": before,
        "after": after,
        "truncated": False,
    }
    return bounded_json(payload, [*before, target, *after])


def run_read_document_bytes(context: ToolContext, args: ReadDocumentBytesArgs) -> str:
    found = read_document_bytes(context.backend.pool, args.document_id, args.offset, args.length)
    payload: dict[str, Any] = {
        "document_id": str(found.document_id),
        "offset": found.offset,
        "length": len(found.data),
        "total_bytes": found.total_bytes,
        "end_of_document": found.end_of_document,
        "sha256": found.sha256,  # of these bytes
        "document_sha256": found.document_sha256,  # of the whole file, as ingested
    }
    try:
        text = found.data.decode("utf-8")
        payload |= {"encoding": "utf-8", "data": text}
        # Escaping can grow text several-fold (control characters); base64 never needs escaping.
        if wire_size(to_json(payload)) <= MAX_RESPONSE_BYTES // 2:
            return to_json(payload)
    except UnicodeDecodeError:
        pass  # a range that cuts a character, or binary content: exact bytes as base64
    payload |= {"encoding": "base64", "data": base64.b64encode(found.data).decode("ascii")}
    return to_json(payload)


GET_DOCUMENT = ToolSpec(
    name="get_document",
    title="Read a document page by page",
    description=(
        "A document's metadata (title, path, url, source, content type, size) and its chunks in order, "
        f"{PAGE_CHUNKS} chunks or about 128 KB per page. Pass a document_id from a search result; when "
        "next_cursor is not null, call again with cursor=next_cursor for the next page (remaining_chunks says "
        "how many are left). Each chunk has its heading_path or symbol_path, line span and byte span."
    ),
    arguments=GetDocumentArgs,
    run=run_get_document,
    cost=one_token,
)

GET_CHUNK = ToolSpec(
    name="get_chunk",
    title="Read a chunk with its neighbours",
    description=(
        "One chunk by chunk_id (from a search result) with up to `before` preceding and `after` following "
        "chunks of the same document (0-20 each), in document order, plus the document's metadata. Use it "
        "to see the context around a search hit without reading the whole document."
    ),
    arguments=GetChunkArgs,
    run=run_get_chunk,
    cost=one_token,
)

READ_DOCUMENT_BYTES = ToolSpec(
    name="read_document_bytes",
    title="Read exact bytes of a document",
    description=(
        f"Exactly the stored bytes [offset, offset+length) of a document (length 1-{MAX_BYTE_RANGE}), e.g. a "
        "chunk's start_byte/end_byte span from get_chunk or get_document, or the original text of a long "
        "chunk that was truncated. data is UTF-8 text (encoding='utf-8') when the range decodes as UTF-8, "
        "else base64 (encoding='base64'). total_bytes and end_of_document tell how much is left."
    ),
    arguments=ReadDocumentBytesArgs,
    run=run_read_document_bytes,
    cost=one_token,
)
