"""``quarry vectors load FILE --store NAME``: bulk-load precomputed vectors into a vector store.

Two formats, told apart by the file name:

- ``.jsonl``: one object per line, ``{"id": "a1", "embedding": [0.1, ...], "metadata": {...}}``
  (``metadata`` optional; blank lines skipped; any other key is an error).
- ``.npy``: a 2-D float array, one vector per row; ids are the row numbers (``0``, ``1``, ...)
  unless ``--ids FILE`` gives one id per line.

Rows stream into a COPY (see ``engine.store.vector_stores.load_vectors``): a file larger than
memory loads fine (``.npy`` is memory-mapped). The whole load is one transaction: a bad
row aborts it, naming the line, and leaves the store as it was.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import InvalidRequestError
from engine.store.vector_stores import METRICS, StagedVector, as_vector, load_vectors

if TYPE_CHECKING:
    from engine.runtime import Runtime

__all__ = ["add_vectors_arguments", "run_vectors"]

_EXIT_OK = 0
_JSONL_KEYS = frozenset({"id", "embedding", "metadata"})


def add_vectors_arguments(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``quarry vectors ...`` to the top-level command parser."""
    vectors = subparsers.add_parser(
        "vectors", help="bring-your-own vector stores: bulk-load precomputed vectors",
        epilog="examples:\n  quarry vectors load embeddings.jsonl --store papers --metric dot\n"
               "  quarry vectors load vectors.npy --store images --ids ids.txt --namespace 2024",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = vectors.add_subparsers(dest="vectors_command", required=True, metavar="ACTION")
    load = actions.add_parser(
        "load", help="load a .jsonl or .npy file of vectors into a store (created on first load), idempotently",
        epilog="example: quarry vectors load embeddings.jsonl --store papers --dimension 1024 --metric cosine\n"
               "JSONL lines: {\"id\": \"a1\", \"embedding\": [0.1, 0.2], \"metadata\": {\"lang\": \"en\"}}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    load.add_argument("file", type=Path, help="a .jsonl file (id, embedding, metadata per line) or a 2-D .npy array")
    load.add_argument("--store", required=True, help="the vector store to load into")
    load.add_argument("--namespace", help="the namespace to load into (default: the store's default namespace)")
    load.add_argument("--dimension", type=int,
                      help="the store's dimension: checked against an existing store; default: the first vector's")
    load.add_argument("--metric", choices=METRICS,
                      help="the metric of a new store (default cosine); checked against an existing store")
    load.add_argument("--ids", type=Path, help=".npy only: a text file with one id per line, one per row")
    load.add_argument("--json", action="store_true", help="print the summary as JSON")


def run_vectors(runtime: Runtime, args: argparse.Namespace) -> int:
    """Carry out ``quarry vectors ACTION``; returns the exit code (errors raise ``QuarryError``)."""
    if args.vectors_command != "load":
        raise AssertionError(args.vectors_command)
    rows = read_vectors(args.file, args.ids)
    summary = load_vectors(runtime.pool, args.store, rows, namespace=args.namespace, dimension=args.dimension,
                           metric=args.metric)
    print(json.dumps(asdict(summary)) if args.json else summary.one_line())
    return _EXIT_OK


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
