"""Version sets: the one form every version constraint passes through on its way to SQL.

Constraints arrive in many syntaxes (node-semver, Compact pragmas, PEP 440, Poetry, Cargo,
go.mod), but Quarry stores only node-semver ranges, the one syntax
``quarry.version_range(range)`` parses. Rather than rewriting text, each syntax is read
into a ``VersionSet`` (a union of intervals over semver points), combined here with
``union``/``intersect``/``complement``, and written back by ``format_range`` in one
canonical form, so every emitted range is valid whatever the input looked like. The set
operations follow node-semver's reading of prereleases, not the plain total order, so the
canonical text admits exactly what the input admitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "EVERYTHING",
    "LOWEST_RELEASE",
    "MAX_SAFE_INTEGER",
    "Bound",
    "Interval",
    "SemVer",
    "UnrepresentableRange",
    "VersionSet",
    "complement",
    "floor_prerelease",
    "format_range",
    "intersect",
    "union",
]


class UnrepresentableRange(ValueError):
    """A constraint that has no node-semver equivalent (bad syntax, epochs, empty sets).

    Internal: the public functions catch it and report the entry as skipped.
    """


# ---------------------------------------------------------------- semver points and sets

#: node-semver refuses version components above JavaScript's safe integer range.
MAX_SAFE_INTEGER = 2**53 - 1

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


LOWEST_RELEASE = Bound(SemVer(0, 0, 0), True)
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
    return max(numbers) <= MAX_SAFE_INTEGER


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
        if upper is None and lower in (None, LOWEST_RELEASE) and len(version_set) > 1:
            # "*" next to other alternatives would make node ignore them (only prereleases
            # of 0.0.0 can come before): spell every release out instead.
            alternatives.append("0.0.0 || >0.0.0")
            continue
        parts = []
        if lower is not None and lower != LOWEST_RELEASE:  # node-semver drops ">=0.0.0" too
            parts.append((">=" if lower.inclusive else ">") + str(lower.point))
        if upper is not None:
            parts.append(("<=" if upper.inclusive else "<") + str(upper.point))
        alternatives.append(" ".join(parts) or "*")
    return " || ".join(alternatives)
