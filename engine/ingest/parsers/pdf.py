"""PDF files -> text chunks per page, the page (and the outline entry it falls under) as location.

Text comes from pypdf: pure Python and maintained, with no system library to install (unlike
pdfminer's C speed-ups or PDFium bindings), and bounded against hostile files by its own limits
(decompressed stream sizes, array, page-tree and outline sizes). Each page's text
is extracted in content-stream order; a chunk never spans two pages, and its heading path is
the outline entries enclosing its page, outermost first, then ``"page N"`` (1-based, the
physical page, not a printed label).

Chunk content is extracted text, so spans cannot index the PDF's bytes. They index the
document's *extracted text* instead: every page's text in order, one blank line between pages,
UTF-8; ``start_line``/``end_line`` are lines of that text and ``start_byte``/``end_byte``
offsets into its encoding, and ``content == text[start_byte:end_byte]`` as for Markdown. Line
numbers therefore agree with what grep reports for a chunk (``start_line`` plus the line's
place in it).

A valid PDF with nothing to index raises ``NothingToIndex`` (a ``ParseError``), meant to be
listed as skipped rather than failed: a scanned PDF (no text layer), one that needs a
password, and one over the page or time bound. A file pypdf cannot read raises ``ParseError``.
The time bound is checked between pages; pypdf's own limits bound a single page.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from io import BytesIO
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from engine.ingest.model import Chunk, ParsedDocument
from engine.ingest.parsers.errors import NothingToIndex, ParseError
from engine.ingest.parsers.outline import heading_label
from engine.ingest.parsers.packing import Block, pack_blocks
from engine.ingest.parsers.source_text import SourceText
from engine.ingest.parsers.tokens import WORD_CHARACTER
from engine.logs import held_back

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = ["MAX_PDF_PAGES", "MAX_PDF_SECONDS", "NO_TEXT_REASON", "PDF_EXTENSIONS", "NothingToIndex",
           "parse_pdf"]

PDF_EXTENSIONS = (".pdf",)
#: A PDF with more pages is skipped: past this it is a scanned archive or a data dump, not a manual.
MAX_PDF_PAGES = 2_000
#: Text extraction stops (and the file is skipped) once it has taken this long.
MAX_PDF_SECONDS = 60.0
#: Extracted text beyond this many characters is not a document anyone reads as one.
MAX_PDF_TEXT_CHARS = 20_000_000
NO_TEXT_REASON = "no text layer (scanned PDF?)"
_PAGE_SEPARATOR = "\n\n"
_MAX_OUTLINE_ENTRIES = 10_000
_MAX_OUTLINE_DEPTH = 16
# Control characters other than tab and newline: Postgres text refuses NUL, and the rest are
# extraction debris (a font's private glyph codes), not text.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_BLANK_LINES = re.compile(r"\n{3,}")


def parse_pdf(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a PDF into page-located chunks; raises ``ParseError`` or ``NothingToIndex`` (see module)."""
    with held_back("pypdf", logging.ERROR):  # its repair notes ("Ignoring wrong pointing object") are not ours
        reader = _open(raw)
        pages = _page_texts(reader)
        page_paths = _outline_paths(reader, len(pages))
        title = _metadata_title(reader)
    if not any(WORD_CHARACTER.search(page) for page in pages):
        raise NothingToIndex(NO_TEXT_REASON)
    source = SourceText(_PAGE_SEPARATOR.join(pages).encode("utf-8"))
    chunks: list[Chunk] = []
    offset = 0
    for number, (page, outline_path) in enumerate(zip(pages, page_paths, strict=True), start=1):
        end = offset + len(page.encode("utf-8"))
        if end > offset:
            chunks += pack_blocks(source, [Block(offset, end)], heading_path=(*outline_path, f"page {number}"))
        offset = end + len(_PAGE_SEPARATOR)
    return ParsedDocument(
        title=title or _first_line(pages) or PurePosixPath(relative_path).stem or relative_path,
        content_type="text",
        language=None,
        chunks=chunks,
        text=source.raw,
    )


def _open(raw: bytes) -> PdfReader:
    # Imported here: pypdf takes 150 ms to import, half the parsers' share of every command's start.
    from pypdf import PasswordType, PdfReader
    from pypdf.errors import DependencyError

    # pypdf reports a damaged file with whatever exception the damage leads to (PdfReadError,
    # ValueError, KeyError, RecursionError...), and a parser raises only ParseError.
    try:
        reader = PdfReader(BytesIO(raw), strict=False)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")  # "permissions only" PDFs open with the empty password
            except DependencyError:
                raise NothingToIndex("encrypted PDF whose cipher needs the cryptography package") from None
            if opened == PasswordType.NOT_DECRYPTED:
                raise NothingToIndex("encrypted PDF (it needs a password)")
        page_count = len(reader.pages)
    except ParseError:
        raise
    except Exception as error:
        raise ParseError(f"not a readable PDF ({_reason(error)})") from None
    if page_count == 0:
        raise ParseError("not a readable PDF (no pages)")
    if page_count > MAX_PDF_PAGES:
        raise NothingToIndex(f"{page_count} pages, more than the {MAX_PDF_PAGES} a PDF may have to be ingested")
    return reader


def _page_texts(reader: PdfReader) -> list[str]:
    """Each page's cleaned text ("" for a page without text, or whose text pypdf cannot read)."""
    started = time.monotonic()
    texts: list[str] = []
    characters = 0
    first_error: Exception | None = None
    for number, page in enumerate(reader.pages, start=1):
        try:
            text = _clean(page.extract_text())
        except Exception as error:  # one damaged page costs that page, not the document
            first_error = first_error or error
            text = ""
        texts.append(text)
        characters += len(text)
        if characters > MAX_PDF_TEXT_CHARS:
            raise NothingToIndex(f"more than {MAX_PDF_TEXT_CHARS} characters of text by page {number}")
        if time.monotonic() - started > MAX_PDF_SECONDS:
            raise NothingToIndex(f"text extraction took over {MAX_PDF_SECONDS:.0f}s "
                                 f"(stopped at page {number} of {len(reader.pages)})")
    if first_error is not None and not any(texts):
        raise ParseError(f"not a readable PDF ({_reason(first_error)})")
    return texts


def _clean(text: str) -> str:
    """Text safe to store and chunk: one newline convention, no control characters, valid UTF-8."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")
    text = _CONTROL.sub("", text).encode("utf-8", errors="replace").decode("utf-8")
    text = _BLANK_LINES.sub("\n\n", _TRAILING_SPACE.sub("\n", text + "\n"))
    return text.strip("\n").rstrip()


def _outline_paths(reader: PdfReader, page_count: int) -> list[tuple[str, ...]]:
    """For each page, the outline entries it falls under (outermost first); () before the first.

    A page is labelled by the first entry starting on it (a chapter starting on page 5 names
    page 5); the last entry starting on a page carries on to the pages after it.
    """
    first_on: dict[int, tuple[str, ...]] = {}
    last_on: dict[int, tuple[str, ...]] = {}
    try:
        for path, page in _outline_entries(reader, reader.outline, (), 0, [_MAX_OUTLINE_ENTRIES]):
            if page is not None and 0 <= page < page_count:
                first_on.setdefault(page, path)
                last_on[page] = path
    except Exception:  # a broken outline is no reason to lose the text: pages keep their numbers
        return [()] * page_count
    paths: list[tuple[str, ...]] = []
    carried: tuple[str, ...] = ()
    for page in range(page_count):
        paths.append(first_on.get(page, carried))
        carried = last_on.get(page, carried)
    return paths


def _outline_entries(reader: PdfReader, items: list[Any], parent: tuple[str, ...], depth: int,
                     budget: list[int]) -> Iterator[tuple[tuple[str, ...], int | None]]:
    """(path, 0-based page) of outline entries in document order; a list holds the previous entry's children."""
    if depth > _MAX_OUTLINE_DEPTH:
        return
    previous = parent
    for item in items:
        if budget[0] <= 0:
            return
        if isinstance(item, list):
            yield from _outline_entries(reader, item, previous, depth + 1, budget)
            continue
        budget[0] -= 1
        title = heading_label(str(getattr(item, "title", "") or ""))
        previous = (*parent, title) if title else parent
        yield previous, reader.get_destination_page_number(item)


def _metadata_title(reader: PdfReader) -> str:
    try:
        metadata = reader.metadata
        title = metadata.title if metadata is not None else None
    except Exception:  # an unreadable info dictionary: the first line serves as the title
        return ""
    return heading_label(_clean(str(title))) if title else ""


def _first_line(pages: list[str]) -> str:
    for page in pages:
        for line in page.split("\n"):
            if WORD_CHARACTER.search(line):
                return heading_label(line)
    return ""


def _reason(error: Exception) -> str:
    """A one-line reason from pypdf's exception (its message can be empty or span lines)."""
    message = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
