"""Word files (``.docx``) -> text chunks along their headings, with the standard library only.

A ``.docx`` is a zip of XML: ``word/document.xml`` holds the paragraphs, ``word/styles.xml``
names their styles. A paragraph whose style is a built-in heading (``heading 1`` ... ``heading 9``;
style names are stored in English whatever the user's language) or that states an outline level
opens a section; tables become one line per row, cells separated by `` | ``.

As for PDF, chunk content is extracted text: spans and line numbers index the document's
extracted text (one paragraph per line, a blank line between paragraphs, UTF-8), not the zip.

A zip bomb is refused by the sizes its entries declare (zipfile never inflates past them), and
a DTD by its presence: Word writes none, and entities are how XML expands.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
import zipfile
import zlib
from io import BytesIO
from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.errors import ParseError
from engine.ingest.parsers.outline import Outline
from engine.ingest.parsers.source_text import SourceText

__all__ = ["DOCX_EXTENSIONS", "MAX_DOCX_XML_BYTES", "parse_docx"]

DOCX_EXTENSIONS = (".docx",)
#: The most XML one part may inflate to; a long manual's document.xml is a few MB.
MAX_DOCX_XML_BYTES = 64 * 1024 * 1024
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING_NAME = re.compile(r"heading ([1-9])", re.IGNORECASE)
_HEADING_ID = re.compile(r"heading([1-9])", re.IGNORECASE)


def parse_docx(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a ``.docx``; raises ``ParseError`` when it is not one, or too large once inflated."""
    try:
        with zipfile.ZipFile(BytesIO(raw)) as archive:
            body = _xml(archive, "word/document.xml")
            styles = _xml(archive, "word/styles.xml", required=False)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError,
            NotImplementedError) as error:
        # How zipfile reports damage besides BadZipFile: zlib.error (deflate data), ValueError (a
        # negative seek from a bad offset), RuntimeError (an encrypted entry), NotImplementedError
        # (a compression method it lacks).
        raise ParseError(f"not a readable .docx ({error})") from None
    heading_levels = _heading_styles(styles)
    paragraphs = [(text, _level(paragraph, heading_levels)) for paragraph, text in _paragraphs(body)]
    paragraphs = [(text, level) for text, level in paragraphs if text.strip()]

    source = SourceText("\n\n".join(text for text, _ in paragraphs).encode("utf-8"))
    outline = Outline(source)
    line = 0
    for text, level in paragraphs:
        end = line + text.count("\n") + 1
        if level:
            outline.start_section(level, text, line, end)
        else:
            outline.add_block(line, end)
        line = end + 1  # the blank line between paragraphs
    title = outline.first_titles.get(min(outline.first_titles, default=0), "")
    return ParsedDocument(title=title or PurePosixPath(relative_path).stem or relative_path,
                          content_type="text", language=None, chunks=outline.chunks(), text=source.raw)


def _xml(archive: zipfile.ZipFile, name: str, *, required: bool = True) -> ElementTree.Element | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        if required:
            raise ParseError(f"not a .docx (no {name} in the archive)") from None
        return None
    if info.file_size > MAX_DOCX_XML_BYTES:
        raise ParseError(f"{name} inflates to {info.file_size} bytes, more than {MAX_DOCX_XML_BYTES}")
    data = archive.read(info)
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise ParseError(f"{name} declares a DTD, which Word never writes")
    try:
        return ElementTree.fromstring(data)
    except ElementTree.ParseError as error:
        raise ParseError(f"not a readable .docx ({name}: {error})") from None


def _heading_styles(styles: ElementTree.Element | None) -> dict[str, int]:
    """Style id -> heading level, from the style's built-in name or its outline level."""
    levels: dict[str, int] = {}
    for style in () if styles is None else styles.iter(f"{_W}style"):
        style_id = style.get(f"{_W}styleId", "")
        name = style.find(f"{_W}name")
        named = _HEADING_NAME.fullmatch(name.get(f"{_W}val", "")) if name is not None else None
        outline_level = style.find(f"{_W}pPr/{_W}outlineLvl")
        if named is not None:
            levels[style_id] = int(named.group(1))
        elif name is not None and name.get(f"{_W}val", "").lower() == "title":
            levels[style_id] = 1
        elif outline_level is not None and outline_level.get(f"{_W}val", "").isdigit():
            levels[style_id] = min(int(outline_level.get(f"{_W}val", "0")) + 1, 9)
    return levels


def _level(paragraph: ElementTree.Element, heading_levels: dict[str, int]) -> int:
    """The paragraph's heading level, 0 for body text."""
    properties = paragraph.find(f"{_W}pPr")
    if properties is None:
        return 0
    direct = properties.find(f"{_W}outlineLvl")
    if direct is not None and direct.get(f"{_W}val", "").isdigit() and int(direct.get(f"{_W}val", "9")) < 9:
        return int(direct.get(f"{_W}val", "0")) + 1
    style = properties.find(f"{_W}pStyle")
    style_id = "" if style is None else style.get(f"{_W}val", "")
    by_id = _HEADING_ID.fullmatch(style_id)  # documents written without a styles part
    return heading_levels.get(style_id, int(by_id.group(1)) if by_id else 0)


def _paragraphs(body: ElementTree.Element | None) -> list[tuple[ElementTree.Element, str]]:
    """Body paragraphs in order with their text; a table row is one paragraph of its cells."""
    found: list[tuple[ElementTree.Element, str]] = []
    container = None if body is None else body.find(f"{_W}body")
    for element in () if container is None else container:
        if element.tag == f"{_W}p":
            found.append((element, _text(element)))
        elif element.tag == f"{_W}tbl":
            for row in element.iter(f"{_W}tr"):
                cells = [" ".join(_text(p) for p in cell.iter(f"{_W}p")).strip() for cell in row.iter(f"{_W}tc")]
                found.append((row, " | ".join(cells)))
    return found


def _text(paragraph: ElementTree.Element) -> str:
    parts: list[str] = []
    for node in paragraph.iter():
        if node.tag == f"{_W}t" and node.text:
            parts.append(node.text)
        elif node.tag == f"{_W}tab":
            parts.append("\t")
        elif node.tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")
    return "".join(parts).replace("\x00", "").strip()
