"""The one error envelope, and how results and failures become MCP tool results.

Expected failures are ``ToolFailure`` with a stable code; anything else is logged
with a fresh error id and reaches the client only as ``INTERNAL`` plus that id.
Either way the client gets ``isError: true`` and a JSON body::

    {"error": {"code": "INVALID", "message": "...", "problems": [{"path": "limit", "rule": "..."}]}}
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

import mcp_types as types
import psycopg
import psycopg_pool

from engine.errors import InvalidRequestError, QuarryError, UnavailableError, new_error_id

ErrorCode = Literal["INVALID", "NOT_FOUND", "LIMIT", "RATE_LIMITED", "UNAUTHORIZED", "UNAVAILABLE", "INTERNAL",
                   "FLOW_GATE", "BUSY",
                   # the knowledge-base contract's own (mcp_server.profiles.kb)
                   "CONFLICT", "PATH_DENIED", "INDEX_ERROR", "IO_ERROR"]
ERROR_CODES: tuple[ErrorCode, ...] = get_args(ErrorCode)

logger = logging.getLogger("quarry.mcp")


@dataclass(frozen=True, slots=True)
class Problem:
    """One rejected argument: where (``filters.kind.any_of[0]``) and which rule it broke."""

    path: str
    rule: str


class ToolFailure(Exception):
    """An expected failure, reported to the client in the error envelope."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        problems: Sequence[Problem] = (),
        retry_after: float | None = None,
        error_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.problems = list(problems)
        self.retry_after = retry_after
        self.error_id = error_id

    def envelope(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.problems:
            error["problems"] = [{"path": problem.path, "rule": problem.rule} for problem in self.problems]
        if self.retry_after is not None:
            error["retry_after"] = round(self.retry_after, 3)
        if self.error_id is not None:
            error["error_id"] = self.error_id
        return {"error": error}


def internal_failure(error: BaseException, where: str) -> ToolFailure:
    """Log an unexpected error with its traceback under a new id; the client sees only the id."""
    error_id = new_error_id()
    logger.error("internal error %s in %s", error_id, where, exc_info=error)
    return ToolFailure("INTERNAL", f"internal error in {where}; quote error_id {error_id} when reporting it",
                       error_id=error_id)


def classify(error: BaseException, where: str) -> ToolFailure:
    """The envelope for any exception a tool raised."""
    if isinstance(error, ToolFailure):
        return error
    if isinstance(error, QuarryError):
        code = next((known for known in ERROR_CODES if known == error.code), None)
        if code is None or code == "INTERNAL":
            return internal_failure(error, where)
        if isinstance(error, InvalidRequestError) and error.argument is not None:
            return ToolFailure(code, str(error), problems=[Problem(error.argument, error.rule or str(error))])
        return ToolFailure(code, str(error), error_id=error.error_id if isinstance(error, UnavailableError) else None)
    if isinstance(error, psycopg.errors.InvalidParameterValue):
        # raised by Quarry's SQL for a malformed argument (e.g. an unparsable version range);
        # its message names the offending argument, never internal state
        return ToolFailure("INVALID", error.diag.message_primary or "invalid argument")
    if isinstance(error, psycopg.errors.QueryCanceled):
        error_id = new_error_id()
        logger.warning("statement timeout %s in %s", error_id, where, exc_info=error)
        return ToolFailure("UNAVAILABLE", "the database did not answer in time; retry, or narrow the request",
                           error_id=error_id)
    if isinstance(error, psycopg_pool.PoolTimeout):
        # Either the database is down or every pooled connection stayed busy: the pool cannot tell.
        error_id = new_error_id()
        logger.error("no pooled connection %s in %s", error_id, where, exc_info=error)
        return ToolFailure("UNAVAILABLE", "no database connection came free in time (the database is down or "
                           "every connection is busy); retry later", error_id=error_id)
    if isinstance(error, psycopg.OperationalError):
        error_id = new_error_id()
        logger.error("database unavailable %s in %s", error_id, where, exc_info=error)
        return ToolFailure("UNAVAILABLE", "the database is unavailable; retry later", error_id=error_id)
    return internal_failure(error, where)


def to_json(payload: Any) -> str:
    """Compact JSON, UTF-8 text unescaped (it is what the size bound measures)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_jsonable)


def _jsonable(value: object) -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


#: How a profile shows a failure: Quarry's envelope, or the body a contract specifies (``mcp_server.profiles``).
ErrorStyle = Callable[[ToolFailure], dict[str, Any]]


def quarry_error(error: ToolFailure) -> dict[str, Any]:
    """Quarry's own envelope: ``{"error": {"code", "message", "problems"?, "retry_after"?, "error_id"?}}``."""
    return error.envelope()


def success(text: str) -> types.CallToolResult:
    """The result as JSON text (for clients before structured content) and as ``structuredContent``.

    The response bound is measured on the text; the structured copy is the same object unescaped.
    """
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=json.loads(text), is_error=False)


def failure(error: ToolFailure, style: ErrorStyle = quarry_error) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=to_json(style(error)))],
                                is_error=True)
