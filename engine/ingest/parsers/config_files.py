"""Configuration files (YAML, TOML, JSON, INI/CFG) -> text chunks along top-level sections.

==================================  ==========================================================
format                              a section starts at
==================================  ==========================================================
.yaml .yml                          a top-level key (``services:``) or a ``---`` document
.toml .ini .cfg .conf               a ``[table]`` / ``[[array]]`` header at the start of a line
.json (pretty-printed)              a key of the outermost object (the least indented keys)
==================================  ==========================================================

Text before the first section (a preamble, a JSON ``{``) is a section without a heading.
Comment lines (``#``, ``;``) directly above a section belong to it. Consecutive sections
that fit the token bound together are merged into one chunk, with no heading path (a
chunk of several sections has no single heading); a section too large for one chunk is
chunked on its own, every piece headed by the section's name, and cut between its
entries: the lines indented least within it (a service of ``services:``, a key of a
TOML table) start the entries. Minified JSON has no lines to cut between; the packer
then cuts between tokens.

Configuration is prose-ranked text (``content_type`` ``text``, no language): it is read
for its key names and values, not run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import PurePosixPath

from engine.ingest.model import MAX_CHUNK_TOKENS, Chunk, ParsedDocument
from engine.ingest.parsers.outline import heading_label
from engine.ingest.parsers.packing import Block, pack_blocks
from engine.ingest.parsers.source_text import SourceText
from engine.ingest.parsers.tokens import count_utf8_tokens

__all__ = ["CONFIG_EXTENSIONS", "parse_config"]

_YAML_EXTENSIONS = (".yaml", ".yml")
_TABLE_EXTENSIONS = (".toml", ".ini", ".cfg", ".conf")
_JSON_EXTENSIONS = (".json", ".jsonc", ".json5")
CONFIG_EXTENSIONS = (*_YAML_EXTENSIONS, *_TABLE_EXTENSIONS, *_JSON_EXTENSIONS)

# A top-level key: quoted, or plain (not a comment, a `- ` list item, a `? ` complex key).
_YAML_KEY = re.compile(
    r"""("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\-?:][^:#]*?|-[^\s:#][^:#]*?)[ \t]*:(?:[ \t]|\r?$)"""
)
_YAML_DOCUMENT = re.compile(r"---(?:[ \t]|\r?$)")
_TABLE_HEADER = re.compile(r"\[\[?\s*([^\[\]]+?)\s*\]\]?[ \t]*(?:[#;].*)?\r?$")
_JSON_KEY = re.compile(r"""([ \t]*)"((?:[^"\\]|\\.)*)"\s*:""")
_COMMENT_PREFIXES = ("#", ";", "//")
_CLOSING_BRACKETS = ("]", "}", ")")


@dataclass(frozen=True, slots=True)
class _SectionStart:
    line: int  # 0-based index of the line naming the section
    heading: str | None


def _yaml_sections(lines: list[str]) -> list[_SectionStart]:
    starts: list[_SectionStart] = []
    for index, line in enumerate(lines):
        if _YAML_DOCUMENT.match(line):
            starts.append(_SectionStart(index, None))
            continue
        key = _YAML_KEY.match(line)
        if key is not None:
            starts.append(_SectionStart(index, key.group(1).strip("\"'")))
    return starts


def _table_sections(lines: list[str]) -> list[_SectionStart]:
    starts: list[_SectionStart] = []
    for index, line in enumerate(lines):
        header = _TABLE_HEADER.match(line)
        if header is not None:
            starts.append(_SectionStart(index, header.group(1)))
    return starts


def _json_sections(lines: list[str]) -> list[_SectionStart]:
    keys = [(index, match) for index, line in enumerate(lines) if (match := _JSON_KEY.match(line)) is not None]
    if not keys:
        return []
    outermost = min(len(match.group(1)) for _, match in keys)
    return [_SectionStart(index, match.group(2)) for index, match in keys if len(match.group(1)) == outermost]


_SECTIONS_BY_EXTENSION: dict[str, Callable[[list[str]], list[_SectionStart]]] = {
    **dict.fromkeys(_YAML_EXTENSIONS, _yaml_sections),
    **dict.fromkeys(_TABLE_EXTENSIONS, _table_sections),
    **dict.fromkeys(_JSON_EXTENSIONS, _json_sections),
}


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith(_COMMENT_PREFIXES)


def _first_line_with_comments(lines: list[str], line: int, floor: int) -> int:
    while line > floor and _is_comment(lines[line - 1]):
        line -= 1
    return line


def _indentation(line: str) -> int:
    return len(line) - len(line.lstrip())


def _entries(source: SourceText, first: int, named: int, end: int) -> list[Block]:
    """A large section's entries: lines [first, end) cut where the least indented body lines start.

    The section's own line ``named`` (its header or key) and the comments above it join
    the first entry; a comment line joins the entry below it, a closing bracket the one above.
    """
    lines = source.lines
    body = [index for index in range(named + 1, end) if lines[index].strip() and not _is_comment(lines[index])]
    if not body:
        return [Block(source.line_starts[first], source.line_end(end - 1))]
    least = min(_indentation(lines[index]) for index in body)
    cuts = [first]
    for index in body[1:]:  # the first entry holds the section's own line: never a chunk of only `key:`
        line = lines[index]
        if _indentation(line) == least and not line.lstrip().startswith(_CLOSING_BRACKETS):
            cut = _first_line_with_comments(lines, index, cuts[-1] + 1)
            if cut > cuts[-1]:
                cuts.append(cut)
    bounds = [*cuts, end]
    return [Block(source.line_starts[start], source.line_end(stop - 1)) for start, stop in pairwise(bounds)]


def _section_chunks(source: SourceText, starts: list[_SectionStart]) -> list[Chunk]:
    lines = source.lines
    firsts: list[int] = []  # first line of each section, comments above it included
    for index, start in enumerate(starts):
        floor = 0 if index == 0 else starts[index - 1].line + 1
        firsts.append(_first_line_with_comments(lines, start.line, floor))
    if not firsts or firsts[0] > 0:  # a preamble, or no sections at all
        firsts.insert(0, 0)
        starts = [_SectionStart(0, None), *starts]
    chunks: list[Chunk] = []
    small: list[Block] = []  # consecutive sections that may share chunks
    for start, first, stop in zip(starts, firsts, [*firsts[1:], len(lines)], strict=True):
        block = Block(source.line_starts[first], source.line_end(stop - 1))
        if count_utf8_tokens(source.raw[block.start : block.end]) <= MAX_CHUNK_TOKENS or start.heading is None:
            small.append(block)
            continue
        chunks.extend(pack_blocks(source, small))
        small = []
        heading = (heading_label(start.heading),)
        chunks.extend(pack_blocks(source, _entries(source, first, start.line, stop), heading_path=heading))
    chunks.extend(pack_blocks(source, small))
    return chunks


def parse_config(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a configuration file in one of ``CONFIG_EXTENSIONS``; raises ``ParseError`` if not UTF-8."""
    source = SourceText(raw)
    find_sections = _SECTIONS_BY_EXTENSION[PurePosixPath(relative_path).suffix.lower()]
    return ParsedDocument(
        title=PurePosixPath(relative_path).name,
        content_type="text",
        language=None,
        chunks=_section_chunks(source, find_sections(source.lines)),
    )
