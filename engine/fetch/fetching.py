"""Fetch a location into a ``FetchedTree``: the one place that knows which fetcher serves which kind.

Called by the ingest under the source's lock (``engine.ingest.pipeline``), so two runs never
crawl into one mirror at once, and inside the run's job, so a crawl is cancellable, shown and
accounted for like the rest of the ingest.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.errors import InvalidRequestError, NotFoundError
from engine.fetch.locations import FetchOptions, Location, parse_location
from engine.fetch.tree import FetchedTree

__all__ = ["Fetcher", "locate", "recorded_location"]


@dataclass(frozen=True, slots=True)
class Fetcher:
    """Fetches one location for one source; ``arguments`` is what its job records."""

    location: Location
    options: FetchOptions
    source_slug: str
    fetch_dir: Path
    pypi_index_url: str | None = None
    npm_registry: str | None = None

    @property
    def revision_key(self) -> str:
        """What the last ingested git commit is a commit of: the repository, whatever ref it was at."""
        if self.location.kind == "git":
            from engine.fetch.git import split_git_location

            return split_git_location(self.location.shown)[0]
        return self.location.shown

    @property
    def arguments(self) -> dict[str, object]:
        return {"location": self.location.shown, "fetch": self.options.as_arguments()}

    def fetch(self, last_revision: str | None, progress: Callable[[str], None] | None = None) -> FetchedTree:
        """Bring the location to disk; ``last_revision`` is the git commit the source last ingested."""
        kind = self.location.kind
        if kind == "web":
            from engine.fetch.web import CrawlOptions, crawl_site

            bounds: dict[str, Any] = {name: value for name, value in (
                ("max_pages", self.options.max_pages), ("max_depth", self.options.max_depth),
                ("delay_seconds", self.options.delay_seconds)) if value is not None}
            crawl = CrawlOptions(include=self.options.include, exclude=self.options.exclude,
                                 retry_failed_only=self.options.retry_failed_only, **bounds)
            shown = None if progress is None else (lambda state: progress(str(state)))
            return crawl_site(self.location.text, self.fetch_dir / "web" / self.source_slug, crawl, progress=shown)
        if kind == "pypi":
            from engine.fetch.packages import DEFAULT_PYPI_INDEX_URL, fetch_pypi

            assert self.location.name is not None
            return fetch_pypi(self.location.name, self.location.version, self.fetch_dir / "packages",
                              index_url=self.pypi_index_url or DEFAULT_PYPI_INDEX_URL)
        if kind == "npm":
            from engine.fetch.packages import DEFAULT_NPM_REGISTRY, fetch_npm

            assert self.location.name is not None
            return fetch_npm(self.location.name, self.location.version, self.fetch_dir / "packages",
                             registry=self.npm_registry or DEFAULT_NPM_REGISTRY)
        if kind == "git":
            from engine.fetch.git import fetch_git, split_git_location

            url, ref = split_git_location(self.location.text)
            # A work tree per source: two sources of one repository at two refs never share one.
            return fetch_git(url, ref, self.fetch_dir / "git" / self.source_slug, last_commit=last_revision,
                             location=self.location.text)
        raise ValueError(f"a {kind} location is read in place, not fetched")


def locate(text: str, settings: Settings, source_slug: str, options: FetchOptions | None = None, *,
           remote_only: bool = False) -> Path | Fetcher:
    """What the ingest reads for ``text``: a local path as it is, anything else through its fetcher.

    ``remote_only`` (jobs queued over MCP): no local path, no ``file://`` repository, and no
    loopback, link-local or private host unless ``QUARRY_FETCH_PRIVATE_HOSTS`` allows them.
    """
    location = parse_location(text)
    if remote_only:
        refuse_local_reach(location, allow_private=settings.fetch_private_hosts)
    if not location.is_fetched:
        return location.path
    return Fetcher(location, options or FetchOptions(), source_slug, settings.fetch_dir,
                   settings.pypi_index_url, settings.npm_registry)


def recorded_location(pool: ConnectionPool, source_slug: str) -> tuple[str, FetchOptions]:
    """Where the source was last ingested from, and how it was fetched (a refresh does it again).

    Raises ``NotFoundError`` for an unknown source and ``InvalidRequestError`` for a source
    ingested before locations were recorded that has no folder either.
    """
    with pool.connection() as conn:
        row = conn.execute("select metadata ->> 'location', metadata -> 'fetch', root_path from quarry.sources"
                           " where slug = %s", (source_slug,)).fetchone()
    if row is None:
        raise NotFoundError(f"no source named {source_slug!r}")
    location = row[0] or row[2]  # sources ingested before locations were recorded kept their folder
    if not location:
        raise InvalidRequestError(f"source {source_slug!r} has no recorded location: name it once "
                                  f"(quarry ingest LOCATION --source {source_slug})")
    return str(location), FetchOptions.from_arguments(row[1] if isinstance(row[1], dict) else None)


def refuse_local_reach(location: Location, *, allow_private: bool) -> None:
    """Raise ``InvalidRequestError`` when a location would read this machine or its private network."""
    if location.kind == "path" or "file:" in location.text.split("://", 1)[0]:
        raise InvalidRequestError("location: a source added over MCP is fetched from the network (https://, "
                                  "pypi:, npm:, a git URL); local paths and file:// are for `quarry ingest`")
    if location.kind in ("pypi", "npm") or allow_private:
        return  # the package indexes are the server's own configuration
    host = urlsplit(location.text.removeprefix("git+")).hostname
    if host is None:  # scp-style git@host:org/repo
        host = location.text.split("@", 1)[-1].split(":", 1)[0]
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        raise InvalidRequestError(f"location: cannot resolve host {host!r}") from None
    for address in addresses:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
        if not parsed.is_global:
            raise InvalidRequestError(f"location: {host!r} is a private, loopback or link-local address; "
                                      "QUARRY_FETCH_PRIVATE_HOSTS=1 on the worker allows it")
