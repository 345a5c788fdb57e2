"""Exact and regular-expression search over stored text: ``grep``, in (source, path, line) order with a cursor.

There is no trigram index on the embedded server (it ships no pg_trgm), so a grep scans documents
in order, a batch per statement (``quarry.grep_documents`` then ``quarry.grep_lines``, sql/045-grep.sql),
each statement under a timeout, and stops at the page size or at its time budget. Either way the
page carries a cursor to go on from; ``truncated`` says the budget, not the corpus, ended the page.
Patterns are Postgres's: substrings, or with ``regex`` its advanced regular expressions (ARE).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError, LimitError
from engine.retrieval.request import (
    DEFAULT_CONTEXT_LINES,
    DEFAULT_GREP_LIMIT,
    MAX_CONTEXT_LINES,
    MAX_GREP_LIMIT,
    Filters,
    filters_json,
)

MAX_PATTERN_CHARS = 1000
#: Wall time one grep call may scan for before it returns what it found and a cursor.
TIME_BUDGET_S = 2.0
#: Documents read per statement, halved when a statement runs out of time.
DOCUMENT_BATCH = 200
#: A matching line is cut to this many characters around the match (minified files have huge lines).
MAX_LINE_CHARS = 400
#: Characters of matched lines and context one page holds at most: it ends early (with its cursor)
#: rather than have a response bound drop matches the cursor has passed.
MAX_PAGE_CHARS = 120_000


@dataclass(frozen=True, slots=True)
class GrepMatch:
    source_slug: str
    path: str
    #: 1-based line in the document (in the extracted text for HTML)
    line: int
    text: str
    #: the match in ``text``, 0-based [start, end) character offsets
    start: int
    end: int
    before: list[str]
    after: list[str]
    document_id: UUID
    chunk_id: UUID
    #: characters cut from the start of the line to keep the match in view (0: none)
    cut_before: int = 0

    @property
    def size(self) -> int:
        """Characters this match adds to a response, roughly."""
        return 200 + len(self.path) + len(self.text) + sum(len(line) + 4 for line in (*self.before, *self.after))

    def as_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "source": self.source_slug, "path": self.path, "line": self.line, "text": self.text,
            "match": {"start": self.start, "end": self.end}, "before": self.before, "after": self.after,
            "document_id": str(self.document_id), "chunk_id": str(self.chunk_id),
        }
        if self.cut_before:
            row["cut_before"] = self.cut_before
        return row


@dataclass(slots=True)
class GrepPage:
    matches: list[GrepMatch]
    #: where the next call goes on from (None: nothing left)
    next_cursor: str | None
    #: the time budget ended the scan before the page filled or the corpus ended
    truncated: bool
    documents_scanned: int
    notes: list[str] = field(default_factory=list)

    def as_payload(self) -> dict[str, Any]:
        """The page as MCP's grep and ``quarry grep --json`` return it."""
        matches = [match.as_row() for match in self.matches]
        return {"matches": matches, "match_count": len(matches), "next_cursor": self.next_cursor,
                "truncated": self.truncated, "documents_scanned": self.documents_scanned, "notes": self.notes}


@dataclass(frozen=True, slots=True)
class _Position:
    """The last line read: (source slug, path, line)."""

    source: str
    path: str
    line: int


#: Before every document ((slug, path) >= ('', '') holds for all).
_START = _Position("", "", 0)


def grep(
    pool: ConnectionPool,
    pattern: str,
    *,
    regex: bool = False,
    case_sensitive: bool = True,
    filters: Filters | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_GREP_LIMIT,
    context_lines: int = DEFAULT_CONTEXT_LINES,
    time_budget_s: float = TIME_BUDGET_S,
) -> GrepPage:
    """The first ``limit`` lines matching ``pattern`` after ``cursor``, in (source, path, line) order."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidRequestError(f"pattern must have 1-{MAX_PATTERN_CHARS} characters", argument="pattern")
    if "\x00" in pattern:
        raise InvalidRequestError("pattern must not contain NUL", argument="pattern")
    if not 1 <= limit <= MAX_GREP_LIMIT:
        raise InvalidRequestError(f"limit must be between 1 and {MAX_GREP_LIMIT}", argument="limit")
    if not 0 <= context_lines <= MAX_CONTEXT_LINES:
        raise InvalidRequestError(f"context_lines must be between 0 and {MAX_CONTEXT_LINES}",
                                  argument="context_lines")
    filters_text = filters_json(filters)
    query_key = _query_key(pattern, regex, case_sensitive, filters_text)
    position = _decode_cursor(cursor, query_key) if cursor is not None else _START
    deadline = time.monotonic() + time_budget_s
    matches: list[GrepMatch] = []
    scanned = 0
    page_chars = 0
    batch = DOCUMENT_BATCH
    with pool.connection() as conn:
        if regex:
            _check_regex(conn, pattern)
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return GrepPage(matches, _cursor_at(position, query_key), True, scanned,
                                [f"stopped after {time_budget_s:g} s of scanning: pass next_cursor to go on"])
            try:
                with conn.transaction():
                    conn.execute("select set_config('statement_timeout', %s, true)", (str(remaining_ms),))
                    documents = conn.execute(
                        "select document_id, source_slug, path from quarry.grep_documents(%s::jsonb, %s, %s, %s)",
                        (filters_text, position.source, position.path, batch)).fetchall()
                    if not documents:
                        return GrepPage(matches, None, False, scanned)
                    by_id = {row[0]: (row[1], row[2]) for row in documents}
                    skip = next((row[0] for row in documents if (row[1], row[2]) == (position.source, position.path)),
                                None)
                    rows = conn.execute(
                        "select document_id, chunk_id, line, line_text, match_start, match_end, before, after"
                        " from quarry.grep_lines(%s, %s, %s, %s, %s::jsonb, %s, %s, %s)",
                        (pattern, list(by_id), regex, case_sensitive, filters_text, skip,
                         position.line if skip else 0, context_lines)).fetchall()
            except psycopg.errors.QueryCanceled:
                if matches or scanned:
                    # this call made progress: the next one goes on from here with a whole budget
                    return GrepPage(matches, _cursor_at(position, query_key), True, scanned,
                                    [f"stopped after {time_budget_s:g} s of scanning: pass next_cursor to go on"])
                if batch == 1:
                    raise LimitError(
                        "the pattern takes longer than the time budget to match a single document; use a "
                        "more specific pattern (a literal substring is cheapest) or narrow with filters.path"
                    ) from None
                batch = max(1, batch // 2)
                continue
            found = sorted((_match(row, by_id) for row in rows), key=lambda m: (m.source_slug, m.path, m.line))
            scanned += len(documents) - (1 if skip else 0)
            for match in found:
                if matches and page_chars + match.size > MAX_PAGE_CHARS:
                    last = matches[-1]
                    return GrepPage(matches, _cursor_at(_Position(last.source_slug, last.path, last.line), query_key),
                                    False, scanned, ["the page is full (by size): pass next_cursor for more"])
                matches.append(match)
                page_chars += match.size
                if len(matches) == limit:
                    return GrepPage(matches, _cursor_at(_Position(match.source_slug, match.path, match.line),
                                                        query_key), False, scanned)
            last_source, last_path = documents[-1][1], documents[-1][2]
            if len(documents) < batch:
                return GrepPage(matches, None, False, scanned)
            # the last document was read whole: go on after it
            position = _Position(last_source, last_path, 2**31 - 1)


def _check_regex(conn: psycopg.Connection[Any], pattern: str) -> None:
    try:
        with conn.transaction():
            conn.execute("select '' ~ %s", (pattern,))
    except psycopg.errors.InvalidRegularExpression as error:
        # Postgres's message names the fault (e.g. "parentheses () not balanced"), not the pattern
        detail = str(error.diag.message_primary or "invalid regular expression")
        raise InvalidRequestError(f"pattern is not a valid regular expression: {detail}", argument="pattern",
                                  rule=detail) from None


def _match(row: Sequence[Any], documents: Mapping[UUID, tuple[str, str]]) -> GrepMatch:
    document_id, chunk_id, line, text, start, end, before, after = row
    source, path = documents[document_id]
    cut = 0
    if len(text) > MAX_LINE_CHARS:
        # keep the match in view: a window around it, its offsets moved with it
        cut = max(0, min(start - MAX_LINE_CHARS // 4, len(text) - MAX_LINE_CHARS))
        text = text[cut:cut + MAX_LINE_CHARS]
        start, end = start - cut, min(end - cut, MAX_LINE_CHARS)
    return GrepMatch(source, path, line, text, start, end,
                     [context[:MAX_LINE_CHARS] for context in before or []],
                     [context[:MAX_LINE_CHARS] for context in after or []], document_id, chunk_id, cut)


def _query_key(pattern: str, regex: bool, case_sensitive: bool, filters_text: str | None) -> str:
    material = json.dumps([pattern, regex, case_sensitive, filters_text])
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def _cursor_at(position: _Position, query_key: str) -> str:
    raw = json.dumps({"s": position.source, "p": position.path, "l": position.line, "q": query_key})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_cursor(cursor: str, query_key: str) -> _Position:
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        position = _Position(str(raw["s"]), str(raw["p"]), int(raw["l"]))
        key = raw["q"]
    except (ValueError, KeyError, TypeError):
        raise InvalidRequestError("cursor is not one this tool returned", argument="cursor") from None
    if key != query_key:
        raise InvalidRequestError("cursor belongs to another pattern or other filters: start without one",
                                  argument="cursor")
    return position
