"""Source code -> chunks along symbols, each with a dotted ``symbol_path``.

Each function, class, method, impl, struct, ... becomes its own chunk, with the
comments, decorators and attributes directly above it. A container's header and
fields (the text between its members) form chunks of the container's path, and code
between top-level symbols (imports, constants) forms chunks of the module's path.
Chunks follow the file in order without overlap; only stretches holding nothing but
closing brackets or comments trailing a symbol's last line are left out. A symbol
over the token bound is split on line boundaries, every piece keeping its path.

Symbol paths start with the module path: the relative path without extension, ``/``
-> ``.`` (``engine/search.py`` -> ``engine.search``; a trailing Python ``__init__`` or
Rust ``mod`` is dropped). Java uses the file's ``package`` declaration instead of
its directories, and a top-level class named like its file does not repeat the name
(``com/x/Foo.java``: ``com.x.Foo.bar``, not ``com.x.Foo.Foo.bar``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from tree_sitter import Node

from engine.ingest.model import Chunk, ParsedDocument
from engine.ingest.parsers.languages import (
    LANGUAGE_BY_EXTENSION,
    LanguageSpec,
    SymbolKind,
    node_text,
    parser_for,
)
from engine.ingest.parsers.packing import Block, pack_blocks
from engine.ingest.parsers.source_text import SourceText

__all__ = ["CODE_EXTENSIONS", "module_path", "parse_code"]

CODE_EXTENSIONS = tuple(LANGUAGE_BY_EXTENSION)


@dataclass(frozen=True, slots=True)
class _Region:
    start: int
    end: int
    symbol_path: str


def _join(path: str, name: str) -> str:
    if not name:
        return path
    return f"{path}.{name}" if path else name


def module_path(relative_path: str) -> str:
    """Dotted module path of a source file (without Java's package rule)."""
    path = PurePosixPath(relative_path.replace("\\", "/"))
    parts = [part for part in path.parts if part not in ("/", ".", "..")]
    if not parts:
        return ""
    extension = path.suffix.lower()
    stem = parts[-1][: len(parts[-1]) - len(extension)] if extension else parts[-1]
    if extension in (".ts", ".mts", ".cts") and stem.endswith(".d"):
        stem = stem[:-2]  # index.d.ts declares module "index"
    parts[-1] = stem
    if (extension in (".py", ".pyi") and stem == "__init__") or (extension == ".rs" and stem == "mod"):
        parts.pop()
    return ".".join(parts) or stem


def _java_module_path(relative_path: str, root: Node) -> str:
    for child in root.named_children:
        if child.type == "package_declaration":
            package = next(
                (node for node in child.named_children if node.type in ("scoped_identifier", "identifier")),
                None,
            )
            if package is not None:
                return _join("".join(node_text(package).split()), PurePosixPath(relative_path).stem)
    return module_path(relative_path)


class _SymbolWalker:
    """Cuts a syntax tree into ordered, non-overlapping regions labelled with symbol paths."""

    def __init__(self, source: SourceText, spec: LanguageSpec, file_class: str) -> None:
        self.source = source
        self.spec = spec
        self.file_class = file_class  # Java: the top-level class named like the file adds no segment
        self.regions: list[_Region] = []

    def walk(self, nodes: Sequence[Node], scope_start: int, scope_end: int, path: str, *, top_level: bool) -> None:
        """Regions for the definitions among ``nodes`` and the code between them.

        A gap between definitions becomes a region only if it holds code or a comment
        on a line of its own: what is left after ``}  // namespace x`` is noise. The
        first gap of a container always counts, as it holds the container's header.
        """
        raw = self.source.raw
        cursor = scope_start
        attached_from = -1  # start of the comment/attribute run right above the next node
        attached_last_row = -2
        gap_has_content = True
        for node in self.spec.members(nodes):
            if node.type in self.spec.attached:
                line_start = node.start_byte - node.start_point.column
                if line_start < cursor or raw[line_start : node.start_byte].strip():
                    attached_from = -1  # a trailing comment belongs to the code before it
                else:
                    gap_has_content = True
                    if attached_from < 0 or node.start_point.row > attached_last_row + 1:
                        attached_from = line_start
                attached_last_row = node.end_point.row
                continue
            definition = self.spec.definition(node)
            if definition is None:
                attached_from = -1
                gap_has_content = True
                continue
            start = node.start_byte
            if attached_from >= 0 and node.start_point.row <= attached_last_row + 1:
                start = attached_from
            else:
                line_start = start - node.start_point.column
                if line_start >= cursor and not raw[line_start:start].strip():
                    start = line_start  # keep the indentation with the definition
            attached_from = -1
            end = max(node.end_byte, start)
            if start > cursor and gap_has_content:
                self.regions.append(_Region(cursor, start, path))
            repeats_file = top_level and definition.name == self.file_class
            symbol_path = path if repeats_file else _join(path, definition.name)
            if definition.kind is SymbolKind.CONTAINER:
                self.walk(definition.members, start, end, symbol_path, top_level=False)
            else:
                self.regions.append(_Region(start, end, symbol_path))
            cursor = end
            gap_has_content = False
        if scope_end > cursor and gap_has_content:
            self.regions.append(_Region(cursor, scope_end, path))


def parse_code(relative_path: str, raw: bytes, *, spec: LanguageSpec | None = None) -> ParsedDocument:
    """Parse a source file in one of ``CODE_EXTENSIONS``; raises ``ParseError`` if not UTF-8.

    ``spec`` names the language of a file whose extension does not (a ``#!`` script).
    """
    spec = spec or LANGUAGE_BY_EXTENSION.get(PurePosixPath(relative_path).suffix.lower())
    if spec is None:
        raise ValueError(f"no grammar for {relative_path!r}; expected one of {CODE_EXTENSIONS}")
    source = SourceText(raw)
    root = parser_for(spec).parse(raw).root_node
    if spec.name == "java":
        module = _java_module_path(relative_path, root)
        file_class = PurePosixPath(relative_path).stem
    else:
        module, file_class = module_path(relative_path), ""
    walker = _SymbolWalker(source, spec, file_class)
    walker.walk(root.named_children, source.body_start, len(raw), module, top_level=True)
    chunks: list[Chunk] = []
    for region in walker.regions:
        chunks.extend(
            pack_blocks(source, (Block(region.start, region.end, True),), symbol_path=region.symbol_path or None)
        )
    return ParsedDocument(
        title=PurePosixPath(relative_path).name,
        content_type="code",
        language=spec.name,
        chunks=chunks,
    )
