"""Quarry's exceptions: one documented base class and a shallow tree.

    QuarryError                 base; ``code`` is the stable error-envelope code
    ├── InvalidRequestError     INVALID: the caller sent something wrong
    ├── NotFoundError           NOT_FOUND: the named thing does not exist
    ├── BusyError               BUSY: the work is already being done elsewhere
    └── UnavailableError        UNAVAILABLE: a dependency (database, provider) is down
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
