"""node-semver range syntax, read into version sets exactly as node-semver reads it.

node-semver is the syntax ``quarry.version_range`` parses and the one npm users write, so a
range must mean here what it means to npm: partial versions, ``x`` wildcards, hyphen
ranges, carets and tildes, the dropped ``>=0.0.0`` and the 256-character limit all follow
node's own code (cited where it is surprising). The caret, tilde and comparator readers are
also the meaning Compact pragmas, Poetry and Cargo give those operators, so they are shared
from here.
"""

from __future__ import annotations

import re

from engine.ingest.version_sets import (
    EVERYTHING,
    LOWEST_RELEASE,
    MAX_SAFE_INTEGER,
    Bound,
    Interval,
    SemVer,
    UnrepresentableRange,
    VersionSet,
    floor_prerelease,
    format_range,
    intersect,
    union,
)

__all__ = [
    "Partial",
    "caret_range",
    "comparator",
    "comparator_range",
    "normalise_npm_range",
    "npm_range",
    "parse_partial",
    "tilde_range",
]


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
    if len(text) > 16 or int(text) > MAX_SAFE_INTEGER:
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
        if interval.lower == LOWEST_RELEASE and interval.upper != LOWEST_RELEASE else interval
        for interval in version_set
    )


def comparator(text: str, *, node: bool = False) -> VersionSet:
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
    if low_patch is None or "v" not in low_text:  # as in comparator: a full "v0.0.0" stays
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
        alternatives.append(intersect(*(comparator(word, node=True) for word in words)))
    # An alternative that is nothing but "*" (after ">=0.0.0" is dropped) makes node's
    # whole range "*", which admits no prerelease even where another alternative would.
    if EVERYTHING in alternatives:
        return EVERYTHING
    return union(*alternatives)


def normalise_npm_range(text: str) -> str:
    """Canonical form of a node-semver range; raises ``UnrepresentableRange``."""
    return format_range(npm_range(text))
