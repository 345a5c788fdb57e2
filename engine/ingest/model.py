"""What a parser hands to the ingestion pipeline: a parsed document and its chunks.

Parsers are pure functions ``(path, raw bytes) -> ParsedDocument``; they never touch
the database. Spans index into the *raw bytes* of the file so a client can read the
exact original text back (``documents.raw[start_byte:end_byte]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Upper bound for one chunk, in estimated model tokens. The local embedder reads at
#: most 256 word pieces; keeping chunks under that means nothing is silently truncated.
MAX_CHUNK_TOKENS = 240

_TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")


def estimate_tokens(text: str) -> int:
    """Cheap upper-leaning estimate of word-piece tokens (words, punctuation, long words count extra)."""
    count = 0
    for match in _TOKEN_PATTERN.finditer(text):
        count += 1 + len(match.group()) // 8
    return count


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrievable piece of a document, in document order."""

    content: str
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    start_byte: int  # offset into the raw file bytes, inclusive
    end_byte: int  # offset into the raw file bytes, exclusive
    heading_path: tuple[str, ...] = ()  # docs: enclosing headings, outermost first
    symbol_path: str | None = None  # code: e.g. "engine.search.HybridSearch.run"
    is_code: bool = False  # code chunk (source file or a code block inside docs)


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A parsed file: its title, what it is, and its chunks in order."""

    title: str
    content_type: str  # markdown | rst | html | text | code
    language: str | None  # programming language for code ("python", "rust", ...), else None
    chunks: list[Chunk] = field(default_factory=list)
    #: The text the chunks' spans index when it is not the file's own bytes (a PDF's or a DOCX's
    #: extracted text): stored as the document's raw, so ``raw[start_byte:end_byte]`` is a chunk's
    #: text for every document. The content hash stays the file's, for change detection.
    text: bytes | None = None

#: Bump when parsing, chunking, what a chunk is embedded as, or what ingestion extracts
#: (version constraints: 3; links and imports: 4; unfenced code in Markdown: 5; SQL, shell,
#: Dockerfile, Makefile, config and CSV parsers: 6; PDF and DOCX, DocBook navigation tables: 7)
#: changes, so unchanged files are re-read once (and re-embedded only where their embedding input
#: changed).
PARSER_VERSION = 7
