"""Parsers: ``parse_document(relative_path, raw) -> ParsedDocument`` by file extension.

=================================  ===========  ======================================
extensions                         module       chunks along
=================================  ===========  ======================================
.md .markdown .mdx                 markdown     ATX/setext headings; fences kept whole
.rst                               rst          section titles (adornment order)
.html .htm                         html         h1-h6, site chrome removed
.py .js .ts .rs .go .java .c ...   code         symbols, via tree-sitter
.txt, anything else                text         paragraphs
=================================  ===========  ======================================

Every chunk stays within ``MAX_CHUNK_TOKENS``. For all but HTML, a chunk's content is
exactly ``raw[start_byte:end_byte].decode("utf-8")``; HTML content is extracted text
and its spans cover the section it came from.

Errors: ``ParseError`` (the only exception raised on bad input) when the bytes are
not valid UTF-8 or contain NUL; the caller skips the file with ``str(error)``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.code import CODE_EXTENSIONS, parse_code
from engine.ingest.parsers.errors import ParseError
from engine.ingest.parsers.html import HTML_EXTENSIONS, parse_html
from engine.ingest.parsers.markdown import MARKDOWN_EXTENSIONS, parse_markdown
from engine.ingest.parsers.rst import RST_EXTENSIONS, parse_rst
from engine.ingest.parsers.text import TEXT_EXTENSIONS, parse_text

__all__ = ["SUPPORTED_EXTENSIONS", "ParseError", "is_supported", "parse_document"]

_Parser = Callable[[str, bytes], ParsedDocument]

_PARSER_BY_EXTENSION: dict[str, _Parser] = {
    **dict.fromkeys(MARKDOWN_EXTENSIONS, parse_markdown),
    **dict.fromkeys(RST_EXTENSIONS, parse_rst),
    **dict.fromkeys(HTML_EXTENSIONS, parse_html),
    **dict.fromkeys(TEXT_EXTENSIONS, parse_text),
    **dict.fromkeys(CODE_EXTENSIONS, parse_code),
}

#: File extensions (lower case, with the dot) that have a dedicated parser.
SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(sorted(_PARSER_BY_EXTENSION))


def _extension(relative_path: str) -> str:
    return PurePosixPath(relative_path.replace("\\", "/")).suffix.lower()


def is_supported(relative_path: str) -> bool:
    """True for a known extension, or no extension at all (README, LICENSE, Makefile)."""
    extension = _extension(relative_path)
    return extension == "" or extension in _PARSER_BY_EXTENSION


def parse_document(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse one file, choosing the parser by extension; unknown extensions are plain text.

    Raises ``ParseError`` for input that is not UTF-8 text.
    """
    parser = _PARSER_BY_EXTENSION.get(_extension(relative_path), parse_text)
    return parser(relative_path, raw)
