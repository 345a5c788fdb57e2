"""HTML pages of documentation sites -> text chunks along h1-h6, site chrome removed.

Walking the DOM node by node from Python costs ~1 µs per node, more than the whole
budget for a page. Instead the raw bytes are annotated *before* parsing, by regexes
that run in C: each ``<hN>`` gets an invisible start marker carrying its index, each
``<pre>`` gets begin/end markers, and block-level tags get a paragraph-boundary
marker (the markers are Unicode noncharacters, which lexbor keeps in text). Lexbor
(selectolax) then parses the bytes, navigation and site chrome are removed by CSS
selectors, and one C call extracts the text of the main content; splitting that
text on the markers yields the sections, their paragraphs and their code blocks.

Chunk content is extracted text, not a raw slice. Spans are best effort: a section
runs from its heading tag to the next surviving heading tag in the raw bytes (the
last one to ``</body>``), and all chunks of a section share the section's span.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from selectolax.lexbor import LexborHTMLParser, LexborNode

from engine.ingest.model import Chunk, ParsedDocument
from engine.ingest.parsers.outline import heading_label
from engine.ingest.parsers.packing import pack_text_blocks
from engine.ingest.parsers.source_text import SourceText

__all__ = ["HTML_EXTENSIONS", "parse_html"]

HTML_EXTENSIONS = (".html", ".htm")

_HEADING_START = "\ufdd0"  # followed by the heading's index, then _HEADING_TEXT
_HEADING_TEXT = "\ufdd1"
_HEADING_END = "\ufdd2"
_PRE_START = "\ufdd3"
_PRE_END = "\ufdd4"
_BLOCK_END = "\ufdd5"
_MARKERS = re.compile("[\ufdd0-\ufdd5]")
_MARKER_BYTES = re.compile("[\ufdd0-\ufdd5]".encode())


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _any_case_alternatives(words: Iterable[str]) -> str:
    """A regex for any of ``words`` in any letter case, factored by common prefix.

    Python's regex engine tries alternatives one by one and its IGNORECASE flag is
    slow; a prefix-factored pattern with explicit case classes scans ~2x faster.
    """
    by_first: dict[str, list[str]] = {}
    may_end = False
    for word in words:
        if word:
            by_first.setdefault(word[0], []).append(word[1:])
        else:
            may_end = True
    alternatives = [_any_case(first) + _any_case_alternatives(rests) for first, rests in sorted(by_first.items())]
    if not alternatives:
        return ""
    pattern = "(?:" + "|".join(alternatives) + ")"
    return pattern + "?" if may_end else pattern


# Patterns start with a literal "<" so the engine skips ahead quickly; replacements
# are literal bytes, so substitution never calls back into Python.
_HEADING_OPEN_TAG = re.compile(rb"<[hH]([1-6])(?=[\s/>])[^>]*>")
_HEADING_CLOSE_TAG = re.compile(rb"</(?=[hH][1-6]\s*>)")
_PRE_OPEN_TAG = re.compile(_any_case("<pre").encode() + rb"(?=[\s/>])[^>]*>")
_PRE_CLOSE_TAG = re.compile(("</(?=" + _any_case("pre") + r"\s*>)").encode())
_PRE_CONTENT = re.compile(f"{_PRE_START}(.*?){_PRE_END}", re.DOTALL)
# Paragraph boundaries go before the opening and closing tags of flow blocks, and
# before the closing tag of table cells: never directly inside <table> or <tr>,
# where the parser would move ("foster-parent") the marker out of the table.
_FLOW_BLOCKS = (
    *("p", "div", "li", "dt", "dd", "ul", "ol", "dl", "blockquote", "section", "article"),
    *("figure", "figcaption", "details", "summary", "address", "main", "header", "footer"),
    *("nav", "aside", "hr", "br"),
)
_BLOCK_BOUNDARY = re.compile(
    (
        "<(?="
        + _any_case_alternatives([*_FLOW_BLOCKS, *(f"/{tag}" for tag in _FLOW_BLOCKS), "/td", "/th", "/caption"])
        + r"[\s/>])"
    ).encode()
)

# One CSS call with every selector: lexbor's cost is mostly the tree walk, so a
# long selector list costs little more than a short one.
_CHROME = ", ".join(
    (
        "script, style, noscript, template, iframe, svg, button, form, nav, aside, footer, header",
        "[role=navigation], [role=search], [role=banner], [role=contentinfo]",
        # PostgreSQL (DocBook): prev/next/up bars and per-chapter tables of contents; other DocBook
        # stylesheets (Valgrind's) draw the same bars as bare tables
        "div.navheader, div.navfooter, div.toc, table[summary^=\"Navigation\" i]",
        # Sphinx: sidebar, breadcrumb bars, footer, pilcrow anchors
        "div.sphinxsidebar, div.related, div.footer, a.headerlink",
    )
)
# The first match in document order, so the outermost of nested candidates.
_MAIN_CONTENT = "[role=main], main, article, div.body"
_TITLE_SUFFIX = re.compile(
    r"\s+[|\u2014\u2013-]\s+[^|\u2014\u2013-]*\b(?:documentation|docs|manual|reference)\b[^|\u2014\u2013-]*$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class _Heading:
    level: int
    byte_offset: int  # where the <hN> tag starts in the raw bytes


@dataclass(slots=True)
class _Section:
    level: int  # 0 for the text before the first heading
    title: str
    start_byte: int
    blocks: list[tuple[str, bool]]


def _annotate(raw: bytes) -> tuple[bytes, list[_Heading]]:
    """Insert heading, code and block markers; return the marked bytes and every heading tag.

    A heading's index in the returned list is the number its marker carries.
    """
    headings: list[_Heading] = []

    def mark_heading(match: re.Match[bytes]) -> bytes:
        headings.append(_Heading(int(match.group(1)), match.start()))
        return b"%s%s%d%s" % (
            match.group(0),
            _HEADING_START.encode(),
            len(headings) - 1,
            _HEADING_TEXT.encode(),
        )

    marked = _HEADING_OPEN_TAG.sub(mark_heading, raw)
    marked = _HEADING_CLOSE_TAG.sub(_HEADING_END.encode() + b"</", marked)
    marked = _PRE_OPEN_TAG.sub(lambda match: match.group(0) + _PRE_START.encode(), marked)
    marked = _PRE_CLOSE_TAG.sub(_PRE_END.encode() + b"</", marked)
    return _BLOCK_BOUNDARY.sub(_BLOCK_END.encode() + b"<", marked), headings


def _remove_chrome(tree: LexborHTMLParser) -> None:
    # Innermost first: decomposing an ancestor frees its descendants, so a later
    # call on a descendant would touch freed memory.
    for node in reversed(tree.css(_CHROME)):
        if node.tag == "header" and _inside_main_content(node):
            continue  # an article's own header, not a site banner
        node.decompose()


def _inside_main_content(node: LexborNode) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag in ("main", "article") or parent.attributes.get("role") == "main":
            return True
        parent = parent.parent
    return False


def _main_content(tree: LexborHTMLParser) -> LexborNode | None:
    return tree.css_first(_MAIN_CONTENT) or tree.body or tree.root


def _clean(text: str) -> str:
    return " ".join(text.split()).rstrip("¶#§ ")


def _blocks(body: str) -> Iterator[tuple[str, bool]]:
    """(text, is_code) blocks of a section body: one per paragraph, one per <pre>."""
    for index, part in enumerate(_PRE_CONTENT.split(body)):
        if index % 2:
            code = _strip_blank_lines(part.replace(_BLOCK_END, ""))
            if code:
                yield code, True
            continue
        for text in part.split(_BLOCK_END):
            paragraph = " ".join(text.split())
            if paragraph:
                yield paragraph, False


def _strip_blank_lines(text: str) -> str:
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    return "\n".join(line.rstrip() for line in lines[start:])


def _sections(text: str, headings: list[_Heading], content_start: int) -> list[_Section]:
    parts = text.split(_HEADING_START)
    sections = [_Section(0, "", content_start, list(_blocks(parts[0])))]
    for part in parts[1:]:
        index_text, _, rest = part.partition(_HEADING_TEXT)
        if not index_text.isdigit() or int(index_text) >= len(headings):
            continue
        heading = headings[int(index_text)]
        title_text, found, body = rest.partition(_HEADING_END)
        if not found:  # unclosed heading: its text ends at the next block boundary
            title_text, _, body = rest.partition(_BLOCK_END)
        title = heading_label(_clean(_MARKERS.sub("", title_text)))
        blocks = list(_blocks(body))
        if not title:  # an empty heading (an anchor holder) is no section boundary
            sections[-1].blocks.extend(blocks)
            continue
        sections.append(_Section(heading.level, title, heading.byte_offset, blocks))
    return sections


def _document_title(tree: LexborHTMLParser, sections: list[_Section], relative_path: str) -> str:
    first_h1 = next((section.title for section in sections if section.level == 1), None)
    title_node = tree.css_first("title")
    title = _clean(title_node.text()) if title_node is not None else ""
    if title:
        if first_h1 and title.startswith(first_h1):
            return first_h1  # drops a " — Project documentation" suffix
        return _TITLE_SUFFIX.sub("", title) or title
    return first_h1 or PurePosixPath(relative_path).stem


class _LineCounter:
    """1-based line numbers of non-decreasing byte offsets, counting newlines once."""

    __slots__ = ("_line", "_offset", "_raw")

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._offset = 0
        self._line = 1

    def line_of(self, offset: int) -> int:
        if offset < self._offset:  # not expected; stay correct anyway
            return self._raw.count(b"\n", 0, offset) + 1
        self._line += self._raw.count(b"\n", self._offset, offset)
        self._offset = offset
        return self._line


def _chunks(raw: bytes, sections: list[_Section], content_end: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    lines = _LineCounter(raw)
    stack: list[tuple[int, str]] = []
    carried: list[tuple[str, bool]] = []  # bare parent headings waiting for their first child
    carried_start = -1
    for position, section in enumerate(sections):
        following = sections[position + 1] if position + 1 < len(sections) else None
        blocks = section.blocks
        start_byte = section.start_byte
        if section.level:
            while stack and stack[-1][0] >= section.level:
                stack.pop()
            stack.append((section.level, section.title))
            blocks = [(section.title, False), *blocks]
        if carried:
            blocks, start_byte = [*carried, *blocks], carried_start
            carried, carried_start = [], -1
        if section.level and not section.blocks and following and following.level > section.level:
            # A heading directly followed by a deeper one joins its first child
            # rather than becoming a chunk of a few tokens.
            carried, carried_start = blocks, start_byte
            continue
        packed = pack_text_blocks(blocks)
        if not packed:
            continue
        end_byte = following.start_byte if following is not None else content_end
        end_byte = max(end_byte, start_byte + 1)
        start_line = lines.line_of(start_byte)
        end_line = max(start_line, lines.line_of(end_byte - 1))
        heading_path = tuple(title for _, title in stack)
        for content, is_code in packed:
            chunks.append(
                Chunk(
                    content=content,
                    start_line=start_line,
                    end_line=end_line,
                    start_byte=start_byte,
                    end_byte=end_byte,
                    heading_path=heading_path,
                    is_code=is_code,
                )
            )
    return chunks


def parse_html(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse an HTML page; raises ``ParseError`` if it is not UTF-8 text."""
    SourceText(raw)  # validates: UTF-8, no NUL
    if b"\xef\xb7" in raw:
        # Marker characters already in the page would confuse the split; dropping
        # them shifts later byte offsets, which is acceptable for such odd input.
        raw = _MARKER_BYTES.sub(b"", raw)
    marked, headings = _annotate(raw)
    # Lexbor reads bytes as UTF-8 whatever the page's <meta charset> claims, which is
    # right here: the bytes were just validated as UTF-8.
    tree = LexborHTMLParser(marked)
    lowered = raw.lower()
    _remove_chrome(tree)
    root = _main_content(tree)
    body_tag = lowered.find(b"<body")
    sections = _sections(root.text(deep=True) if root is not None else "", headings, max(body_tag, 0))
    body_end = lowered.rfind(b"</body")
    content_end = body_end if body_end > sections[-1].start_byte else len(raw)
    return ParsedDocument(
        title=_document_title(tree, sections, relative_path),
        content_type="html",
        language=None,
        chunks=_chunks(raw, sections, content_end),
    )
