"""``grep``: exact substrings or regular expressions over the stored text, with exact lines and match spans."""

from __future__ import annotations

from pydantic import BaseModel, Field

from engine.retrieval.grep import (
    DEFAULT_CONTEXT_LINES,
    DEFAULT_GREP_LIMIT,
    MAX_CONTEXT_LINES,
    MAX_GREP_LIMIT,
    MAX_PATTERN_CHARS,
    grep,
)
from engine.retrieval.pipeline import check_version_ranges
from mcp_server import limits
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, Filters
from mcp_server.tools import ToolContext, ToolSpec, one_token


class GrepArgs(BaseModel):
    model_config = _STRICT

    pattern: str = Field(min_length=1, max_length=MAX_PATTERN_CHARS,
                         description="A substring to find as written (e.g. parse_user_id, CREATE INDEX CONCURRENTLY), "
                         "or with regex=true a Postgres regular expression (e.g. ^\\s*def (load|save)\\().")
    regex: bool = Field(default=False, description="Treat pattern as a regular expression.")
    case_sensitive: bool = Field(default=True, description="false: match regardless of case.")
    filters: Filters | None = Field(default=None, description="As in advanced_search, e.g. "
                                    "{\"path\": {\"any_of\": [\"src/**/*.py\"]}}.")
    context_lines: int = Field(default=DEFAULT_CONTEXT_LINES, ge=0, le=MAX_CONTEXT_LINES,
                               description="Lines before and after each match (within its chunk).")
    limit: int = Field(default=DEFAULT_GREP_LIMIT, ge=1, le=MAX_GREP_LIMIT, description="Matching lines to return.")
    cursor: str | None = Field(default=None, min_length=1, max_length=limits.MAX_CURSOR_CHARS,
                               description="next_cursor of the previous page (same pattern and filters).")


def run_grep(context: ToolContext, args: GrepArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    check_version_ranges(context.backend.pool, filters)
    page = grep(context.backend.pool, args.pattern, regex=args.regex, case_sensitive=args.case_sensitive,
                filters=filters or None, cursor=args.cursor, limit=args.limit, context_lines=args.context_lines)
    payload = page.as_payload()
    return bounded_json(payload, [], droppable=[payload["matches"]], dropped_key="omitted_matches")


GREP = ToolSpec(
    name="grep",
    title="Find exact text or a regular expression",
    description=(
        "Every line holding an exact substring (identifiers, error messages, SQL) or, with regex=true, matching a "
        "Postgres regular expression, in source, path and line order: source, path, line, text, match "
        "{start, end} (character offsets in text), context lines, document_id and chunk_id. Narrow with filters "
        "(path globs, symbol, source_slug, language, ...; symbol and chunk_kind hold for a line's own chunk). "
        "Pages end at limit, by size or after a 2 s scan (truncated: true); pass next_cursor to go on. Use "
        "search for questions; grep for exact text."
    ),
    arguments=GrepArgs,
    run=run_grep,
    cost=one_token,
)
