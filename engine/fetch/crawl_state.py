"""What a website crawl leaves in its cache folder for the next run: ``crawl.json`` (one record
per URL: document path, validators, last status, failure) and the mirror folder of pages.

Kept apart from the crawl (``engine.fetch.web``) because resuming depends on these files alone:
every write here is atomic (temporary name, then ``os.replace``), and the sweep deletes what a
killed run left in the mirror without recording it, so a crawl interrupted at any moment is
picked up by the next one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

__all__ = ["MIRROR_FOLDER", "STATE_FILE", "CrawlState", "PageRecord", "is_mirrored", "sweep_mirror",
           "write_atomically"]

STATE_FILE = "crawl.json"
MIRROR_FOLDER = "pages"
_STATE_VERSION = 1


@dataclass(slots=True)
class PageRecord:
    """What the crawl knows of one URL (the key): a mirrored page's key is its final URL."""

    depth: int
    path: str | None = None  # the mirrored document (shared with another URL's page when same_as is set)
    etag: str | None = None
    last_modified: str | None = None
    status: int | None = None
    gone: int = 0  # consecutive crawls answering 404/410
    gone_in: int = -1  # the crawl generation that counted the last one (a resumed crawl counts once)
    failure: str | None = None
    skipped: str | None = None  # answered, but not a document the ingest reads
    same_as: str | None = None  # the URL whose page holds this one's document (".../" and ".../index.html")


_PAGE_FIELDS = tuple(item.name for item in fields(PageRecord))


@dataclass(slots=True)
class CrawlState:
    pages: dict[str, PageRecord] = field(default_factory=dict)
    start: str | None = None  # the start page's final URL: the scope of a retry
    generation: int = 0
    finished: bool = False

    @classmethod
    def load(cls, file: Path) -> CrawlState:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            if data.get("version") != _STATE_VERSION:
                return cls()
            pages = {url: PageRecord(**{key: value for key, value in entry.items() if key in _PAGE_FIELDS})
                     for url, entry in data["pages"].items()}
            return cls(pages, data.get("start"), int(data["generation"]), bool(data["finished"]))
        except (OSError, ValueError, KeyError, TypeError):
            return cls()  # no state (or one this version cannot read): a fresh crawl

    def save(self, file: Path) -> None:
        entries = {url: {name: value for name in _PAGE_FIELDS if (value := getattr(page, name)) is not None}
                   for url, page in sorted(self.pages.items())}
        data = {"version": _STATE_VERSION, "start": self.start, "generation": self.generation,
                "finished": self.finished, "pages": entries}
        write_atomically(file, json.dumps(data, separators=(",", ":")).encode())


def is_mirrored(page: PageRecord) -> bool:
    return page.path is not None and page.same_as is None and page.skipped is None


def write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.part")
    temporary.write_bytes(data)
    os.replace(temporary, target)


def sweep_mirror(mirror: Path, keep: set[str | None]) -> None:
    """Delete what the state no longer names: gone pages, and copies a killed run left unrecorded."""
    for directory, _, names in os.walk(mirror, topdown=False):
        here = Path(directory)
        for name in names:
            if (here / name).relative_to(mirror).as_posix() not in keep:
                (here / name).unlink()
        if here != mirror and not any(here.iterdir()):
            here.rmdir()
