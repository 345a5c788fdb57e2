"""A documentation website, crawled politely into a mirror the ingest reads like a folder.

``crawl_site("https://docs.example.com/guide/", cache_dir)`` reads the pages under the start
page's directory (``/guide/`` for ``/guide/index.html``; ``include`` globs replace that scope,
``exclude`` globs narrow it), starting from the page itself and the site's sitemaps, within
robots.txt (``engine.fetch.robots``), a per-host concurrency and delay, ``max_pages`` and
``max_depth``. The crawl is breadth-first and level by level, each level in sorted URL order,
so what is mirrored never depends on thread timing: the same site gives the same tree.

The mirror is ``cache_dir/pages/<document path>``: a page's document path is its final URL's
path (after redirects) without the leading "/" and without query or fragment, "index.html"
standing for a path ending in "/", and a suffix added where the content type needs one the
path lacks (an HTML page at ``/guide/install`` is ``guide/install.html``), so that the ingest
picks its parser by name. HTML pages are mirrored and read for links; Markdown, plain text and
PDF are mirrored as files; anything else is listed as skipped. ``cache_dir/crawl.json`` keeps
each URL's document path, validators (ETag, Last-Modified), last status and failure: a re-crawl
asks with If-None-Match / If-Modified-Since, so an unchanged site costs 304s, and still walks
the site through the mirrored copies of unchanged pages. A page answered 404/410 in two crawls
in a row is gone (removed from mirror and state, so the ingest deletes its document); once is a
blip (kept, and reported). Pages are written to the mirror before the state records them and
both are replaced atomically, the state after every small batch: a crawl killed at any moment
is resumed by the next run, which converges on what an uninterrupted crawl would have made.

Two URLs holding one document path (``/guide/`` and ``/guide/index.html``) make one document,
the first in crawl order owning it; the other is remembered as its alias, so it is asked
conditionally too. Credentials in the start URL are sent to its origin only and appear in no
URL, path or message the crawl reports.

Which URL is which page and document path is ``engine.fetch.crawl_urls``; what the cache folder
keeps between runs, and how it is written, is ``engine.fetch.crawl_state``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

import httpx

from engine.errors import InvalidRequestError
from engine.fetch.crawl_state import (
    MIRROR_FOLDER,
    STATE_FILE,
    CrawlState,
    PageRecord,
    is_mirrored,
    sweep_mirror,
    write_atomically,
)
from engine.fetch.crawl_urls import (
    DOCUMENT_TYPES,
    Scope,
    canonical_url,
    document_path,
    guessed_path,
    page_links,
    resolve_url,
)
from engine.fetch.credentials import without_credentials
from engine.fetch.robots import CONNECT_TIMEOUT_SECONDS, HostRules, PoliteClient, origin_of, status_reason
from engine.fetch.sitemaps import announced_pages
from engine.fetch.tree import FetchedTree
from engine.ingest.walk import Candidate, SkippedFile

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_MAX_PAGES", "DEFAULT_USER_AGENT", "CrawlOptions", "CrawlProgress",
           "crawl_site"]

DEFAULT_MAX_PAGES = 5000
DEFAULT_CONCURRENCY = 4
DEFAULT_USER_AGENT = "QuarryBot/0.1 (+https://github.com/quarry)"
MAX_PAGE_BYTES = 20 * 1024 * 1024
MAX_REDIRECTS = 10
#: Requests in a row without any HTTP answer after which the rest of the crawl is not tried.
GIVE_UP_AFTER_UNANSWERED = 20
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = ("text/html", "application/xhtml+xml")
#: Links to these are not requested: no parser reads them, and a docs site links many.
_NOT_DOCUMENTS = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".ico", ".css", ".js", ".woff", ".woff2",
                  ".ttf", ".zip", ".gz", ".tgz", ".bz2", ".xz", ".tar", ".whl", ".exe", ".dmg", ".mp4", ".mp3")


@dataclass(frozen=True, slots=True)
class CrawlOptions:
    #: URL path globs ("guide/**", "api/*.html"; "**" crosses "/", a leading "/" is optional)
    #: replacing the default scope (the start page's directory). The start page is always read.
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_pages: int = DEFAULT_MAX_PAGES
    #: Link hops from the start page; sitemap URLs count as one hop.
    max_depth: int | None = None
    #: Seconds between two requests to a host; a robots.txt Crawl-delay raises it.
    delay_seconds: float = 0.0
    concurrency: int = DEFAULT_CONCURRENCY
    #: Re-fetch only the URLs that failed last time (and pages only they linked to).
    retry_failed_only: bool = False
    user_agent: str = DEFAULT_USER_AGENT
    read_timeout_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class CrawlProgress:
    pages_done: int
    queued: int
    failed: int
    current_url: str

    def __str__(self) -> str:
        return f"crawled {self.pages_done} pages, {self.queued} queued, {self.failed} failed: {self.current_url}"


def crawl_site(
    start_url: str,
    cache_dir: Path,
    options: CrawlOptions = CrawlOptions(),
    *,
    progress: Callable[[CrawlProgress], None] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> FetchedTree:
    """Crawl the site at ``start_url`` into ``cache_dir`` (resuming what a previous run left there).

    Never raises for what a server answers or fails to answer: every failure is in the tree's
    ``failed`` with its status or reason, and pages mirrored before stay listed (``kept``).
    Raises ``InvalidRequestError`` for a start URL that is not http(s) or for bad options.
    """
    start = canonical_url(start_url)
    if start is None:
        raise InvalidRequestError(f"not a website address: {without_credentials(start_url)!r}; give an http(s) URL",
                                  argument="location")
    if options.max_pages < 1 or options.concurrency < 1 or (options.max_depth is not None and options.max_depth < 0):
        raise InvalidRequestError("max_pages and concurrency must be at least 1, max_depth at least 0",
                                  argument="options")
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / MIRROR_FOLDER).mkdir(exist_ok=True)
    credentials = urlsplit(start_url.strip())
    auth = (httpx.BasicAuth(unquote(credentials.username), unquote(credentials.password or ""))
            if credentials.username else None)
    timeout = httpx.Timeout(options.read_timeout_seconds, connect=CONNECT_TIMEOUT_SECONDS)
    limits = httpx.Limits(max_connections=options.concurrency, max_keepalive_connections=options.concurrency)
    with httpx.Client(transport=transport, timeout=timeout, limits=limits, max_redirects=MAX_REDIRECTS,
                      headers={"User-Agent": options.user_agent}) as client:
        polite = PoliteClient(client, user_agent=options.user_agent, delay_seconds=options.delay_seconds,
                              read_timeout_seconds=options.read_timeout_seconds,
                              auth=auth, auth_origin=origin_of(start))
        crawl = _Crawl(start, cache_dir, options, polite, progress)
        return crawl.run(without_credentials(start_url.strip()))  # credentials stay out of what is recorded



# -- one page over HTTP ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Answer:
    requested: str
    final: str
    status: int | None = None
    body: bytes | None = None
    content_type: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    failure: str | None = None
    skipped: str | None = None
    #: The request got no HTTP answer (refused, reset, timed out): the host, not the page, failed.
    unanswered: bool = False


def _fetch_page(client: PoliteClient, url: str, known: Callable[[str], PageRecord | None], mirror: Path,
                in_scope: Callable[[str], bool] | None) -> _Answer:
    """GET ``url`` following redirects by hand, each hop checked against scope and robots.txt.

    ``known`` (what the last crawl got at a URL) makes each hop's request conditional while
    its mirror copy exists; ``in_scope`` None (the start page) lets redirects go anywhere.
    """
    current, hops = url, [url]
    try:
        for _ in range(MAX_REDIRECTS + 1):
            rules = client.rules(origin_of(current))
            if rules.unavailable is not None:
                return _Answer(url, current, failure=rules.unavailable)
            if not client.allows(current):
                return _Answer(url, current, skipped="disallowed by robots.txt")
            with client.get(current, headers=_validators(known(current), mirror)) as response:
                location = response.headers.get("location")
                if response.status_code not in _REDIRECTS or not location:
                    return _answer(client, url, current, response)
                target = resolve_url(current, location)
                if target is None:
                    return _Answer(url, current, failure="redirect to a non-web address")
                if target in hops:
                    return _Answer(url, current, failure="redirect loop")
                if in_scope is not None and not in_scope(target):
                    return _Answer(url, current, skipped=f"redirected out of scope to {target}")
                current = target
                hops.append(current)
    except httpx.HTTPError as error:
        return _Answer(url, current, failure=client.describe(error), unanswered=True)
    except (httpx.InvalidURL, UnicodeError):  # a host name no resolver takes ("exa mple.com")
        return _Answer(url, current, failure="not a valid URL for HTTP")
    return _Answer(url, current, failure=f"more than {MAX_REDIRECTS} redirects")


def _answer(client: PoliteClient, url: str, final: str, response: httpx.Response) -> _Answer:
    validators = {"etag": response.headers.get("etag"), "last_modified": response.headers.get("last-modified")}
    if response.status_code == 304:
        return _Answer(url, final, status=304, **validators)
    if response.status_code not in (200, 203):
        return _Answer(url, final, status=response.status_code, failure=status_reason(response))
    declared = response.headers.get("content-type", "")
    content_type = declared.split(";")[0].strip().lower() or _type_by_suffix(final)
    if content_type not in DOCUMENT_TYPES:
        return _Answer(url, final, status=200, content_type=content_type, **validators,
                       skipped=f"unsupported content type ({content_type or 'none given'})")
    body = client.body(response, limit=MAX_PAGE_BYTES)
    if body is None:
        return _Answer(url, final, status=200, content_type=content_type, **validators,
                       skipped=f"oversized (more than {MAX_PAGE_BYTES} bytes)")
    if content_type != "application/pdf":
        body = _as_utf8(body, declared)
    return _Answer(url, final, status=200, body=body, content_type=content_type, **validators)


def _validators(known: PageRecord | None, mirror: Path) -> dict[str, str]:
    """Conditional request headers, only while a copy exists to stand for a 304."""
    if known is None or (known.skipped is None and (known.path is None or not (mirror / known.path).is_file())):
        return {}
    headers = {}
    if known.etag:
        headers["If-None-Match"] = known.etag
    if known.last_modified:
        headers["If-Modified-Since"] = known.last_modified
    return headers


def _type_by_suffix(url: str) -> str:
    suffix = PurePosixPath(urlsplit(url).path).suffix.lower()
    return {".html": "text/html", ".htm": "text/html", ".md": "text/markdown", ".markdown": "text/markdown",
            ".rst": "text/x-rst", ".txt": "text/plain", ".pdf": "application/pdf"}.get(suffix, "")


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)


def _as_utf8(body: bytes, content_type: str) -> bytes:
    """Text as UTF-8, the one encoding the ingest's parsers read (as browsers guess, cp1252 last)."""
    try:
        body.decode("utf-8")
        return body
    except UnicodeDecodeError:
        pass
    declared = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", content_type, re.IGNORECASE)
    meta = _META_CHARSET.search(body[:4096])
    for charset in (declared.group(1) if declared else None, meta.group(1).decode() if meta else None):
        if charset:
            try:
                return body.decode(charset).encode("utf-8")
            except (LookupError, UnicodeDecodeError):
                continue
    return body.decode("cp1252", errors="replace").encode("utf-8")


# -- the crawl -----------------------------------------------------------------------------------


class _Crawl:
    """One run: the state it resumes, the frontier level by level, and what it reports."""

    def __init__(self, start: str, cache_dir: Path, options: CrawlOptions, http: PoliteClient,
                 progress: Callable[[CrawlProgress], None] | None) -> None:
        self._start, self._options, self._http, self._progress = start, options, http, progress
        self._state_file = cache_dir / STATE_FILE
        self._mirror = cache_dir / MIRROR_FOLDER
        self._state = CrawlState.load(self._state_file)
        self._retrying = options.retry_failed_only and self._state.finished and bool(self._state.pages)
        if self._state.finished:  # a new crawl; an unfinished one is resumed as the same crawl
            self._state.generation += 1
            self._state.finished = False
        self._scope = Scope.around(start, options.include, options.exclude)
        self._depth_of: dict[str, int] = {}
        self._waiting: set[str] = set()
        self._processed: set[str] = set()  # requested or landed on this run
        self._claimed: dict[str, str] = {}  # document path -> the URL whose page it is, this run
        self._touched: set[str] = set()  # state entries this run confirmed
        self._failed: list[tuple[str, str]] = []
        self._skipped: dict[str, str] = {}
        self._kept: set[str] = set()
        self._unchanged = self._fetched = self._gone = self._done = self._unanswered_in_row = 0
        self._resolved: dict[tuple[str, str], str | None] = {}

    def run(self, location: str) -> FetchedTree:
        pages = self._state.pages
        origin = origin_of(self._state.start if self._retrying and self._state.start else self._start)
        rules = self._http.rules(origin)
        if rules.unavailable is not None:
            self._failed.append((origin + "/robots.txt", rules.unavailable))
            self._touched = set(pages)
            self._kept = {page.path for page in pages.values() if is_mirrored(page) and page.path is not None}
            self._state.save(self._state_file)  # unfinished: the next run, retry or not, crawls it all
            return self._tree(location, f"robots.txt unavailable: nothing fetched; {len(self._kept)} pages kept "
                                        "from the last crawl")
        if self._retrying:
            self._prepare_retry()
        else:
            self._prepare_crawl(rules)
        self._crawl_levels()
        if not self._retrying:
            for url in [url for url in pages if url not in self._touched]:
                del pages[url]  # no longer reached: out of scope, unlinked, or past a bound
        self._state.finished = True
        self._state.save(self._state_file)
        sweep_mirror(self._mirror, {page.path for page in pages.values() if is_mirrored(page)})
        return self._tree(location)

    def _prepare_crawl(self, rules: HostRules) -> None:
        answer = _fetch_page(self._http, self._start, self._state.pages.get, self._mirror, None)
        landed = answer.final if answer.failure is None and answer.skipped is None else self._start
        self._scope = Scope.around(landed, self._options.include, self._options.exclude)
        self._state.start = landed
        self._processed.add(self._start)
        self._integrate(answer, 0)
        for url, page in sorted(self._state.pages.items()):
            if (page.path or page.skipped) and self._scope.contains(url):
                self._enqueue(url, page.depth)  # known pages, at the depth they were found
        origin = self._scope.origin
        roots = [origin + "/sitemap.xml", *rules.sitemaps, origin + self._scope.directory + "sitemap.xml"]
        for url in announced_pages(self._http, roots, optional={roots[0], roots[-1]}, report=self._note_failure):
            page_url = canonical_url(url)
            if page_url is not None and self._scope.contains(page_url):
                self._enqueue(page_url, 1)

    def _prepare_retry(self) -> None:
        """Carry every page over as it was; queue the ones that failed, at their depths."""
        self._scope = Scope.around(self._state.start or self._start, self._options.include, self._options.exclude)
        self._touched = set(self._state.pages)
        for url, page in sorted(self._state.pages.items()):
            if is_mirrored(page) and page.path is not None:
                self._claimed[page.path] = url
            if page.failure is not None:
                self._enqueue(url, page.depth)
            else:
                self._processed.add(url)
                if page.skipped is not None:
                    self._skip(guessed_path(url) or url, page.skipped)

    def _crawl_levels(self) -> None:
        batch_size = max(16, 4 * self._options.concurrency)
        with ThreadPoolExecutor(self._options.concurrency, thread_name_prefix="quarry-crawl") as pool:
            while self._waiting:
                level = min(self._depth_of[url] for url in self._waiting)
                pending = sorted(url for url in self._waiting if self._depth_of[url] == level)
                while pending:
                    budget = self._options.max_pages - len(self._claimed)
                    if budget <= 0:
                        self._stop_at_max_pages()
                        return
                    batch, pending = pending[: min(batch_size, budget)], pending[min(batch_size, budget):]
                    self._processed.update(batch)
                    self._waiting.difference_update(batch)
                    # The workers read the state while this thread waits for them: nothing changes it meanwhile.
                    answers = list(pool.map(self._fetch, batch))
                    for answer in answers:
                        self._integrate(answer, level)
                        self._unanswered_in_row = self._unanswered_in_row + 1 if answer.unanswered else 0
                    self._state.save(self._state_file)
                    if self._unanswered_in_row >= GIVE_UP_AFTER_UNANSWERED:
                        self._give_up()
                        return
                    pending = [url for url in pending if url not in self._processed]

    def _fetch(self, url: str) -> _Answer:
        return _fetch_page(self._http, url, self._state.pages.get, self._mirror, self._scope.contains)

    def _give_up(self) -> None:
        """The host stopped answering mid-crawl: what is left fails at once, not one timeout at a time."""
        reason = f"not tried: the host stopped answering ({self._unanswered_in_row} requests in a row failed)"
        for url in sorted(self._waiting):
            self._fail(_Answer(url, url, failure=reason, unanswered=True), self._depth_of[url])
        self._waiting.clear()
        self._state.save(self._state_file)

    def _stop_at_max_pages(self) -> None:
        for url in sorted(self._waiting):
            self._skip(guessed_path(url) or url, f"not fetched: max_pages ({self._options.max_pages}) reached")
        self._waiting.clear()

    def _enqueue(self, url: str, depth: int) -> None:
        max_depth = self._options.max_depth
        if url in self._processed or (max_depth is not None and depth > max_depth):
            return
        if depth < self._depth_of.get(url, depth + 1):
            self._depth_of[url] = depth
            self._waiting.add(url)

    def _integrate(self, answer: _Answer, depth: int) -> None:
        """Record one answer, in the crawl's deterministic order (thread timing plays no part)."""
        self._done += 1
        if answer.failure is not None:
            self._fail(answer, depth)
        elif answer.final != answer.requested and answer.final in self._processed:
            pass  # redirected onto a page this run already has
        elif answer.skipped is not None:
            self._processed.add(answer.final)
            if answer.status == 200:  # answered, so asked conditionally next time
                self._state.pages[answer.final] = PageRecord(depth, etag=answer.etag,
                                                             last_modified=answer.last_modified,
                                                             status=200, skipped=answer.skipped)
                self._touched.add(answer.final)
            self._skip(document_path(answer.final, answer.content_type) or answer.final, answer.skipped)
        elif answer.status == 304:
            self._processed.add(answer.final)
            self._unchanged_page(answer, depth)
        else:
            self._processed.add(answer.final)
            self._new_copy(answer, depth)
        if self._progress is not None:
            self._progress(CrawlProgress(self._done, len(self._waiting), len(self._failed), answer.requested))

    def _unchanged_page(self, answer: _Answer, depth: int) -> None:
        page = self._state.pages.get(answer.final)
        if page is None or (page.path is None and page.skipped is None):
            self._fail(_Answer(answer.requested, answer.final, status=304,
                               failure="HTTP 304 Not Modified to a request that was not conditional"), depth)
            return
        page.depth, page.status, page.gone, page.failure = depth, 304, 0, None
        page.etag, page.last_modified = answer.etag or page.etag, answer.last_modified or page.last_modified
        self._touched.add(answer.final)
        if page.skipped is not None:
            self._skip(guessed_path(answer.final) or answer.final, page.skipped)
            return
        assert page.path is not None
        if not self._claim(page, answer.final):
            return
        self._unchanged += 1
        if page.path.lower().endswith((".html", ".htm")):
            self._follow((self._mirror / page.path).read_bytes(), answer.final, depth)

    def _new_copy(self, answer: _Answer, depth: int) -> None:
        assert answer.body is not None
        path = document_path(answer.final, answer.content_type)
        if path is None:
            self._fail(_Answer(answer.requested, answer.final, status=200,
                               failure="no document path for this URL (dot segments or NUL in its path)"), depth)
            return
        page = PageRecord(depth, path, answer.etag, answer.last_modified, status=200)
        if self._claimed.get(path, answer.final) != answer.final:
            page.same_as = self._claimed[path]
            self._state.pages[answer.final] = page
            self._touched.add(answer.final)
            return
        try:
            write_atomically(self._mirror / path, answer.body)
        except OSError as error:
            self._fail(_Answer(answer.requested, answer.final, status=200,
                               failure=f"cannot store the page as {path} ({error.strerror})"), depth)
            return
        self._state.pages[answer.final] = page
        self._touched.add(answer.final)
        self._claimed[path] = answer.final
        self._fetched += 1
        if answer.content_type in _HTML_TYPES:
            self._follow(answer.body, answer.final, depth)

    def _claim(self, page: PageRecord, url: str) -> bool:
        """Make ``url``'s page the owner of its document path unless another URL has it this run."""
        assert page.path is not None
        owner = self._claimed.get(page.path)
        if owner is not None and owner != url:
            page.same_as = owner
            return False
        if not (self._mirror / page.path).is_file():
            return False
        page.same_as = None  # its owner is gone or later: the copy is this page's now
        self._claimed[page.path] = url
        return True

    def _fail(self, answer: _Answer, depth: int) -> None:
        url, reason = answer.requested, answer.failure or "failed"
        page = self._state.pages.setdefault(url, PageRecord(depth))
        page.depth, page.status, page.failure = min(page.depth, depth), answer.status, reason
        gone = answer.status in (404, 410)
        if gone and page.gone_in != self._state.generation:
            page.gone, page.gone_in = page.gone + 1, self._state.generation
        if is_mirrored(page) and page.path is not None and self._claimed.get(page.path, url) == url:
            if gone and page.gone >= 2:
                del self._state.pages[url]
                self._claimed.pop(page.path, None)
                self._touched.discard(url)
                self._gone += 1
                return
            self._claimed[page.path] = url
            self._kept.add(page.path)
            reason += " (kept; removed if the next crawl finds it gone too)" if gone else " (kept the earlier copy)"
        self._touched.add(url)
        self._failed.append((url, reason))

    def _follow(self, raw: bytes, page_url: str, depth: int) -> None:
        for link in page_links(raw, page_url, self._resolved):
            if self._retrying and link in self._state.pages:
                continue  # known from the last crawl, which is what a retry keeps
            if self._scope.contains(link) and not link.lower().endswith(_NOT_DOCUMENTS):
                self._enqueue(link, depth + 1)

    def _skip(self, path: str, reason: str) -> None:
        self._skipped.setdefault(path, reason)

    def _note_failure(self, url: str, reason: str) -> None:
        self._failed.append((url, reason))

    def _tree(self, location: str, report: str | None = None) -> FetchedTree:
        pages = self._state.pages
        mirrored = {page.path: url for url, page in pages.items() if is_mirrored(page) and page.path is not None}
        listing: list[Candidate | SkippedFile] = []
        for path in mirrored:
            try:
                listing.append(Candidate(path, self._mirror / path, (self._mirror / path).stat().st_size))
            except OSError:
                listing.append(SkippedFile(path, "missing from the mirror (re-run to fetch it again)"))
        listing.extend(SkippedFile(path, reason) for path, reason in self._skipped.items() if path not in mirrored)
        listing.sort(key=lambda item: item.relative_path)
        failures = len([url for url, _ in self._failed if url in pages])
        others = len(self._failed) - failures
        report = report or (f"{'retried failed pages; ' if self._retrying else ''}"
                  f"{self._unchanged + self._fetched + failures} pages: {self._unchanged} unchanged (304), "
                  f"{self._fetched} fetched, {failures} failed; {self._gone} gone"
                  + (f"; {len(self._skipped)} skipped" if self._skipped else "")
                  + (f"; {others} other failures (robots.txt, sitemaps)" if others else ""))
        return FetchedTree(
            root=self._mirror, location=location, listing=listing,
            urls={path: mirrored[path] for path in sorted(mirrored)},
            failed=list(self._failed), kept=self._kept & set(mirrored),
            report=report,
        )
