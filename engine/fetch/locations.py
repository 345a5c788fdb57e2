"""Where a source's documents come from, as ``quarry ingest LOCATION`` takes it, and fetching it.

A location is one of: a local folder or file (read in place, nothing fetched), a website
(``https://docs.example.com/guide/``), a package release (``pypi:NAME==VERSION``,
``npm:NAME@VERSION``; no version: the latest), or a git repository (``git+https://…@REF``,
``https://host/org/repo.git@REF``, ``git+file:///path/repo@REF``, ``ssh://…``). The source
records its location (``quarry.sources.metadata``), so a refresh needs only the source's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from engine.errors import InvalidRequestError
from engine.fetch.credentials import without_credentials
from engine.vocabulary import SourceKind

__all__ = ["FetchOptions", "Location", "parse_location"]

LocationKind = Literal["path", "web", "pypi", "npm", "git"]

_PYPI = re.compile(r"^pypi:(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:==(?P<version>[^\s=]+))?$")
_NPM = re.compile(r"^npm:(?P<name>(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*)(?:@(?P<version>\S+))?$")


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed location: its kind and, for packages, the name and version asked for."""

    text: str  # as the user wrote it
    kind: LocationKind
    name: str | None = None  # package name (pypi, npm)
    version: str | None = None  # package version, tag or range asked for; None: the latest

    @property
    def shown(self) -> str:
        """The location without a password or token in its URL: what is recorded, printed and logged."""
        return without_credentials(self.text)

    @property
    def path(self) -> Path:
        return Path(self.text).expanduser()

    @property
    def is_fetched(self) -> bool:
        return self.kind != "path"

    @property
    def default_kind(self) -> SourceKind | None:
        """The kind a new source from here is, unless told: a website is docs, a package or repository code."""
        if self.kind == "path":
            return None
        return "docs_site" if self.kind == "web" else "code_repo"


@dataclass(frozen=True, slots=True)
class FetchOptions:
    """How to fetch: crawl bounds for websites (``quarry ingest --include/--max-pages/...``)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_pages: int | None = None
    max_depth: int | None = None
    delay_seconds: float | None = None
    retry_failed_only: bool = False

    def as_arguments(self) -> dict[str, object]:
        """The options a job records (and a retry or refresh fetches with again)."""
        return {"include": list(self.include), "exclude": list(self.exclude), "max_pages": self.max_pages,
                "max_depth": self.max_depth, "delay_seconds": self.delay_seconds}

    @classmethod
    def from_arguments(cls, arguments: dict[str, object] | None) -> FetchOptions:
        given = arguments or {}

        def optional_int(name: str) -> int | None:
            value = given.get(name)
            return value if isinstance(value, int) else None

        def globs(name: str) -> tuple[str, ...]:
            value = given.get(name)
            return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list) else ()

        delay = given.get("delay_seconds")
        return cls(globs("include"), globs("exclude"), optional_int("max_pages"), optional_int("max_depth"),
                   float(delay) if isinstance(delay, (int, float)) else None,
                   retry_failed_only=given.get("retry_failed_only") is True)


def parse_location(text: str) -> Location:
    """Classify ``text``; raises ``InvalidRequestError`` naming what is wrong with it."""
    text = text.strip()
    if not text:
        raise InvalidRequestError("location: empty (a folder, a file, a URL, pypi:NAME, npm:NAME or a git URL)")
    if text.startswith("pypi:"):
        match = _PYPI.match(text)
        if match is None:
            raise InvalidRequestError(f"location: {text!r} is not pypi:NAME or pypi:NAME==VERSION")
        return Location(text, "pypi", match["name"], match["version"])
    if text.startswith("npm:"):
        match = _NPM.match(text)
        if match is None:
            raise InvalidRequestError(f"location: {text!r} is not npm:NAME, npm:@SCOPE/NAME or npm:NAME@VERSION")
        return Location(text, "npm", match["name"], match["version"])
    if text.startswith(("git+", "ssh://", "git://")) or re.match(r"^[\w.-]+@[\w.-]+:", text):
        return Location(text, "git")
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text):
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https"):
            raise InvalidRequestError(f"location: unsupported scheme {parts.scheme!r} (http, https, git+..., "
                                      "ssh, pypi:, npm:, or a local path)")
        if not parts.hostname:
            raise InvalidRequestError("location: the URL has no host")
        # A repository URL: `…/repo.git` or `…/repo.git@REF`.
        if re.search(r"\.git(?:@[^/]+)?/?$", parts.path):
            return Location(text, "git")
        return Location(text, "web")
    return Location(text, "path")

