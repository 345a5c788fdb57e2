"""``quarry vectors load FILE --store NAME``: bulk-load precomputed vectors into a vector store.

Two formats, told apart by the file name:

- ``.jsonl``: one object per line, ``{"id": "a1", "embedding": [0.1, ...], "metadata": {...}}``
  (``metadata`` optional; blank lines skipped; any other key is an error).
- ``.npy``: a 2-D float array, one vector per row; ids are the row numbers (``0``, ``1``, ...)
  unless ``--ids FILE`` gives one id per line.

Rows are read by ``engine.store.vector_files`` and stream into a COPY (see
``engine.store.vector_stores.load_vectors``): a file larger than memory loads fine (``.npy`` is
memory-mapped). The whole load is one transaction: a bad row aborts it, naming the line, and
leaves the store as it was.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from engine.vocabulary import METRICS

if TYPE_CHECKING:
    from engine.runtime import Runtime

__all__ = ["add_vectors_arguments", "run_vectors"]

_EXIT_OK = 0


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
    from engine.store.vector_files import read_vectors
    from engine.store.vector_stores import load_vectors

    rows = read_vectors(args.file, args.ids)
    summary = load_vectors(runtime.pool, args.store, rows, namespace=args.namespace, dimension=args.dimension,
                           metric=args.metric)
    print(json.dumps(asdict(summary)) if args.json else summary.one_line())
    return _EXIT_OK
