"""``count``: how many documents a question is about (or, naming no subject, pass the filters)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from engine.embed.base import TEXT_SPACE
from engine.retrieval.counting import SIMILARITY_FLOOR, DocumentCount, count_documents
from engine.retrieval.degradation import Degradation, embed_queries
from engine.retrieval.pipeline import check_version_ranges
from engine.retrieval.request import Filters as EngineFilters
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, Filters, QueryText
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape


class CountArgs(BaseModel):
    model_config = _STRICT

    query_text: QueryText = Field(description="What the documents are about; 'document' counts all.")
    filters: Filters | None = Field(default=None)


def count_payload(context: ToolContext, query: str, filters: EngineFilters | None) -> dict[str, Any]:
    """The ``count`` response (small: no size bound needed beyond the sample of five)."""
    check_version_ranges(context.backend.pool, filters)
    degradation = Degradation()

    def embed(text: str) -> list[float] | None:
        vectors = embed_queries(context.backend, TEXT_SPACE, [text], degradation)
        return list(vectors[0]) if vectors is not None else None

    counted = count_documents(context.backend.pool, query, embed=embed, filters=filters)
    payload: dict[str, Any] = {
        "count": counted.count,
        "truncated": counted.truncated,
        "bound": counted.bound,
        "method": counted.method,
        "selective_terms": counted.selective_terms,
        "keyword_documents": counted.keyword_documents,
        "vector_documents": counted.vector_documents,
        "explanation": _explain(counted),
        "sample": _sample(context, counted.sample),
        **degradation.fields(),
    }
    if filters:
        payload["filters"] = filters
    return payload


def run_count(context: ToolContext, args: CountArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    payload = count_payload(context, args.query_text, filters or None)
    return bounded_json(payload, [], droppable=[payload["sample"]], dropped_key="omitted_sample")


def _explain(counted: DocumentCount) -> str:
    if counted.method == "metadata":
        return ("the query names no subject (only words such as 'document', 'how many', 'mention', or terms in "
                "most chunks), so every document passing the filters was counted, exactly")
    legs = (f"a chunk holds every selective term ({', '.join(counted.selective_terms)})"
            + (f" or is among the nearest {counted.bound} chunks with cosine similarity >= {SIMILARITY_FLOOR}"
               if counted.method == "hybrid" else " (keyword only: the query embedding failed)"))
    bound = (f"; a leg reached its bound of {counted.bound}, so at least this many match"
             if counted.truncated else "")
    return f"documents where {legs}, each counted once{bound}"


def _sample(context: ToolContext, document_ids: tuple[UUID, ...]) -> list[dict[str, Any]]:
    if not document_ids:
        return []
    with context.backend.pool.connection() as conn:
        rows = conn.execute(
            "select d.id, d.title, d.path, s.slug from quarry.documents d join quarry.sources s on s.id = d.source_id"
            " where d.id = any (%s)", (list(document_ids),)).fetchall()
    found = {row[0]: {"document_id": str(row[0]), "title": row[1], "path": row[2], "source": row[3]} for row in rows}
    return [found[document_id] for document_id in document_ids if document_id in found]


COUNT = ToolSpec(
    name="count",
    title="Count the documents about something",
    description=(
        "How many documents are about query_text (each once; truncated: at least count). For 'how many' "
        "questions."
    ),
    arguments=CountArgs,
    run=run_count,
    cost=one_token,
    output_schema=shape({"count": "integer", "truncated": "boolean"}),
)
