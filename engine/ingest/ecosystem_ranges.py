"""Python's, Poetry's and Cargo's requirement syntaxes, read into version sets.

Manifests state dependency ranges in their ecosystem's own syntax, but Quarry stores node-semver
ranges only (see ``engine.ingest.version_sets``), so each syntax is translated here into a
version set, as faithfully as semver points allow:

- PEP 440 (``pep440_range``) is exact over plain ``X.Y.Z`` releases: the range admits
  a release iff ``packaging``'s ``SpecifierSet`` does. Specifier versions with more than
  three components, post-releases or local labels fall between two semver releases and
  are rounded to the nearest release (``>=1.2.3.4`` -> ``>=1.2.4``, ``==1.2.post1``
  matches no release). Pre-releases map to semver prereleases (``1.0rc1`` ->
  ``1.0.0-rc.1``, ``a``/``b`` likewise, ``1.0.dev2`` -> ``1.0.0-dev.2``); their order
  among each other is approximate. ``===V`` pins V padded to three components.
  Epochs other than 0 are skipped.
- Poetry: ``^``/``~`` as npm, a bare version is exact, ``,`` and spaces AND, ``||`` OR.
- Cargo: a bare version means ``^version``; ``,`` ANDs; otherwise npm's reading.
"""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from engine.ingest.npm_ranges import caret_range, npm_range, parse_partial, tilde_range
from engine.ingest.version_sets import (
    EVERYTHING,
    Bound,
    Interval,
    SemVer,
    UnrepresentableRange,
    VersionSet,
    complement,
    intersect,
    union,
)

__all__ = ["cargo_range", "pep440_range", "poetry_range"]


# ---------------------------------------------------------------- PEP 440

def _pep440_point(version: Version) -> SemVer | tuple[int, int, int]:
    """A version's semver point, or the release it lies just above when semver has no point there.

    ``1.2.3.4``, ``1.2.post1`` and ``1.2+local`` sit strictly between ``1.2.x`` and the
    next patch; the tuple returned for them is the release just below.
    """
    if version.epoch != 0:
        raise UnrepresentableRange("version epochs have no semver equivalent")
    release = version.release
    major, minor, patch = (*release, 0, 0)[:3]
    if any(release[3:]):
        return (major, minor, patch)
    if version.pre is not None:
        letter, number = version.pre
        return SemVer(major, minor, patch, ({"a": "a", "b": "b", "rc": "rc"}[letter], number))
    if version.post is not None or version.local is not None:
        return (major, minor, patch)
    if version.dev is not None:
        return SemVer(major, minor, patch, ("dev", version.dev))
    return SemVer(major, minor, patch)


def _prefix_range(prefix: tuple[int, ...]) -> VersionSet:
    """``==prefix.*``: releases whose leading components equal ``prefix`` (zero-padded)."""
    if len(prefix) > 3:
        if any(prefix[3:]):
            return ()
        prefix = prefix[:3]
    major, minor, patch = (*prefix, 0, 0)[:3]
    high = [major, minor, patch]
    high[len(prefix) - 1] += 1
    return (Interval(Bound(SemVer(major, minor, patch), True), Bound(SemVer(high[0], high[1], high[2]), False)),)


def _specifier_range(specifier: Specifier) -> VersionSet:
    operator, text = specifier.operator, specifier.version
    if operator in ("==", "!=") and text.endswith(".*"):
        version = Version(text[:-2])
        if version.epoch != 0:
            raise UnrepresentableRange("version epochs have no semver equivalent")
        matching = _prefix_range(version.release)
        return matching if operator == "==" else complement(matching)
    try:
        version = Version(text)
    except InvalidVersion as error:  # "===foo": arbitrary strings
        raise UnrepresentableRange(f"{text!r} is not a version") from error
    if operator == "~=":
        return intersect(_specifier_range(Specifier(f">={text}")), _prefix_range(version.release[:-1]))
    point = _pep440_point(version)
    if isinstance(point, tuple):  # strictly between release `point` and the next patch
        below, next_patch = SemVer(*point), SemVer(point[0], point[1], point[2] + 1)
        return {
            ">=": (Interval(Bound(next_patch, True), None),),
            ">": (Interval(Bound(next_patch, True), None),),
            "<=": (Interval(None, Bound(below, True)),),
            "<": (Interval(None, Bound(below, True)),),
            "!=": EVERYTHING,
        }.get(operator, ())
    exact: VersionSet = (Interval(Bound(point, True), Bound(point, True)),)
    return {
        ">=": (Interval(Bound(point, True), None),),
        ">": (Interval(Bound(point, False), None),),
        "<=": (Interval(None, Bound(point, True)),),
        "<": (Interval(None, Bound(point, False)),),
        "!=": complement(exact),
    }.get(operator, exact)  # "==" and "==="


def pep440_range(specifiers: SpecifierSet) -> VersionSet:
    """The releases a PEP 440 specifier set admits, as a version set (see the module notes)."""
    return intersect(*(_specifier_range(specifier) for specifier in specifiers))


# ---------------------------------------------------------------- Poetry and Cargo

def poetry_range(text: str) -> VersionSet:
    alternatives: list[VersionSet] = []
    for alternative in re.split(r"\|\|?", text):
        parts = re.sub(r"(\^|~=|~|===|==|!=|>=|<=|>|<|=)\s+", r"\1", alternative).replace(",", " ").split()
        sets: list[VersionSet] = []
        for part in parts:
            if part in ("*", ""):
                continue
            if part.startswith("^") or (part.startswith("~") and not part.startswith("~=")):
                shape = caret_range if part[0] == "^" else tilde_range
                sets.append(shape(parse_partial(part[1:])))
                continue
            if part[0].isdigit():
                part = "==" + part
            elif part.startswith("="):
                part = "=" + part if not part.startswith(("==", "===")) else part
            try:
                sets.append(pep440_range(SpecifierSet(part)))
            except InvalidSpecifier as error:
                raise UnrepresentableRange(f"not a Poetry constraint: {part!r}") from error
        alternatives.append(intersect(*sets))
    return union(*alternatives)


def cargo_range(text: str) -> VersionSet:
    sets: list[VersionSet] = []
    for part in text.split(","):
        part = re.sub(r"^(~|\^|>=|<=|>|<|=)\s+", r"\1", part.strip())
        if part[:1].isdigit() and not re.search(r"[*xX]", part):
            part = "^" + part  # Cargo's default requirement is a caret requirement
        if not part or any(character.isspace() for character in part):
            raise UnrepresentableRange(f"not a Cargo requirement: {text!r}")
        sets.append(npm_range(part))
    return intersect(*sets)
