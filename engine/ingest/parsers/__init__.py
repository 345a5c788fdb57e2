"""Parsers: ``parse_document(relative_path, raw) -> ParsedDocument`` by file name and extension.

=====================================  ============  =======================================
files                                  module        chunks along
=====================================  ============  =======================================
.md .markdown .mdx                     markdown      ATX/setext headings; fences kept whole
.rst                                   rst           section titles (adornment order)
.html .htm                             html          h1-h6, site chrome removed
.py .js .ts .rs .go .java .c ...       code          symbols, via tree-sitter
.sql .psql .pgsql                      sql           statements; ``create`` of named objects
.sh .bash .zsh .ksh, ``#!`` scripts    scripts       shell functions (other interpreters:
                                                     their grammar, or one module)
Dockerfile*, Makefile*, .mk            build_files   build stages, make rules
.yaml .yml .toml .ini .cfg .conf       config_files  top-level sections, then their entries
.json .jsonc .json5
.csv .tsv                              tabular       rows of the file's head only
.txt, README, LICENSE (no extension)   text          paragraphs
.pdf                                   pdf           pages (text layer via pypdf; outline)
.docx                                  docx          Word heading styles
=====================================  ============  =======================================

Markdown, reStructuredText, HTML, config, tabular and plain text are documents
(``content_type`` of that name, or ``text``); source code, SQL, shell scripts,
Dockerfiles and Makefiles are ``code`` with ``is_code`` chunks. A file with an
extension none of these knows is not supported: the walk skips it with that reason.

Every chunk stays within ``MAX_CHUNK_TOKENS``. For all but HTML, PDF and DOCX, a chunk's
content is exactly ``raw[start_byte:end_byte].decode("utf-8")``; HTML content is extracted
text and its spans cover the section it came from; PDF and DOCX spans index their extracted
text (see those modules).

Errors: ``ParseError`` (the only exception raised on bad input) when the bytes are
not valid UTF-8 or contain NUL, or are no readable PDF or DOCX; the caller skips the file
with ``str(error)``. Its subclass ``NothingToIndex`` marks a valid file with no text
to index (a scanned PDF): listed as skipped rather than failed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.build_files import (
    DOCKERFILE_EXTENSIONS,
    MAKEFILE_EXTENSIONS,
    is_dockerfile,
    is_makefile,
    parse_dockerfile,
    parse_makefile,
)
from engine.ingest.parsers.code import CODE_EXTENSIONS, parse_code
from engine.ingest.parsers.config_files import CONFIG_EXTENSIONS, parse_config
from engine.ingest.parsers.docx import DOCX_EXTENSIONS, parse_docx
from engine.ingest.parsers.errors import ParseError
from engine.ingest.parsers.html import HTML_EXTENSIONS, parse_html
from engine.ingest.parsers.markdown import MARKDOWN_EXTENSIONS, parse_markdown
from engine.ingest.parsers.pdf import PDF_EXTENSIONS, parse_pdf
from engine.ingest.parsers.rst import RST_EXTENSIONS, parse_rst
from engine.ingest.parsers.scripts import SHELL_EXTENSIONS, parse_script, parse_shell
from engine.ingest.parsers.sql import SQL_EXTENSIONS, parse_sql
from engine.ingest.parsers.tabular import TABULAR_EXTENSIONS, parse_tabular
from engine.ingest.parsers.text import TEXT_EXTENSIONS, parse_text

__all__ = ["SUPPORTED_EXTENSIONS", "ParseError", "is_supported", "parse_document"]

_Parser = Callable[[str, bytes], ParsedDocument]

_PARSER_BY_EXTENSION: dict[str, _Parser] = {
    **dict.fromkeys(MARKDOWN_EXTENSIONS, parse_markdown),
    **dict.fromkeys(RST_EXTENSIONS, parse_rst),
    **dict.fromkeys(HTML_EXTENSIONS, parse_html),
    **dict.fromkeys(TEXT_EXTENSIONS, parse_text),
    **dict.fromkeys(CODE_EXTENSIONS, parse_code),
    **dict.fromkeys(SQL_EXTENSIONS, parse_sql),
    **dict.fromkeys(SHELL_EXTENSIONS, parse_shell),
    **dict.fromkeys(DOCKERFILE_EXTENSIONS, parse_dockerfile),
    **dict.fromkeys(MAKEFILE_EXTENSIONS, parse_makefile),
    **dict.fromkeys(CONFIG_EXTENSIONS, parse_config),
    **dict.fromkeys(TABULAR_EXTENSIONS, parse_tabular),
    **dict.fromkeys(PDF_EXTENSIONS, parse_pdf),
    **dict.fromkeys(DOCX_EXTENSIONS, parse_docx),
}

#: File extensions (lower case, with the dot) that have a dedicated parser.
SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(sorted(_PARSER_BY_EXTENSION))


def _parse_extensionless(relative_path: str, raw: bytes) -> ParsedDocument:
    """README, LICENSE, .gitignore are text; a file starting with ``#!`` is a script."""
    return parse_script(relative_path, raw) if raw.startswith(b"#!") else parse_text(relative_path, raw)


def _parser_for(relative_path: str) -> _Parser | None:
    """The parser of a file: by extension, else by name (``Dockerfile.dev``), else None."""
    path = PurePosixPath(relative_path.replace("\\", "/"))
    extension = path.suffix.lower()
    by_extension = _PARSER_BY_EXTENSION.get(extension)
    if by_extension is not None:
        return by_extension
    if is_dockerfile(path.name):
        return parse_dockerfile
    if is_makefile(path.name):
        return parse_makefile
    return _parse_extensionless if extension == "" else None


def is_supported(relative_path: str) -> bool:
    """True for a known extension or name (``Dockerfile``), or no extension at all (README, scripts)."""
    return _parser_for(relative_path) is not None


def parse_document(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse one file, choosing the parser by extension or name; unknown extensions are plain text.

    Raises ``ParseError`` for input that is not UTF-8 text.
    """
    parser = _parser_for(relative_path) or parse_text
    return parser(relative_path, raw)
