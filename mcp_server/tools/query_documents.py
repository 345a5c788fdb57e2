"""``query_documents``: search, rerank, then return whole documents instead of chunks."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, Field

from engine.corpus.whole_documents import DEFAULT_CHUNKS_PER_DOCUMENT, MAX_CHUNKS_PER_DOCUMENT, merged_documents
from engine.retrieval.pipeline import Retrieval, retrieve
from engine.retrieval.request import Filters as EngineFilters
from engine.retrieval.request import SearchRequest
from mcp_server.bounds import bounded_json, response_limit
from mcp_server.envelope import to_json
from mcp_server.schemas import _STRICT, MAX_TOKENS_DESCRIPTION, Filters, QueryText
from mcp_server.token_budget import CHARS_PER_TOKEN, MAX_TOKENS, MIN_TOKENS, estimated_tokens, pack
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

MAX_DOCUMENTS = 20


class QueryDocumentsArgs(BaseModel):
    model_config = _STRICT

    query_text: QueryText
    filters: Filters | None = Field(default=None)
    top_k: int = Field(default=5, ge=1, le=MAX_DOCUMENTS)
    max_chunks_per_document: int = Field(default=DEFAULT_CHUNKS_PER_DOCUMENT, ge=1, le=MAX_CHUNKS_PER_DOCUMENT)
    max_tokens: int | None = Field(default=None, ge=MIN_TOKENS, le=MAX_TOKENS, description=MAX_TOKENS_DESCRIPTION)


def whole_documents(context: ToolContext, query: str, filters: EngineFilters | None, top_k: int,
                    max_chunks: int) -> tuple[Retrieval, list[dict[str, Any]]]:
    """The retrieval and its top ``top_k`` documents, best first, each whole (``content``: merged chunks)."""
    # the documents advanced_search's group_by='document' returns (engine.retrieval.grouping)
    retrieval = retrieve(context.backend, SearchRequest((query,), limit=top_k, filters=filters, group_by="document"))
    chosen = retrieval.documents or []
    merged = merged_documents(context.backend.pool, [document.document_id for document in chosen], max_chunks)
    documents: list[dict[str, Any]] = []
    for document in chosen:
        whole = merged.get(document.document_id)
        if whole is None:  # deleted since the search
            continue
        row = document.best.as_row()
        documents.append({
            "rank": len(documents) + 1,
            "document_id": row["document_id"],
            "title": row["title"],
            "path": row["path"],
            "url": row["url"],
            "source": row["source"],
            "content_type": row["content_type"],
            "language": row["language"],
            "score": round(document.score, 4),
            "best_score": row["confidence"],
            "best_chunk_id": row["chunk_id"],
            "matched_chunks": len(document.chunks),
            "chunk_count": whole.chunk_count,
            "merged_chunks": whole.merged_chunks,
            "trust_score": row["trust_score"],
            "confidence_factors": row["confidence_factors"],
            "reranked": row["reranked"],
            "content": whole.content,
        })
    return retrieval, documents


def bounded_documents(payload: dict[str, Any], documents: list[dict[str, Any]], limit: int) -> str:
    """``payload`` within ``limit`` bytes, its documents' ``content`` cut fairly and renamed ``merged_content``."""
    # bounded_json cuts fields named `content`; a document's field is `merged_content`, a few bytes longer
    # each, so the bound is taken that much tighter before renaming
    text = bounded_json(payload, documents, droppable=[documents], dropped_key="omitted_documents",
                        limit=limit - 32 * MAX_DOCUMENTS)
    bounded = json.loads(text)
    for document in bounded["documents"]:
        document["merged_content"] = document.pop("content")
    if "token_budget" in bounded:
        bounded["token_budget"]["used_tokens"] = estimated_tokens(bounded)
    return to_json(bounded)


def run_query_documents(context: ToolContext, args: QueryDocumentsArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    retrieval, documents = whole_documents(context, args.query_text, filters or None, args.top_k,
                                           args.max_chunks_per_document)
    payload: dict[str, Any] = {
        "documents": documents,
        "document_count": len(documents),
        "chunks_retrieved": len(retrieval.hits),
        "ordered_by": "score (a document's best chunk's score plus a little per further matching chunk)",
        **retrieval.status(),
        "truncated": False,
    }
    if retrieval.rerank.note:
        payload["notes"] = [retrieval.rerank.note]
    if filters:
        payload["filters"] = filters
    if args.max_tokens is not None:
        # room for renaming each document's content to merged_content, below
        pack(payload, documents, args.max_tokens, omitted_key="omitted_documents",
             reserve_tokens=math.ceil(len("merged_") * len(documents) / CHARS_PER_TOKEN))
    return bounded_documents(payload, documents, response_limit(args.max_tokens))


QUERY_DOCUMENTS = ToolSpec(
    name="query_documents",
    title="Search and read whole documents",
    description="Search, then the top_k whole documents best first (merged_content), cut to the response budget.",
    arguments=QueryDocumentsArgs,
    run=run_query_documents,
    cost=one_token,
    output_schema=shape({"documents": "array", "ordered_by": "string", "truncated": "boolean"}),
)
