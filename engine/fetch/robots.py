"""Requests a host allows, at the pace it allows: robots.txt, a per-host delay, bounded answers.

robots.txt is read as Google documents it: a 2xx is parsed (the first 500 KiB); any other
4xx (404, 403, 401...) means there is no policy, so everything is allowed; a 429, a 5xx or no
answer at all means the site is in trouble or says "not now", so nothing on the host is
fetched (Google does so for a while, then falls back to a cached copy; a crawl run is short,
so "this run" is that while). Matching, wildcards and Crawl-delay are protego's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from protego import Protego

__all__ = ["CONNECT_TIMEOUT_SECONDS", "MAX_CRAWL_DELAY_SECONDS", "MAX_ROBOTS_BYTES", "HostRules", "PoliteClient",
           "origin_of", "product_token", "status_reason"]

#: Google reads this much of a robots.txt and ignores the rest.
MAX_ROBOTS_BYTES = 500 * 1024
#: A Crawl-delay above this is read as this: a site asking for an hour between requests would
#: hold a crawl for days, and one this slow is better served by a scheduled re-run.
MAX_CRAWL_DELAY_SECONDS = 60.0
CONNECT_TIMEOUT_SECONDS = 10.0


def product_token(user_agent: str) -> str:
    """The name robots.txt groups are matched on: "QuarryBot" of "QuarryBot/0.1 (+https://…)"."""
    return user_agent.split("/", 1)[0].split()[0] if user_agent.strip() else "*"


def origin_of(url: str) -> str:
    """``scheme://host[:port]``: what robots.txt, pacing and credentials are per."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def status_reason(response: httpx.Response) -> str:
    return f"HTTP {response.status_code} {response.reason_phrase}".rstrip()


@dataclass(frozen=True, slots=True)
class HostRules:
    """One host's robots.txt, read once per crawl run."""

    #: None when the host has no policy (no robots.txt): everything is allowed.
    parser: Protego | None = None
    #: Why nothing on the host may be fetched this run (robots.txt answered 5xx or not at all).
    unavailable: str | None = None
    sitemaps: tuple[str, ...] = field(default=())

    @classmethod
    def from_answer(cls, status: int, body: bytes) -> HostRules:
        """The rules a robots.txt answer stands for (``status`` after redirects were followed)."""
        if 200 <= status < 300:
            parser = Protego.parse(body[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace"))
            return cls(parser=parser, sitemaps=tuple(parser.sitemaps))
        if status == 429 or status >= 500:
            return cls.unreachable(f"HTTP {status}")
        return cls()  # 3xx left over (too many redirects) and 4xx: no policy

    @classmethod
    def unreachable(cls, reason: str) -> HostRules:
        return cls(unavailable=f"robots.txt unavailable ({reason}): nothing on this host is fetched this run; "
                               "re-run later")

    def allows(self, url: str, user_agent: str) -> bool:
        if self.unavailable is not None:
            return False
        return self.parser is None or self.parser.can_fetch(url, product_token(user_agent))

    def crawl_delay(self, user_agent: str) -> float:
        """Seconds to leave between two requests to the host (0 when robots.txt names none)."""
        if self.parser is None:
            return 0.0
        delay = self.parser.crawl_delay(product_token(user_agent))
        return min(float(delay), MAX_CRAWL_DELAY_SECONDS) if delay is not None and delay > 0 else 0.0


class PoliteClient:
    """An ``httpx.Client`` (shareable between threads) that reads each host's robots.txt once,
    spaces the requests to a host, sends credentials only to the origin they came with, and
    turns transport failures into short reasons."""

    def __init__(self, client: httpx.Client, *, user_agent: str, delay_seconds: float, read_timeout_seconds: float,
                 auth: httpx.Auth | None = None, auth_origin: str | None = None) -> None:
        self._client, self._user_agent, self._delay = client, user_agent, delay_seconds
        self._read_timeout, self._auth, self._auth_origin = read_timeout_seconds, auth, auth_origin
        self._rules: dict[str, HostRules] = {}
        self._last_start: dict[str, float] = {}  # when the latest request to each host started (or will)
        self._pace_lock = threading.Lock()
        self._rules_lock = threading.Lock()

    def rules(self, origin: str) -> HostRules:
        """The host's robots.txt, fetched on first use."""
        with self._rules_lock:
            if origin not in self._rules:
                try:
                    with self.get(origin + "/robots.txt", follow_redirects=True) as response:
                        body = self.body(response, limit=MAX_ROBOTS_BYTES) or b""
                        self._rules[origin] = HostRules.from_answer(response.status_code, body)
                except httpx.HTTPError as error:
                    self._rules[origin] = HostRules.unreachable(self.describe(error))
                except (httpx.InvalidURL, UnicodeError):
                    self._rules[origin] = HostRules.unreachable("not a valid host name")
            return self._rules[origin]

    def allows(self, url: str) -> bool:
        return self.rules(origin_of(url)).allows(url, self._user_agent)

    def get(self, url: str, *, headers: Mapping[str, str] | None = None,
            follow_redirects: bool = False) -> AbstractContextManager[httpx.Response]:
        """A streamed GET, after the host's delay (robots.txt is the caller's to check)."""
        origin = origin_of(url)
        self._pace(origin)
        auth = self._auth if self._auth is not None and origin == self._auth_origin else httpx.USE_CLIENT_DEFAULT
        return self._client.stream("GET", url, headers=headers, follow_redirects=follow_redirects, auth=auth)

    @staticmethod
    def body(response: httpx.Response, *, limit: int) -> bytes | None:
        """The body, or None past ``limit`` bytes (reading no further than that)."""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return None
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def describe(self, error: httpx.HTTPError) -> str:
        """A short reason for a failed request; never the URL (it may carry credentials)."""
        text = str(error).lower()
        if isinstance(error, httpx.ConnectTimeout):
            return f"connect timeout after {CONNECT_TIMEOUT_SECONDS:g} s"
        if isinstance(error, httpx.TimeoutException):
            return f"timeout after {self._read_timeout:g} s"
        if isinstance(error, httpx.ConnectError):
            if "refused" in text:
                return "connection refused"
            if "name or service" in text or "nodename" in text or "getaddrinfo" in text:
                return "host not found"
            tls = "certificate" in text or "ssl" in text
            return "TLS error (certificate not trusted?)" if tls else "cannot connect"
        if isinstance(error, httpx.ReadError):
            return "connection reset while reading"
        if isinstance(error, httpx.RemoteProtocolError):
            return "connection closed by the server mid-answer"
        return f"network error ({type(error).__name__})"

    def _pace(self, origin: str) -> None:
        """Leave the host's delay (the larger of ours and its Crawl-delay) between request starts."""
        rules = self._rules.get(origin)
        delay = max(self._delay, rules.crawl_delay(self._user_agent) if rules is not None else 0.0)
        with self._pace_lock:
            now = time.monotonic()
            start = max(now, self._last_start.get(origin, now - delay) + delay)
            self._last_start[origin] = start
        if start > now:
            time.sleep(start - now)
