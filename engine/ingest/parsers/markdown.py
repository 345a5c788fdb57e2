"""Markdown and MDX -> chunks along headings, with the heading path of each chunk.

A single line-by-line pass, not a full CommonMark parse: it only needs to know where
headings (ATX ``## x`` and setext underlines), fenced code blocks and paragraphs are.
Fence contents are opaque, so a ``# comment`` inside a fence is never a heading, and
a fence is one block that the packer splits only when it alone exceeds the bound.

Front matter (YAML between ``---`` lines, or TOML between ``+++``) is metadata, not
chunk text; its ``title`` is the document title. In MDX, ESM ``import``/``export``
statements and lines holding only JSX tags are dropped from chunk content.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.code_like import looks_like_code
from engine.ingest.parsers.outline import Outline
from engine.ingest.parsers.source_text import SourceText

__all__ = ["MARKDOWN_EXTENSIONS", "clean_heading", "parse_markdown"]

MARKDOWN_EXTENSIONS = (".md", ".markdown", ".mdx")

_ATX_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*\r?$")
_SETEXT_UNDERLINE = re.compile(r" {0,3}(?:=+|-+)[ \t]*\r?$")
# Lenient about indentation so fences nested in list items are recognised too.
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)$")
# Lines that interrupt a paragraph, so an underline after them is not a setext
# heading: list items, block quotes, table rows, HTML, indented code.
_NOT_PARAGRAPH = re.compile(r"[ \t]*(?:[-+*]|\d{1,9}[.)])(?:[ \t]|\r?$)|[ \t]*[>|<]| {4}|\t")
_FRONT_MATTER_TITLE = {
    "---": re.compile(r"title[ \t]*:[ \t]*(.*?)[ \t]*\r?$"),
    "+++": re.compile(r"title[ \t]*=[ \t]*(.*?)[ \t]*\r?$"),
}
_FRONT_MATTER_END = {"---": ("---", "..."), "+++": ("+++",)}
_MDX_ESM = re.compile(r"(?:import|export)\b")
_MDX_TAGS_ONLY = re.compile(r"[ \t]*(?:</?[A-Za-z][^<>]*>[ \t]*|\{/\*.*?\*/\}[ \t]*)+\r?$")
_MDX_TAG_UNCLOSED = re.compile(r"[ \t]*<[A-Za-z][^<>]*$")
_INLINE_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_INLINE_MARKUP = re.compile(r"<[^>]+>|[`*]|\{#[^}]*\}")


def clean_heading(text: str) -> str:
    """Heading text without inline markup: links become their text, code ticks vanish."""
    text = _INLINE_LINK.sub(r"\1", text)
    text = _INLINE_MARKUP.sub("", text)
    return " ".join(text.split())


class _MarkdownReader:
    """One pass over the lines, reporting headings and blocks to an ``Outline``."""

    def __init__(self, source: SourceText, *, mdx: bool) -> None:
        self.source = source
        self.mdx = mdx
        self.outline = Outline(source)
        self._block_start = -1  # first line of the open text block, -1 if none
        self._paragraph_start = -1  # first line of the open paragraph, -1 if none

    def read(self, first_line: int) -> None:
        lines = self.source.lines
        fence: str | None = None  # the opening fence run while inside a fence
        fence_start = 0
        skipping_esm = skipping_tag = False
        for index in range(first_line, len(lines)):
            line = lines[index]
            stripped = line.strip()
            if fence is not None:
                if stripped.startswith(fence[0]) and _closes_fence(stripped, fence):
                    self.outline.add_block(fence_start, index + 1, is_code=True)
                    fence = None
                continue
            if not stripped:
                self._close_block(index)
                skipping_esm = False
                continue
            if skipping_esm:
                continue
            if skipping_tag:
                skipping_tag = ">" not in line
                continue
            first = stripped[0]
            if first in "`~":
                opening = _FENCE_OPEN.match(line)
                if opening and not (first == "`" and "`" in opening.group(2)):
                    self._close_block(index)
                    fence, fence_start = opening.group(1), index
                    continue
            if self.mdx:
                if self._paragraph_start < 0 and _MDX_ESM.match(line):
                    self._close_block(index)
                    skipping_esm = True
                    continue
                if first in "<{":
                    if _MDX_TAGS_ONLY.match(line):
                        self._close_block(index)
                        continue
                    if _MDX_TAG_UNCLOSED.match(line):
                        self._close_block(index)
                        skipping_tag = True
                        continue
            if first == "#":
                atx = _ATX_HEADING.match(line)
                if atx:
                    self._close_block(index)
                    title = clean_heading(atx.group(2) or "")
                    self.outline.start_section(len(atx.group(1)), title, index, index + 1)
                    continue
            if first in "=-" and self._paragraph_start >= 0 and _SETEXT_UNDERLINE.match(line):
                title_start = self._paragraph_start
                self._close_block(title_start)
                title = clean_heading(" ".join(lines[title_start:index]))
                self.outline.start_section(1 if first == "=" else 2, title, title_start, index + 1)
                continue
            if self._block_start < 0:
                self._block_start = index
            if _NOT_PARAGRAPH.match(line):
                self._paragraph_start = -1
            elif self._paragraph_start < 0:
                self._paragraph_start = index
        if fence is not None:  # an unclosed fence runs to the end of the file
            self.outline.add_block(fence_start, len(lines), is_code=True)
        self._close_block(len(lines))

    def _close_block(self, end_line: int) -> None:
        if self._block_start >= 0:
            pasted_code = looks_like_code(self.source.lines[self._block_start:end_line])
            self.outline.add_block(self._block_start, end_line, is_code=pasted_code)
        self._block_start = self._paragraph_start = -1


def _closes_fence(stripped: str, fence: str) -> bool:
    run = len(stripped) - len(stripped.lstrip(fence[0]))
    return run >= len(fence) and not stripped[run:].strip()


def _front_matter(lines: list[str]) -> tuple[int, str | None]:
    """(index of the first body line, front matter title or None)."""
    opener = lines[0].rstrip()
    if opener not in _FRONT_MATTER_END:
        return 0, None
    closers = _FRONT_MATTER_END[opener]
    title_pattern = _FRONT_MATTER_TITLE[opener]
    title: str | None = None
    for index in range(1, len(lines)):
        line = lines[index]
        if line.rstrip() in closers:
            return index + 1, title
        match = title_pattern.match(line)
        if match and title is None:
            title = match.group(1).strip("'\"") or None
    return 0, None  # never closed: not front matter after all


def parse_markdown(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a Markdown or MDX file; raises ``ParseError`` if it is not UTF-8 text."""
    source = SourceText(raw)
    body_line, front_title = _front_matter(source.lines)
    reader = _MarkdownReader(source, mdx=relative_path.lower().endswith(".mdx"))
    reader.read(body_line)
    first_h1 = reader.outline.first_titles.get(1)
    title = front_title or first_h1 or PurePosixPath(relative_path).stem
    return ParsedDocument(title=title, content_type="markdown", language=None, chunks=reader.outline.chunks())
