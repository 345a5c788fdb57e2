"""Search latency, throughput and HNSW recall at 10k / 100k / 1M chunks, on a synthetic corpus.

    python -m bench.latency --scales 10000 100000 [--clients 1 4 16] [--out bench/.out/latency]
                            [--queries 200] [--duration 10] [--seed 7] [--fresh] [--plot docs/latency.png]

Embedding a million chunks with the local model (~80 chunks/s) is out of reach on two cores, so
the corpus is synthetic and deterministic from ``--seed``: words from a Zipf-distributed vocabulary
of 50,000 made-up words (plus 24 topic words per cluster, so a document's words follow its vector
cluster), documents of 10 chunks of 80-160 words under headings; 384-dim unit vectors from a
mixture of 1,000 Gaussians (centres grouped in 50 topics, spread partly in a 16-dim subspace per
cluster), calibrated so nearest-neighbour cosines match Quarry's real MiniLM vectors of SciFact and
CoSQA. Queries: 2-4 words (common ones included) and vectors drawn around a cluster the corpus
holds, a bit farther out than its documents. A scale's corpus is a prefix of every larger one.
``--real-vectors DIR`` adds an anchor for recall: 10,000 real document vectors (bench/quality.py's
cache) under synthetic text, searched with the real query vectors.

Every scale gets its own database ``bench_latency_<n>`` on the bench's embedded server
(``<out>/pgdata``), bulk-loaded with COPY, then timed separately: BM25 postings
(``quarry.rebuild_text_index()``), the HNSW index (Quarry's own definition, dropped before the
load and recreated after it) and ``vacuum analyze``. A loaded scale is reused on the next run.
Measured through ``engine.search.search`` with precomputed query vectors (the database path):
p50/p95/p99 per mode over ``--queries`` queries after a warm-up, QPS with 1/4/16 threads (one
pooled connection each) for ``--duration`` seconds, and recall@10 of ``search(mode="vector")``
against exact cosine top-10 from numpy, with an ``hnsw.ef_search`` sweep when it falls short.
Results: ``<out>/results-<n>.json``; ``bench/latency_plot.py`` draws them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg_pool import ConnectionPool

from bench.quarry_system import schema_state
from engine.db import embedded_database_url, open_pool
from engine.ids import uuid7
from engine.migrations import ensure_migrated, schema_fingerprint
from engine.search import SearchMode, search

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / ".out" / "latency"
MODES: tuple[SearchMode, ...] = ("fts", "vector", "hybrid")
MODEL = "synthetic-gaussian-mixture"
DIMENSION = 384
VOCABULARY = 50_000
CLUSTERS = 1_000
TOPIC_WORDS = 24
SUBSPACE = 16
TOPICS = 50
QUERY_SPREAD = 1.3  # queries sit farther from their documents than documents from each other
CHUNKS_PER_DOCUMENT = 10
CORPUS_VERSION = 2  # bump when the generator changes: a loaded scale is reused only if it matches
BLOCK = 10_000  # chunks generated (and loaded) per step; each block has its own seeded generator
SOURCE = "synthetic"


# ---------------------------------------------------------------------------- synthetic corpus


@dataclass(frozen=True)
class Universe:
    """Everything shared by all blocks: vocabulary, word frequencies, clusters."""

    words: list[str]
    word_probabilities: np.ndarray
    topic_words: np.ndarray  # (CLUSTERS, TOPIC_WORDS) word indices
    centres: np.ndarray  # (CLUSTERS, DIMENSION), unit length
    bases: np.ndarray  # (CLUSTERS, SUBSPACE, DIMENSION): directions of each cluster's spread


def make_universe(seed: int) -> Universe:
    rng = np.random.default_rng([seed, 0])
    consonants, vowels = list("bcdfghklmnprstvz"), list("aeiou")
    syllables = [c + v for c in consonants for v in vowels] + [c + v + "n" for c in consonants for v in vowels]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(syllables, size=int(rng.integers(2, 5))))
        if word not in seen:
            seen.add(word)
            words.append(word)
    ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
    weights = 1.0 / (ranks + 2.7)  # Zipf-Mandelbrot, exponent 1: "the"-like words hold ~8 % of tokens
    # topic words from the middle of the frequency range: specific, yet not hapaxes
    topic_words = rng.integers(200, 20_000, size=(CLUSTERS, TOPIC_WORDS))
    # Centres: a direction all text embeddings share (their cosines are mostly > 0), one of 50 broad
    # topics, and the cluster's own direction. Calibrated on Quarry's real MiniLM vectors of SciFact and
    # CoSQA (11,450 documents, 1,300 queries): nearest / 10th-nearest cosine document-document 0.71 / 0.57
    # and query-document 0.68 / 0.53, median 0.08; this gives 0.73 / 0.58, 0.67 / 0.51 and 0.10 at 10k.
    def unit(rows: np.ndarray) -> np.ndarray:
        scaled: np.ndarray = rows / np.linalg.norm(rows, axis=-1, keepdims=True)
        return scaled

    shared = unit(rng.standard_normal(DIMENSION))
    topics = unit(rng.standard_normal((TOPICS, DIMENSION)))
    centres = unit(0.6 * shared + topics[rng.integers(0, TOPICS, size=CLUSTERS)]
                   + unit(rng.standard_normal((CLUSTERS, DIMENSION))))
    bases = rng.standard_normal((CLUSTERS, SUBSPACE, DIMENSION)) / np.sqrt(DIMENSION)
    return Universe(words, weights / weights.sum(), topic_words, centres.astype(np.float32), bases.astype(np.float32))


def cluster_points(universe: Universe, clusters: np.ndarray, rng: np.random.Generator, spread: float) -> np.ndarray:
    """Unit vectors around the given clusters' centres: subspace noise of norm ~0.6 x spread, isotropic ~0.5."""
    subspace = rng.standard_normal((len(clusters), SUBSPACE)).astype(np.float32) * (0.6 * spread / np.sqrt(SUBSPACE))
    noise = np.einsum("ns,nsd->nd", subspace, universe.bases[clusters])
    noise += rng.standard_normal((len(clusters), DIMENSION)).astype(np.float32) * (0.5 * spread / np.sqrt(DIMENSION))
    points = universe.centres[clusters] + noise
    unit_points: np.ndarray = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    return unit_points


@dataclass(frozen=True)
class Block:
    """One block of BLOCK chunks: documents with their chunks' text and vectors."""

    titles: list[str]
    raws: list[bytes]
    chunks: list[list[tuple[str, str, int, int, int, int, int]]]  # heading, content, lines, bytes, tokens
    vectors: np.ndarray


def make_block(universe: Universe, seed: int, index: int) -> Block:
    rng = np.random.default_rng([seed, 1, index])
    documents = BLOCK // CHUNKS_PER_DOCUMENT
    doc_clusters = rng.integers(0, CLUSTERS, size=documents)
    lengths = rng.integers(80, 161, size=BLOCK)
    general = rng.choice(VOCABULARY, size=int(lengths.sum()) + documents * 40, p=universe.word_probabilities)
    topical = rng.random(len(general)) < 0.2
    topic_pick = rng.integers(0, TOPIC_WORDS, size=len(general))
    words, cursor = universe.words, 0

    def take(n: int, cluster: int) -> list[str]:
        nonlocal cursor
        ids = np.where(topical[cursor:cursor + n], universe.topic_words[cluster, topic_pick[cursor:cursor + n]],
                       general[cursor:cursor + n])
        cursor += n
        return [words[i] for i in ids]

    titles, raws, chunks = [], [], []
    for d in range(documents):
        cluster = int(doc_clusters[d])
        title = " ".join(take(int(rng.integers(3, 7)), cluster)).capitalize()
        parts, offset, line = [f"# {title}\n\n"], 0, 3
        offset = len(parts[0].encode())
        doc_chunks = []
        for c in range(CHUNKS_PER_DOCUMENT):
            heading = " ".join(take(int(rng.integers(2, 5)), cluster)).capitalize()
            tokens = take(int(lengths[d * CHUNKS_PER_DOCUMENT + c]), cluster)
            sentences = [" ".join(tokens[i:i + 12]).capitalize() + "." for i in range(0, len(tokens), 12)]
            content = " ".join(sentences)
            section = f"## {heading}\n\n{content}\n\n"
            size = len(section.encode())
            doc_chunks.append((heading, content, line, line + 2, offset, offset + size, len(tokens)))
            parts.append(section)
            offset += size
            line += 4
        titles.append(title)
        raws.append("".join(parts).encode())
        chunks.append(doc_chunks)
    vectors = cluster_points(universe, np.repeat(doc_clusters, CHUNKS_PER_DOCUMENT), rng, spread=1.0)
    return Block(titles, raws, chunks, vectors)


@dataclass(frozen=True)
class QuerySet:
    texts: list[str]
    vectors: np.ndarray
    common: list[bool]  # holds one of the 100 most frequent words


def make_queries(universe: Universe, seed: int, count: int, scale: int) -> QuerySet:
    """Queries about clusters the corpus of this scale holds: 2-4 words, a vector drawn around the cluster."""
    present = np.unique(np.concatenate([
        np.random.default_rng([seed, 1, b]).integers(0, CLUSTERS, size=BLOCK // CHUNKS_PER_DOCUMENT)
        for b in range(scale // BLOCK)]))
    rng = np.random.default_rng([seed, 2, scale])
    clusters = rng.choice(present, size=count)
    texts, common = [], []
    for cluster in clusters:
        n = int(rng.integers(2, 5))
        topical = int(rng.integers(1, n))  # at least one topic word and one general (often common) word
        ids = list(rng.choice(universe.topic_words[cluster], size=topical, replace=False))
        ids += list(rng.choice(VOCABULARY, size=n - topical, p=universe.word_probabilities))
        texts.append(" ".join(universe.words[i] for i in ids))
        common.append(any(i < 100 for i in ids))
    return QuerySet(texts, cluster_points(universe, clusters, rng, spread=QUERY_SPREAD), common)


# ---------------------------------------------------------------------------- loading


def scale_database(out: Path, label: str, *, fresh: bool) -> str:
    server_url = embedded_database_url(out)
    name = f"bench_latency_{label}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        if fresh:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = psycopg.conninfo.make_conninfo(server_url, dbname=name)
    try:
        ensure_migrated(url)
    except psycopg.Error as error:  # e.g. a working tree mid-edit: measure the schema the corpus has
        if fresh:
            raise
        print(f"  migrating failed ({error}); measuring the schema as stored (--fresh to reload)", flush=True)
    return url


def load_scale(url: str, universe: Universe, seed: int, scale: int,
               vectors: np.ndarray | None = None) -> dict[str, float]:
    """COPY the corpus in, then build BM25 postings and the HNSW index; seconds per step."""
    timings: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("truncate quarry.sources cascade")
        source_id = conn.execute("insert into quarry.sources (slug, display_name, kind) values (%s, %s, 'docs_site')"
                                 " returning id", (SOURCE, "Synthetic corpus")).fetchone()[0]  # type: ignore[index]
        space = conn.execute("select quarry.ensure_embedding_space('text', %s, %s)", (MODEL, DIMENSION)).fetchone()
        index_name = conn.execute("select quarry.space_index_name(%s)", (space[0],)).fetchone()[0]  # type: ignore[index]
        row = conn.execute("select pg_get_indexdef(%s::regclass)", (f"quarry.{index_name}",)).fetchone()
        index_definition = row[0]  # type: ignore[index]
        # bulk load: build the graph once at the end instead of inserting 1 vector at a time
        conn.execute(sql.SQL("drop index quarry.{}").format(sql.Identifier(index_name)))

        started = time.perf_counter()
        generation = 0.0
        for b in range(scale // BLOCK):
            g = time.perf_counter()
            block = make_block(universe, seed, b)
            if vectors is not None:  # real vectors under the synthetic text
                block = Block(block.titles, block.raws, block.chunks, vectors[b * BLOCK:(b + 1) * BLOCK])
            generation += time.perf_counter() - g
            copy_block(conn, block, source_id, space[0], b)  # type: ignore[index]
            print(f"  loaded {(b + 1) * BLOCK:>9,} chunks  {time.perf_counter() - started:7.1f} s", flush=True)
        timings["load_seconds"] = time.perf_counter() - started - generation
        timings["generate_seconds"] = generation

        started = time.perf_counter()
        conn.execute("select quarry.rebuild_text_index()")
        timings["postings_seconds"] = time.perf_counter() - started
        print(f"  BM25 postings {timings['postings_seconds']:.1f} s", flush=True)

        started = time.perf_counter()
        conn.execute("set maintenance_work_mem = '4GB'")  # the graph must fit, or the build crawls
        conn.execute(index_definition)
        timings["hnsw_seconds"] = time.perf_counter() - started
        print(f"  HNSW index {timings['hnsw_seconds']:.1f} s", flush=True)

        started = time.perf_counter()
        conn.execute("vacuum analyze")
        timings["vacuum_analyze_seconds"] = time.perf_counter() - started
    return timings


def copy_block(conn: psycopg.Connection[Any], block: Block, source_id: int, space: str, index: int) -> None:
    document_ids = [uuid7() for _ in block.titles]
    chunk_ids: list[Any] = []
    with conn.transaction():
        with conn.cursor().copy("copy quarry.documents (id, source_id, path, title, content_hash, raw, content_type,"
                                " parser_version) from stdin with (format binary)") as copy:
            copy.set_types(["uuid", "int8", "text", "text", "bytea", "bytea", "text", "int4"])
            for d, (doc_id, title, raw) in enumerate(zip(document_ids, block.titles, block.raws, strict=True)):
                copy.write_row((doc_id, source_id, f"block{index:04d}/doc{d:04d}.md", title,
                                hashlib.sha256(raw).digest(), raw, "markdown", 1))
        with conn.cursor().copy("copy quarry.chunks (id, document_id, source_id, ordinal, content, title,"
                                " heading_path, content_type, start_line, end_line, start_byte, end_byte,"
                                " token_estimate) from stdin with (format binary)") as copy:
            copy.set_types(["uuid", "uuid", "int8", "int4", "text", "text", "text[]", "text",
                            "int4", "int4", "int4", "int4", "int4"])
            for doc_id, title, doc_chunks in zip(document_ids, block.titles, block.chunks, strict=True):
                for ordinal, (heading, content, first, last, start, end, tokens) in enumerate(doc_chunks):
                    chunk_id = uuid7()
                    chunk_ids.append(chunk_id)
                    copy.write_row((chunk_id, doc_id, source_id, ordinal, content, title, [title, heading],
                                    "markdown", first, last, start, end, tokens))
        with conn.cursor().copy("copy quarry.embeddings (chunk_id, space, input_hash, embedding)"
                                " from stdin with (format binary)") as copy:
            copy.set_types(["uuid", "text", "bytea", "vector"])
            for chunk_id, vector in zip(chunk_ids, block.vectors, strict=True):
                copy.write_row((chunk_id, space, hashlib.sha256(vector.tobytes()).digest(), vector))


def sizes(url: str) -> dict[str, int]:
    """Bytes on disk: the database, and each table (heap + TOAST) and index of the corpus."""
    with psycopg.connect(url) as conn:
        result = {"database": conn.execute("select pg_database_size(current_database())").fetchone()[0]}  # type: ignore[index]
        for name, kind, size in conn.execute(
            "select c.relname, c.relkind::text, case c.relkind when 'r' then pg_table_size(c.oid)"
            " else pg_relation_size(c.oid) end from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = 'quarry' and c.relkind in ('r', 'i')"
            " and c.relname ~ '^(documents|chunks|embeddings|text_postings|text_terms)'"
        ).fetchall():
            result[f"{'table' if kind == 'r' else 'index'}:{name}"] = int(size)
    return result


def loaded_chunks(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select count(*) from quarry.chunks c where exists"
                           " (select 1 from pg_indexes where indexname = 'embeddings_hnsw_text')").fetchone()
        return int(row[0]) if row else 0


# ---------------------------------------------------------------------------- measuring


def percentile(values: Sequence[float], fraction: float) -> float:
    return float(np.percentile(np.asarray(values), fraction * 100))


def run_query(pool: ConnectionPool, queries: QuerySet, i: int, mode: SearchMode) -> int:
    return len(search(pool, None, queries.texts[i], query_vectors=queries.vectors[i][None, :], mode=mode,
                      limit=10, query_model=MODEL).hits)


def latencies(pool: ConnectionPool, queries: QuerySet, mode: SearchMode, warmup: int) -> dict[str, Any]:
    for i in range(warmup):
        run_query(pool, queries, i % len(queries.texts), mode)
    timings, empty = [], 0
    for i in range(len(queries.texts)):
        started = time.perf_counter()
        empty += run_query(pool, queries, i, mode) == 0
        timings.append((time.perf_counter() - started) * 1000)
    common = [t for t, c in zip(timings, queries.common, strict=True) if c]
    return {"n": len(timings), "p50": statistics.median(timings), "p95": percentile(timings, 0.95),
            "p99": percentile(timings, 0.99), "mean": statistics.fmean(timings), "max": max(timings),
            "empty_results": empty,
            "common_word_queries": {"n": len(common), "p50": statistics.median(common) if common else None,
                                    "p95": percentile(common, 0.95) if common else None}}


def throughput(url: str, queries: QuerySet, mode: SearchMode, clients: int, duration: float) -> dict[str, Any]:
    """Queries per second with ``clients`` threads, each on its own pooled connection, for ``duration`` s."""
    with open_pool(url, min_size=clients, max_size=clients, name=f"bench-{clients}") as pool:
        for i in range(clients * 2):
            run_query(pool, queries, i % len(queries.texts), mode)
        counts = [0] * clients
        timings: list[list[float]] = [[] for _ in range(clients)]
        barrier = threading.Barrier(clients + 1)
        deadline = [0.0]

        def client(k: int) -> None:
            barrier.wait()
            i = k * 7919
            while (now := time.perf_counter()) < deadline[0]:
                run_query(pool, queries, i % len(queries.texts), mode)
                timings[k].append((time.perf_counter() - now) * 1000)
                counts[k] += 1
                i += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for thread in threads:
            thread.start()
        deadline[0] = time.perf_counter() + duration
        started = time.perf_counter()
        barrier.wait()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    every = [t for per in timings for t in per]
    return {"clients": clients, "qps": sum(counts) / elapsed, "queries": sum(counts),
            "p50": statistics.median(every), "p95": percentile(every, 0.95)}


def corpus_vectors(url: str) -> tuple[list[Any], np.ndarray]:
    with psycopg.connect(url) as conn:
        register_vector(conn)
        rows = conn.execute("select chunk_id, embedding from quarry.embeddings where space = 'text'").fetchall()
    return [r[0] for r in rows], np.stack([r[1].to_numpy() for r in rows]).astype(np.float32)


def recall(url: str, pool: ConnectionPool, queries: QuerySet, count: int) -> dict[str, Any]:
    """Recall@10 of search(mode="vector", limit=10) against exact cosine top-10; an ef_search sweep if short."""
    ids, matrix = corpus_vectors(url)
    sample = queries.vectors[:count]
    similarities = sample @ matrix.T  # unit vectors: cosine = dot
    exact = [set(ids[j] for j in np.argsort(-row)[:10]) for row in similarities]
    found = []
    for i in range(count):
        hits = search(pool, None, queries.texts[i], query_vectors=sample[i][None, :], mode="vector", limit=10,
                      query_model=MODEL).hits
        found.append(len(exact[i] & {hit.chunk_id for hit in hits}) / 10)
    result: dict[str, Any] = {"queries": count, "recall_at_10": statistics.fmean(found), "min": min(found),
                              "ef_search_in_search": "greatest(40, candidates=50) = 50",
                              "nearest_neighbour_similarity": float(np.mean(np.sort(similarities, axis=1)[:, -1])),
                              "tenth_neighbour_similarity": float(np.mean(np.sort(similarities, axis=1)[:, -10]))}
    sweep = {}
    with pool.connection() as conn:
        for ef in (40, 64, 100, 200, 400):
            with conn.transaction():
                conn.execute("select set_config('hnsw.ef_search', %s, true)", (str(ef),))
                conn.execute("select set_config('hnsw.iterative_scan', 'relaxed_order', true)")
                per = []
                for i in range(count):
                    rows = conn.execute("select chunk_id from quarry.nearest_chunks('text', %s, 10)",
                                        (sample[i],)).fetchall()
                    per.append(len(exact[i] & {r[0] for r in rows}) / 10)
            sweep[str(ef)] = statistics.fmean(per)
    result["nearest_chunks_limit_10_by_ef_search"] = sweep
    return result


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def server_settings(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("select name, setting || coalesce(unit, '') from pg_settings where name in"
                            " ('shared_buffers', 'work_mem', 'effective_cache_size', 'max_parallel_workers_per_gather',"
                            " 'server_version', 'jit')").fetchall()
        version = conn.execute("select extversion from pg_extension where extname = 'vector'").fetchone()
    return {**dict(rows), "pgvector": version[0] if version else "?"}


def prepared_database(args: argparse.Namespace, universe: Universe, scale: int, label: str,
                      vectors: np.ndarray | None = None) -> tuple[str, dict[str, Any]]:
    """DSN of the loaded corpus ``label`` (loaded now unless a finished load of this generator exists)."""
    out: Path = args.out
    url = scale_database(out, label, fresh=args.fresh)
    load_file = out / f"load-{label}.json"
    if load_file.exists() and loaded_chunks(url) == scale:
        load = json.loads(load_file.read_text())
        if load.get("corpus_version") == CORPUS_VERSION and load.get("seed") == args.seed:
            print("  reusing the loaded corpus", flush=True)
            return url, load
    load = {"corpus_version": CORPUS_VERSION, "seed": args.seed, "load_average_before": load_average(),
            **load_scale(url, universe, args.seed, scale, vectors)}
    load["sizes"] = sizes(url)
    load["load_average_after"] = load_average()
    load_file.write_text(json.dumps(load, indent=2))
    return url, load


def real_vector_recall(args: argparse.Namespace, universe: Universe) -> dict[str, Any]:
    """Recall@10 on real MiniLM vectors: 10,000 documents of SciFact + CoSQA, their real queries."""
    directory: Path = args.real_vectors
    documents = np.concatenate([np.load(f) for f in sorted(directory.glob("*-documents.*.npy"))])
    queries = np.concatenate([np.load(f) for f in sorted(directory.glob("*-queries-test.*.npy"))])
    rng = np.random.default_rng([args.seed, 3])
    documents = documents[rng.permutation(len(documents))[:BLOCK]].astype(np.float32)
    queries = queries[rng.permutation(len(queries))[:args.recall_queries]].astype(np.float32)
    print(f"\n## real vectors: {len(documents):,} documents, {len(queries)} queries", flush=True)
    url, load = prepared_database(args, universe, BLOCK, "real", documents)
    query_set = QuerySet([f"query {i}" for i in range(len(queries))], queries, [False] * len(queries))
    with open_pool(url, min_size=1, max_size=1, name="bench-latency") as pool:
        result = recall(url, pool, query_set, len(queries))
    print(f"  recall@10 {result['recall_at_10']:.3f}  sweep {result['nearest_chunks_limit_10_by_ef_search']}",
          flush=True)
    return {"documents": len(documents), "load": load, "recall": result}


def benchmark_scale(args: argparse.Namespace, universe: Universe, scale: int) -> dict[str, Any]:
    print(f"\n## {scale:,} chunks", flush=True)
    url, load = prepared_database(args, universe, scale, str(scale))
    queries = make_queries(universe, args.seed, args.queries, scale)
    report: dict[str, Any] = {"scale": scale, "load": load, "latency": {}, "throughput": {},
                              "load_average_before": load_average()}
    with open_pool(url, min_size=1, max_size=1, name="bench-latency") as pool:
        for mode in MODES:
            report["latency"][mode] = latencies(pool, queries, mode, warmup=args.warmup)
            lat = report["latency"][mode]
            print(f"  {mode:7} p50 {lat['p50']:7.2f}  p95 {lat['p95']:7.2f}  p99 {lat['p99']:7.2f} ms"
                  f"  (load {load_average()[0]})", flush=True)
        report["recall"] = recall(url, pool, queries, min(args.recall_queries, args.queries))
        print(f"  recall@10 {report['recall']['recall_at_10']:.3f}  sweep "
              f"{report['recall']['nearest_chunks_limit_10_by_ef_search']}", flush=True)
    for mode in MODES:
        report["throughput"][mode] = [throughput(url, queries, mode, n, args.duration) for n in args.clients]
        print(f"  {mode:7} QPS " + "  ".join(f"{t['clients']}: {t['qps']:.0f}" for t in report["throughput"][mode])
              + f"  (load {load_average()[0]})", flush=True)
    report["load_average_after"] = load_average()
    report["server"] = server_settings(url)
    report["schema"] = schema_state(url)
    report["schema"]["matches_working_tree"] = report["schema"].get("schema_fingerprint") == schema_fingerprint()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--recall-queries", type=int, default=100)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per throughput run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fresh", action="store_true", help="drop and reload every scale")
    parser.add_argument("--real-vectors", type=Path, default=None, metavar="DIR",
                        help="also check recall on the real vectors bench/quality.py caches (<its home>/vectors)")
    parser.add_argument("--plot", type=Path, default=None, help="also draw the results (e.g. docs/latency.png)")
    args = parser.parse_args()
    if any(scale % BLOCK for scale in args.scales):
        parser.error(f"scales must be multiples of {BLOCK}")
    args.out.mkdir(parents=True, exist_ok=True)
    universe = make_universe(args.seed)
    if args.real_vectors is not None:
        real = real_vector_recall(args, universe)
        real.update(date=datetime.now(UTC).isoformat(timespec="seconds"), machine=machine())
        (args.out / "recall-real.json").write_text(json.dumps(real, indent=2, default=str))
    for scale in args.scales:
        report = benchmark_scale(args, universe, scale)
        report.update(date=datetime.now(UTC).isoformat(timespec="seconds"), machine=machine(), seed=args.seed,
                      command="python -m bench.latency " + " ".join(map(str, sys.argv[1:])))
        (args.out / f"results-{scale}.json").write_text(json.dumps(report, indent=2, default=str))
    if args.plot is not None:
        from bench.latency_plot import plot_results

        plot_results(args.out, args.plot)


if __name__ == "__main__":
    main()
