"""Search latency per mode on the live corpus: p50/p95/p99 over a query set, one client, warm.

    python bench/search_latency.py [--source SLUG] [--rounds 3]

Uses Quarry's configured database (DATABASE_URL or the embedded server). Query
embedding time is included for hybrid and vector modes, as a client sees it;
``--sql-only`` reports the SQL statement alone with precomputed query vectors.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.pipeline import bench_backend
from engine.retrieval.pipeline import RetrievalBackend, retrieve
from engine.retrieval.request import SearchMode, SearchRequest
from engine.runtime import Runtime

QUERIES = [
    "create a partial index", "how to vacuum a table", "streaming replication setup",
    "jsonb containment operator", "window functions row_number", "foreign key on delete cascade",
    "pg_dump custom format restore", "explain analyze buffers", "create extension", "listen notify",
    "full text search ranking", "logical replication publication", "row level security policy",
    "generated columns", "transaction isolation levels serializable", "btree index on expression",
    "copy from csv file", "set statement_timeout", "array functions unnest", "create role login password",
]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--sql-only", action="store_true", help="exclude query embedding time")
    args = parser.parse_args()

    with Runtime() as runtime:
        embedder = runtime.embedders["text"]
        # --sql-only: vectors computed up front; otherwise every call embeds its query
        backend: RetrievalBackend = (bench_backend(runtime.pool, embedder.model_name, QUERIES,
                                                   embedder.embed_queries(QUERIES))
                                     if args.sql_only else runtime)
        sources = tuple(args.source or ())

        def search(query: str, mode: SearchMode) -> None:
            retrieve(backend, SearchRequest((query,), mode, limit=args.limit, sources=sources, rerank=False))

        print(f"{'mode':8} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
        modes: tuple[SearchMode, ...] = ("fts", "vector", "hybrid")
        for mode in modes:
            for query in QUERIES[:3]:  # warm caches and the pool
                search(query, mode)
            timings = []
            for _ in range(args.rounds):
                for query in QUERIES:
                    started = time.perf_counter()
                    search(query, mode)
                    timings.append((time.perf_counter() - started) * 1000)
            print(f"{mode:8} {len(timings):>4} {statistics.median(timings):8.2f} "
                  f"{percentile(timings, 0.95):8.2f} {percentile(timings, 0.99):8.2f}")


if __name__ == "__main__":
    main()
