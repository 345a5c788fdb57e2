"""Invariants every parser's chunks must satisfy, shared by the parser tests."""

from __future__ import annotations

from engine.ingest.model import MAX_CHUNK_TOKENS, ParsedDocument, estimate_tokens


def assert_bounded_chunks(document: ParsedDocument) -> None:
    """Non-empty chunks within the token bound, with sane line numbers (all parsers)."""
    for chunk in document.chunks:
        assert chunk.content.strip(), chunk
        assert estimate_tokens(chunk.content) <= MAX_CHUNK_TOKENS, chunk
        assert 1 <= chunk.start_line <= chunk.end_line, chunk
        assert 0 <= chunk.start_byte < chunk.end_byte, chunk


def assert_exact_chunks(raw: bytes, document: ParsedDocument) -> None:
    """Chunks are exact, ordered, non-overlapping slices of ``raw`` (all but HTML)."""
    assert_bounded_chunks(document)
    previous_end = 0
    for chunk in document.chunks:
        assert raw[chunk.start_byte : chunk.end_byte].decode("utf-8") == chunk.content, chunk
        assert chunk.start_byte >= previous_end, chunk
        assert chunk.start_line == raw.count(b"\n", 0, chunk.start_byte) + 1, chunk
        assert chunk.end_line == chunk.start_line + chunk.content.count("\n"), chunk
        previous_end = chunk.end_byte
