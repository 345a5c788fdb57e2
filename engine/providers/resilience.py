"""Calling a remote model provider without letting it stall or flood Quarry.

One *call* (an ``embed_documents``, a ``rerank``) may need several HTTP requests. ``ResilientCaller``
runs it so that:

* a ``CircuitBreaker`` fails it fast while the provider is known to be down;
* the whole call has one deadline (``timeout_s``), shared by its requests, their retries and the
  waits between them; each attempt gets what is left of it as its HTTP timeout;
* a request is retried with exponential backoff and jitter when the failure is transient
  (HTTP 408/429/5xx, connection error, timeout), honouring ``Retry-After`` up to a cap;
  other 4xx answers are final (``RequestRejected``);
* the requests of one call run on a bounded thread pool, results in request order.

Every failure surfaces as ``ProviderError`` with a short, client-safe ``reason``:
``"timeout after 5000ms"``, ``"HTTP 503"``, ``"HTTP 400: <message>"``, ``"circuit open for 30s"``.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Literal, TypeVar

from engine.errors import ProviderError

__all__ = [
    "CircuitBreaker",
    "Deadline",
    "RequestRejected",
    "ResilientCaller",
    "RetryPolicy",
    "TransientFailure",
    "http_failure",
]

T = TypeVar("T")
Clock = Callable[[], float]
# An attempt gets the seconds left before the deadline, to use as its HTTP timeout.
Attempt = Callable[[float], T]

_MESSAGE_CHARS = 160  # provider messages are quoted in reasons; keep them one short line


class TransientFailure(Exception):
    """Raised by an attempt when trying again may succeed (rate limit, 5xx, lost connection)."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class RequestRejected(ProviderError):
    """The provider refused the request itself (a 4xx other than 408/429).

    Retrying cannot help, and the provider is up, so it does not count against the breaker.
    """


def http_failure(status: int, message: object, retry_after: str | None) -> Exception:
    """The failure an HTTP error status means: transient (408, 429, 5xx) or a rejection."""
    if status in (408, 429) or status >= 500:
        return TransientFailure(f"HTTP {status}", retry_after_s=_parse_retry_after(retry_after))
    text = " ".join(str(message or "").split())[:_MESSAGE_CHARS]
    return RequestRejected(f"HTTP {status}: {text}" if text else f"HTTP {status}")


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried.

    The n-th wait (n = 0, 1, ...) is ``d/2 + uniform(0, d/2)`` with ``d = min(max_backoff_s,
    initial_backoff_s * 2**n)``: exponential, jittered so that clients do not retry in lockstep.
    A ``Retry-After`` from the provider replaces it, capped at ``max_retry_after_s``.
    """

    max_retries: int = 3
    initial_backoff_s: float = 0.25
    max_backoff_s: float = 4.0
    max_retry_after_s: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.initial_backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("retry counts and delays cannot be negative")

    def delay_s(self, retry: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.max_retry_after_s)
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * 2.0**retry)
        return ceiling / 2 + random.uniform(0, ceiling / 2)


@dataclass(frozen=True, slots=True)
class Deadline:
    """The moment a call must be over by, on the monotonic clock."""

    timeout_s: float
    at: float

    @classmethod
    def after(cls, timeout_s: float) -> Deadline:
        return cls(timeout_s, time.monotonic() + timeout_s)

    def remaining_s(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> ProviderError:
        return ProviderError(f"timeout after {round(self.timeout_s * 1000)}ms")


def call_with_retries(attempt: Attempt[T], deadline: Deadline, policy: RetryPolicy) -> T:
    """Run ``attempt`` until it succeeds, fails for good, runs out of retries or of time."""
    retries = 0
    while True:
        remaining = deadline.remaining_s()
        if remaining <= 0:
            raise deadline.expired()
        try:
            return attempt(remaining)
        except TransientFailure as failure:
            if deadline.remaining_s() <= 0:
                raise deadline.expired() from failure
            if retries >= policy.max_retries:
                raise ProviderError(failure.reason) from failure
            delay = policy.delay_s(retries, failure.retry_after_s)
            if delay >= deadline.remaining_s():
                # Waiting would only end in a timeout; the provider's own answer says more.
                raise ProviderError(failure.reason) from failure
            policy.sleep(delay)
            retries += 1


BreakerState = Literal["closed", "open", "half-open"]


class CircuitBreaker:
    """Fails calls fast while a provider keeps failing.

    closed --(``failure_threshold`` consecutive failed calls)--> open --(``cool_down_s``)-->
    half-open: one trial call goes through, others still fail fast; its success closes the
    circuit, its failure opens it for another cool-down. A failed call is one that raised
    ``ProviderError``; a ``RequestRejected`` (the provider answered) counts as a success.
    Thread-safe; ``clock`` is injectable so tests need not wait out the cool-down.
    """

    def __init__(self, *, failure_threshold: int = 5, cool_down_s: float = 30.0, clock: Clock = time.monotonic) -> None:
        if failure_threshold < 1 or cool_down_s < 0:
            raise ValueError("failure_threshold must be >= 1 and cool_down_s >= 0")
        self._threshold = failure_threshold
        self._cool_down_s = cool_down_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None  # set while open or half-open
        self._trial_running = False

    @property
    def state(self) -> BreakerState:
        with self._lock:
            if self._opened_at is None:
                return "closed"
            return "open" if self._clock() - self._opened_at < self._cool_down_s else "half-open"

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Admit one call (or raise ``ProviderError``) and record how it ended."""
        self._admit()
        try:
            yield
        except RequestRejected:
            self._record(ok=True)
            raise
        except ProviderError:
            self._record(ok=False)
            raise
        except BaseException:
            self._release()  # not the provider's doing: neither success nor failure
            raise
        self._record(ok=True)

    def _admit(self) -> None:
        with self._lock:
            if self._opened_at is None:
                return
            waited = self._clock() - self._opened_at
            if waited >= self._cool_down_s and not self._trial_running:
                self._trial_running = True
                return
            left = max(1, math.ceil(self._cool_down_s - waited))
            raise ProviderError(f"circuit open for {left}s")

    def _record(self, *, ok: bool) -> None:
        with self._lock:
            if ok:
                self._failures = 0
                self._opened_at = None
            elif self._trial_running:
                self._opened_at = self._clock()
            else:
                self._failures += 1
                if self._failures >= self._threshold and self._opened_at is None:
                    self._opened_at = self._clock()
            self._trial_running = False

    def _release(self) -> None:
        with self._lock:
            self._trial_running = False


class ResilientCaller:
    """Runs a provider call's requests under one breaker, deadline, retry policy and thread pool."""

    def __init__(
        self,
        *,
        timeout_s: float,
        retry: RetryPolicy,
        breaker: CircuitBreaker,
        max_concurrency: int,
        thread_name: str,
    ) -> None:
        if timeout_s <= 0 or max_concurrency < 1:
            raise ValueError("timeout_s must be > 0 and max_concurrency >= 1")
        self.timeout_s = timeout_s
        self.retry = retry
        self.breaker = breaker
        self._max_concurrency = max_concurrency
        self._thread_name = thread_name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, requests: Sequence[Attempt[T]], timeout_s: float | None = None) -> list[T]:
        """Each request's result, in order; the first failure (or the deadline) ends the call."""
        with self.breaker.guard():
            deadline = Deadline.after(timeout_s if timeout_s is not None else self.timeout_s)
            if len(requests) == 1:
                # The common case (one query, one small batch) runs in the caller's thread, so a
                # search never queues behind a bulk ingest's requests in the pool.
                return [call_with_retries(requests[0], deadline, self.retry)]
            futures = [self._executor().submit(call_with_retries, r, deadline, self.retry) for r in requests]
            try:
                return _gather(futures, deadline)
            finally:
                for future in futures:
                    future.cancel()

    def close(self) -> None:
        """Stop the thread pool (requests in flight finish on their own HTTP timeouts)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_concurrency, thread_name_prefix=self._thread_name)
            return self._pool


def _gather(futures: list[Future[T]], deadline: Deadline) -> list[T]:
    done, pending = wait(futures, timeout=max(0.0, deadline.remaining_s()), return_when=FIRST_EXCEPTION)
    for future in futures:  # in request order, so the reported failure is deterministic
        error = future.exception() if future in done else None
        if error is not None:
            raise error
    if pending:
        raise deadline.expired()
    return [future.result() for future in futures]
