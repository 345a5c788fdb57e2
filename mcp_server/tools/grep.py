"""``grep``: exact substrings or regular expressions over the stored text, with exact lines and match spans."""

from __future__ import annotations

from pydantic import BaseModel, Field

from engine.retrieval.grep import MAX_PATTERN_CHARS, grep
from engine.retrieval.pipeline import check_version_ranges
from engine.retrieval.request import DEFAULT_CONTEXT_LINES, DEFAULT_GREP_LIMIT, MAX_CONTEXT_LINES, MAX_GREP_LIMIT
from mcp_server import limits
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, Filters
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape


class GrepArgs(BaseModel):
    model_config = _STRICT

    pattern: str = Field(min_length=1, max_length=MAX_PATTERN_CHARS)
    regex: bool = Field(default=False)
    case_sensitive: bool = Field(default=True)
    filters: Filters | None = Field(default=None)
    context_lines: int = Field(default=DEFAULT_CONTEXT_LINES, ge=0, le=MAX_CONTEXT_LINES)
    limit: int = Field(default=DEFAULT_GREP_LIMIT, ge=1, le=MAX_GREP_LIMIT)
    cursor: str | None = Field(default=None, min_length=1, max_length=limits.MAX_CURSOR_CHARS)


def run_grep(context: ToolContext, args: GrepArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    check_version_ranges(context.backend.pool, filters)
    page = grep(context.backend.pool, args.pattern, regex=args.regex, case_sensitive=args.case_sensitive,
                filters=filters or None, cursor=args.cursor, limit=args.limit, context_lines=args.context_lines)
    payload = {**page.as_payload(), "ordered_by": "source, path, line"}
    return bounded_json(payload, [], droppable=[payload["matches"]], dropped_key="omitted_matches")


GREP = ToolSpec(
    name="grep",
    title="Find exact text or a regular expression",
    description=(
        "Lines with an exact substring or (regex) a Postgres regular expression, with match spans; "
        "next_cursor pages."
    ),
    arguments=GrepArgs,
    run=run_grep,
    cost=one_token,
    output_schema=shape({"matches": "array", "next_cursor": "string?", "ordered_by": "string"}),
)
