"""Links and imports a document states, and the paths of its source they may name.

``references_in_document(path, text)`` reads one file's references; it never touches
the database. A reference keeps its target as written and, when the target may be a
file of the same source, the *candidate* paths it names, best first. Which candidate
exists is decided at query time (``quarry.relation_target``), so a target ingested
later, deleted or renamed back resolves without re-reading the referring file.

===================  ==========================================================================
format               what is read (relation)
===================  ==========================================================================
Markdown             ``[x](target)`` (images skipped), ``[x]: target`` definitions, ``<url>``
                     autolinks and ``<a href>``; code fences and code spans ignored (links_to)
HTML                 ``<a href>`` (links_to)
reStructuredText     ``:doc:``, ``.. toctree::`` entries, ``.. include::`` /
                     ``.. literalinclude::``, `` `text <target>`_ `` and ``.. _name: target``
                     (links_to); ``:ref:`` labels are not paths and are not read
Python               ``import a.b``, ``from .x import y`` (tree-sitter; imports)
JavaScript / TS      ``import ... from``, ``export ... from``, ``require()``, ``import()``,
                     TS ``import x = require()`` (tree-sitter; imports)
C / C++              ``#include "x.h"`` and ``<x.h>`` (imports)
Rust                 ``mod x;``, ``use crate::`` / ``self::`` / ``super::`` (imports)
Java                 ``import a.b.C;`` (imports)
Go                   ``import "path"`` (imports, unresolved: a Go package is a directory)
===================  ==========================================================================

Resolution rules:

- A link with a URL scheme (``https:``, ``mailto:``) or ``//host`` is ``external``; so
  is a relative path climbing above the source root, a bare JavaScript specifier
  (``react``, ``node:fs``), a Rust path outside ``crate``/``self``/``super``,
  ``java.*``/``javax.*``, Go's standard library and Python's (whose modules still
  resolve where the source holds them: CPython's ``Lib/``).
- Link paths lose ``#fragment`` and ``?query``, are percent-decoded and resolved against
  the document's directory (``/x`` against the source root) and normalised. A link to a
  directory names its ``index``/``README`` page; a path without extension may name
  ``x.md``, ``x.rst``, ``x.html`` or ``x/index.*``; ``x.html`` may name the ``x.md`` or
  ``x.rst`` it was built from. A link to the document itself is dropped.
- Python: ``from .m import n`` names ``m/n.py``, ``m/n/__init__.py`` (when ``n`` could be a
  module: no capitals), then ``m.py``, ``m/__init__.py``, relative to the package; an
  absolute module ``a.b`` names ``a/b.py`` or ``a/b/__init__.py`` under the source root or
  any directory enclosing the file, the root first (src layouts, nested projects).
- JavaScript / TypeScript: ``./x`` names ``x`` as written, then ``x`` with ``.ts .tsx .js
  .jsx .mjs .cjs .mts .cts .d.ts``, then ``x/index.*``; ``./x.js`` may also name ``x.ts``
  (TypeScript's ESM convention).
- C: ``"x.h"`` names the file next to the includer, then ``x.h``, ``include/x.h``,
  ``src/x.h`` from the root; ``<x.h>`` the last three.
- Rust: ``mod x;`` names ``x.rs`` or ``x/mod.rs`` in the module's directory; ``use
  crate::a::b`` names ``a/b.rs``, ``a/b/mod.rs``, ``a.rs``, ``a/mod.rs`` under the nearest
  enclosing ``src`` directory, longest path first (a path may end in an item).
- Java: ``a.b.C`` names ``a/b/C.java`` (then shorter prefixes, for nested classes) under
  the root or any enclosing directory (``src/main/java``).
"""

from __future__ import annotations

import bisect
import html
import posixpath
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal
from urllib.parse import unquote

from tree_sitter import Node, Query, QueryCursor

from engine.ingest.parsers.html import HTML_EXTENSIONS
from engine.ingest.parsers.languages import LANGUAGE_BY_EXTENSION, LanguageSpec, node_text, parser_for
from engine.ingest.parsers.markdown import MARKDOWN_EXTENSIONS
from engine.ingest.parsers.rst import RST_EXTENSIONS

__all__ = ["MAX_REFERENCES", "RELATIONS", "Reference", "Relation", "references_in_document"]

Relation = Literal["links_to", "imports", "external"]
RELATIONS: tuple[Relation, ...] = ("links_to", "imports", "external")

#: References kept per document, at most (a generated index page can hold thousands).
MAX_REFERENCES = 2000
_MAX_TARGET_CHARS = 500


@dataclass(frozen=True, slots=True)
class Reference:
    """One link or import, as written, with the paths of the same source it may name."""

    relation: Relation
    target: str  # as written: '../guide/a.md#setup', 'engine.errors', 'https://...'
    line: int  # 1-based line of the document it is written on
    candidates: tuple[str, ...] = ()  # source-relative paths it may name, best first
    # False: each candidate may sit under any directory enclosing the document, the root first
    anchored: bool = True


def references_in_document(path: str, text: str) -> list[Reference]:
    """The distinct references of one document, in document order (see the module docstring)."""
    extension = PurePosixPath(path).suffix.lower()
    lines = _Lines(text)
    found: Iterable[Reference]
    if extension in MARKDOWN_EXTENSIONS:
        found = _markdown(path, text, lines)
    elif extension in HTML_EXTENSIONS:
        found = _html_anchors(path, text, lines)
    elif extension in RST_EXTENSIONS:
        found = _rst(path, text, lines)
    elif extension in LANGUAGE_BY_EXTENSION:
        found = _code(path, text, lines, LANGUAGE_BY_EXTENSION[extension])
    else:
        return []
    unique: dict[tuple[object, ...], Reference] = {}
    for reference in found:
        if reference.anchored and reference.candidates[:1] == (path,):
            continue  # a link to the document itself
        key = (reference.relation, reference.candidates, reference.anchored) if reference.candidates \
            else (reference.relation, reference.target)
        if key not in unique:
            unique[key] = reference
            if len(unique) == MAX_REFERENCES:
                break
    return sorted(unique.values(), key=lambda reference: reference.line)


class _Lines:
    """Offset -> 1-based line number."""

    def __init__(self, text: str) -> None:
        self._starts = [match.end() for match in re.finditer("\n", text)]

    def at(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset) + 1


def _reference(relation: Relation, target: str, line: int, candidates: Iterable[str] = (),
               anchored: bool = True) -> Reference:
    return Reference(relation, target[:_MAX_TARGET_CHARS], line, tuple(dict.fromkeys(candidates)), anchored)


# -- links in documents -------------------------------------------------------

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_NOT_LINKS = ("javascript:", "data:", "about:")
_DIRECTORY_PAGES = ("index.md", "README.md", "index.html", "index.rst", "readme.md", "index.mdx", "README.rst")
_PAGE_EXTENSIONS = (".md", ".mdx", ".rst", ".html")
_BUILT_PAGE_EXTENSIONS = (".html", ".htm")


def _inside(directory: str, relative: str) -> str | None:
    """``relative`` joined to ``directory`` and normalised; None when it climbs above the root."""
    joined = posixpath.normpath(posixpath.join(directory, relative))
    if joined == ".":
        return ""
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        return None
    return joined


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
        return _reference("external", target, line)
    location = unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not location:
        return None
    base = "" if location.startswith("/") else posixpath.dirname(document)
    resolved = _inside(base, location.lstrip("/"))
    if resolved is None:
        return _reference("external", target, line)  # outside this source
    return _reference("links_to", target, line, _page_candidates(resolved, location.endswith("/")))


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


def _markdown(path: str, text: str, lines: _Lines) -> Iterator[Reference]:
    prose = _without_code(text)
    for match in _INLINE_LINK.finditer(prose):
        if match.group(1) != "!" and (found := _link(path, match.group(2), lines.at(match.start()))) is not None:
            yield found  # an image ("![alt](src)") is not a link
    for match in _LINK_DEFINITION.finditer(prose):
        if (found := _link(path, match.group(1), lines.at(match.start()))) is not None:
            yield found
    for match in _AUTOLINK.finditer(prose):
        yield _reference("external", match.group(1), lines.at(match.start()))
    yield from _html_anchors(path, prose, lines)


def _html_anchors(path: str, text: str, lines: _Lines) -> Iterator[Reference]:
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
        return _reference("external", name, line)
    has_extension = PurePosixPath(name).suffix.lower() in _SOURCE_EXTENSIONS
    if name.startswith("/"):
        # the Sphinx source directory is some directory enclosing the document (often docs/ or Doc/)
        relative = posixpath.normpath(name.lstrip("/"))
        return _reference("links_to", name, line, _document_files(relative, has_extension), anchored=False)
    resolved = _inside(posixpath.dirname(path), name)
    if resolved is None:
        return _reference("external", name, line)
    return _reference("links_to", name, line, _document_files(resolved, has_extension))


def _document_files(name: str, has_extension: bool) -> list[str]:
    return [name] if has_extension else [f"{name}.rst", f"{name}.md", f"{name}/index.rst"]


def _rst(path: str, text: str, lines: _Lines) -> Iterator[Reference]:
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


def _toctree_entries(path: str, text: str, directive: re.Match[str], lines: _Lines) -> Iterator[Reference]:
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


# -- imports in code ----------------------------------------------------------

def _code(path: str, text: str, lines: _Lines, spec: LanguageSpec) -> Iterator[Reference]:
    if spec.name == "python":
        yield from _python(path, _tree(spec, text), spec)
    elif spec.name in ("javascript", "typescript", "tsx"):
        yield from _javascript(path, _tree(spec, text), spec)
    elif spec.name in ("c", "cpp"):
        yield from _c_includes(path, text, lines)
    elif spec.name == "rust":
        yield from _rust(path, text, lines)
    elif spec.name == "java":
        yield from _java(text, lines)
    elif spec.name == "go":
        yield from _go(text, lines)


def _tree(spec: LanguageSpec, text: str) -> Node:
    return parser_for(spec).parse(text.encode("utf-8")).root_node


_queries: dict[tuple[str, str], Query] = {}


def _matches(spec: LanguageSpec, root: Node, pattern: str) -> list[dict[str, list[Node]]]:
    query = _queries.get((spec.name, pattern))
    if query is None:
        language = parser_for(spec).language
        assert language is not None  # parser_for sets it
        query = _queries[(spec.name, pattern)] = Query(language, pattern)
    return [captures for _, captures in QueryCursor(query).matches(root)]


_PYTHON_IMPORTS = "[(import_statement) (import_from_statement) (future_import_statement)] @import"
_STDLIB = frozenset(sys.stdlib_module_names)


def _python(path: str, root: Node, spec: LanguageSpec) -> Iterator[Reference]:
    for captures in _matches(spec, root, _PYTHON_IMPORTS):
        statement = captures["import"][0]
        line = statement.start_point[0] + 1
        names = [name if name.type == "dotted_name" else name.child_by_field_name("name")
                 for name in statement.children_by_field_name("name")]
        written = [node_text(name) for name in names if name is not None]
        if statement.type == "future_import_statement":
            yield _reference("external", "__future__", line)
        elif statement.type == "import_statement":
            for module in written:
                yield _python_module(path, module, [], line)
        else:
            module_name = statement.child_by_field_name("module_name")
            if module_name is not None:
                yield from _python_from(path, "".join(node_text(module_name).split()), written, line)


def _python_from(path: str, module: str, names: list[str], line: int) -> Iterator[Reference]:
    if module.split(".", 1)[0] in _STDLIB:
        yield _python_module(path, module, [], line)  # what the standard library holds is not asked
        return
    # Names with capitals are classes or constants, never modules: one reference for all of them.
    submodules = [name for name in names if name == name.lower()]
    if len(submodules) < len(names) or not names:
        yield _python_module(path, module, [], line)
    for name in submodules:
        yield _python_module(path, module, [name], line)


def _python_module(path: str, module: str, names: list[str], line: int) -> Reference:
    """``module`` (``a.b``, ``..x``) imported by ``path``, optionally ``names`` from it."""
    dots = len(module) - len(module.lstrip("."))
    parts = [part for part in module[dots:].split(".") if part]
    written = module if not names else module + ("" if module.endswith(".") else ".") + names[0]
    if dots == 0:
        if parts and parts[0] in _STDLIB:
            # external, unless the source is the standard library itself (CPython's Lib/)
            return _reference("external", module, line, _python_files(parts, []), anchored=False)
        return _reference("imports", written, line, _python_files(parts, names), anchored=False)
    package = posixpath.dirname(path)
    for _ in range(dots - 1):
        if not package:
            return _reference("imports", written, line)  # climbs above the source: cannot resolve
        package = posixpath.dirname(package)
    base = [package] if package else []
    return _reference("imports", written, line, _python_files([*base, *parts], names))


def _python_files(parts: list[str], names: list[str]) -> list[str]:
    module = "/".join(parts)
    found = [f"{module}/{name}.py" if module else f"{name}.py" for name in names]
    found += [f"{module}/{name}/__init__.py" if module else f"{name}/__init__.py" for name in names]
    if module:
        found += [f"{module}.py", f"{module}/__init__.py"]
    return found


_JS_IMPORTS = """
(import_statement source: (string) @source)
(export_statement source: (string) @source)
(call_expression function: [(identifier) (import)] @callee arguments: (arguments . (string) @source))
"""
_TS_IMPORTS = _JS_IMPORTS + "(import_require_clause source: (string) @source)\n"
_SCRIPT_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".d.ts")
_INDEX_FILES = tuple(f"index{ext}" for ext in (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs"))


def _javascript(path: str, root: Node, spec: LanguageSpec) -> Iterator[Reference]:
    pattern = _JS_IMPORTS if spec.name == "javascript" else _TS_IMPORTS
    for captures in _matches(spec, root, pattern):
        callee = captures.get("callee")
        if callee is not None and node_text(callee[0]) not in ("require", "import"):
            continue
        source = captures["source"][0]
        specifier = node_text(source)[1:-1]
        line = source.start_point[0] + 1
        if not specifier:
            continue
        if not specifier.startswith((".", "/")) or specifier.startswith("//"):
            yield _reference("external", specifier, line)  # a package, node: builtin or path alias
            continue
        resolved = _inside(posixpath.dirname(path), specifier) if specifier.startswith(".") else None
        if resolved is None:
            yield _reference("external", specifier, line)
            continue
        yield _reference("imports", specifier, line, _script_files(resolved))


def _script_files(resolved: str) -> list[str]:
    found = [resolved] if resolved else []
    extension = PurePosixPath(resolved).suffix.lower()
    if extension in (".js", ".jsx", ".mjs", ".cjs"):
        stem = resolved[: -len(extension)]
        found += [stem + {".js": ".ts", ".jsx": ".tsx", ".mjs": ".mts", ".cjs": ".cts"}[extension], stem + ".tsx"]
    found += [resolved + ext for ext in _SCRIPT_EXTENSIONS]
    prefix = f"{resolved}/" if resolved else ""
    found += [prefix + index for index in _INDEX_FILES]
    return found


_C_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)


def _c_includes(path: str, text: str, lines: _Lines) -> Iterator[Reference]:
    for match in _C_INCLUDE.finditer(text):
        quoted, angled = match.groups()
        header = quoted or angled
        line = lines.at(match.start())
        search = [header, f"include/{header}", f"src/{header}"]
        if quoted is not None:
            beside = _inside(posixpath.dirname(path), header)
            search = [beside, *search] if beside is not None else search
        yield _reference("imports", f'"{header}"' if quoted else f"<{header}>", line,
                         [file for file in map(posixpath.normpath, search) if not file.startswith(("/", "../"))])


_RUST_MOD = re.compile(r"^[ \t]*(?:pub(?:\([^)\n]*\))?[ \t]+)?mod[ \t]+(\w+)[ \t]*;", re.MULTILINE)
_RUST_USE = re.compile(r"^[ \t]*(?:pub(?:\([^)\n]*\))?[ \t]+)?use[ \t]+([^;]+);", re.MULTILINE)


def _rust(path: str, text: str, lines: _Lines) -> Iterator[Reference]:
    module_dir = _rust_module_dir(path)
    for match in _RUST_MOD.finditer(text):
        name = match.group(1)
        prefix = f"{module_dir}/" if module_dir else ""
        yield _reference("imports", f"mod {name}", lines.at(match.start()), [f"{prefix}{name}.rs",
                                                                              f"{prefix}{name}/mod.rs"])
    for match in _RUST_USE.finditer(text):
        line = lines.at(match.start())
        tree = "".join(re.sub(r"\s+as\s+\w+", "", match.group(1)).split())
        for use_path in _rust_use_paths(tree):
            segments = use_path.split("::")
            base: str | None
            if segments[0] == "crate":
                base = _rust_crate_root(path)
            elif segments[0] == "self":
                base = module_dir
            elif segments[0] == "super":
                base = posixpath.dirname(module_dir)
                while len(segments) > 1 and segments[1] == "super":
                    base, segments = posixpath.dirname(base), segments[1:]
            else:
                yield _reference("external", use_path, line)
                continue
            yield _reference("imports", use_path, line, _rust_files(base, segments[1:]))


def _rust_use_paths(tree: str) -> list[str]:
    """``a::{b, c::{d, self}}`` -> ``a::b``, ``a::c::d``, ``a::c``; aliases and globs dropped."""
    if "{" not in tree:
        return [tree.removesuffix("::*").removesuffix("::self")]
    head, _, rest = tree.partition("{")
    inner = rest[: rest.rfind("}")]
    items: list[str] = []
    depth = 0
    current = ""
    for character in inner:
        if character == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(character, 0)
        current += character
    items.append(current)
    head = head.removesuffix("::")
    paths: list[str] = []
    for item in items:
        if not item or item == "*":
            continue
        paths += [f"{head}::{sub}" if sub else head for sub in _rust_use_paths(item)] if item != "self" else [head]
    return [path.removesuffix("::self") for path in paths]


def _rust_module_dir(path: str) -> str:
    """Where the child modules of the file's module live."""
    stem = PurePosixPath(path).stem
    directory = posixpath.dirname(path)
    if stem in ("mod", "lib", "main"):
        return directory
    return posixpath.join(directory, stem) if directory else stem


def _rust_crate_root(path: str) -> str:
    parts = posixpath.dirname(path).split("/")
    if "src" in parts:
        return "/".join(parts[: len(parts) - parts[::-1].index("src")])
    return posixpath.dirname(path)


def _rust_files(base: str, segments: list[str]) -> list[str]:
    prefix = f"{base}/" if base else ""
    found: list[str] = []
    for length in range(len(segments), 0, -1):
        module = "/".join(segments[:length])
        found += [f"{prefix}{module}.rs", f"{prefix}{module}/mod.rs"]
    return found


_JAVA_IMPORT = re.compile(r"^[ \t]*import[ \t]+(static[ \t]+)?([\w.]+?)(\.\*)?[ \t]*;", re.MULTILINE)
_JAVA_PLATFORM = ("java.", "javax.", "jdk.", "sun.", "com.sun.")


def _java(text: str, lines: _Lines) -> Iterator[Reference]:
    for match in _JAVA_IMPORT.finditer(text):
        is_static, name, wildcard = match.groups()
        line = lines.at(match.start())
        if name.startswith(_JAVA_PLATFORM):
            yield _reference("external", name, line)
            continue
        parts = name.split(".")
        if is_static and not wildcard:
            parts = parts[:-1]  # a member of the class
        if wildcard and not is_static:
            yield _reference("imports", name + ".*", line)  # a package: a directory, not a file
            continue
        candidates = ["/".join(parts[:length]) + ".java" for length in range(len(parts), 1, -1)]
        yield _reference("imports", name, line, candidates, anchored=False)


_GO_IMPORT = re.compile(r'^import[ \t]+(?:[\w.]+[ \t]+)?"([^"\n]+)"', re.MULTILINE)
_GO_IMPORT_BLOCK = re.compile(r"^import[ \t]*\(([^)]*)\)", re.MULTILINE)
_GO_SPEC = re.compile(r'^[ \t]*(?:[\w.]+[ \t]+)?"([^"\n]+)"', re.MULTILINE)


def _go(text: str, lines: _Lines) -> Iterator[Reference]:
    found = [(match.group(1), match.start()) for match in _GO_IMPORT.finditer(text)]
    for block in _GO_IMPORT_BLOCK.finditer(text):
        found += [(spec.group(1), block.start(1) + spec.start()) for spec in _GO_SPEC.finditer(block.group(1))]
    for package, offset in found:
        standard = "." not in package.split("/", 1)[0]
        yield _reference("external" if standard else "imports", package, lines.at(offset))
