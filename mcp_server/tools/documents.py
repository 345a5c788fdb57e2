"""``get_document``, ``get_chunk`` and ``read_document_bytes``: reading around a search result."""

from __future__ import annotations

import base64
from typing import Any

from engine.corpus.documents import (
    DocumentInfo,
    DocumentPage,
    StoredChunk,
    encode_cursor,
    get_chunk,
    get_document,
    read_document_bytes,
)
from engine.errors import InvalidRequestError
from mcp_server.bounds import DEFAULT_RESPONSE_BYTES, DEFAULT_RESPONSE_TOKENS, bounded_json, wire_size
from mcp_server.envelope import to_json
from mcp_server.limits import MAX_RESPONSE_BYTES
from mcp_server.schemas import GetChunkArgs, GetDocumentArgs, ReadDocumentBytesArgs
from mcp_server.token_budget import estimated_tokens, pack
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

#: Tokens kept for the cursor and counts a budget-ended page reports (set after packing).
_CURSOR_TOKENS = 16


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
    row: dict[str, Any] = {
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
    if chunk.resumed_from_char:
        row["resumed_from_char"] = chunk.resumed_from_char
    return row


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
    # a page ends at a line within its budget, so next_cursor resumes exactly where it stopped
    if chunks:
        _fit_budget(payload, page, args.max_tokens or DEFAULT_RESPONSE_TOKENS)
    # No chunk is ever dropped here: the cursor already points past this page.
    return bounded_json(payload, chunks)


def _fit_budget(payload: dict[str, Any], page: DocumentPage, max_tokens: int) -> None:
    """Whole lines of the page up to ``max_tokens``; the cursor resumes where they stop, inside a chunk if need be."""
    chunks: list[dict[str, Any]] = payload["chunks"]
    pack(payload, chunks, max_tokens, omitted_key="omitted_chunks", fill=True, reserve_tokens=_CURSOR_TOKENS)
    last, stored = chunks[-1], page.chunks[len(chunks) - 1]
    if last.get("truncated"):
        kept = last["content"]
        if not kept:  # a cursor to the same place would never get on
            raise InvalidRequestError(
                f"max_tokens: {max_tokens} leaves no room for the document's text after its metadata "
                f"(about {estimated_tokens(payload)} tokens); ask for at least {estimated_tokens(payload) + 100}",
                argument="max_tokens")
        if stored.content_is_bytes:  # the spans of what is here, not of the whole chunk
            last["end_line"] = stored.start_line + kept.count("\n")
            last["end_byte"] = stored.start_byte + len(kept.encode())
        resume = encode_cursor(page.document.document_id, stored.ordinal, stored.resumed_from_char + len(kept))
    elif len(chunks) < len(page.chunks):
        resume = encode_cursor(page.document.document_id, page.chunks[len(chunks)].ordinal)
    else:
        return
    payload["next_cursor"] = resume
    payload["returned_chunks"] = len(chunks)
    payload["remaining_chunks"] = page.remaining_chunks + len(page.chunks) - len(chunks) + (1 if last.get(
        "truncated") else 0)
    payload["token_budget"]["used_tokens"] = estimated_tokens(payload)


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
    return bounded_json(payload, [*before, target, *after], limit=DEFAULT_RESPONSE_BYTES)


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
        "A document and its chunks in order, a page (about 8k tokens) at a time; call again with "
        "cursor=next_cursor."
    ),
    arguments=GetDocumentArgs,
    run=run_get_document,
    cost=one_token,
    output_schema=shape({"document": "object", "chunks": "array", "next_cursor": "string?"}),
)

GET_CHUNK = ToolSpec(
    name="get_chunk",
    title="Read a chunk with its neighbours",
    description="A chunk with up to before/after neighbouring chunks and its document.",
    arguments=GetChunkArgs,
    run=run_get_chunk,
    cost=one_token,
    output_schema=shape({"chunk": "object", "before": "array", "after": "array"}),
)

READ_DOCUMENT_BYTES = ToolSpec(
    name="read_document_bytes",
    title="Read exact bytes of a document",
    description="Exact stored bytes of a document (e.g. a chunk's start_byte..end_byte): UTF-8, else base64.",
    arguments=ReadDocumentBytesArgs,
    run=run_read_document_bytes,
    cost=one_token,
    output_schema=shape({"data": "string", "encoding": "string", "end_of_document": "boolean"}),
)
