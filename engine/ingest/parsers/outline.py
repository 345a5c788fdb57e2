"""A document outline: sections of blocks under a stack of headings.

Markdown and reStructuredText readers find headings and blocks line by line; this
class turns heading levels into heading paths (outermost first) and the collected
blocks into bounded chunks, one section at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.ingest.model import Chunk
from engine.ingest.parsers.packing import Block, pack_blocks
from engine.ingest.parsers.source_text import SourceText

__all__ = ["MAX_HEADING_CHARS", "Outline", "heading_label"]

#: Longest heading kept in a heading path; a setext underline below a long paragraph
#: would otherwise make the whole paragraph a "heading" repeated on every chunk.
MAX_HEADING_CHARS = 200


def heading_label(text: str) -> str:
    """Heading text with whitespace collapsed, cut to ``MAX_HEADING_CHARS``."""
    label = " ".join(text.split())
    if len(label) > MAX_HEADING_CHARS:
        label = label[: MAX_HEADING_CHARS - 1].rstrip() + "…"
    return label


@dataclass(slots=True)
class _Section:
    heading_path: tuple[str, ...]
    level: int  # 0 for the text before the first heading
    blocks: list[Block] = field(default_factory=list)
    heading_only: bool = False  # holds nothing but its heading so far


class Outline:
    """Collects a document's blocks into sections as its reader reports them."""

    __slots__ = ("_heading_stack", "_sections", "_source", "first_titles")

    def __init__(self, source: SourceText) -> None:
        self._source = source
        self._sections: list[_Section] = [_Section((), 0)]
        self._heading_stack: list[tuple[int, str]] = []
        self.first_titles: dict[int, str] = {}  # level -> text of the first heading at that level

    def add_block(self, first_line: int, end_line: int, *, is_code: bool = False) -> None:
        """Add lines [first_line, end_line) (0-based) to the current section."""
        if end_line <= first_line:
            return
        section = self._sections[-1]
        section.blocks.append(
            Block(
                self._source.line_starts[first_line],
                self._source.line_end(end_line - 1),
                is_code,
            )
        )
        section.heading_only = False

    def start_section(self, level: int, title: str, first_line: int, end_line: int) -> None:
        """Open a section (level 1 outermost) whose heading occupies lines [first_line, end_line)."""
        title = heading_label(title)
        if title:
            self.first_titles.setdefault(level, title)
        while self._heading_stack and self._heading_stack[-1][0] >= level:
            self._heading_stack.pop()
        self._heading_stack.append((level, title))
        previous = self._sections[-1]
        section = _Section(tuple(text for _, text in self._heading_stack), level)
        if previous.heading_only and level > previous.level:
            # "# Install" directly followed by "## From source": the bare parent heading
            # joins its first child instead of becoming a chunk of a few tokens.
            section.blocks = previous.blocks
            previous.blocks = []
        self._sections.append(section)
        self.add_block(first_line, end_line)
        section.heading_only = True

    def chunks(self) -> list[Chunk]:
        return [
            chunk
            for section in self._sections
            for chunk in pack_blocks(self._source, section.blocks, heading_path=section.heading_path)
        ]
