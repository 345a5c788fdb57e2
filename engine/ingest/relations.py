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

The readers are ``engine.ingest.links_in_documents`` (Markdown, HTML, reStructuredText)
and ``engine.ingest.imports_in_code``; ``Reference`` and the helpers they share are in
``engine.ingest.references``. This module dispatches a file to its reader by extension and
keeps each distinct reference once.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from engine.ingest.imports_in_code import code_imports
from engine.ingest.links_in_documents import html_anchors, markdown_links, rst_links
from engine.ingest.parsers.html import HTML_EXTENSIONS
from engine.ingest.parsers.languages import LANGUAGE_BY_EXTENSION
from engine.ingest.parsers.markdown import MARKDOWN_EXTENSIONS
from engine.ingest.parsers.rst import RST_EXTENSIONS
from engine.ingest.references import Lines, Reference

__all__ = ["MAX_REFERENCES", "references_in_document"]

#: References kept per document, at most (a generated index page can hold thousands).
MAX_REFERENCES = 2000


def references_in_document(path: str, text: str) -> list[Reference]:
    """The distinct references of one document, in document order (see the module docstring)."""
    extension = PurePosixPath(path).suffix.lower()
    lines = Lines(text)
    found: Iterable[Reference]
    if extension in MARKDOWN_EXTENSIONS:
        found = markdown_links(path, text, lines)
    elif extension in HTML_EXTENSIONS:
        found = html_anchors(path, text, lines)
    elif extension in RST_EXTENSIONS:
        found = rst_links(path, text, lines)
    elif extension in LANGUAGE_BY_EXTENSION:
        found = code_imports(path, text, lines, LANGUAGE_BY_EXTENSION[extension])
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
