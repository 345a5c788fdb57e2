"""Dockerfiles and Makefiles -> chunks along build stages and make rules.

Both are recognised by name as well as by extension: ``Dockerfile``, ``Containerfile``,
``Dockerfile.dev``, ``app.dockerfile``; ``Makefile``, ``makefile``, ``GNUmakefile``,
``Makefile.am``, ``rules.mk``. Both are code (``is_code`` chunks).

* Dockerfile (language ``dockerfile``): each ``FROM`` starts a stage running to the next
  one, named by its ``AS`` alias or else its image (``Dockerfile.builder``); instructions
  before the first ``FROM`` (global ``ARG``) chunk under the module's path.
* Makefile (language ``makefile``): each rule (its target line, continuation lines and
  tab-indented recipe) is named by its first target (``Makefile.test``); variables,
  directives and special targets such as ``.PHONY`` chunk under the module's path.

Comment lines directly above a stage or rule belong to its chunk.
"""

from __future__ import annotations

import re
from itertools import pairwise

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.code_regions import NamedSpan, code_document, start_with_comments
from engine.ingest.parsers.source_text import SourceText

__all__ = [
    "DOCKERFILE_EXTENSIONS",
    "MAKEFILE_EXTENSIONS",
    "is_dockerfile",
    "is_makefile",
    "parse_dockerfile",
    "parse_makefile",
]

DOCKERFILE_EXTENSIONS = (".dockerfile", ".containerfile")
MAKEFILE_EXTENSIONS = (".mk", ".mak")
_DOCKERFILE_NAMES = ("dockerfile", "containerfile")
_MAKEFILE_NAMES = ("makefile", "gnumakefile", "bsdmakefile")

_FROM = re.compile(r"[ \t]*FROM[ \t]+(?:--\S+[ \t]+)*(\S+)(?:[ \t]+AS[ \t]+(\S+))?", re.IGNORECASE)
# A rule line: targets, then `:` or `::` that does not begin an assignment (`:=`, `::=`).
_RULE = re.compile(r"([^\s#:=][^#:=]*?)[ \t]*:{1,2}(?![:=])")
_DIRECTIVE = re.compile(
    r"(?:include|-include|sinclude|define|endef|ifeq|ifneq|ifdef|ifndef|else|endif|export|unexport|override"
    r"|private|vpath|undefine)\b"
)
_SPECIAL_TARGET = re.compile(r"\.[A-Z_]+")


def _named_like(name: str, names: tuple[str, ...]) -> bool:
    """``Dockerfile`` and ``Dockerfile.<anything>`` for ``names`` = ("dockerfile",), any case."""
    lowered = name.lower()
    return any(lowered == known or lowered.startswith(known + ".") for known in names)


def is_dockerfile(file_name: str) -> bool:
    """Whether a file name (not a path) names a Dockerfile without saying so by extension."""
    return _named_like(file_name, _DOCKERFILE_NAMES)


def is_makefile(file_name: str) -> bool:
    """Whether a file name (not a path) names a Makefile without saying so by extension."""
    return _named_like(file_name, _MAKEFILE_NAMES)


def _stages(source: SourceText) -> list[NamedSpan]:
    starts: list[tuple[int, str]] = []  # (first line, name)
    floor = 0
    for index, line in enumerate(source.lines):
        match = _FROM.match(line)
        if match is not None:
            first = start_with_comments(source, index, floor)
            starts.append((first, match.group(2) or match.group(1)))
            floor = index + 1
    bounds = [source.line_starts[first] for first, _ in starts] + [len(source.raw)]
    return [NamedSpan(start, end, name) for (start, end), (_, name) in zip(pairwise(bounds), starts, strict=True)]


def _rule_end(lines: list[str], header: int) -> int:
    """Index of the last line of the rule whose target line is ``header``."""
    last = header
    continued = lines[header].rstrip("\r").endswith("\\")
    for index in range(header + 1, len(lines)):
        line = lines[index]
        if continued or line.startswith("\t"):
            last = index
        elif line.strip():
            break  # blank lines may separate recipe lines; anything else ends the rule
        continued = line.rstrip("\r").endswith("\\")
    return last


def _rules(source: SourceText) -> list[NamedSpan]:
    lines = source.lines
    spans: list[NamedSpan] = []
    floor = index = 0
    while index < len(lines):
        line = lines[index]
        rule = None if _DIRECTIVE.match(line) else _RULE.match(line)
        target = rule.group(1).split()[0] if rule is not None else ""
        if not target or _SPECIAL_TARGET.fullmatch(target):
            index += 1
            continue
        end = _rule_end(lines, index)
        first = start_with_comments(source, index, floor)
        spans.append(NamedSpan(source.line_starts[first], source.line_end(end), target))
        floor = index = end + 1
    return spans


def parse_dockerfile(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a Dockerfile; raises ``ParseError`` if it is not UTF-8 text."""
    source = SourceText(raw)
    return code_document(relative_path, source, "dockerfile", _stages(source))


def parse_makefile(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a Makefile; raises ``ParseError`` if it is not UTF-8 text."""
    source = SourceText(raw)
    return code_document(relative_path, source, "makefile", _rules(source))
