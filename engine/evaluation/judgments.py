"""Judged queries in BEIR format: the queries file and the qrels (relevance judgments).

Queries: JSONL, one ``{"_id": ..., "text": ...}`` per line (other keys, like BEIR's
``metadata``, are ignored), or TSV ``id<TAB>text`` (an ``id``/``_id``/``query-id`` header
line is allowed). Qrels: TSV ``query-id<TAB>corpus-id<TAB>score`` after a header line
naming those columns, or JSONL ``{"query-id": ..., "corpus-id": ..., "score": ...}``
(``query_id`` / ``corpus_id`` accepted too). Ids may be JSON numbers; they are compared as
text. Scores are integers (graded or binary; 0 means judged not relevant).

The format is told by the first non-blank character (``{`` means JSONL), not the file
name, so a CI job can name its files as it likes. Anything malformed is refused with an
``InvalidRequestError`` naming the file and line: a gate that silently skipped a broken
judgment would pass for the wrong reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import InvalidRequestError

_QUERY_HEADERS = ({"_id", "id", "query-id", "query_id", "qid"}, {"text", "query"})
_QRELS_HEADER = ("query-id", "corpus-id", "score")
_JSON_KEYS = {"query-id": ("query-id", "query_id"), "corpus-id": ("corpus-id", "corpus_id"), "score": ("score",)}


def load_queries(path: Path) -> dict[str, str]:
    """Query id -> text, in file order; a repeated id is an error."""
    queries: dict[str, str] = {}
    lines = list(_lines(path))
    jsonl = _is_jsonl(lines)
    for number, line in lines:
        if jsonl:
            row = _json_object(path, number, line)
            query_id, text = _id(path, number, row, "_id"), row.get("text")
        else:
            fields = line.split("\t", 1)
            if len(fields) != 2:
                raise _error(path, number, "expected 'id<TAB>text', found no tab")
            if number == lines[0][0] and fields[0].strip().lower() in _QUERY_HEADERS[0] \
                    and fields[1].strip().lower() in _QUERY_HEADERS[1]:
                continue
            query_id, text = fields[0].strip(), fields[1]
        if not query_id:
            raise _error(path, number, "empty query id")
        if not isinstance(text, str) or not text.strip():
            raise _error(path, number, f"query {query_id!r} has no text (a non-empty string)")
        if query_id in queries:
            raise _error(path, number, f"query id {query_id!r} appears twice")
        queries[query_id] = text.strip()
    if not queries:
        raise InvalidRequestError(f"{path}: no queries")
    return queries


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Query id -> corpus id -> score; a pair judged twice is an error."""
    qrels: dict[str, dict[str, int]] = {}
    lines = list(_lines(path))
    jsonl = _is_jsonl(lines)
    for index, (number, line) in enumerate(lines):
        if jsonl:
            row = _json_object(path, number, line)
            query_id, doc_id = _id(path, number, row, "query-id"), _id(path, number, row, "corpus-id")
            score = _score(path, number, _get(row, "score"))
        else:
            fields = [field.strip() for field in line.split("\t")]
            if index == 0:
                if tuple(field.lower() for field in fields) != _QRELS_HEADER:
                    raise _error(path, number, "expected the header line 'query-id<TAB>corpus-id<TAB>score', "
                                               f"got {line.strip()!r}")
                continue
            if len(fields) != 3:
                raise _error(path, number, "expected 'query-id<TAB>corpus-id<TAB>score', "
                                           f"got {len(fields)} tab-separated fields")
            query_id, doc_id, score = fields[0], fields[1], _score(path, number, fields[2])
        if not query_id or not doc_id:
            raise _error(path, number, "empty query-id or corpus-id")
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged:
            raise _error(path, number, f"query {query_id!r} judges {doc_id!r} twice")
        judged[doc_id] = score
    if not qrels:
        raise InvalidRequestError(f"{path}: no judgments")
    return qrels


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers; invalid UTF-8 is reported at its line."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise InvalidRequestError(f"{path}: cannot read: {error.strerror or error}") from None
    for number, data in enumerate(raw.splitlines(), start=1):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _error(path, number, "not valid UTF-8") from None
        if line.strip():
            yield number, line.removeprefix("\ufeff") if number == 1 else line


def _is_jsonl(lines: list[tuple[int, str]]) -> bool:
    return bool(lines) and lines[0][1].lstrip().startswith("{")


def _json_object(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise _error(path, number, f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(row, dict):
        raise _error(path, number, f"expected a JSON object, got {type(row).__name__}")
    return row


def _get(row: dict[str, Any], key: str) -> Any:
    for name in _JSON_KEYS.get(key, (key,)):
        if name in row:
            return row[name]
    return None


def _id(path: Path, number: int, row: dict[str, Any], key: str) -> str:
    value = _get(row, key)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _error(path, number, f"{key!r} must be a string or an integer, got {json.dumps(value)}")
    return str(value).strip()


def _score(path: Path, number: int, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise _error(path, number, f"score must be an integer, got {value!r}")


def _error(path: Path, number: int, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"{path}:{number}: {message}")
