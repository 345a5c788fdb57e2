"""What a fetcher hands the ingest: a folder on disk and what only the fetcher knows about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.ingest.changes import ChangeSet
from engine.ingest.walk import Candidate, SkippedFile

__all__ = ["FetchedTree"]


@dataclass(slots=True)
class FetchedTree:
    """A fetched location, as ``Ingestor.ingest`` reads it (``engine.fetch.fetching.Fetcher.fetch`` makes one).

    ``listing`` is the files to ingest and those passed over, in a stable order; None means
    "walk ``root`` as a folder" (``engine.ingest.walk.list_tree``: ignore rules apply), which
    is right for a package or a repository and wrong for a website mirror (a page under
    ``/build/`` is a page). ``urls`` maps a document path to its citation URL where the
    source's base URL joined with the path would be wrong (a page's final URL after redirects).
    ``failed`` lists what could not be fetched, as (path or URL, reason): the ingest reports
    them with its own failures and never deletes the stored document of a path in ``kept``
    (a page that failed this time is not a page that is gone).
    """

    root: Path
    #: Where it came from, without credentials (what reports show).
    location: str
    listing: list[Candidate | SkippedFile] | None = None
    urls: dict[str, str] = field(default_factory=dict)
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: Stored paths to keep although this fetch did not produce them (failed fetches).
    kept: set[str] = field(default_factory=set)
    #: The exact release fetched (a package version), recorded as the source's version.
    version: str | None = None
    #: The git commit ingested (git remotes), and what changed since the last one.
    revision: str | None = None
    changed: ChangeSet | None = None
    #: One line for the CLI: what the fetch did ("312 pages: 300 unchanged (304), 12 fetched").
    report: str = ""
