"""Version constraints written inside documents, as node-semver ranges.

Every constraint Quarry stores is a node-semver range string, because that is the one
syntax ``quarry.version_range(range)`` parses in SQL. Ranges are computed, not copied:
each source syntax is read into a ``VersionSet`` (a union of intervals over semver
points) and written back out in a canonical form, so ``>= 0.16 && <= 0.18`` becomes
``>=0.16.0 <0.19.0-0`` and every emitted range is valid whatever the input looked like.

What a document can say about versions:

- Compact pragmas, ``pragma language_version <expr>;`` (whole text of ``.compact`` and
  non-Markdown files, fenced code blocks of Markdown): ``&&`` and juxtaposition mean
  AND, ``||`` OR, ``!`` NOT, parentheses group. Partial versions follow node-semver,
  which is also how Compact reads them: ``0.16`` is any 0.16.x, ``<= 0.18`` includes
  0.18.5, ``> 0.18`` starts at 0.19.0.
- Front matter (YAML ``---`` or TOML ``+++`` at the top of a Markdown file); see
  ``FRONT_MATTER_KEYS``. A value is a node-semver range (commas also mean AND), a list
  of them (OR), or a bare version (``0.17`` = 0.17.x).

Nothing here raises on bad input: an unreadable constraint is left out, and when the
caller passes a ``skipped`` list it receives ``(what, reason)`` for each one.
"""

from __future__ import annotations

import html
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

__all__ = [
    "EVERYTHING",
    "FRONT_MATTER_KEYS",
    "Bound",
    "Facet",
    "Interval",
    "SemVer",
    "Skipped",
    "UnrepresentableRange",
    "VersionConstraint",
    "VersionSet",
    "caret_range",
    "compact_pragma_range",
    "comparator_range",
    "complement",
    "constraints_in_document",
    "format_range",
    "intersect",
    "normalise_npm_range",
    "npm_range",
    "parse_partial",
    "tilde_range",
    "union",
]

Facet = Literal["language_target", "sdk_dependency"]

#: Where the public functions report what they left out: ``(what, reason)`` pairs.
Skipped = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class VersionConstraint:
    """One version constraint found at ingest, ready for ``quarry.version_range(range)``."""

    facet: Facet
    name: str | None  # package (sdk_dependency) or language (language_target); None when unnamed
    range: str  # node-semver range syntax, canonical form, e.g. ">=0.16.0 <0.19.0-0"
    raw: str  # the constraint as written
    origin: str  # e.g. "pragma", "front_matter:version", "package.json:peerDependencies"


class UnrepresentableRange(ValueError):
    """A constraint that has no node-semver equivalent (bad syntax, epochs, empty sets).

    Internal: the public functions catch it and report the entry as skipped.
    """


# ---------------------------------------------------------------- semver points and sets

#: node-semver refuses version components above JavaScript's safe integer range.
_MAX_SAFE_INTEGER = 2**53 - 1

_PreKey = tuple[tuple[int, int, str], ...]


@dataclass(frozen=True, slots=True)
class SemVer:
    """A semver 2.0 version (build metadata dropped: it never affects precedence)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()

    def key(self) -> tuple[int, int, int, int, _PreKey]:
        # A release sorts after its prereleases; numeric identifiers before alphanumeric ones.
        pre: _PreKey = tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return core + "-" + ".".join(str(part) for part in self.prerelease) if self.prerelease else core


def floor_prerelease(major: int, minor: int, patch: int) -> SemVer:
    """``M.m.p-0``: below every prerelease of ``M.m.p`` (node-semver's exclusive upper bounds)."""
    return SemVer(major, minor, patch, (0,))


@dataclass(frozen=True, slots=True)
class Bound:
    point: SemVer
    inclusive: bool


@dataclass(frozen=True, slots=True)
class Interval:
    """Versions between two bounds; a missing bound is unbounded on that side."""

    lower: Bound | None = None
    upper: Bound | None = None


_LOWEST_RELEASE = Bound(SemVer(0, 0, 0), True)
_BELOW_EVERYTHING = Bound(SemVer(0, 0, 0, (0,)), False)

#: A union of intervals, sorted and disjoint; ``()`` matches nothing.
VersionSet = tuple[Interval, ...]
EVERYTHING: VersionSet = (Interval(),)


def _lower_key(bound: Bound | None) -> tuple[int, tuple[int, int, int, int, _PreKey], int]:
    if bound is None:
        return (0, (0, 0, 0, 0, ()), 0)
    return (1, bound.point.key(), 0 if bound.inclusive else 1)


def _precedes(upper: Bound | None, lower: Bound | None) -> bool:
    """True when everything under ``upper`` lies strictly below everything over ``lower``, with no gap."""
    if upper is None or lower is None:
        return False
    upper_key, lower_key = upper.point.key(), lower.point.key()
    return upper_key < lower_key or (upper_key == lower_key and not (upper.inclusive and lower.inclusive))


def _is_empty(interval: Interval) -> bool:
    # Nothing sorts below 0.0.0-0, so "<0.0.0-0" (node-semver's "nothing") is empty too.
    return interval.upper == _BELOW_EVERYTHING or _precedes(interval.upper, interval.lower)


def _tighter_lower(a: Bound | None, b: Bound | None) -> Bound | None:
    return a if _lower_key(a) >= _lower_key(b) else b


def _tighter_upper(a: Bound | None, b: Bound | None) -> Bound | None:
    if a is None or b is None:
        return b if a is None else a
    a_key, b_key = a.point.key(), b.point.key()
    if a_key != b_key:
        return a if a_key < b_key else b
    return a if not a.inclusive else b


def _looser_upper(a: Bound | None, b: Bound | None) -> Bound | None:
    if a is None or b is None:
        return None
    return b if _tighter_upper(a, b) is a else a


def _merge(intervals: Iterable[Interval]) -> VersionSet:
    """Plain interval union over the total order of semver points (prereleases included)."""
    ordered = sorted((i for i in intervals if not _is_empty(i)), key=lambda i: _lower_key(i.lower))
    merged: list[Interval] = []
    for interval in ordered:
        if merged:
            last = merged[-1]
            # Merge when they overlap or touch (``<1.5.0`` and ``>=1.5.0``).
            touching = (
                last.upper is not None and interval.lower is not None
                and last.upper.point == interval.lower.point and (last.upper.inclusive or interval.lower.inclusive)
            )
            if touching or not _precedes(last.upper, interval.lower):
                merged[-1] = Interval(last.lower, _looser_upper(last.upper, interval.upper))
                continue
        merged.append(interval)
    return tuple(merged)


def _clip(intervals: Iterable[Interval], to: Interval) -> VersionSet:
    return _merge(Interval(_tighter_lower(i.lower, to.lower), _tighter_upper(i.upper, to.upper)) for i in intervals)


# How node-semver reads a prerelease. An interval is written out as (at most) two
# comparators, and node admits a prerelease ``M.m.p-x`` only when one of those
# comparators is itself a prerelease of ``M.m.p`` (``testSet`` in classes/range.js):
# ``>=1.2.0-beta <2.0.0`` admits 1.2.0-rc but not 1.5.0-rc. So the prereleases an
# interval really stands for are those of the versions its bounds "open"; the others
# inside it are phantoms of the total order. Sets are normalised so that the intervals
# written out admit, between them, exactly what the intervals read in admitted: merging
# ``0 || 0.0.0-0`` into one interval would drop 0.0.0-0, and ``<1.0.0-beta ||
# >=1.0.0-beta`` into ``*`` every prerelease of 1.0.0.

_Core = tuple[int, int, int]


def _opened(interval: Interval) -> frozenset[_Core]:
    """The ``M.m.p`` whose prereleases node-semver lets into this interval."""
    return frozenset(
        (bound.point.major, bound.point.minor, bound.point.patch)
        for bound in (interval.lower, interval.upper) if bound is not None and bound.point.prerelease
    )


def _prereleases_of(core: _Core) -> Interval:
    """Every prerelease of ``M.m.p``: from ``M.m.p-0`` up to (not including) ``M.m.p``."""
    return Interval(Bound(floor_prerelease(*core), True), Bound(SemVer(*core), False))


def _admitted_prereleases(intervals: Iterable[Interval], core: _Core) -> VersionSet:
    """The prereleases of ``core`` node-semver admits, written as ``intervals`` joined by ``||``."""
    return _clip((i for i in intervals if core in _opened(i)), _prereleases_of(core))


def _normalise(intervals: Iterable[Interval]) -> VersionSet:
    """Sorted, disjoint intervals admitting, as node-semver reads them, what ``intervals`` admit.

    Releases are a plain union. The prereleases of every opened ``M.m.p`` are cut out of
    that union and put back as exactly the ones some input interval admits; neighbouring
    pieces then join only where node-semver reads the joined interval the same way.
    """
    given = [i for i in intervals if not _is_empty(i)]
    cores = sorted(frozenset().union(*(_opened(i) for i in given)))
    releases = _merge(given)
    for core in cores:
        below = Interval(None, Bound(floor_prerelease(*core), False))
        above = Interval(Bound(SemVer(*core), True), None)
        releases = _merge([*_clip(releases, below), *_clip(releases, above)])
    pieces = sorted(
        [*releases, *(i for core in cores for i in _admitted_prereleases(given, core))],
        key=lambda i: _lower_key(i.lower),
    )
    joined: list[Interval] = []
    for piece in pieces:
        if joined and _touching(joined[-1], piece):
            candidate = Interval(joined[-1].lower, piece.upper)
            parts = (joined[-1], piece)
            if all(
                _admitted_prereleases([candidate], core) == _admitted_prereleases(parts, core)
                for core in _opened(parts[0]) | _opened(parts[1])
            ):
                joined[-1] = candidate
                continue
        joined.append(piece)
    return tuple(joined)


def _touching(last: Interval, following: Interval) -> bool:
    """Disjoint ``last`` ends exactly where ``following`` starts (``<1.5.0`` then ``>=1.5.0``)."""
    return (
        last.upper is not None and following.lower is not None and last.upper.point == following.lower.point
        and last.upper.inclusive != following.lower.inclusive
    )


def union(*sets: VersionSet) -> VersionSet:
    return _normalise(interval for version_set in sets for interval in version_set)


def intersect(*sets: VersionSet) -> VersionSet:
    result = EVERYTHING
    for version_set in sets:
        result = _normalise(
            Interval(_tighter_lower(a.lower, b.lower), _tighter_upper(a.upper, b.upper))
            for a in result for b in version_set
        )
    return result


def complement(version_set: VersionSet) -> VersionSet:
    gaps: list[Interval] = []
    previous: Bound | None = None  # lower bound of the next gap; None before the first interval
    for interval in version_set:
        if interval.lower is not None:
            gaps.append(Interval(previous, Bound(interval.lower.point, not interval.lower.inclusive)))
        if interval.upper is None:
            return _normalise(gaps)
        previous = Bound(interval.upper.point, not interval.upper.inclusive)
    gaps.append(Interval(previous, None))
    return _normalise(gaps)


def _fits_node(point: SemVer) -> bool:
    numbers = [point.major, point.minor, point.patch, *(p for p in point.prerelease if isinstance(p, int))]
    return max(numbers) <= _MAX_SAFE_INTEGER


def format_range(version_set: VersionSet) -> str:
    """Canonical node-semver text for a set; raises ``UnrepresentableRange`` for the empty set."""
    if not version_set:
        raise UnrepresentableRange("matches no version")
    alternatives: list[str] = []
    for interval in version_set:
        lower, upper = interval.lower, interval.upper
        for bound in (lower, upper):
            if bound is not None and not _fits_node(bound.point):
                raise UnrepresentableRange(f"{bound.point} is beyond node-semver's number range")
        if lower is not None and upper is not None and lower.point == upper.point:
            alternatives.append(str(lower.point))  # both inclusive, or it would be empty
            continue
        if upper is None and lower in (None, _LOWEST_RELEASE) and len(version_set) > 1:
            # "*" next to other alternatives would make node ignore them (only prereleases
            # of 0.0.0 can come before): spell every release out instead.
            alternatives.append("0.0.0 || >0.0.0")
            continue
        parts = []
        if lower is not None and lower != _LOWEST_RELEASE:  # node-semver drops ">=0.0.0" too
            parts.append((">=" if lower.inclusive else ">") + str(lower.point))
        if upper is not None:
            parts.append(("<=" if upper.inclusive else "<") + str(upper.point))
        alternatives.append(" ".join(parts) or "*")
    return " || ".join(alternatives)


# ---------------------------------------------------------------- node-semver syntax

_NUMBER = r"0|[1-9]\d*"
_X_OR_NUMBER = rf"[xX*]|{_NUMBER}"
_PRERELEASE_ID = r"0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*"
_BUILD_ID = r"[0-9A-Za-z-]+"
_COMPARATOR = re.compile(
    rf"(?P<op>~>|~|\^|>=|<=|>|<|=)?v?(?P<major>{_X_OR_NUMBER})"
    rf"(?:\.(?P<minor>{_X_OR_NUMBER})(?:\.(?P<patch>{_X_OR_NUMBER})"
    rf"(?:-(?P<pre>(?:{_PRERELEASE_ID})(?:\.(?:{_PRERELEASE_ID}))*))?(?:\+{_BUILD_ID}(?:\.{_BUILD_ID})*)?)?)?"
)
_OPERATOR_SPACE = re.compile(r"(~>|~|\^|>=|<=|>|<|=)\s+")
_HYPHEN = re.compile(r"(\S+)\s+-\s+(\S+)")

#: A partial version: missing or wildcard components are None (everything after the first None is None).
Partial = tuple[int | None, int | None, int | None, tuple[int | str, ...]]


def _component(text: str | None) -> int | None:
    if text is None or text in ("x", "X", "*"):
        return None
    if len(text) > 16 or int(text) > _MAX_SAFE_INTEGER:
        raise UnrepresentableRange(f"version component {text[:20]} is too large")
    return int(text)


def _prerelease(text: str | None) -> tuple[int | str, ...]:
    if not text:
        return ()
    parts = text.split(".")
    if any(part.isdigit() and len(part) > 16 for part in parts):
        raise UnrepresentableRange("prerelease number is too large")
    return tuple(int(part) if part.isdigit() else part for part in parts)


def _partial(match: re.Match[str]) -> Partial:
    texts = [match.group(name) for name in ("major", "minor", "patch")]
    major, minor, patch = (_component(text) for text in texts)
    wildcards = [text in ("x", "X", "*") for text in texts if text is not None]
    if wildcards != sorted(wildcards):  # "1.x.2": node-semver 7.8 rejects a number after a wildcard
        raise UnrepresentableRange(f"a number after a wildcard in {match.group(0)!r}")
    if major is None:
        return (None, None, None, ())
    if minor is None:
        return (major, None, None, ())
    if patch is None:
        return (major, minor, None, ())
    return (major, minor, patch, _prerelease(match.group("pre")))


def _at_least(point: SemVer, inclusive: bool = True) -> VersionSet:
    return (Interval(Bound(point, inclusive), None),)


def _below(point: SemVer, inclusive: bool = False) -> VersionSet:
    return (Interval(None, Bound(point, inclusive)),)


def _between(low: SemVer, high_exclusive: SemVer) -> VersionSet:
    return (Interval(Bound(low, True), Bound(high_exclusive, False)),)


def _x_range(major: int, minor: int | None) -> VersionSet:
    if minor is None:
        return _between(SemVer(major, 0, 0), floor_prerelease(major + 1, 0, 0))
    return _between(SemVer(major, minor, 0), floor_prerelease(major, minor + 1, 0))


def caret_range(version: Partial) -> VersionSet:
    """``^version``: changes that do not modify the left-most non-zero component (npm, Cargo, Poetry)."""
    major, minor, patch, pre = version
    if major is None:
        return EVERYTHING
    if minor is None:
        return _x_range(major, None)
    if patch is None:
        if major == 0:
            return _x_range(0, minor)
        return _between(SemVer(major, minor, 0), floor_prerelease(major + 1, 0, 0))
    low = SemVer(major, minor, patch, pre)
    if major > 0:
        return _between(low, floor_prerelease(major + 1, 0, 0))
    if minor > 0:
        return _between(low, floor_prerelease(0, minor + 1, 0))
    return _between(low, floor_prerelease(0, 0, patch + 1))


def tilde_range(version: Partial) -> VersionSet:
    """``~version``: patch-level changes when a minor is given, else minor-level (npm, Cargo, Poetry)."""
    major, minor, patch, pre = version
    if major is None:
        return EVERYTHING
    if minor is None or patch is None:
        return _x_range(major, minor)
    return _between(SemVer(major, minor, patch, pre), floor_prerelease(major, minor + 1, 0))


def comparator_range(operator: str, version: Partial) -> VersionSet:
    """One node-semver comparator, with node-semver's reading of partial versions."""
    major, minor, patch, pre = version
    if operator == "^":
        return caret_range(version)
    if operator in ("~", "~>"):
        return tilde_range(version)
    if major is None:  # "*", ">=*": everything; ">*", "<*": nothing
        return () if operator in (">", "<") else EVERYTHING
    if patch is None:
        low = SemVer(major, minor if minor is not None else 0, 0)
        after = SemVer(major + 1, 0, 0) if minor is None else SemVer(major, minor + 1, 0)
        if operator in ("", "="):
            return _x_range(major, minor)
        if operator == ">=":
            return _at_least(low)
        if operator == ">":
            return _at_least(after)
        if operator == "<":
            return _below(floor_prerelease(low.major, low.minor, low.patch))
        return _below(floor_prerelease(after.major, after.minor, after.patch))  # "<="
    point = SemVer(major, minor if minor is not None else 0, patch, pre)
    if operator in ("", "="):
        return (Interval(Bound(point, True), Bound(point, True)),)
    if operator in (">=", ">"):
        return _at_least(point, operator == ">=")
    return _below(point, operator == "<=")


def parse_partial(text: str) -> Partial:
    match = _COMPARATOR.fullmatch(text)
    if match is None or match.group("op"):
        raise UnrepresentableRange(f"not a version: {text!r}")
    return _partial(match)


def _without_gte0(version_set: VersionSet) -> VersionSet:
    """node-semver drops a comparator that desugars to exactly ``>=0.0.0`` (``replaceGTE0``).

    Not a no-op: ``0 - 0.0.0-0`` is ``<=0.0.0-0`` to node, which admits 0.0.0-0, where
    ``>=0.0.0 <=0.0.0-0`` would admit nothing.
    """
    return tuple(
        Interval(None, interval.upper)
        if interval.lower == _LOWEST_RELEASE and interval.upper != _LOWEST_RELEASE else interval
        for interval in version_set
    )


def _comparator(text: str, *, node: bool = False) -> VersionSet:
    """One comparator; ``node`` reads it exactly as node-semver's ``Range`` does (see ``npm_range``)."""
    match = _COMPARATOR.fullmatch(text)
    if match is None:
        raise UnrepresentableRange(f"not a semver comparator: {text!r}")
    operator = match.group("op") or ""
    result = comparator_range(operator, _partial(match))
    # node rewrites partials, carets and tildes from their numbers (">=v0" is ">=0.0.0",
    # which it drops) but keeps a full ">=v0.0.0" as written, which it then does not drop.
    if node and not (operator == ">=" and match.group("patch") is not None and "v" in text):
        return _without_gte0(result)
    return result


def _hyphen_range(low_text: str, high_text: str) -> VersionSet:
    low_major, low_minor, low_patch, low_pre = parse_partial(low_text)
    high = parse_partial(high_text)
    lower = EVERYTHING if low_major is None else _at_least(
        SemVer(low_major, low_minor or 0, low_patch or 0, low_pre)
    )
    if low_patch is None or "v" not in low_text:  # as in _comparator: a full "v0.0.0" stays
        lower = _without_gte0(lower)
    upper = EVERYTHING if high[0] is None else comparator_range("<=", high)
    return intersect(lower, upper)


def npm_range(text: str) -> VersionSet:
    """Read a node-semver range (``||``, hyphen ranges, ``^ ~ x``, partials); raises on bad syntax."""
    if len(text) > 256:  # node-semver's own limit
        raise UnrepresentableRange("range longer than 256 characters")
    alternatives: list[VersionSet] = []
    for alternative in text.split("||"):
        alternative = alternative.strip()
        hyphen = _HYPHEN.fullmatch(alternative)
        if hyphen is not None:
            alternatives.append(_hyphen_range(hyphen.group(1), hyphen.group(2)))
            continue
        words = _OPERATOR_SPACE.sub(r"\1", alternative).split()
        alternatives.append(intersect(*(_comparator(word, node=True) for word in words)))
    # An alternative that is nothing but "*" (after ">=0.0.0" is dropped) makes node's
    # whole range "*", which admits no prerelease even where another alternative would.
    if EVERYTHING in alternatives:
        return EVERYTHING
    return union(*alternatives)


def normalise_npm_range(text: str) -> str:
    """Canonical form of a node-semver range; raises ``UnrepresentableRange``."""
    return format_range(npm_range(text))


# ---------------------------------------------------------------- Compact pragmas

_PRAGMA = re.compile(r"\bpragma\s+language_version\b\s*([^;]{0,200});")
_PRAGMA_TOKEN = re.compile(
    r"\s*(?:(?P<punct>\|\||&&|!|\(|\))|(?P<comparator>(?:~>|~|\^|>=|<=|==|>|<|=)?\s*v?\d[\w.+-]*|[xX*]))"
)
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n(.*?)^ {0,3}\1[`~]*[ \t]*$", re.DOTALL | re.MULTILINE)


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
        return _comparator(token.replace("==", "=", 1))


def compact_pragma_range(expression: str) -> str:
    """Node-semver range for the expression of ``pragma language_version <expression>;``."""
    return format_range(_PragmaReader(expression).read())


def _pragmas(text: str, skipped: Skipped | None) -> list[VersionConstraint]:
    found: list[VersionConstraint] = []
    if "pragma" not in text:
        # a substring search skips the regex scan of nearly every document, which tries each
        # position (\b first: no literal prefix to search for): constraints_in_document over
        # the PostgreSQL manual's 1,169 pages took 0.21 s, now 0.07 s
        return found
    for match in _PRAGMA.finditer(text):
        raw = " ".join(match.group(0).split())
        try:
            found.append(VersionConstraint("language_target", "compact", compact_pragma_range(match.group(1)),
                                           raw, "pragma"))
        except UnrepresentableRange as error:
            _skip(skipped, raw, str(error))
    return found


# ---------------------------------------------------------------- front matter

#: Front matter keys read as version constraints (case-insensitive, ``-`` same as ``_``):
#: key -> (facet, name).
FRONT_MATTER_KEYS: dict[str, tuple[Facet, str | None]] = {
    "version": ("language_target", None),
    "versions": ("language_target", None),
    "language_version": ("language_target", None),
    "language_versions": ("language_target", None),
    "compact_version": ("language_target", "compact"),
    "compact_versions": ("language_target", "compact"),
    "compact_language_version": ("language_target", "compact"),
    # The SDK a page is written against: a dependency range, though the page names no package.
    "sdk_version": ("sdk_dependency", None),
    "sdk_versions": ("sdk_dependency", None),
}

_YAML_KEY = re.compile(r"([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*?))?[ \t]*$")
_YAML_ITEM = re.compile(r"[ \t]+-[ \t]+(.*?)[ \t]*$")
_YAML_COMMENT = re.compile(r"(?:^|[ \t]+)#.*$")


def _unquote(value: str) -> str:
    value = value.strip()
    if value[:1] in ("'", '"'):
        end = value.find(value[0], 1)
        if end > 0:
            return value[1:end].strip()
    return _YAML_COMMENT.sub("", value).strip()


def _yaml_front_matter(lines: list[str]) -> dict[str, list[str]]:
    """Top-level ``key: value``, ``key: [a, b]`` and ``key:`` + ``- item`` entries; nothing nested."""
    values: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        item = _YAML_ITEM.match(line)
        if item is not None and current is not None:
            values[current].append(_unquote(item.group(1)))
            continue
        current = None
        entry = _YAML_KEY.match(line)
        if entry is None:
            continue
        key, value = entry.group(1), _unquote(entry.group(2) or "")
        if value.startswith("[") and value.endswith("]"):
            values[key] = [_unquote(part) for part in value[1:-1].split(",") if part.strip()]
        elif value:
            values[key] = [value]
        else:
            values[key], current = [], key
    return values


def _toml_front_matter(lines: list[str]) -> dict[str, list[str]]:
    try:
        table = tomllib.loads("\n".join(lines))
    except tomllib.TOMLDecodeError:
        return {}
    values: dict[str, list[str]] = {}
    for key, value in table.items():
        items = value if isinstance(value, list) else [value]
        if all(isinstance(item, str | int | float) and not isinstance(item, bool) for item in items):
            values[key] = [str(item) for item in items]
    return values


def _front_matter(text: str) -> tuple[dict[str, list[str]], int]:
    """Front matter values by key, and the offset where the body starts (0 without front matter)."""
    lines = text.split("\n")
    opener = lines[0].strip().lstrip("\ufeff")
    if opener not in ("---", "+++"):
        return {}, 0
    closers = ("---", "...") if opener == "---" else ("+++",)
    for index in range(1, len(lines)):
        if lines[index].rstrip() in closers:
            body = lines[1:index]
            values = _yaml_front_matter(body) if opener == "---" else _toml_front_matter(body)
            return values, sum(len(line) + 1 for line in lines[: index + 1])
    return {}, 0


def _front_matter_constraints(values: dict[str, list[str]], skipped: Skipped | None) -> list[VersionConstraint]:
    found: list[VersionConstraint] = []
    for key, items in values.items():
        meaning = FRONT_MATTER_KEYS.get(key.lower().replace("-", "_"))
        if meaning is None or not items:
            continue
        raw = items[0] if len(items) == 1 else "[" + ", ".join(items) + "]"
        readable: list[VersionSet] = []
        for item in items:
            try:
                readable.append(npm_range(item.replace(",", " ")))
            except UnrepresentableRange as error:
                _skip(skipped, f"front_matter:{key} {item}", str(error))
        if not readable:
            continue
        try:
            found.append(VersionConstraint(meaning[0], meaning[1], format_range(union(*readable)), raw,
                                           f"front_matter:{key}"))
        except UnrepresentableRange as error:
            _skip(skipped, f"front_matter:{key} {raw}", str(error))
    return found


# ---------------------------------------------------------------- documents

_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdx"})
_HTML_SUFFIXES = frozenset({".html", ".htm"})
_HTML_TAG = re.compile(r"<[^>]*>")


def _skip(skipped: Skipped | None, what: str, reason: str) -> None:
    if skipped is not None:
        skipped.append((what, reason))


def constraints_in_document(path: str, text: str, *, skipped: Skipped | None = None) -> list[VersionConstraint]:
    """Version constraints a document states about itself: Compact pragmas and front matter.

    Markdown contributes its front matter and the pragmas inside fenced code blocks;
    ``.compact`` files their pragmas outside comments; HTML its pragmas with tags and
    entities removed; any other text its pragmas. Never raises: unreadable constraints
    are left out and, when ``skipped`` is given, appended to it as ``(what, reason)``.
    Identical constraints are reported once.
    """
    suffix = PurePosixPath(path.replace("\\", "/")).suffix.lower()
    found: list[VersionConstraint] = []
    if suffix in _MARKDOWN_SUFFIXES:
        values, body_start = _front_matter(text)
        found += _front_matter_constraints(values, skipped)
        for block in _FENCE.finditer(text, body_start):
            found += _pragmas(block.group(2), skipped)
    elif suffix == ".compact":
        found += _pragmas(_COMMENTS.sub(" ", text), skipped)
    elif suffix in _HTML_SUFFIXES:
        found += _pragmas(html.unescape(_HTML_TAG.sub("", text)), skipped)
    else:
        found += _pragmas(text, skipped)
    return list(dict.fromkeys(found))
