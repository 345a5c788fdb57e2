"""Quarry's exceptions: one documented base class and a shallow tree.

    QuarryError                 base; ``code`` is the stable error-envelope code
    ├── InvalidRequestError     INVALID: the caller sent something wrong
    ├── NotFoundError           NOT_FOUND: the named thing does not exist
    ├── BusyError               BUSY: the work is already being done elsewhere
    └── UnavailableError        UNAVAILABLE: a dependency (database, provider) is down
        └── ProviderError       a model provider call failed; ``reason`` is short and client-safe
"""

from __future__ import annotations


class QuarryError(Exception):
    """Base of every error Quarry raises on purpose; ``code`` names it for clients."""

    code = "INTERNAL"


class InvalidRequestError(QuarryError):
    code = "INVALID"


class NotFoundError(QuarryError):
    code = "NOT_FOUND"


class BusyError(QuarryError):
    code = "BUSY"


class UnavailableError(QuarryError):
    code = "UNAVAILABLE"


class ProviderError(UnavailableError):
    """A model call (embedding, reranking) failed after retries, or its breaker is open.

    ``reason`` is what a response's ``degradation_reason`` reports, e.g.
    ``"timeout after 5000ms"``, ``"HTTP 503"``, ``"circuit open for 30s"``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
