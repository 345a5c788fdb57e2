"""The Python package index protocol, read: a project's files (PEP 691 JSON, PEP 503 HTML) and which one to fetch.

Only reading lives here; the HTTP exchange, the download and the cache are ``engine.fetch.packages``.
A release's version comes from its file names (as pip reads them), never from metadata inside
the archive, so choosing a file costs one index request. The sdist is preferred over wheels:
it holds the docs, tests and examples a wheel leaves out; a release without one falls back to a
pure wheel, then any wheel. Yanked files (PEP 592) are passed over unless the exact version is
asked for, as pip does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urljoin, urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version
from selectolax.lexbor import LexborHTMLParser

from engine.errors import InvalidRequestError, NotFoundError, UnavailableError

__all__ = [
    "ACCEPT",
    "DistributionFile",
    "choose_file",
    "exact_version",
    "expected_digest",
    "normalize_name",
    "project_page_url",
    "read_project_page",
]

#: PEP 691 content negotiation: JSON when the index speaks it, the PEP 503 HTML page otherwise.
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
_JSON_TYPES = ("application/vnd.pypi.simple.v1+json", "application/json")
#: PEP 508 project names.
_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
#: Old sdists use archive suffixes ``parse_sdist_filename`` no longer reads; tarfile still does.
_LEGACY_SDIST_SUFFIXES = (".tar.bz2", ".tar.xz", ".tgz", ".tbz")
#: Strongest first; PEP 503 allows any hashlib algorithm guaranteed on every platform.
_HASH_PREFERENCE = ("sha256", "sha512", "sha384", "sha224", "sha1", "md5")


@dataclass(frozen=True, slots=True)
class DistributionFile:
    """One file the index lists for the project, with what its name says about it."""

    filename: str
    url: str
    version: Version
    packaging: Literal["sdist", "wheel"]
    #: Wheel compatibility preference: 0 for ``py3-none-any``, 1 for other pure wheels, 2 otherwise.
    wheel_rank: int = 0
    hashes: dict[str, str] = field(default_factory=dict)
    #: None when not yanked; the reason (possibly empty) when it is.
    yanked: str | None = None


def normalize_name(name: str) -> str:
    """The PEP 503 form of a project name; raises ``InvalidRequestError`` for a name PEP 508 refuses."""
    if not _NAME.match(name):
        raise InvalidRequestError(f"{name!r} is not a Python package name (letters, digits, '.', '_', '-')",
                                  argument="location")
    return re.sub(r"[-_.]+", "-", name).lower()


def exact_version(wanted: str | None) -> str | None:
    """The normalised form of an exact version (``2.32.3``), the cache's folder name; None for a specifier."""
    exact = _exact_version(wanted) if wanted else None
    return None if exact is None else str(exact)


def project_page_url(index_url: str, name: str) -> str:
    """The project's page under a simple index (``{index}/{normalized-name}/``)."""
    return index_url.rstrip("/") + "/" + normalize_name(name) + "/"


def read_project_page(body: bytes, content_type: str, page_url: str, *, project: str,
                      label: str) -> list[DistributionFile]:
    """The project's files from its index page, JSON or HTML as the index answered.

    ``label`` names the index in messages (credentials already stripped). Files whose names are
    not a wheel or an sdist of this project (eggs, installers, another project) are left out.
    """
    media_type = content_type.split(";", 1)[0].strip().lower()
    entries = _json_entries(body, page_url, label) if media_type in _JSON_TYPES else _html_entries(body, page_url)
    wanted = canonicalize_name(project)
    files = []
    for filename, url, hashes, yanked in entries:
        described = _describe_file(filename, url, hashes, yanked)
        if described is not None and _project_of(filename) == wanted:
            files.append(described)
    return files


def _json_entries(body: bytes, page_url: str, label: str) -> list[tuple[str, str, dict[str, str], str | None]]:
    try:
        document = json.loads(body)
        api_version = str(document.get("meta", {}).get("api-version", "1.0"))
        raw_files = document["files"]
        if not isinstance(raw_files, list):
            raise TypeError("'files' is not a list")
        entries = []
        for raw in raw_files:
            yanked = raw.get("yanked", False)
            hashes = raw.get("hashes") or {}
            if not isinstance(hashes, dict):
                raise TypeError("'hashes' is not an object")
            entries.append((str(raw["filename"]), urljoin(page_url, str(raw["url"])),
                            {str(k).lower(): str(v).lower() for k, v in hashes.items()},
                            (yanked if isinstance(yanked, str) else "") if yanked else None))
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise UnavailableError(f"{label} answered with a malformed PEP 691 JSON page ({error}); "
                               "check that it is a simple index") from error
    if api_version.split(".", 1)[0] != "1":
        raise UnavailableError(f"{label} speaks simple API version {api_version}; Quarry reads version 1")
    return entries


def _html_entries(body: bytes, page_url: str) -> list[tuple[str, str, dict[str, str], str | None]]:
    page = LexborHTMLParser(body.decode("utf-8", "replace"))
    base = page.css_first("base")
    base_url = urljoin(page_url, base.attributes.get("href") or "") if base is not None else page_url
    entries = []
    for anchor in page.css("a"):
        href = anchor.attributes.get("href")
        if not href:
            continue
        url = urljoin(base_url, href)
        parts = urlsplit(url)
        hashes = {}
        if "=" in parts.fragment:
            algorithm, _, digest = parts.fragment.partition("=")
            hashes[algorithm.lower()] = digest.lower()
        filename = unquote(parts.path.rsplit("/", 1)[-1])
        attributes = anchor.attributes
        yanked = (attributes["data-yanked"] or "") if "data-yanked" in attributes else None
        entries.append((filename, url.split("#", 1)[0], hashes, yanked))
    return entries


def _project_of(filename: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[0]
        return parse_sdist_filename(_as_sdist_name(filename))[0]
    except (InvalidSdistFilename, InvalidWheelFilename, InvalidVersion):
        return None


def _as_sdist_name(filename: str) -> str:
    for suffix in _LEGACY_SDIST_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)] + ".tar.gz"
    return filename


def _describe_file(filename: str, url: str, hashes: dict[str, str], yanked: str | None) -> DistributionFile | None:
    try:
        if filename.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(filename)
            pure = [tag for tag in tags if tag.abi == "none" and tag.platform == "any"]
            rank = 0 if any(tag.interpreter.startswith("py3") for tag in pure) else 1 if pure else 2
            return DistributionFile(filename, url, version, "wheel", rank, hashes, yanked)
        _, version = parse_sdist_filename(_as_sdist_name(filename))
    except (InvalidSdistFilename, InvalidWheelFilename, InvalidVersion):
        return None
    return DistributionFile(filename, url, version, "sdist", 0, hashes, yanked)


def expected_digest(file: DistributionFile) -> tuple[str, bytes] | None:
    """The strongest hash the index gave for the file, as (algorithm, digest bytes); None: no hash."""
    for algorithm in _HASH_PREFERENCE:
        hex_digest = file.hashes.get(algorithm)
        if hex_digest:
            try:
                return algorithm, bytes.fromhex(hex_digest)
            except ValueError:
                continue
    return None


def choose_file(files: Sequence[DistributionFile], wanted: str | None, *, project: str,
                label: str) -> DistributionFile:
    """The file to fetch for ``wanted``: an exact version, a PEP 440 specifier, or None for the latest.

    The latest is the highest release that is neither yanked nor a prerelease (a prerelease only
    when the project has nothing else). Raises ``NotFoundError`` naming the nearest versions.
    """
    if not files:
        raise NotFoundError(f"{label} lists no release files for '{project}' "
                            "(is the index URL a PEP 503 simple index?)")
    available = [file for file in files if file.yanked is None]
    if not wanted:
        versions = _versions(available)
        finals = [version for version in versions if not version.is_prerelease]
        if not versions:
            raise NotFoundError(f"every release of '{project}' on {label} is yanked; "
                                f"name one: pypi:{project}==VERSION ({_listed(_versions(files))})")
        return _best_file(available, (finals or versions)[-1])
    exact = _exact_version(wanted)
    if exact is not None:
        matching = [file for file in files if file.version == exact]
        if not matching:
            finals = [version for version in _versions(available) if not version.is_prerelease]
            latest = f" (latest: {finals[-1]})" if finals else ""
            raise NotFoundError(f"'{project}' has no release {wanted} on {label}; "
                                f"nearest: {_nearest(_versions(files), exact)}{latest}")
        # PEP 592: a yanked file is still served to whoever pins its exact version.
        return _best_file([file for file in matching if file.yanked is None] or matching, exact)
    specifier = _specifier(wanted)
    versions = _versions(available)
    chosen = list(specifier.filter(versions, prereleases=False)) or list(specifier.filter(versions, prereleases=True))
    if not chosen:
        raise NotFoundError(f"no release of '{project}' on {label} satisfies {wanted} "
                            f"(available: {_listed(versions)})")
    return _best_file(available, max(chosen))


def _exact_version(wanted: str) -> Version | None:
    try:
        return Version(wanted)
    except InvalidVersion:
        return None


def _specifier(wanted: str) -> SpecifierSet:
    # The location syntax is NAME==VERSION, so "2.31.*" arrives without its operator.
    text = wanted if wanted[:1] in "<>=!~" else "==" + wanted
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as error:
        raise InvalidRequestError(f"{wanted!r} is neither a PEP 440 version nor a version specifier "
                                  "(e.g. 2.32.3, 2.32.*, >=2.31,<3)", argument="location") from error


def _best_file(files: Iterable[DistributionFile], version: Version) -> DistributionFile:
    of_version = [file for file in files if file.version == version]
    sdists = sorted((file for file in of_version if file.packaging == "sdist"),
                    key=lambda file: (not file.filename.endswith(".tar.gz"), file.filename))
    wheels = sorted((file for file in of_version if file.packaging == "wheel"),
                    key=lambda file: (file.wheel_rank, file.filename))
    return (sdists or wheels)[0]


def _versions(files: Iterable[DistributionFile]) -> list[Version]:
    return sorted({file.version for file in files})


def _nearest(versions: list[Version], wanted: Version, count: int = 4) -> str:
    if not versions:
        return "none published"
    below = [version for version in versions if version < wanted]
    above = [version for version in versions if version > wanted]
    taken_above = min(len(above), max(count // 2, count - len(below)))
    below, above = below[len(below) - min(len(below), count - taken_above):], above[:taken_above]
    return ", ".join(str(version) for version in below + above)


def _listed(versions: list[Version], count: int = 6) -> str:
    if not versions:
        return "none"
    shown = ", ".join(str(version) for version in versions[-count:])
    return shown if len(versions) <= count else f"…, {shown}"
