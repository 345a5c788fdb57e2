"""The server's limits, in one place: the schemas enforce them and ``status`` reports them."""

from __future__ import annotations

from typing import Final

from engine.corpus.documents import MAX_BYTE_RANGE, MAX_NEIGHBOURS, PAGE_CHUNKS, PAGE_CONTENT_BYTES

MAX_RESPONSE_BYTES: Final = 256 * 1024
"""Serialised size of one tool result, at most; long content is truncated to fit."""

MAX_RESULTS: Final = 50
MAX_QUERIES: Final = 10
MAX_QUERY_CHARS: Final = 8_000
"""A query, at most: room for a GitHub issue or a stack trace. The keyword leg reads all of it; an
embedding model reads what its input length allows (the local model: 256 tokens, ~1,000 characters)."""
MAX_RERANK_INSTRUCTIONS: Final = 400
MAX_FACET_VALUES: Final = 200
MAX_FACET_VALUE_CHARS: Final = 200
MAX_FILTER_VALUES: Final = 50
MAX_VERSION_RANGE_CHARS: Final = 200
MAX_PREFIX_CHARS: Final = 100
MAX_CURSOR_CHARS: Final = 200
MAX_REQUEST_BYTES: Final = 1024 * 1024
"""HTTP request body size, at most (the SDK's default is 4 MiB; no valid call needs 1)."""

__all__ = [
    "MAX_BYTE_RANGE",
    "MAX_CURSOR_CHARS",
    "MAX_FACET_VALUES",
    "MAX_FACET_VALUE_CHARS",
    "MAX_FILTER_VALUES",
    "MAX_NEIGHBOURS",
    "MAX_PREFIX_CHARS",
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "MAX_REQUEST_BYTES",
    "MAX_RERANK_INSTRUCTIONS",
    "MAX_RESPONSE_BYTES",
    "MAX_RESULTS",
    "MAX_VERSION_RANGE_CHARS",
    "PAGE_CHUNKS",
    "PAGE_CONTENT_BYTES",
    "as_dict",
]


def as_dict() -> dict[str, int]:
    """Limits as ``status`` reports them."""
    return {
        "max_response_bytes": MAX_RESPONSE_BYTES,
        "max_results": MAX_RESULTS,
        "max_queries": MAX_QUERIES,
        "max_query_chars": MAX_QUERY_CHARS,
        "max_rerank_instructions_chars": MAX_RERANK_INSTRUCTIONS,
        "max_filter_values_per_rule": MAX_FILTER_VALUES,
        "max_version_range_chars": MAX_VERSION_RANGE_CHARS,
        "max_facet_values": MAX_FACET_VALUES,
        "max_neighbours": MAX_NEIGHBOURS,
        "max_byte_range": MAX_BYTE_RANGE,
        "document_page_chunks": PAGE_CHUNKS,
        "document_page_content_bytes": PAGE_CONTENT_BYTES,
        "max_request_bytes": MAX_REQUEST_BYTES,
    }
