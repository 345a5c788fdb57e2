"""Delimited data (``.csv``, ``.tsv``) -> text chunks of its first rows only.

A data file is mostly values no question is asked about; what a reader searches for is
what it holds: its column names and a sample of rows. So only the head is chunked, the
header line and up to ``HEAD_ROWS`` rows after it (the document keeps the whole file,
so ``raw`` still reads back every row). Rows are packed into chunks like paragraphs;
every chunk after the first is headed by the header line, so each one still says which
column a value is in. A quoted value spanning lines counts each line as a row.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.outline import heading_label
from engine.ingest.parsers.packing import Block, pack_blocks
from engine.ingest.parsers.source_text import SourceText

__all__ = ["HEAD_ROWS", "TABULAR_EXTENSIONS", "parse_tabular"]

TABULAR_EXTENSIONS = (".csv", ".tsv")
#: Rows after the header that are chunked; the rest of a larger file is stored, not chunked.
HEAD_ROWS = 50


def parse_tabular(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a CSV or TSV file's head; raises ``ParseError`` if the file is not UTF-8 text."""
    source = SourceText(raw)
    rows = [index for index, line in enumerate(source.lines) if line.strip()][: HEAD_ROWS + 1]
    blocks = [Block(source.line_starts[index], source.line_end(index)) for index in rows]
    chunks = pack_blocks(source, blocks)
    if rows and len(chunks) > 1:
        header = (heading_label(source.lines[rows[0]]),)
        chunks[1:] = [dataclasses.replace(chunk, heading_path=header) for chunk in chunks[1:]]
    return ParsedDocument(
        title=PurePosixPath(relative_path).name, content_type="text", language=None, chunks=chunks
    )
