"""reStructuredText -> chunks along section titles, with the heading path of each chunk.

A light line-based reader instead of a docutils render (which is ~100x slower and
fails on unknown Sphinx roles). A section title is an unindented line underlined
(and optionally overlined) with one repeated punctuation character; as in docutils,
heading levels follow the order in which adornment styles first appear, and an
overlined style differs from the underline-only style with the same character.
Literal blocks (after ``::``), code directives and doctest paragraphs are code.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.outline import Outline
from engine.ingest.parsers.source_text import SourceText

__all__ = ["RST_EXTENSIONS", "parse_rst"]

RST_EXTENSIONS = (".rst",)

_ADORNMENT_CHARACTERS = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1*[ \t]*\r?$")
_CODE_DIRECTIVE = re.compile(
    r"[ \t]*\.\.[ \t]+(?:code-block|code|sourcecode|doctest|testcode|testoutput|"
    r"ipython|jupyter-execute)[ \t]*::"
)
_INLINE_MARKUP = re.compile(r":[\w:.+-]+:(?=`)|`_{0,2}|\*{1,2}|\|")


def _clean_title(text: str) -> str:
    return " ".join(_INLINE_MARKUP.sub("", text).split())


def _indentation(line: str) -> int:
    return len(line) - len(line.lstrip())


def _adornment(line: str) -> str | None:
    """The adornment character if ``line`` is one repeated punctuation character."""
    if line and line[0] in _ADORNMENT_CHARACTERS and _ADORNMENT.match(line):
        return line[0]
    return None


class _RstReader:
    """One pass over the lines, reporting titles and blocks to an ``Outline``."""

    def __init__(self, source: SourceText) -> None:
        self.source = source
        self.outline = Outline(source)
        self._styles: list[tuple[str, bool]] = []  # adornment styles in order of appearance
        self._block_start = -1

    def read(self) -> None:
        lines = self.source.lines
        count = len(lines)
        index = 0
        after_blank = True  # a title must start after a blank line (or the top)
        literal_indent = -1  # while >= 0, lines indented deeper open a literal block
        code_from = -1  # a code directive's line, which its literal block includes
        while index < count:
            line = lines[index]
            if not line.strip():
                self._close_block(index)
                after_blank = True
                index += 1
                continue
            indent = _indentation(line)
            if literal_indent >= 0:
                if indent > literal_indent:
                    index = self._read_literal(code_from if code_from >= 0 else index, literal_indent)
                    literal_indent = code_from = -1
                    after_blank = True
                    continue
                literal_indent = code_from = -1
            if after_blank and self._read_title(index):
                index += 3 if _adornment(line) else 2
                continue
            after_blank = False
            if _CODE_DIRECTIVE.match(line):
                self._close_block(index)
                literal_indent, code_from = indent, index
                index += 1
                continue
            if self._block_start < 0:
                self._block_start = index
            if line.rstrip().endswith("::"):
                literal_indent = _indentation(lines[self._block_start])
            index += 1
        self._close_block(count)

    def _read_title(self, index: int) -> bool:
        """Start a section if a title begins at ``index``; True if it did."""
        lines = self.source.lines
        line = lines[index]
        character = _adornment(line)
        if character is not None:  # overline, title, underline of the same length
            if index + 2 >= len(lines):
                return False
            title, underline = lines[index + 1], lines[index + 2]
            if not title.strip() or underline.rstrip() != line.rstrip():
                return False
            self._start_section((character, True), title, index, index + 3)
            return True
        if index + 1 >= len(lines) or line[0] in " \t":
            return False
        underline = lines[index + 1]
        character = _adornment(underline)
        if character is None:
            return False
        width = len(underline.rstrip())
        if width < 4 and width < len(line.strip()):  # docutils: too short to be a title
            return False
        self._start_section((character, False), line, index, index + 2)
        return True

    def _start_section(self, style: tuple[str, bool], title: str, first: int, end: int) -> None:
        self._close_block(first)
        if style not in self._styles:
            self._styles.append(style)
        level = self._styles.index(style) + 1
        self.outline.start_section(level, _clean_title(title), first, end)

    def _read_literal(self, first_line: int, base_indent: int) -> int:
        """Add the literal block starting at ``first_line``; return the line after it."""
        self._close_block(first_line)
        lines = self.source.lines
        index = last_text = first_line
        while index < len(lines):
            line = lines[index]
            if line.strip():
                if index > first_line and _indentation(line) <= base_indent:
                    break
                last_text = index
            index += 1
        self.outline.add_block(first_line, last_text + 1, is_code=True)
        return last_text + 1

    def _close_block(self, end_line: int) -> None:
        start = self._block_start
        if start >= 0:
            doctest = self.source.lines[start].lstrip().startswith(">>>")
            self.outline.add_block(start, end_line, is_code=doctest)
        self._block_start = -1


def parse_rst(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a reStructuredText file; raises ``ParseError`` if it is not UTF-8 text."""
    source = SourceText(raw)
    reader = _RstReader(source)
    reader.read()
    title = reader.outline.first_titles.get(1) or PurePosixPath(relative_path).stem
    return ParsedDocument(title=title, content_type="rst", language=None, chunks=reader.outline.chunks())
