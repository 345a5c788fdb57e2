"""URLs as the website crawl sees them: one canonical form per page, the scope it may enter,
the document path a page is mirrored at, and the links an HTML page holds.

Kept apart from the crawl (``engine.fetch.web``) because these are pure functions of a URL or
a page's bytes: no HTTP, no state, no files, so the crawl's rules for which URL is which page
can be read, and tested, on their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

from selectolax.lexbor import LexborHTMLParser

from engine.fetch.robots import origin_of

__all__ = ["DEFAULT_EXCLUDE", "DOCUMENT_TYPES", "Scope", "canonical_url", "document_path", "guessed_path",
           "page_links", "resolve_url"]

#: Pages the default scope leaves out: Sphinx's copies of each page's source and its generated
#: index pages would duplicate the pages, or hold only names (an ``include`` replaces these too).
DEFAULT_EXCLUDE = ("**/_sources/**", "**/_static/**", "**/genindex*.html")
#: Content type -> (suffix to add, suffixes that already say it); the ingest parses these.
DOCUMENT_TYPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "text/html": (".html", (".html", ".htm")),
    "application/xhtml+xml": (".html", (".html", ".htm")),
    "text/markdown": (".md", (".md", ".markdown")),
    "text/x-markdown": (".md", (".md", ".markdown")),
    "text/x-rst": (".rst", (".rst",)),
    "text/plain": (".txt", (".txt", ".md", ".markdown", ".rst")),
    "application/pdf": (".pdf", (".pdf",)),
}


def canonical_url(url: str) -> str | None:
    """``url`` as the crawl identifies a page: no credentials, query or fragment, default port
    dropped, dot segments resolved; None unless it is http(s) with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in ("http", "https") or not host:
        return None
    host = f"[{host}]" if ":" in host else host
    netloc = host if port is None or port == {"http": 80, "https": 443}[scheme] else f"{host}:{port}"
    path = quote(_without_dot_segments(parts.path or "/"), safe="/%:@!$&'()*+,;=-._~")
    return urlunsplit((scheme, netloc, path, "", ""))


def _without_dot_segments(path: str) -> str:
    segments = path.split("/")
    kept: list[str] = []
    for segment in segments:
        if segment == "..":
            if len(kept) > 1:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    if segments[-1] in (".", ".."):
        kept.append("")
    joined = "/".join(kept)
    return joined if joined.startswith("/") else "/" + joined


@dataclass(frozen=True, slots=True)
class Scope:
    origin: str
    directory: str
    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]

    @classmethod
    def around(cls, page_url: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> Scope:
        """The start page's directory, or the ``include`` globs; minus the ``exclude`` ones."""
        path = urlsplit(page_url).path
        exclude = exclude if include else (*DEFAULT_EXCLUDE, *exclude)
        return cls(origin_of(page_url), path[: path.rfind("/") + 1],
                   tuple(map(_glob, include)), tuple(map(_glob, exclude)))

    def contains(self, url: str) -> bool:
        if origin_of(url) != self.origin:
            return False
        path = urlsplit(url).path
        relative = unquote(path).lstrip("/")
        inside = any(glob.fullmatch(relative) for glob in self.include) if self.include else \
            path.startswith(self.directory)
        return inside and not any(glob.fullmatch(relative) for glob in self.exclude)


def _glob(pattern: str) -> re.Pattern[str]:
    """A path glob as a regex: ``*`` and ``?`` stay within a segment, ``**`` crosses "/"."""
    if pattern.startswith(("http://", "https://")):
        pattern = urlsplit(pattern).path
    pattern = pattern.strip().lstrip("/")
    if pattern.endswith("/") or not pattern:
        pattern += "**"
    regex, index = [], 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            regex.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            regex.append(".*")
            index += 2
        elif pattern[index] in "*?":
            regex.append("[^/]*" if pattern[index] == "*" else "[^/]")
            index += 1
        elif pattern[index] == "[" and "]" in pattern[index + 2:]:
            end = pattern.index("]", index + 2)
            body = pattern[index + 1: end]
            regex.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            index = end + 1
        else:
            regex.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(regex))


def guessed_path(url: str) -> str | None:
    """The document path a URL's page would have, before its content type is known."""
    path = unquote(urlsplit(url).path)
    segments = [segment for segment in path.split("/") if segment]
    if path.endswith("/"):
        segments.append("index.html")
    if any(segment in (".", "..") or "\x00" in segment for segment in segments):
        return None
    return "/".join(segments)


def document_path(url: str, content_type: str | None) -> str | None:
    path = guessed_path(url)
    suffix, known_suffixes = DOCUMENT_TYPES.get(content_type or "", ("", ()))
    if path is None or not suffix or path.lower().endswith(known_suffixes):
        return path
    return path + suffix



def page_links(raw: bytes, page_url: str, resolved: dict[tuple[str, str], str | None]) -> set[str]:
    """The pages an HTML page links to (``a[href]``, ``link[rel=next]``), resolved, canonical.

    A docs page links to the same few hundred pages as its neighbours: ``resolved`` memoizes
    (directory, href) -> URL across the crawl, since resolving costs more than parsing the page.
    """
    tree = LexborHTMLParser(raw)
    base = page_url
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        base = resolve_url(page_url, base_node.attributes.get("href") or "") or page_url
    directory = base[: base.rfind("/") + 1]
    hrefs = {(node.attributes.get("href") or "").split("#", 1)[0].strip()
             for node in tree.css("a[href], link[rel~=next i][href]")}
    targets = set()
    for href in hrefs:
        if not href or href.startswith("?"):
            continue  # the page itself
        key = (directory, href)
        if key not in resolved:
            resolved[key] = resolve_url(directory, href)
        target = resolved[key]
        if target is not None:
            targets.add(target)
    return targets


def resolve_url(base: str, href: str) -> str | None:
    try:
        return canonical_url(urljoin(base, href))
    except ValueError:  # a malformed host ("http://[x/")
        return None
