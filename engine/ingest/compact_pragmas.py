"""Compact's version expressions, the ``<expr>`` of ``pragma language_version <expr>;``.

Compact combines node-semver comparators with boolean operators (``&&`` and juxtaposition,
``||``, ``!``, parentheses) that no node-semver range can spell directly, ``!`` above all.
So an expression is evaluated over version sets and only its result is written out as a
range. Where pragmas are found in documents is ``engine.ingest.versions``.
"""

from __future__ import annotations

import re

from engine.ingest.npm_ranges import comparator
from engine.ingest.version_sets import UnrepresentableRange, VersionSet, complement, format_range, intersect, union

__all__ = ["compact_pragma_range"]

_PRAGMA_TOKEN = re.compile(
    r"\s*(?:(?P<punct>\|\||&&|!|\(|\))|(?P<comparator>(?:~>|~|\^|>=|<=|==|>|<|=)?\s*v?\d[\w.+-]*|[xX*]))"
)


class _PragmaReader:
    """Recursive descent over Compact's version expressions: ``||`` < ``&&`` < ``!`` < atoms."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        position = 0
        while position < len(text):
            match = _PRAGMA_TOKEN.match(text, position)
            if match is None or match.end() == position:
                if text[position:].strip():
                    raise UnrepresentableRange(f"unexpected {text[position:]!r}")
                break
            self.tokens.append(match.group("punct") or re.sub(r"\s+", "", match.group("comparator")))
            position = match.end()
        self.position = 0

    def read(self) -> VersionSet:
        result = self._any()
        if self.position != len(self.tokens):
            raise UnrepresentableRange(f"unexpected {self.tokens[self.position]!r}")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _any(self) -> VersionSet:
        result = self._all()
        while self._peek() == "||":
            self.position += 1
            result = union(result, self._all())
        return result

    def _all(self) -> VersionSet:
        result = self._term()
        while self._peek() not in (None, "||", ")"):
            if self._peek() == "&&":
                self.position += 1
            result = intersect(result, self._term())
        return result

    def _term(self) -> VersionSet:
        token = self._peek()
        if token is None:
            raise UnrepresentableRange("expression ends early")
        self.position += 1
        if token == "!":
            return complement(self._term())
        if token == "(":
            inner = self._any()
            if self._peek() != ")":
                raise UnrepresentableRange("unbalanced parenthesis")
            self.position += 1
            return inner
        if token in ("&&", "||", ")"):
            raise UnrepresentableRange(f"unexpected {token!r}")
        return comparator(token.replace("==", "=", 1))


def compact_pragma_range(expression: str) -> str:
    """Node-semver range for the expression of ``pragma language_version <expression>;``."""
    return format_range(_PragmaReader(expression).read())
