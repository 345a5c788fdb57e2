"""The npm registry protocol, read: a package document and which version's tarball to fetch.

Only reading lives here; the HTTP exchange, the download and the cache are ``engine.fetch.packages``.
A version argument is read the way npm reads one (npm-package-arg): an exact version, else a
node-semver range (``^4``, ``~1.2``, ``>=2 <3``; the range code is ``engine.ingest.npm_ranges``,
the one Quarry's version filters use), else a dist-tag (``latest``, ``next``). A range picks
the ``latest`` tag when that satisfies it, else the highest satisfying version, as
npm-pick-manifest does; deprecated versions only when nothing else satisfies.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from engine.errors import InvalidRequestError, NotFoundError, UnavailableError
from engine.ingest.npm_ranges import npm_range, parse_partial
from engine.ingest.version_sets import Bound, SemVer, UnrepresentableRange, VersionSet

__all__ = ["ACCEPT", "NpmRelease", "choose_release", "exact_version", "expected_digest", "package_document_url",
           "read_package_document", "validate_name"]

#: The abbreviated ("corgi") document when the registry has it: dist-tags and dists, no READMEs.
ACCEPT = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
#: npm names, old ones included (uppercase was allowed once); never a leading '.' or '_'.
_NAME = re.compile(r"^(?:@[A-Za-z0-9~-][A-Za-z0-9._~-]*/)?[A-Za-z0-9~-][A-Za-z0-9._~-]*$")
_SRI_PREFERENCE = ("sha512", "sha384", "sha256", "sha1")


@dataclass(frozen=True, slots=True)
class NpmRelease:
    """One version of a package as the registry describes it."""

    version: str
    tarball: str
    integrity: str | None = None  # Subresource Integrity (``sha512-<base64>``)
    shasum: str | None = None  # sha1, hex: what registries had before integrity
    deprecated: str | None = None


def validate_name(name: str) -> str:
    if len(name) > 214 or not _NAME.match(name):
        raise InvalidRequestError(f"{name!r} is not an npm package name (name or @scope/name)", argument="location")
    return name


def exact_version(wanted: str | None) -> str | None:
    """``wanted`` when it is one exact version as the registry spells versions (the cache's folder name)."""
    return wanted if wanted and _semver(wanted) is not None else None


def package_document_url(registry: str, name: str) -> str:
    """``{registry}/{name}``; a scoped name's slash is escaped as npm itself sends it (``@scope%2fname``)."""
    return registry.rstrip("/") + "/" + validate_name(name).replace("/", "%2f")


def read_package_document(body: bytes, *, name: str, label: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as error:
        raise UnavailableError(f"{label} answered with malformed JSON for '{name}' ({error}); "
                               "check that it is an npm registry") from error
    if not isinstance(document, dict) or not isinstance(document.get("versions"), dict):
        raise UnavailableError(f"{label} answered for '{name}' without a 'versions' object; "
                               "check that it is an npm registry")
    if not isinstance(document.get("dist-tags", {}), dict):
        raise UnavailableError(f"{label} answered for '{name}' with a malformed 'dist-tags'")
    return document


def choose_release(document: dict[str, Any], wanted: str | None, *, name: str, label: str,
                   document_url: str) -> NpmRelease:
    """The release ``wanted`` (exact version, range, tag; None: the ``latest`` tag) names."""
    versions: dict[str, Any] = document["versions"]
    tags: dict[str, Any] = document.get("dist-tags") or {}
    if not versions:
        raise NotFoundError(f"'{name}' has no published versions on {label}")
    semvers = {text: parsed for text in versions if (parsed := _semver(text)) is not None}
    if not wanted or (wanted == "latest" and "latest" not in tags):
        wanted = "latest" if "latest" in tags else "*"  # no latest tag: the highest release
    if wanted in versions:
        return _release(versions, wanted, name, label, document_url)
    exact = _semver(wanted.lstrip("=v").strip())
    if exact is not None:
        if str(exact) in versions:  # "v1.2.3", "=1.2.3"
            return _release(versions, str(exact), name, label, document_url)
        raise NotFoundError(f"'{name}' has no version {wanted} on {label}; nearest: {_nearest(semvers, exact, tags)}")
    try:
        wanted_set = npm_range(wanted)
    except UnrepresentableRange:
        tagged = tags.get(wanted)
        if not isinstance(tagged, str):
            shown = ", ".join(f"{tag}={version}" for tag, version in sorted(tags.items())) or "none"
            raise NotFoundError(f"'{name}' has no version, range or dist-tag {wanted!r} on {label} "
                                f"(tags: {shown})") from None
        if tagged not in versions:
            raise UnavailableError(f"{label}: the dist-tag {wanted} of '{name}' names {tagged}, "
                                   "a version the document does not hold") from None
        return _release(versions, tagged, name, label, document_url)
    satisfying = sorted((text for text, parsed in semvers.items() if _admits(wanted_set, parsed)),
                        key=lambda text: semvers[text].key())
    if not satisfying:
        raise NotFoundError(f"no version of '{name}' on {label} satisfies {wanted} "
                            f"(latest: {tags.get('latest', 'none')})")
    latest = tags.get("latest")
    if isinstance(latest, str) and latest in satisfying:
        return _release(versions, latest, name, label, document_url)
    supported = [text for text in satisfying if not versions[text].get("deprecated")] or satisfying
    return _release(versions, supported[-1], name, label, document_url)


def _release(versions: dict[str, Any], version: str, name: str, label: str, document_url: str) -> NpmRelease:
    entry = versions[version]
    dist = entry.get("dist") if isinstance(entry, dict) else None
    tarball = dist.get("tarball") if isinstance(dist, dict) else None
    if not isinstance(dist, dict) or not isinstance(tarball, str) or not tarball:
        raise UnavailableError(f"{label}: version {version} of '{name}' has no dist.tarball")
    integrity, shasum, deprecated = dist.get("integrity"), dist.get("shasum"), entry.get("deprecated")
    return NpmRelease(version, urljoin(document_url, tarball),
                      integrity if isinstance(integrity, str) and integrity else None,
                      shasum if isinstance(shasum, str) and shasum else None,
                      (deprecated if isinstance(deprecated, str) else "deprecated") if deprecated else None)


def expected_digest(release: NpmRelease) -> tuple[str, bytes] | None:
    """The strongest hash the registry gave, as (algorithm, digest bytes); None: no hash at all."""
    offered: dict[str, bytes] = {}
    for token in (release.integrity or "").split():
        algorithm, _, value = token.partition("-")
        try:
            offered.setdefault(algorithm.lower(), base64.b64decode(value.split("?", 1)[0], validate=True))
        except (binascii.Error, ValueError):
            continue
    if release.shasum and "sha1" not in offered:
        with contextlib.suppress(ValueError):
            offered["sha1"] = bytes.fromhex(release.shasum)
    for algorithm in _SRI_PREFERENCE:
        if algorithm in offered:
            return algorithm, offered[algorithm]
    return None


def _semver(text: str) -> SemVer | None:
    try:
        major, minor, patch, prerelease = parse_partial(text)
    except UnrepresentableRange:
        return None
    if major is None or minor is None or patch is None or text.startswith(("v", "=")):
        return None
    return SemVer(major, minor, patch, prerelease)


def _admits(version_set: VersionSet, version: SemVer) -> bool:
    """node-semver ``satisfies``: in an interval, and a prerelease only where a bound opens its M.m.p."""
    key = version.key()
    core = (version.major, version.minor, version.patch)
    for interval in version_set:
        if interval.lower is not None and not _above(key, interval.lower):
            continue
        if interval.upper is not None and not _below(key, interval.upper):
            continue
        bounds = [bound for bound in (interval.lower, interval.upper) if bound is not None]
        if version.prerelease and not any(
            bound.point.prerelease and (bound.point.major, bound.point.minor, bound.point.patch) == core
            for bound in bounds
        ):
            continue
        return True
    return False


def _above(key: tuple[Any, ...], bound: Bound) -> bool:
    bound_key = bound.point.key()
    return key > bound_key or (bound.inclusive and key == bound_key)


def _below(key: tuple[Any, ...], bound: Bound) -> bool:
    bound_key = bound.point.key()
    return key < bound_key or (bound.inclusive and key == bound_key)


def _nearest(semvers: dict[str, SemVer], wanted: SemVer, tags: dict[str, Any], count: int = 4) -> str:
    ordered = sorted(semvers, key=lambda text: semvers[text].key())
    if not ordered:
        return "none published"
    below = [text for text in ordered if semvers[text].key() < wanted.key()]
    above = [text for text in ordered if semvers[text].key() > wanted.key()]
    taken_above = min(len(above), max(count // 2, count - len(below)))
    below, above = below[len(below) - min(len(below), count - taken_above):], above[:taken_above]
    return ", ".join(below + above) + f" (latest: {tags.get('latest', ordered[-1])})"
