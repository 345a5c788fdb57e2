"""``suggest_query_params``: filters, facet values and the tool to use for a question asked of one source."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, StringConstraints

from engine.retrieval.suggestions import Suggestion, suggest_query_params
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, QueryText
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

SourceSlug = Annotated[str, StringConstraints(min_length=1, max_length=63)]


class SuggestQueryParamsArgs(BaseModel):
    model_config = _STRICT

    source: SourceSlug
    user_query: QueryText


def suggested_arguments(suggestion: Suggestion, query: str) -> dict[str, Any]:
    """Arguments for the recommended tool, ready to pass."""
    if suggestion.recommended_tool == "count":
        return {"query_text": query, "filters": suggestion.filters}
    if suggestion.recommended_tool == "query_documents":
        return {"query_text": query, "filters": suggestion.filters, "top_k": 3}
    return {"queries": [query], "filters": suggestion.filters}


def run_suggest_query_params(context: ToolContext, args: SuggestQueryParamsArgs) -> str:
    suggestion = suggest_query_params(context.backend.pool, args.source, args.user_query)
    values = list(suggestion.available_values.values())
    payload: dict[str, Any] = {
        "source": suggestion.source,
        "suggested_filters": suggestion.filters,
        "recommended_tool": suggestion.recommended_tool,
        "use_count_tool": suggestion.use_count_tool,
        "suggested_arguments": suggested_arguments(suggestion, args.user_query),
        "selective_terms": suggestion.selective_terms,
        "explanation": "; ".join(suggestion.explanation),
        "available_values": suggestion.available_values,
        "truncated": False,
    }
    return bounded_json(payload, [], droppable=values, dropped_key="omitted_values")


SUGGEST_QUERY_PARAMS = ToolSpec(
    name="suggest_query_params",
    title="Suggest filters and a tool for a question",
    description="Filters, a tool and ready arguments for a question asked of one source.",
    arguments=SuggestQueryParamsArgs,
    run=run_suggest_query_params,
    cost=one_token,
    output_schema=shape({"suggested_filters": "object", "recommended_tool": "string", "suggested_arguments": "object"}),
)
