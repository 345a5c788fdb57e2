"""Code without a tree-sitter grammar (SQL, shell, Makefile, Dockerfile) -> chunks along named spans.

A parser for such a language finds its definitions (a ``create function``, a shell
function, a make rule, a build stage) as byte spans; ``code_document`` makes each span
its own chunks with symbol path ``<module>.<name>``, and the code between spans chunks
of the module's path: the shape ``engine.ingest.parsers.code`` gives tree-sitter
languages, so search and embedding treat both alike. A span over the token bound is
split on line boundaries (preferring blank lines), every piece keeping its path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from engine.ingest.model import Chunk, ParsedDocument
from engine.ingest.parsers.code import module_path
from engine.ingest.parsers.packing import Block, pack_blocks
from engine.ingest.parsers.source_text import SourceText

__all__ = ["NamedSpan", "code_document", "start_with_comments"]


@dataclass(frozen=True, slots=True)
class NamedSpan:
    """Bytes [start, end) of the raw file that define ``name``."""

    start: int
    end: int
    name: str


def start_with_comments(source: SourceText, line: int, floor: int = 0, *, comment: str = "#") -> int:
    """The first of the comment lines directly above line ``line`` (0-based), not above ``floor``.

    A comment right above a definition describes it, so it belongs to the definition's
    chunk; one separated from it by a blank line (a file header) and a shebang stay
    with the module.
    """
    lines = source.lines
    while line > floor and lines[line - 1].lstrip().startswith(comment) and not (
        line == 1 and lines[0].startswith("#!")
    ):
        line -= 1
    return line


def code_document(
    relative_path: str, source: SourceText, language: str, definitions: Iterable[NamedSpan]
) -> ParsedDocument:
    """A code document: ``definitions`` (in file order, not overlapping) and the code between them."""
    module = module_path(relative_path)
    chunks: list[Chunk] = []

    def add(start: int, end: int, symbol_path: str) -> None:
        chunks.extend(pack_blocks(source, (Block(start, end, True),), symbol_path=symbol_path or None))

    cursor = source.body_start
    for definition in definitions:
        start = max(definition.start, cursor)
        if start > cursor:
            add(cursor, start, module)
        add(start, definition.end, f"{module}.{definition.name}" if module else definition.name)
        cursor = max(cursor, definition.end)
    if len(source.raw) > cursor:
        add(cursor, len(source.raw), module)
    return ParsedDocument(
        title=PurePosixPath(relative_path).name, content_type="code", language=language, chunks=chunks
    )
