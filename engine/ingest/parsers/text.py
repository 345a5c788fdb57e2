"""Plain text (``.txt``, README, LICENSE, extensionless files that are not scripts) -> paragraph chunks.

Paragraphs are the runs of lines between blank lines; the packer merges them into
chunks up to the token bound. Plain text has no headings, so heading paths are empty.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.packing import Block, pack_blocks
from engine.ingest.parsers.source_text import SourceText

__all__ = ["TEXT_EXTENSIONS", "parse_text"]

TEXT_EXTENSIONS = (".txt", ".compact")  # Compact has no tree-sitter grammar on PyPI yet


def _paragraphs(source: SourceText) -> list[Block]:
    blocks: list[Block] = []
    paragraph_start = -1
    for index, line in enumerate(source.lines):
        if line.strip():
            if paragraph_start < 0:
                paragraph_start = index
        elif paragraph_start >= 0:
            blocks.append(Block(source.line_starts[paragraph_start], source.line_end(index - 1)))
            paragraph_start = -1
    if paragraph_start >= 0:
        blocks.append(Block(source.line_starts[paragraph_start], len(source.raw)))
    return blocks


def parse_text(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a plain text file; raises ``ParseError`` if it is not UTF-8 text."""
    source = SourceText(raw)
    return ParsedDocument(
        title=PurePosixPath(relative_path).stem or relative_path,
        content_type="text",
        language=None,
        chunks=pack_blocks(source, _paragraphs(source)),
    )
