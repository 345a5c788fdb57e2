"""Shell scripts and extensionless ``#!`` scripts -> chunks along functions.

``.sh``, ``.bash``, ``.zsh`` and ``.ksh`` files, and extensionless files whose shebang
names a shell, are shell code (language ``shell``): each function (``name() {...}`` or
``function name {...}``), with the comment lines above it, is a definition with symbol
path ``<module>.<name>``, the commands between functions chunk under the module's path.
A function ends at the first ``}`` (``)`` for a subshell body) indented like its header,
which is how shell code is written; a header without one is left to the module.

An extensionless script for another interpreter is read by the grammar of that language
where there is one (``python``, ``node``: the tree-sitter parser in
``engine.ingest.parsers.code``), else kept as one module of code in the interpreter's
language (``perl``, ``ruby``).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers.code import parse_code
from engine.ingest.parsers.code_regions import NamedSpan, code_document, start_with_comments
from engine.ingest.parsers.languages import LANGUAGE_BY_EXTENSION
from engine.ingest.parsers.source_text import SourceText

__all__ = ["SHELL_EXTENSIONS", "parse_script", "parse_shell", "shebang_interpreter"]

SHELL_EXTENSIONS = (".sh", ".bash", ".zsh", ".ksh")
_SHELLS = frozenset({"sh", "bash", "zsh", "ksh", "mksh", "dash", "ash", "busybox"})
#: Interpreters whose scripts a tree-sitter grammar reads: the extension naming that grammar.
_GRAMMAR_EXTENSION_BY_INTERPRETER = {"python": ".py", "pypy": ".py", "node": ".js", "nodejs": ".js"}

_FUNCTION_HEADER = re.compile(
    r"([ \t]*)(?:function[ \t]+([A-Za-z_][\w:.@-]*)[ \t]*(?:\([ \t]*\))?|([A-Za-z_][\w:.@-]*)[ \t]*\([ \t]*\))"
    r"[ \t]*(.*?)[ \t]*\r?$"
)
_VERSION_SUFFIX = re.compile(r"[\d.]+$")


def shebang_interpreter(raw: bytes) -> str | None:
    """The program a ``#!`` line runs, without path or version (``#!/usr/bin/env python3`` -> ``python``)."""
    if not raw.startswith(b"#!"):
        return None
    line_end = raw.find(b"\n")
    words = raw[2 : line_end if line_end >= 0 else len(raw)].decode("utf-8", errors="replace").split()
    if words and PurePosixPath(words[0]).name == "env":
        # `env -S node --flag`, `env LANG=C perl`: the first word that is neither option nor assignment
        words = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
    if not words:
        return None
    return _VERSION_SUFFIX.sub("", PurePosixPath(words[0]).name).lower() or None


def _function_end(lines: list[str], header: int, indentation: str, opener: str) -> int | None:
    """Index of the line closing the function whose header is line ``header``, or None."""
    if opener and opener not in ("{", "(") and opener.rstrip("; ").endswith(("}", ")")):
        return header  # `name() { body; }` on one line
    closer = ")" if opener.startswith("(") else "}"
    for index in range(header + 1, len(lines)):
        line = lines[index]
        if line.startswith(indentation + closer):  # indented exactly like the header
            return index
    return None


def _functions(source: SourceText) -> list[NamedSpan]:
    lines = source.lines
    spans: list[NamedSpan] = []
    floor = index = 0
    while index < len(lines):
        header = _FUNCTION_HEADER.match(lines[index])
        end = None if header is None else _function_end(lines, index, header.group(1), header.group(4))
        if header is None or end is None:
            index += 1
            continue
        first = start_with_comments(source, index, floor)
        spans.append(NamedSpan(source.line_starts[first], source.line_end(end), header.group(2) or header.group(3)))
        floor = index = end + 1
    return spans


def parse_shell(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse a shell script; raises ``ParseError`` if it is not UTF-8 text."""
    source = SourceText(raw)
    return code_document(relative_path, source, "shell", _functions(source))


def parse_script(relative_path: str, raw: bytes) -> ParsedDocument:
    """Parse an extensionless file starting with ``#!``, by the interpreter it names."""
    interpreter = shebang_interpreter(raw)
    grammar_extension = _GRAMMAR_EXTENSION_BY_INTERPRETER.get(interpreter or "")
    if grammar_extension is not None:
        return parse_code(relative_path, raw, spec=LANGUAGE_BY_EXTENSION[grammar_extension])
    if interpreter is None or interpreter in _SHELLS:
        return parse_shell(relative_path, raw)
    return code_document(relative_path, SourceText(raw), interpreter, ())
