"""SQL scripts -> one chunk per ``create`` of a named object, the statements between as module chunks.

Statements end at a ``;`` outside string literals, quoted identifiers, comments and
PostgreSQL dollar-quoted bodies (``$$ ... $$``, ``$fn$ ... $fn$``), so a function body's
own semicolons never cut it.

A statement creating a named object (function, procedure, view, table, type, index,
trigger, ...) is a definition with symbol path ``<module>.<object name>``
(``sql/020-search.sql``: ``create function quarry.search(...)`` ->
``sql.020-search.quarry.search``); other statements (``comment on``, ``grant``,
``insert``, ``alter``) chunk under the module's path. The ``--`` comment lines directly
above a ``create`` belong to its chunk; a comment separated from it by a blank line (a
file header) stays with the module. An unterminated literal or comment runs to the end
of the file: the text is still chunked, never rejected.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.code_regions import NamedSpan, code_document, start_with_comments
from engine.ingest.parsers.source_text import SourceText

__all__ = ["SQL_EXTENSIONS", "parse_sql", "statement_spans"]

SQL_EXTENSIONS = (".sql", ".psql", ".pgsql")

# What can hide a `;`. Identifiers may contain `$` (`a$b$`), so a dollar quote or an
# E'' string must not follow an identifier character.
_HIDING_OR_END = re.compile(
    rb"--[^\n]*|/\*|(?<![\w$])[Ee]'(?:[^'\\]|\\.|'')*(?:'|\Z)|'(?:[^']|'')*(?:'|\Z)|\"(?:[^\"]|\"\")*(?:\"|\Z)"
    rb"|(?<![\w$])\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$|;",
    re.DOTALL,
)
_BLOCK_COMMENT_EDGE = re.compile(rb"/\*|\*/")
_LEADING_COMMENTS = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.DOTALL)
_NAME_PART = re.compile(r'"(?:[^"]|"")+"|[\w$]+')
_NAME = rf"(?:{_NAME_PART.pattern})(?:\s*\.\s*(?:{_NAME_PART.pattern}))*"
_CREATE = re.compile(
    r"create\s+(?:or\s+replace\s+)?"
    r"(?:(?:temp|temporary|unlogged|materialized|unique|recursive|constraint|global|local)\s+)*"
    r"(function|procedure|view|table|index|trigger|type|domain|aggregate|schema|sequence|extension"
    r"|policy|rule|operator\s+class|operator|cast|collation|publication|subscription|event\s+trigger)\s+"
    r"(?:concurrently\s+)?(?:if\s+not\s+exists\s+)?"
    rf"({_NAME})",
    re.IGNORECASE,
)
# Words that follow the object keyword where a name was optional (`create index on t ...`).
_NOT_A_NAME = frozenset({"on", "as"})


def _block_comment_end(raw: bytes, position: int) -> int:
    """Offset just past the ``/* ... */`` opened before ``position`` (they nest in PostgreSQL)."""
    depth = 1
    for edge in _BLOCK_COMMENT_EDGE.finditer(raw, position):
        depth += 1 if edge.group() == b"/*" else -1
        if depth == 0:
            return edge.end()
    return len(raw)


def statement_spans(raw: bytes, start: int = 0) -> Iterator[tuple[int, int]]:
    """Byte spans of the statements in ``raw``: each from the previous ``;`` to its own, inclusive.

    Whatever follows the last ``;`` (a final statement without one, trailing comments)
    is the last span.
    """
    statement_start = position = start
    while True:
        match = _HIDING_OR_END.search(raw, position)
        if match is None:
            break
        token = match.group()
        if token == b";":
            yield statement_start, match.end()
            statement_start = position = match.end()
        elif token == b"/*":
            position = _block_comment_end(raw, match.end())
        elif token.startswith(b"$"):
            closing = raw.find(token, match.end())
            position = len(raw) if closing < 0 else closing + len(token)
        else:
            position = match.end()
    if raw[statement_start:].strip():
        yield statement_start, len(raw)


def _created_name(statement: str, keyword: int) -> str | None:
    """The object a ``create`` statement (its first word at ``keyword``) names (``quarry.search``), else None."""
    match = _CREATE.match(statement, keyword)
    if match is None or match.group(2).lower() in _NOT_A_NAME:
        return None
    return ".".join(part.strip('"') for part in _NAME_PART.findall(match.group(2)))


def parse_sql(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a SQL script; raises ``ParseError`` if it is not UTF-8 text."""
    source = SourceText(raw)
    definitions: list[NamedSpan] = []
    for start, end in statement_spans(raw, source.body_start):
        statement = raw[start:end].decode("utf-8")  # cut at ASCII `;`: never inside a character
        comments = _LEADING_COMMENTS.match(statement)
        name = _created_name(statement, comments.end() if comments else 0)
        if name is None:
            continue
        keyword = start + len(statement[: comments.end() if comments else 0].encode("utf-8"))
        first_line = start_with_comments(source, source.line_number(keyword) - 1, comment="--")
        definitions.append(NamedSpan(max(start, source.line_starts[first_line]), end, name))
    return code_document(relative_path, source, "sql", definitions)
