"""Quarry's exceptions: one documented base class and a shallow tree.

    QuarryError                 base; ``code`` is the stable error-envelope code
    ├── InvalidRequestError     INVALID: the caller sent something wrong
    ├── NotFoundError           NOT_FOUND: the named thing does not exist
    ├── LimitError              LIMIT: the request is valid but costs more than a bound allows
    ├── BusyError               BUSY: the work is already being done elsewhere
    └── UnavailableError        UNAVAILABLE: a dependency (database, provider) is down
        └── ProviderError       a model provider call failed; ``reason`` is short and client-safe
"""

from __future__ import annotations

import uuid


def new_error_id() -> str:
    """A short id to quote when reporting an error whose details only the server log has."""
    return uuid.uuid4().hex[:16]


class QuarryError(Exception):
    """Base of every error Quarry raises on purpose; ``code`` names it for clients."""

    code = "INTERNAL"


class InvalidRequestError(QuarryError):
    """``argument`` (a path such as ``filters.sdk_dependency.version_satisfies``) and ``rule`` name what to fix."""

    code = "INVALID"

    def __init__(self, message: str, *, argument: str | None = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument
        self.rule = rule


class NotFoundError(QuarryError):
    code = "NOT_FOUND"


class LimitError(QuarryError):
    code = "LIMIT"


class BusyError(QuarryError):
    code = "BUSY"


class UnavailableError(QuarryError):
    """``error_id`` names the server log entry holding what the message leaves out."""

    code = "UNAVAILABLE"

    def __init__(self, message: str, *, error_id: str | None = None) -> None:
        super().__init__(message)
        self.error_id = error_id


class ProviderError(UnavailableError):
    """A model call (embedding, reranking) failed after retries, or its breaker is open.

    ``reason`` is what a response's ``degradation_reason`` reports, e.g.
    ``"timeout after 5000ms"``, ``"HTTP 503"``, ``"circuit open for 30s"``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
