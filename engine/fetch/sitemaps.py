"""The pages a site announces in its sitemaps (sitemaps.org protocol), read defensively.

A sitemap is XML from a server the crawler does not trust: a document type declaration is
refused outright (it is the door to entity expansion, "billion laughs", and to external
entities), and sizes are capped as the protocol caps them (50 MB and 50,000 URLs a file).
Gzipped sitemaps (``sitemap.xml.gz``) are inflated under the same cap; plain-text sitemaps
(one URL a line) are read too. An index's child sitemaps are followed, a bounded number.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
import zlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

import httpx

from engine.fetch.robots import PoliteClient, status_reason

__all__ = ["MAX_SITEMAP_BYTES", "MAX_SITEMAP_FILES", "MAX_SITEMAP_URLS", "Sitemap", "SitemapError",
           "announced_pages", "parse_sitemap", "sitemap_pages"]

MAX_SITEMAP_BYTES = 50 * 1024 * 1024
#: Per file, as the protocol allows; also the most page URLs taken from all sitemaps of a crawl.
MAX_SITEMAP_URLS = 50_000
#: Sitemap files read per crawl: an index may name 50,000, a docs site needs a handful.
MAX_SITEMAP_FILES = 50

_DECLARATION = re.compile(rb"<!\s*(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_GZIP_MAGIC = b"\x1f\x8b"


class SitemapError(ValueError):
    """The bytes are no sitemap this crawler reads (the message says why)."""


@dataclass(frozen=True, slots=True)
class Sitemap:
    pages: tuple[str, ...] = ()
    #: Child sitemaps, when this one is a sitemap index.
    sitemaps: tuple[str, ...] = ()


def parse_sitemap(raw: bytes) -> Sitemap:
    """The page URLs (or, for an index, the sitemap URLs) ``raw`` lists, in document order."""
    if raw.startswith(_GZIP_MAGIC):
        raw = _inflated(raw)
    if len(raw) > MAX_SITEMAP_BYTES:
        raise SitemapError(f"sitemap larger than {MAX_SITEMAP_BYTES} bytes")
    text_start = raw.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text_start.startswith(b"<"):
        lines = (line.strip() for line in raw.decode("utf-8", errors="replace").splitlines())
        return Sitemap(pages=tuple(line for line in lines if line.startswith(("http://", "https://")))
                       [:MAX_SITEMAP_URLS])
    if _DECLARATION.search(raw):
        raise SitemapError("sitemap declares a document type (refused: entity expansion)")
    try:
        root = ElementTree.fromstring(raw)
    except ElementTree.ParseError as error:
        raise SitemapError(f"sitemap is not well-formed XML ({error})") from error
    kind = _local_name(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        raise SitemapError(f"not a sitemap (root element <{kind}>)")
    entry = "url" if kind == "urlset" else "sitemap"
    locations = [
        (child.text or "").strip()
        for item in root if _local_name(item.tag) == entry
        for child in item if _local_name(child.tag) == "loc"
    ]
    found = tuple(location for location in locations if location)[:MAX_SITEMAP_URLS]
    return Sitemap(pages=found) if kind == "urlset" else Sitemap(sitemaps=found)


def sitemap_pages(
    roots: Iterable[str], read: Callable[[str], bytes | None], report: Callable[[str, str], None]
) -> list[str]:
    """Every page URL the sitemaps at ``roots`` list, following indexes (bounded, each file once).

    ``read`` fetches a sitemap and returns None when it cannot (reporting why is its job);
    ``report`` is told of each file that came back but is no sitemap this module reads.
    """
    queue = list(dict.fromkeys(roots))
    seen = set(queue)
    pages: list[str] = []
    files_read = 0
    while queue and files_read < MAX_SITEMAP_FILES and len(pages) < MAX_SITEMAP_URLS:
        url = queue.pop(0)
        files_read += 1
        raw = read(url)
        if raw is None:
            continue
        try:
            sitemap = parse_sitemap(raw)
        except SitemapError as error:
            report(url, str(error))
            continue
        pages.extend(sitemap.pages)
        for child in sitemap.sitemaps:
            if child not in seen:
                seen.add(child)
                queue.append(child)
    return pages[:MAX_SITEMAP_URLS]


def announced_pages(client: PoliteClient, roots: Iterable[str], *, optional: Collection[str],
                    report: Callable[[str, str], None]) -> list[str]:
    """The page URLs the sitemaps at ``roots`` list; ``report`` hears of each that failed.

    A sitemap in ``optional`` (one guessed at, such as ``/sitemap.xml``) may be missing: a
    404 or 410 for it is no failure. Sitemaps robots.txt disallows are not read.
    """

    def read(url: str) -> bytes | None:
        if not url.lower().startswith(("http://", "https://")):
            report(url, "not an http(s) sitemap address")
            return None
        if not client.allows(url):
            return None
        try:
            with client.get(url, follow_redirects=True) as response:
                if response.status_code == 200:
                    body = client.body(response, limit=MAX_SITEMAP_BYTES)
                    if body is None:
                        report(url, f"sitemap larger than {MAX_SITEMAP_BYTES} bytes")
                    return body
                if not (url in optional and response.status_code in (404, 410)):
                    report(url, status_reason(response))
        except httpx.HTTPError as error:
            report(url, client.describe(error))
        except (httpx.InvalidURL, UnicodeError):
            report(url, "not a valid URL for HTTP")
        return None

    return sitemap_pages(roots, read, report)


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _inflated(raw: bytes) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    try:
        inflated = inflater.decompress(raw, MAX_SITEMAP_BYTES + 1)
    except zlib.error as error:
        raise SitemapError(f"sitemap is not valid gzip ({error})") from error
    if len(inflated) > MAX_SITEMAP_BYTES:
        raise SitemapError(f"sitemap inflates to more than {MAX_SITEMAP_BYTES} bytes")
    return inflated
