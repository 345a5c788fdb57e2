"""Links in documents: the references Markdown, HTML and reStructuredText pages state.

``markdown_links``, ``html_anchors`` and ``rst_links`` read one page's hyperlinks (and
Sphinx's ``:doc:``, toctree and include names) into ``Reference`` objects whose candidates
are the pages of the source a link may name; ``engine.ingest.relations`` says what each
format reads and how a target resolves. Separate from ``engine.ingest.imports_in_code``:
links are found with regular expressions over prose, resolved as page paths.
"""

from __future__ import annotations

import html
import posixpath
import re
from collections.abc import Iterator
from pathlib import PurePosixPath
from urllib.parse import unquote

from engine.ingest.references import Lines, Reference, inside, reference

__all__ = ["html_anchors", "markdown_links", "rst_links"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_NOT_LINKS = ("javascript:", "data:", "about:")
_DIRECTORY_PAGES = ("index.md", "README.md", "index.html", "index.rst", "readme.md", "index.mdx", "README.rst")
_PAGE_EXTENSIONS = (".md", ".mdx", ".rst", ".html")
_BUILT_PAGE_EXTENSIONS = (".html", ".htm")


def _link(document: str, written: str, line: int) -> Reference | None:
    """A link as written in ``document`` (Markdown, HTML, reStructuredText hyperlinks)."""
    target = written.strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1].strip()
    if not target or target.startswith("#"):
        return None  # empty, or an anchor in the same document
    if target.lower().startswith(_NOT_LINKS):
        return None
    if _SCHEME.match(target) or target.startswith("//"):
        return reference("external", target, line)
    location = unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not location:
        return None
    base = "" if location.startswith("/") else posixpath.dirname(document)
    resolved = inside(base, location.lstrip("/"))
    if resolved is None:
        return reference("external", target, line)  # outside this source
    return reference("links_to", target, line, _page_candidates(resolved, location.endswith("/")))


def _page_candidates(resolved: str, is_directory: bool) -> list[str]:
    prefix = f"{resolved}/" if resolved else ""
    if is_directory or not resolved:
        return [prefix + page for page in _DIRECTORY_PAGES]
    extension = PurePosixPath(resolved).suffix.lower()
    if extension in _BUILT_PAGE_EXTENSIONS:
        stem = resolved[: -len(extension)]
        return [resolved, stem + ".md", stem + ".rst"]
    if extension:
        return [resolved]
    return [resolved, *(resolved + ext for ext in _PAGE_EXTENSIONS), *(prefix + page for page in _DIRECTORY_PAGES)]


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)")
_INLINE_LINK = re.compile(
    r"(!?)\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\(\s*(<[^>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()]*)*)"
)
_LINK_DEFINITION = re.compile(r"^ {0,3}\[(?!\^)[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)", re.MULTILINE)
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]*:[^<>\s]+)>")
_ANCHOR = re.compile(r"""<a\b[^>]*?\shref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group())


def _without_code(text: str) -> str:
    """Markdown with fenced blocks and code spans blanked out (offsets and lines kept)."""
    kept: list[str] = []
    fence: str | None = None
    for line in text.splitlines(keepends=True):
        opening = _FENCE.match(line)
        if fence is None and opening is not None:
            fence = opening.group(1)
        elif fence is not None:
            closing = _FENCE.match(line)
            if closing is not None and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence) \
                    and not line.strip().strip(fence[0]):
                fence = None
        else:
            kept.append(_CODE_SPAN.sub(_blank, line))
            continue
        kept.append(re.sub(r"[^\n]", " ", line))
    return "".join(kept)


def markdown_links(path: str, text: str, lines: Lines) -> Iterator[Reference]:
    prose = _without_code(text)
    for match in _INLINE_LINK.finditer(prose):
        if match.group(1) != "!" and (found := _link(path, match.group(2), lines.at(match.start()))) is not None:
            yield found  # an image ("![alt](src)") is not a link
    for match in _LINK_DEFINITION.finditer(prose):
        if (found := _link(path, match.group(1), lines.at(match.start()))) is not None:
            yield found
    for match in _AUTOLINK.finditer(prose):
        yield reference("external", match.group(1), lines.at(match.start()))
    yield from html_anchors(path, prose, lines)


def html_anchors(path: str, text: str, lines: Lines) -> Iterator[Reference]:
    for match in _ANCHOR.finditer(text):
        written = html.unescape(next(group for group in match.groups() if group is not None))
        if (found := _link(path, written, lines.at(match.start()))) is not None:
            yield found


_DOC_ROLE = re.compile(r":doc:`(?:[^`<]*<([^`>]+)>|([^`]+))`")
_TOCTREE = re.compile(r"^([ \t]*)\.\.[ \t]+toctree::[^\n]*\n", re.MULTILINE)
_INCLUDE = re.compile(r"^[ \t]*\.\.[ \t]+(?:literal)?include::[ \t]+(\S+)", re.MULTILINE)
_HYPERLINK = re.compile(r"(?<![:\w])`[^`<]*<([^`>]+)>`__?")
_LINK_TARGET = re.compile(r"^[ \t]*\.\.[ \t]+_[^:\n]+:[ \t]+(\S+)[ \t]*$", re.MULTILINE)
_TOCTREE_ENTRY = re.compile(r"^(?:[^<]*<([^>]+)>|(\S+))\s*$")
_SOURCE_EXTENSIONS = (".rst", ".md", ".txt")


def _document_name(path: str, name: str, line: int) -> Reference | None:
    """A Sphinx document name (``:doc:``, toctree): relative to the document, or ``/`` from the docs root."""
    name = name.strip()
    if not name or name == "self" or "*" in name:
        return None
    if _SCHEME.match(name):
        return reference("external", name, line)
    has_extension = PurePosixPath(name).suffix.lower() in _SOURCE_EXTENSIONS
    if name.startswith("/"):
        # the Sphinx source directory is some directory enclosing the document (often docs/ or Doc/)
        relative = posixpath.normpath(name.lstrip("/"))
        return reference("links_to", name, line, _document_files(relative, has_extension), anchored=False)
    resolved = inside(posixpath.dirname(path), name)
    if resolved is None:
        return reference("external", name, line)
    return reference("links_to", name, line, _document_files(resolved, has_extension))


def _document_files(name: str, has_extension: bool) -> list[str]:
    return [name] if has_extension else [f"{name}.rst", f"{name}.md", f"{name}/index.rst"]


def rst_links(path: str, text: str, lines: Lines) -> Iterator[Reference]:
    for match in _DOC_ROLE.finditer(text):
        if (found := _document_name(path, match.group(1) or match.group(2), lines.at(match.start()))) is not None:
            yield found
    for match in _TOCTREE.finditer(text):
        yield from _toctree_entries(path, text, match, lines)
    for match in _INCLUDE.finditer(text):
        if (found := _link(path, match.group(1), lines.at(match.start()))) is not None:
            yield found
    for pattern in (_HYPERLINK, _LINK_TARGET):
        for match in pattern.finditer(text):
            if (found := _link(path, match.group(1), lines.at(match.start()))) is not None:
                yield found


def _toctree_entries(path: str, text: str, directive: re.Match[str], lines: Lines) -> Iterator[Reference]:
    indent = len(directive.group(1).expandtabs())
    offset = directive.end()
    for line in text[offset:].splitlines(keepends=True):
        stripped = line.strip()
        if stripped and len(line) - len(line.lstrip()) <= indent:
            return  # the directive's body ended
        if stripped and not stripped.startswith(":"):
            entry = _TOCTREE_ENTRY.match(stripped)
            if entry is not None and (found := _document_name(
                    path, entry.group(1) or entry.group(2), lines.at(offset))) is not None:
                yield found
        offset += len(line)
