"""The website crawler against real HTTP servers on loopback: a generated site whose answers a
test changes between crawls, and the Python documentation as Debian ships it."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from engine.fetch.crawl_state import STATE_FILE
from engine.fetch.crawl_urls import canonical_url
from engine.fetch.sitemaps import SitemapError, parse_sitemap
from engine.fetch.tree import FetchedTree
from engine.fetch.web import CrawlOptions, CrawlProgress, crawl_site
from engine.ingest.parsers.html import parse_html
from engine.ingest.walk import Candidate, SkippedFile

REPO = Path(__file__).resolve().parents[1]
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    conditional: bool
    status: int


@dataclass
class Site:
    """What the server answers, path by path; a test edits it between crawls."""

    port: int = 0
    pages: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # path -> (content type, body)
    redirects: dict[str, tuple[int, str]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)  # path -> an error status to answer
    slow: dict[str, float] = field(default_factory=dict)  # path -> seconds before answering
    delay: float = 0.0  # before every page answer
    robots: str | None = None
    robots_status: int = 200
    hits: list[Hit] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def page(self, path: str, body: str, content_type: str = "text/html; charset=utf-8") -> None:
        self.pages[path] = (content_type, body.encode())

    def take_hits(self) -> list[Hit]:
        with self.lock:
            hits, self.hits = self.hits, []
        return hits


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            conditional = "If-None-Match" in self.headers or "If-Modified-Since" in self.headers
            if self.headers.get("Authorization"):
                site.authorizations.append(self.headers["Authorization"])
            status = self._answer(path)
            with site.lock:
                site.hits.append(Hit(path, conditional, status))

        def _answer(self, path: str) -> int:
            if path == "/robots.txt":
                if site.robots is None or site.robots_status != 200:
                    return self._send(404 if site.robots is None else site.robots_status, b"")
                return self._send(200, site.robots.encode(), "text/plain")
            time.sleep(site.slow.get(path, site.delay))
            if path in site.statuses:
                return self._send(site.statuses[path], b"no")
            if path in site.redirects:
                code, target = site.redirects[path]
                return self._send(code, b"", headers={"Location": target})
            if path not in site.pages:
                return self._send(404, b"not found")
            content_type, body = site.pages[path]
            etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == etag:
                return self._send(304, None, headers={"ETag": etag})
            return self._send(200, body, content_type, {"ETag": etag,
                                                        "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"})

        def _send(self, status: int, body: bytes | None, content_type: str = "text/plain",
                  headers: dict[str, str] | None = None) -> int:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if body is not None:
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)
            return status

    return Handler


def _serve(handler: type[BaseHTTPRequestHandler] | partial[SimpleHTTPRequestHandler]) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.block_on_close = False
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def site() -> Iterator[Site]:
    served = Site()
    for port in _serve(_handler(served)):
        served.port = port
        _build_guide(served)
        yield served


def _html(title: str, *links: str, text: str = "") -> str:
    anchors = "".join(f'<li><a href="{link}">{link}</a></li>' for link in links)
    return (f"<!doctype html><html><head><title>{title}</title></head><body>"
            f"<nav><ul><li><a href='index.html'>Home</a></li></ul></nav>"
            f"<main><h1>{title}</h1><p>{text or 'About ' + title + '.'}</p><ul>{anchors}</ul></main></body></html>")


def _build_guide(site: Site) -> None:
    """/guide/: an index linking a chain of pages and every kind of page a crawl meets."""
    site.robots = f"User-agent: *\nDisallow: /guide/private/\n\nSitemap: {site.url('/maps/index.xml')}\n"
    site.page("/guide/", _html(
        "Guide", "page-00.html", "api", "moved.html", "away.html", "forbidden.html", "private/secret.html",
        "../other/outside.html", "notes.txt", "data.bin", "image.png", "index.html", "page-00.html?x=1#top",
        "mailto:someone@example.com", "https://elsewhere.invalid/x", "#top"))
    site.pages["/guide/index.html"] = site.pages["/guide/"]
    for number in range(6):
        links = ["index.html"] + ([f"page-{number + 1:02d}.html"] if number < 5 else [])
        site.page(f"/guide/page-{number:02d}.html", _html(f"Page {number}", *links))
    site.page("/guide/api", _html("API", "index.html"))
    site.redirects["/guide/moved.html"] = (301, "/guide/new-home.html")
    site.page("/guide/new-home.html", _html("New home"))
    site.redirects["/guide/away.html"] = (302, site.url("/other/landing.html"))
    site.statuses["/guide/forbidden.html"] = 403
    site.page("/guide/private/secret.html", _html("Secret"))
    site.page("/other/outside.html", _html("Outside"))
    site.page("/guide/notes.txt", "plain notes", "text/plain")
    site.pages["/guide/data.bin"] = ("application/octet-stream", b"\x00\x01")
    site.page("/guide/orphan.html", _html("Only in a sitemap"))
    site.page("/guide/from-root-sitemap.html", _html("From the root sitemap"))
    site.page("/sitemap.xml", _urlset(site.url("/guide/from-root-sitemap.html"), site.url("/other/x.html")),
              "application/xml")
    site.page("/maps/index.xml", '<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/'
              f'sitemap/0.9"><sitemap><loc>{site.url("/maps/guide.xml.gz")}</loc></sitemap></sitemapindex>',
              "application/xml")
    site.pages["/maps/guide.xml.gz"] = ("application/gzip", gzip.compress(_urlset(site.url("/guide/orphan.html"),
                                                                                  site.url("/guide/page-00.html"))
                                                                          .encode()))


def _urlset(*urls: str) -> str:
    entries = "".join(f"<url><loc>{url}</loc></url>" for url in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'


def _documents(tree: FetchedTree) -> dict[str, bytes]:
    assert tree.listing is not None
    return {item.relative_path: item.path.read_bytes() for item in tree.listing if isinstance(item, Candidate)}


def _skips(tree: FetchedTree) -> dict[str, str]:
    assert tree.listing is not None
    return {item.relative_path: item.reason for item in tree.listing if isinstance(item, SkippedFile)}


def _mirror(cache: Path) -> dict[str, bytes]:
    root = cache / "pages"
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


GUIDE_DOCUMENTS = {
    "guide/index.html", *(f"guide/page-{number:02d}.html" for number in range(6)), "guide/api.html",
    "guide/new-home.html", "guide/notes.txt", "guide/orphan.html", "guide/from-root-sitemap.html",
}


def test_first_crawl_keeps_to_scope_robots_and_sitemaps(site: Site, tmp_path: Path) -> None:
    seen: list[CrawlProgress] = []
    tree = crawl_site(site.url("/guide/"), tmp_path, progress=seen.append)

    assert set(_documents(tree)) == GUIDE_DOCUMENTS
    assert _documents(tree)["guide/page-03.html"] == site.pages["/guide/page-03.html"][1]
    assert tree.urls["guide/index.html"] == site.url("/guide/")  # the start URL, not its index.html alias
    assert tree.urls["guide/api.html"] == site.url("/guide/api")  # an HTML page without a suffix gets one
    assert tree.urls["guide/new-home.html"] == site.url("/guide/new-home.html")  # final URL after the redirect
    assert _skips(tree) == {
        "guide/private/secret.html": "disallowed by robots.txt",
        "guide/away.html": f"redirected out of scope to {site.url('/other/landing.html')}",
        "guide/data.bin": "unsupported content type (application/octet-stream)",
    }
    assert tree.failed == [(site.url("/guide/forbidden.html"), "HTTP 403 Forbidden")]
    assert tree.kept == set()
    assert tree.location == site.url("/guide/")
    assert tree.report == "13 pages: 0 unchanged (304), 12 fetched, 1 failed; 0 gone; 3 skipped"
    assert tree.root == tmp_path / "pages" and set(_mirror(tmp_path)) == GUIDE_DOCUMENTS

    requested = {hit.path for hit in site.take_hits()}
    assert {"/robots.txt", "/sitemap.xml", "/maps/index.xml", "/maps/guide.xml.gz"} <= requested
    assert not {"/guide/private/secret.html", "/guide/image.png", "/other/outside.html", "/other/x.html",
                "/other/landing.html"} & requested  # disallowed, not a document, out of scope
    assert seen and seen[-1].pages_done >= 14 and seen[-1].failed == 1 and seen[-1].queued == 0


def test_recrawl_of_an_unchanged_site_costs_only_304s(site: Site, tmp_path: Path) -> None:
    first = crawl_site(site.url("/guide/"), tmp_path)
    site.take_hits()
    again = crawl_site(site.url("/guide/"), tmp_path)

    assert (again.listing, again.urls, again.failed) == (first.listing, first.urls, first.failed)
    assert _mirror(tmp_path) == {path: body for path, body in _documents(first).items()}
    hits = site.take_hits()
    page_hits = [hit for hit in hits if hit.path.startswith("/guide/")]
    unconditional = {(hit.path, hit.status) for hit in page_hits if not hit.conditional}
    assert unconditional == {("/guide/moved.html", 301), ("/guide/away.html", 302), ("/guide/forbidden.html", 403),
                             ("/guide/sitemap.xml", 404)}  # none of them has a copy to stand for a 304
    assert {hit.status for hit in page_hits if hit.conditional} == {304}
    # every document, its index.html alias, the skipped data.bin, and moved.html's redirect to new-home.html
    assert len([hit for hit in page_hits if hit.conditional]) == len(GUIDE_DOCUMENTS) + 3
    assert again.report.startswith("13 pages: 12 unchanged (304), 0 fetched, 1 failed; 0 gone")


def test_changed_page_is_refetched_and_a_vanished_one_needs_two_404s(site: Site, tmp_path: Path) -> None:
    crawl_site(site.url("/guide/"), tmp_path)
    site.page("/guide/page-01.html", _html("Page 1", "index.html", "page-02.html", text="Rewritten."))
    del site.pages["/guide/page-05.html"]

    second = crawl_site(site.url("/guide/"), tmp_path)
    assert b"Rewritten." in _documents(second)["guide/page-01.html"]
    assert "guide/page-05.html" in _documents(second)  # one 404 may be a blip: the copy stays
    assert second.kept == {"guide/page-05.html"}
    assert (site.url("/guide/page-05.html"),
            "HTTP 404 Not Found (kept; removed if the next crawl finds it gone too)") in second.failed
    assert "1 fetched" in second.report and "0 gone" in second.report

    site.page("/guide/page-04.html", _html("Page 4", "index.html"))  # unlinked as well: known URLs are re-asked
    third = crawl_site(site.url("/guide/"), tmp_path)
    assert "guide/page-05.html" not in _documents(third) and "guide/page-05.html" not in _mirror(tmp_path)
    assert "guide/page-05.html" not in third.urls and third.kept == set()
    assert third.failed == [(site.url("/guide/forbidden.html"), "HTTP 403 Forbidden")]
    assert "; 1 gone" in third.report
    assert site.url("/guide/page-05.html") not in json.loads((tmp_path / STATE_FILE).read_text())["pages"]


def test_failures_never_abort_and_a_retry_refetches_just_them(site: Site, tmp_path: Path) -> None:
    site.slow["/guide/page-02.html"] = 1.0
    first = crawl_site(site.url("/guide/"), tmp_path, CrawlOptions(read_timeout_seconds=0.3))
    assert dict(first.failed) == {site.url("/guide/forbidden.html"): "HTTP 403 Forbidden",
                                  site.url("/guide/page-02.html"): "timeout after 0.3 s"}
    assert "guide/page-01.html" in _documents(first) and "guide/page-03.html" not in _documents(first)

    del site.statuses["/guide/forbidden.html"]
    del site.slow["/guide/page-02.html"]
    site.page("/guide/forbidden.html", _html("Open now", "index.html", "behind.html"))
    site.page("/guide/behind.html", _html("Behind the door"))
    site.take_hits()
    retried = crawl_site(site.url("/guide/"), tmp_path, CrawlOptions(retry_failed_only=True))

    requested = sorted(hit.path for hit in site.take_hits())
    # the failed ones, and what only they led to (page-02 timed out: the chain behind it was never seen)
    assert requested == ["/guide/behind.html", "/guide/forbidden.html", "/guide/page-02.html", "/guide/page-03.html",
                         "/guide/page-04.html", "/guide/page-05.html", "/robots.txt"]
    assert set(_documents(retried)) == GUIDE_DOCUMENTS | {"guide/forbidden.html", "guide/behind.html"}
    assert retried.failed == [] and retried.report.startswith("retried failed pages; 6 pages: 0 unchanged")


def test_a_start_url_that_redirects_sets_the_scope_where_it_lands(site: Site, tmp_path: Path) -> None:
    site.redirects["/guide"] = (301, "/guide/")
    tree = crawl_site(site.url("/guide"), tmp_path)
    assert set(_documents(tree)) == GUIDE_DOCUMENTS and tree.urls["guide/index.html"] == site.url("/guide/")


def test_include_and_exclude_globs(site: Site, tmp_path: Path) -> None:
    included = crawl_site(site.url("/guide/"), tmp_path / "a", CrawlOptions(include=("/guide/page-0[0-2].html",)))
    assert set(_documents(included)) == {"guide/index.html", "guide/page-00.html", "guide/page-01.html",
                                         "guide/page-02.html"}  # the start page is always read
    excluded = crawl_site(site.url("/guide/"), tmp_path / "b", CrawlOptions(exclude=("**/page-03.html", "**/api")))
    assert set(_documents(excluded)) == GUIDE_DOCUMENTS - {"guide/page-03.html", "guide/page-04.html",
                                                           "guide/page-05.html", "guide/api.html"}
    narrower = crawl_site(site.url("/guide/page-00.html"), tmp_path / "c", CrawlOptions(include=("guide/**",),
                                                                                        exclude=("**/*.txt",)))
    assert set(_documents(narrower)) == GUIDE_DOCUMENTS - {"guide/notes.txt"}


def test_max_pages_and_max_depth(site: Site, tmp_path: Path) -> None:
    bounded = crawl_site(site.url("/guide/"), tmp_path / "a", CrawlOptions(max_pages=3))
    assert set(_documents(bounded)) == {"guide/index.html", "guide/api.html", "guide/from-root-sitemap.html"}
    assert _skips(bounded)["guide/page-00.html"] == "not fetched: max_pages (3) reached"
    shallow = crawl_site(site.url("/guide/"), tmp_path / "b", CrawlOptions(max_depth=2))
    assert {path for path in _documents(shallow) if "page-" in path} == {"guide/page-00.html", "guide/page-01.html"}
    only_start = crawl_site(site.url("/guide/"), tmp_path / "c", CrawlOptions(max_depth=0))
    assert set(_documents(only_start)) == {"guide/index.html"}


def test_crawl_delay_spaces_the_requests_to_a_host(site: Site, tmp_path: Path) -> None:
    site.robots = "User-agent: QuarryBot\nCrawl-delay: 0.1\nDisallow: /guide/private/\n"
    started = time.monotonic()
    crawl_site(site.url("/guide/page-04.html"), tmp_path, CrawlOptions(include=("guide/page-0[45].html",)))
    assert [hit.path for hit in site.take_hits()] == ["/robots.txt", "/guide/page-04.html", "/sitemap.xml",
                                                      "/guide/sitemap.xml", "/guide/page-05.html"]
    assert time.monotonic() - started >= 4 * 0.1  # four gaps between five requests


def test_robots_txt_answering_5xx_fetches_nothing_and_keeps_every_page(site: Site, tmp_path: Path) -> None:
    first = crawl_site(site.url("/guide/"), tmp_path)
    site.robots_status = 503
    site.take_hits()
    down = crawl_site(site.url("/guide/"), tmp_path)
    assert [hit.path for hit in site.take_hits()] == ["/robots.txt"]
    assert down.listing == [item for item in first.listing or [] if isinstance(item, Candidate)]
    assert down.kept == set(_documents(first))
    assert down.report == f"robots.txt unavailable: nothing fetched; {len(down.kept)} pages kept from the last crawl"
    assert down.failed == [(site.url("/robots.txt"), "robots.txt unavailable (HTTP 503): nothing on this host is "
                                                     "fetched this run; re-run later")]


def test_credentials_go_to_their_host_and_never_into_reports(site: Site, tmp_path: Path) -> None:
    start = site.url("/guide/").replace("://", "://reader:s3cret@")
    tree = crawl_site(start, tmp_path)
    assert site.authorizations and all(value.startswith("Basic ") for value in site.authorizations)
    shown = json.dumps([tree.failed, tree.urls, tree.report, _skips(tree)])
    assert "s3cret" not in shown and "reader" not in shown and tree.location == site.url("/guide/")
    assert "s3cret" not in (tmp_path / STATE_FILE).read_text()


def test_canonical_urls() -> None:
    assert canonical_url("HTTP://Docs.Example.com:80/a/./b/../c.html?x=1#top") == "http://docs.example.com/a/c.html"
    assert canonical_url("https://user:pw@example.com:8443/dir/") == "https://example.com:8443/dir/"
    assert canonical_url("https://example.com") == "https://example.com/"
    assert canonical_url("https://example.com/a b/é") == "https://example.com/a%20b/%C3%A9"
    assert canonical_url("mailto:someone@example.com") is None
    assert canonical_url("ftp://example.com/x") is None


def test_sitemaps_are_read_defensively() -> None:
    urlset = _urlset("https://example.com/a", "https://example.com/b").encode()
    assert parse_sitemap(urlset).pages == ("https://example.com/a", "https://example.com/b")
    assert parse_sitemap(gzip.compress(urlset)).pages == ("https://example.com/a", "https://example.com/b")
    assert parse_sitemap(b"https://example.com/a\nnot a url\n").pages == ("https://example.com/a",)
    laughs = b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">]><urlset><url><loc>&lol;</loc></url></urlset>'
    with pytest.raises(SitemapError, match="document type"):
        parse_sitemap(laughs)
    with pytest.raises(SitemapError, match="not a sitemap"):
        parse_sitemap(b"<html><body>hello</body></html>")


_CRAWL_IN_A_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from engine.fetch.web import CrawlOptions, crawl_site
crawl_site(sys.argv[1], Path(sys.argv[2]), CrawlOptions(concurrency=2))
"""


def test_a_crawl_killed_midway_resumes_to_the_same_mirror(tmp_path: Path) -> None:
    slow = Site(delay=0.02)
    for port in _serve(_handler(slow)):
        slow.port = port
        slow.robots = "User-agent: *\nDisallow:\n"
        slow.page("/docs/", _html("Docs", *(f"p{number}.html" for number in range(80))))
        for number in range(80):
            slow.page(f"/docs/p{number}.html", _html(f"P{number}", f"p{(number * 7 + 3) % 80}.html"))
        killed_cache = tmp_path / "killed"
        child = subprocess.Popen([sys.executable, "-c", _CRAWL_IN_A_CHILD, slow.url("/docs/"), str(killed_cache),
                                  str(REPO)])
        deadline = time.monotonic() + 20
        while not (killed_cache / STATE_FILE).exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        state = json.loads((killed_cache / STATE_FILE).read_text())
        assert not state["finished"] and 0 < len(state["pages"]) < 82  # killed mid-crawl, some pages recorded

        slow.delay = 0.0
        slow.take_hits()
        resumed = crawl_site(slow.url("/docs/"), killed_cache)
        recorded = {urlsplit(url).path for url, page in state["pages"].items() if "etag" in page}
        assert [hit for hit in slow.take_hits() if hit.path in recorded and not hit.conditional] == []
        uninterrupted = crawl_site(slow.url("/docs/"), tmp_path / "whole")
        assert _mirror(killed_cache) == _mirror(tmp_path / "whole") and len(_mirror(killed_cache)) == 81
        assert (resumed.listing is not None and uninterrupted.listing is not None
                and [item.relative_path for item in resumed.listing]
                == [item.relative_path for item in uninterrupted.listing])
        assert (resumed.urls, resumed.failed) == (uninterrupted.urls, uninterrupted.failed)


@pytest.mark.skipif(not PYTHON_DOCS.is_dir(), reason=f"{PYTHON_DOCS} missing (Debian's python3.11-doc package)")
def test_crawl_of_the_python_documentation(tmp_path: Path) -> None:
    quiet = type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda self, *args: None})
    for port in _serve(partial(quiet, directory=str(PYTHON_DOCS))):
        start = f"http://127.0.0.1:{port}/library/index.html"
        first = crawl_site(start, tmp_path, CrawlOptions(max_pages=60))
        documents = _documents(first)
        assert len(documents) == 60 and all(path.startswith("library/") for path in documents)
        assert first.urls["library/index.html"] == start and not first.failed
        assert documents["library/index.html"] == (PYTHON_DOCS / "library/index.html").read_bytes()
        assert all(parse_html(path, raw).title for path, raw in sorted(documents.items())[:10])
        assert parse_html("library/index.html", documents["library/index.html"]).title == "The Python Standard Library"

        again = crawl_site(start, tmp_path, CrawlOptions(max_pages=60))  # If-Modified-Since: all 304
        assert again.report.startswith("60 pages: 60 unchanged (304), 0 fetched, 0 failed")
        assert _documents(again) == documents
