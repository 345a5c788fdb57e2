"""What a reference is, and the helpers every reader of references builds one with.

A ``Reference`` is one link or import a document states (``Relation`` says which kind),
with the source paths it may name. ``Lines`` turns offsets into line numbers, ``reference``
makes a ``Reference`` (target cut to a bounded length, candidates deduplicated) and
``inside`` joins a relative path to a directory without leaving the source root. Kept apart
from ``engine.ingest.relations`` so that the readers (``engine.ingest.links_in_documents``,
``engine.ingest.imports_in_code``) and the entry point that dispatches to them all import it.
"""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["RELATIONS", "Lines", "Reference", "Relation", "inside", "reference"]

Relation = Literal["links_to", "imports", "external"]
RELATIONS: tuple[Relation, ...] = ("links_to", "imports", "external")

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


class Lines:
    """Offset -> 1-based line number."""

    def __init__(self, text: str) -> None:
        self._starts = [match.end() for match in re.finditer("\n", text)]

    def at(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset) + 1


def reference(relation: Relation, target: str, line: int, candidates: Iterable[str] = (),
              anchored: bool = True) -> Reference:
    """A ``Reference``, its target cut to a bounded length and its candidates deduplicated in order."""
    return Reference(relation, target[:_MAX_TARGET_CHARS], line, tuple(dict.fromkeys(candidates)), anchored)


def inside(directory: str, relative: str) -> str | None:
    """``relative`` joined to ``directory`` and normalised; None when it climbs above the root."""
    joined = posixpath.normpath(posixpath.join(directory, relative))
    if joined == ".":
        return ""
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        return None
    return joined
