"""Vector files for a bulk load: ``.jsonl`` (id, embedding, metadata per line) or a 2-D ``.npy`` array.

Rows are read lazily and checked as they are read, so a file larger than memory streams into the
load (``.npy`` is memory-mapped) and a bad row fails naming its line (``quarry vectors load``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InvalidRequestError
from engine.store.vector_stores import StagedVector, as_vector

__all__ = ["read_vectors"]

_JSONL_KEYS = frozenset({"id", "embedding", "metadata"})


def read_vectors(path: Path, ids_path: Path | None = None) -> Iterator[StagedVector]:
    """The rows of a ``.jsonl`` or ``.npy`` file, checked as they are read."""
    if not path.is_file():
        raise InvalidRequestError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _read_npy(path, ids_path)
    if ids_path is not None:
        raise InvalidRequestError("--ids is for .npy files; a .jsonl line carries its own id")
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path)
    raise InvalidRequestError(f"{path}: expected a .jsonl or .npy file")


def _read_jsonl(path: Path) -> Iterator[StagedVector]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line, parse_constant=_no_constants)
            except (json.JSONDecodeError, ValueError) as error:
                raise InvalidRequestError(f"{path}:{number}: not a JSON object ({error})") from None
            yield _jsonl_row(row, f"{path}:{number}")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _jsonl_row(row: Any, where: str) -> StagedVector:
    if not isinstance(row, dict):
        raise InvalidRequestError(f"{where}: each line must be a JSON object with id and embedding")
    unknown = sorted(set(row) - _JSONL_KEYS)
    if unknown:
        raise InvalidRequestError(f"{where}: unknown key {unknown[0]!r}; a line has id, embedding and metadata")
    vector_id, embedding, metadata = row.get("id"), row.get("embedding"), row.get("metadata")
    if not isinstance(vector_id, str):
        raise InvalidRequestError(f"{where}: id must be a string")
    if not isinstance(embedding, list):
        raise InvalidRequestError(f"{where}: embedding must be a list of numbers")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidRequestError(f"{where}: metadata must be a JSON object")
    try:
        return StagedVector(vector_id, as_vector(embedding), metadata)
    except InvalidRequestError as error:
        raise InvalidRequestError(f"{where}: {error}") from None


def _read_npy(path: Path, ids_path: Path | None) -> Iterator[StagedVector]:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:
        raise InvalidRequestError(f"{path}: not a numeric .npy array ({error})") from None
    if array.ndim != 2 or not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise InvalidRequestError(f"{path}: expected a 2-D numeric array (vectors as rows), got shape {array.shape} "
                                  f"of {array.dtype}")
    ids: list[str] | None = None
    if ids_path is not None:
        ids = [line.rstrip("\r\n") for line in ids_path.read_text(encoding="utf-8").splitlines()]
        if len(ids) != array.shape[0]:
            raise InvalidRequestError(f"{ids_path}: {len(ids)} ids for {array.shape[0]} vectors")
    return _npy_rows(array, ids)


def _npy_rows(array: np.ndarray[Any, Any], ids: list[str] | None) -> Iterator[StagedVector]:
    for index in range(array.shape[0]):
        yield StagedVector(ids[index] if ids is not None else str(index), np.asarray(array[index]))
