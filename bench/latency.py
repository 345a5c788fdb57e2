"""Search latency, throughput and HNSW recall at 10k / 100k / 1M chunks, on real texts recombined.

    python -m bench.latency --scales 10000 100000 1000000 [--clients 1 4 16] [--out bench/.out/latency]
                            [--queries 200] [--duration 10] [--seed 7] [--fresh] [--plot docs/latency.png]
    python -m bench.latency --scales --scifact     # only: hybrid latency on bench/quality.py's SciFact database
    python -m bench.latency --scales --scifact --quality-home /tmp/q   # ... of a quality run with --home /tmp/q
    python -m bench.latency --scales --scifact --repeat 6   # six runs, modes taking turns: medians
    python -m bench.latency --scales --cosqa                # the same on the CoSQA database (code, 6k docs)
    python -m bench.latency --scales --cosqa --layers       # and where a vector-mode search's time goes
    python -m bench.latency --scales 10000 100000 --systems lancedb supabase   # only: hybrid against the peers

Embedding a million chunks with the local model (~80 chunks/s) is out of reach on two cores, so
the corpus recombines real texts whose real vectors bench/quality.py has cached (``--vectors``,
by default ``<quality-home>/vectors``; run it first): SciFact abstracts split into sentences and
CoSQA functions split into lines, read at run time from ``--data``. A chunk is a run of passages
from one real document (its primary) followed by a run from another (at most as many words), and
its vector is the two real MiniLM vectors mixed by word share, plus Gaussian noise,
renormalised: near the real vector of the text it mostly came from, never a duplicate.
Documents hold 10 chunks from one dataset under headings. Queries are the real SciFact and
CoSQA test queries with their real vectors. Deterministic from ``--seed``; a scale's corpus is a
prefix of every larger one.

Every scale gets its own database ``bench_latency_<n>`` on the bench's embedded server
(``<out>/pgdata``), bulk-loaded with COPY, then timed separately: BM25 postings
(``quarry.rebuild_text_index()``), the HNSW index (Quarry's own definition, dropped before the
load and recreated after it) and ``vacuum analyze``. A loaded scale is reused on the next run.
Measured through the pipeline's SQL step (``engine.retrieval.hits.search_hits``) with precomputed query vectors:
p50/p95/p99 per mode over ``--queries`` queries, one client, after one untimed pass of them in
every mode (warm); QPS with 1/4/16 threads (one pooled connection each) for ``--duration``
seconds; recall@10 of the SQL step (``search_hits``, mode="vector") against exact cosine top-10 from numpy, and by
``hnsw.ef_search``.
Storage: bytes on disk per chunk of every quarry.* table's heap, TOAST and each index, printed
and in ``<out>/storage-<n>.json`` (also with ``--load-only``) and the results' ``storage``.
Results: ``<out>/results-<n>.json``; ``bench/latency_plot.py`` draws them. ``--scifact`` /
``--cosqa`` read the databases bench/quality.py ingested under ``--quality-home`` (its ``--home``).

``--systems`` adds peers over the same chunks (headings + content, the text Quarry's FTS
indexes) and vectors: LanceDB hybrid (bench/peers.py: native FTS + an IVF_HNSW_SQ vector index,
RRF; in ``<out>/lancedb-<n>``) and Supabase's ``hybrid_search`` SQL (bench/supabase.py: its own
schema in the scale's database). Each is built once (seconds and bytes in
``<out>/peer-builds-<n>.json``) and reused. Quarry hybrid and each peer are then timed
interleaved query by query (the order rotating), so they share the machine's load: one
client, warm, limit 10, in ``<out>/peers-<n>.json``. ``quarry`` in ``--systems`` (the
default) runs the per-mode measurement above.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg_pool import ConnectionPool

from bench.beir import load_beir
from bench.peers import lancedb_hybrid_ids, lancedb_table
from bench.quarry_system import bench_database_url, schema_state
from bench.supabase import SCHEMA, build_supabase_tables, supabase_hybrid_ids, use_supabase_schema
from engine.ids import uuid7
from engine.ingest.batch import EMBEDDINGS_COPY, EMBEDDINGS_COPY_TYPES, stored_vector
from engine.retrieval.hits import SearchHit, search_hits
from engine.retrieval.request import DEFAULT_CODE_MODE, DEFAULT_VERSION_MATCH, SearchMode
from engine.store.db import open_pool
from engine.store.migrations import ensure_migrated, schema_fingerprint

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / ".out" / "latency"
QUALITY_HOME = REPO / "bench" / ".out" / "quality"
DEFAULT_DATA = REPO.parent / "shared" / "data"
MODES: tuple[SearchMode, ...] = ("fts", "vector", "hybrid")
MODEL = "recombined-minilm"
DIMENSION = 384
DATASETS = ("scifact", "cosqa")
CHUNKS_PER_DOCUMENT = 10
NOISE = 0.35  # norm of the Gaussian noise added to a chunk's mixed vector (cosine to it ~0.94)
CORPUS_VERSION = 3  # bump when the generator changes: a loaded scale is reused only if it matches
BLOCK = 10_000  # chunks generated (and loaded) per step; each block has its own seeded generator
SOURCE = "recombined"
PEERS = ("lancedb", "supabase")
LANCEDB_VECTOR_INDEX = "IVF_HNSW_SQ"  # LanceDB's HNSW flavour, its defaults (the peer of pgvector's HNSW)


# ---------------------------------------------------------------------------- recombined corpus


@dataclass(frozen=True)
class RealCorpus:
    """One BEIR dataset as material: documents split into passages, their real vectors, the test queries."""

    name: str
    code: bool  # passages are lines of code (joined by newlines), not sentences
    titles: list[str]
    passages: list[list[str]]
    passage_words: list[list[int]]
    vectors: np.ndarray  # (documents, DIMENSION): MiniLM of each document's full text
    query_texts: list[str]
    query_vectors: np.ndarray
    words_per_chunk: tuple[int, int]


def cached(vectors: Path, labels: Sequence[str], rows: int) -> np.ndarray:
    """bench/quality.py's cache under one of ``labels`` (``<label>.<digest>.npy``), checked against the texts' count."""
    for label in labels:
        for path in sorted(vectors.glob(f"{label}.*.npy")):
            matrix: np.ndarray = np.load(path).astype(np.float32)
            if matrix.shape == (rows, DIMENSION):
                return matrix
    raise SystemExit(f"no cached {labels[0]} vectors ({rows} x {DIMENSION}) in {vectors}: run python -m bench.quality")


def read_corpus(data: Path, vectors: Path, name: str) -> RealCorpus:
    dataset = load_beir(data / name, "test")
    code = name == "cosqa"
    passages = [
        [line for line in document.text.splitlines() if line.strip()] if code
        else re.split(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])", document.text.strip())
        for document in dataset.documents]
    first_lines = [parts[0].strip() if parts else "" for parts in passages]
    return RealCorpus(
        name, code,
        [d.title or line for d, line in zip(dataset.documents, first_lines, strict=True)],
        passages, [[len(p.split()) for p in parts] for parts in passages],
        cached(vectors, [f"{name}-documents"], len(dataset.documents)),
        [query.text for query in dataset.queries],
        # bench/quality.py labels a task's queries per corpus (<task>-<corpus>-queries-<split>)
        cached(vectors, [f"{name}-{name}-queries-test", f"{name}-queries-test"], len(dataset.queries)),
        (30, 90) if code else (80, 160))


def read_corpora(data: Path, vectors: Path) -> list[RealCorpus]:
    return [read_corpus(data, vectors, name) for name in DATASETS]


def unit(rows: np.ndarray) -> np.ndarray:
    scaled: np.ndarray = (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)
    return scaled


@dataclass(frozen=True)
class Block:
    """One block of BLOCK chunks: documents with their chunks' text and vectors."""

    titles: list[str]
    raws: list[bytes]
    chunks: list[list[tuple[str, str, int, int, int, int, int]]]  # heading, content, lines, bytes, words
    vectors: np.ndarray


def recombined_chunk(corpus: RealCorpus, rng: np.random.Generator, primary: int,
                     secondary: int) -> tuple[str, int, int]:
    """Text of one chunk: a run of ``primary``'s passages, then at most as many words of ``secondary``'s."""
    low, high = corpus.words_per_chunk
    target = int(rng.integers(low, high + 1))
    parts: list[str] = []
    taken = [0, 0]
    for k, (document, budget) in enumerate(((primary, 0.6 * target), (secondary, None))):
        words = corpus.passage_words[document]
        budget = min(target - taken[0], taken[0]) if budget is None else budget
        i = int(rng.integers(0, len(words)))
        while k == 0 and i > 0 and sum(words[i:]) < budget:  # a run long enough, where the document allows
            i -= 1
        while i < len(words) and (taken[k] < budget or (k == 0 and taken[0] == 0)):
            if k == 1 and taken[1] + words[i] > budget:
                break
            parts.append(corpus.passages[document][i])
            taken[k] += words[i]
            i += 1
    return ("\n" if corpus.code else " ").join(parts), taken[0], taken[1]


def make_block(corpora: Sequence[RealCorpus], seed: int, index: int) -> Block:
    rng = np.random.default_rng([seed, 1, index])
    sizes = np.array([len(c.titles) for c in corpora], dtype=np.float64)
    titles, raws, chunks = [], [], []
    mixes: list[np.ndarray] = []
    for _ in range(BLOCK // CHUNKS_PER_DOCUMENT):
        corpus = corpora[int(rng.choice(len(corpora), p=sizes / sizes.sum()))]
        primaries = rng.integers(0, len(corpus.titles), size=CHUNKS_PER_DOCUMENT)
        secondaries = rng.integers(0, len(corpus.titles), size=CHUNKS_PER_DOCUMENT)
        title = corpus.titles[int(primaries[0])][:120]
        head = f"# {title}\n\n"
        parts, offset, line, doc_chunks = [head], len(head.encode()), 3, []
        for primary, secondary in zip(primaries, secondaries, strict=True):
            content, own, borrowed = recombined_chunk(corpus, rng, int(primary), int(secondary))
            heading = " ".join(corpus.titles[int(primary)].split()[:8])
            section = f"## {heading}\n\n{content}\n\n"
            size, lines = len(section.encode()), section.count("\n")
            doc_chunks.append((heading, content, line, line + lines - 2, offset, offset + size, own + borrowed))
            parts.append(section)
            offset, line = offset + size, line + lines
            share = own / max(own + borrowed, 1)
            mixes.append(share * corpus.vectors[primary] + (1 - share) * corpus.vectors[secondary])
        titles.append(title)
        raws.append("".join(parts).encode())
        chunks.append(doc_chunks)
    noise = rng.standard_normal((BLOCK, DIMENSION)).astype(np.float32) * (NOISE / np.sqrt(DIMENSION))
    return Block(titles, raws, chunks, unit(unit(np.stack(mixes)) + noise))


@dataclass(frozen=True)
class QuerySet:
    texts: list[str]
    vectors: np.ndarray
    common: list[bool]  # holds one of the corpus's 100 most frequent indexed terms (set per scale)


def make_queries(corpora: Sequence[RealCorpus], seed: int, count: int) -> QuerySet:
    """The real test queries of every dataset with their real vectors, shuffled, the first ``count``."""
    texts = [text for corpus in corpora for text in corpus.query_texts]
    vectors = np.concatenate([corpus.query_vectors for corpus in corpora])
    order = np.random.default_rng([seed, 2]).permutation(len(texts))[:count]
    return QuerySet([texts[i] for i in order], vectors[order], [False] * len(order))


def mark_common(url: str, queries: QuerySet) -> QuerySet:
    """Flag the queries holding one of the 100 terms found in most chunks (the longest postings lists)."""
    with psycopg.connect(url) as conn:
        top = {r[0] for r in conn.execute(
            "select lexeme from quarry.text_terms order by chunk_frequency desc limit 100").fetchall()}
        common = [bool(top & set(conn.execute("select quarry.query_lexemes(%s)", (text,)).fetchone()[0]))  # type: ignore[index]
                  for text in queries.texts]
    return QuerySet(queries.texts, queries.vectors, common)


# ---------------------------------------------------------------------------- loading


def scale_database(out: Path, label: str, *, fresh: bool) -> str:
    url = bench_database_url(out, f"bench_latency_{label}", fresh=fresh)
    try:
        ensure_migrated(url)
    except psycopg.Error as error:  # e.g. a working tree mid-edit: measure the schema the corpus has
        if fresh:
            raise
        print(f"  migrating failed ({error}); measuring the schema as stored (--fresh to reload)", flush=True)
    return url


def load_scale(url: str, corpora: Sequence[RealCorpus], seed: int, scale: int) -> dict[str, float]:
    """COPY the corpus in, then build BM25 postings and the HNSW index; seconds per step."""
    timings: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("truncate quarry.sources cascade")
        source_id = conn.execute("insert into quarry.sources (slug, display_name, kind) values (%s, %s, 'docs_site')"
                                 " returning id", (SOURCE, "Recombined SciFact + CoSQA")).fetchone()[0]  # type: ignore[index]
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
            block = make_block(corpora, seed, b)
            generation += time.perf_counter() - g
            copy_block(conn, block, source_id, space[0], b)  # type: ignore[index]
            print(f"  loaded {(b + 1) * BLOCK:>9,} chunks  {time.perf_counter() - started:7.1f} s", flush=True)
        timings["load_seconds"] = time.perf_counter() - started - generation
        timings["generate_seconds"] = generation

        conn.execute("set maintenance_work_mem = '4GB'")  # index builds sort in memory; the graph must fit
        started = time.perf_counter()
        conn.execute("select quarry.rebuild_text_index()")
        timings["postings_seconds"] = time.perf_counter() - started
        print(f"  BM25 postings {timings['postings_seconds']:.1f} s", flush=True)

        started = time.perf_counter()
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
                                " token_estimate, document_chunks) from stdin with (format binary)") as copy:
            copy.set_types(["uuid", "uuid", "int8", "int4", "text", "text", "text[]", "text",
                            "int4", "int4", "int4", "int4", "int4", "int4"])
            for doc_id, title, doc_chunks in zip(document_ids, block.titles, block.chunks, strict=True):
                for ordinal, (heading, content, first, last, start, end, tokens) in enumerate(doc_chunks):
                    chunk_id = uuid7()
                    chunk_ids.append(chunk_id)
                    copy.write_row((chunk_id, doc_id, source_id, ordinal, content, title, [title, heading],
                                    "markdown", first, last, start, end, tokens, len(doc_chunks)))
        with conn.cursor().copy(EMBEDDINGS_COPY) as copy:
            copy.set_types(EMBEDDINGS_COPY_TYPES)
            for chunk_id, vector in zip(chunk_ids, block.vectors, strict=True):
                copy.write_row((chunk_id, space, hashlib.sha256(vector.tobytes()).digest(), stored_vector(vector)))


def sizes(url: str) -> dict[str, int]:
    """Bytes on disk: the database, and each table (heap + TOAST) and index of the corpus."""
    with psycopg.connect(url) as conn:
        result = {"database": conn.execute("select pg_database_size(current_database())").fetchone()[0]}  # type: ignore[index]
        for name, kind, size in conn.execute(
            "select c.relname, c.relkind::text, case c.relkind when 'r' then pg_table_size(c.oid)"
            " else pg_relation_size(c.oid) end from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = 'quarry' and c.relkind in ('r', 'i')"
            " and c.relname ~ '^(documents|chunks|chunk_terms|embeddings|text_postings|text_posting_blocks|text_terms)'"
        ).fetchall():
            result[f"{'table' if kind == 'r' else 'index'}:{name}"] = int(size)
    return result


def storage_breakdown(url: str) -> dict[str, Any]:
    """Bytes on disk of every quarry.* table, split into heap, TOAST (with its index) and each index; per chunk too.

    Heap is the main fork with its free-space and visibility maps (``pg_table_size`` less TOAST).
    """
    with psycopg.connect(url) as conn:
        chunks = int(conn.execute("select count(*) from quarry.chunks").fetchone()[0])  # type: ignore[index]
        rows = conn.execute(
            "select c.relname, pg_table_size(c.oid) - coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),"
            " coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),"
            " coalesce((select json_object_agg(i.relname, pg_relation_size(i.oid) order by i.relname)"
            "           from pg_index x join pg_class i on i.oid = x.indexrelid where x.indrelid = c.oid), '{}'),"
            " pg_total_relation_size(c.oid)"
            " from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = 'quarry' and c.relkind = 'r' order by pg_total_relation_size(c.oid) desc").fetchall()
    per = max(chunks, 1)
    relations: dict[str, Any] = {}
    parts: dict[str, float] = {}
    for name, heap, toast, indexes, total in rows:
        relations[name] = {"heap": int(heap), "toast": int(toast),
                           "indexes": {index: int(size) for index, size in indexes.items()}, "total": int(total)}
        for part, size in (("heap", int(heap)), ("toast", int(toast)), *indexes.items()):
            if size:
                parts[f"{name}.{part}"] = round(int(size) / per, 1)
    total_bytes = sum(int(row[4]) for row in rows)
    return {"chunks": chunks, "total_bytes": total_bytes, "bytes_per_chunk": round(total_bytes / per, 1),
            "relation_bytes_per_chunk": {name: round(r["total"] / per, 1) for name, r in relations.items()},
            "part_bytes_per_chunk": parts, "relations": relations}


def print_storage(storage: dict[str, Any]) -> None:
    """Bytes per chunk of each table's heap, TOAST and indexes, largest first; tables under 1 % summed."""
    per = storage["chunks"] or 1
    print(f"  storage {storage['total_bytes'] / 2**20:,.0f} MiB, {storage['bytes_per_chunk']:,.0f} B per chunk:",
          flush=True)
    rest = 0
    for name, relation in storage["relations"].items():
        if relation["total"] < 0.01 * storage["total_bytes"]:
            rest += relation["total"]
            continue
        parts = [f"heap {relation['heap'] / per:,.0f}"] + ([f"toast {relation['toast'] / per:,.0f}"]
                                                           if relation["toast"] >= per else [])
        parts += [f"{index} {size / per:,.0f}" for index, size in relation["indexes"].items() if size >= per]
        print(f"    {name:16} {relation['total'] / per:7,.0f}  ({', '.join(parts)})", flush=True)
    print(f"    {'the other tables':16} {rest / per:7,.0f}", flush=True)


def loaded_chunks(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select count(*) from quarry.chunks c where exists"
                           " (select 1 from pg_indexes where indexname = 'embeddings_hnsw_text')").fetchone()
        return int(row[0]) if row else 0


# ---------------------------------------------------------------------------- measuring


def percentile(values: Sequence[float], fraction: float) -> float:
    return float(np.percentile(np.asarray(values), fraction * 100))


def database_search(pool: ConnectionPool, text: str, vector: np.ndarray, mode: SearchMode,
                    model: str | None) -> list[SearchHit]:
    """The pipeline's SQL step alone (``engine.retrieval.hits.search_hits``), at the request defaults."""
    return search_hits(pool, [text], mode=mode, limit=10, text_vectors=vector[None, :], code_mode=DEFAULT_CODE_MODE,
                       version_match=DEFAULT_VERSION_MATCH, query_model=model).hits


def run_query(pool: ConnectionPool, queries: QuerySet, i: int, mode: SearchMode, model: str | None) -> int:
    return len(database_search(pool, queries.texts[i], queries.vectors[i], mode, model))


def latencies(pool: ConnectionPool, queries: QuerySet, mode: SearchMode, model: str | None) -> dict[str, Any]:
    timings, empty = [], 0
    for i in range(len(queries.texts)):
        started = time.perf_counter()
        empty += run_query(pool, queries, i, mode, model) == 0
        timings.append((time.perf_counter() - started) * 1000)
    common = [t for t, c in zip(timings, queries.common, strict=True) if c]
    return {"n": len(timings), "p50": statistics.median(timings), "p95": percentile(timings, 0.95),
            "p99": percentile(timings, 0.99), "mean": statistics.fmean(timings), "max": max(timings),
            "empty_results": empty,
            "common_word_queries": {"n": len(common), "p50": statistics.median(common) if common else None,
                                    "p95": percentile(common, 0.95) if common else None}}


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of ``latencies`` as one: each figure the median over runs, the runs kept beside them.

    This machine's speed drifts by ±30 % over minutes with nothing else running (docs/BENCHMARKS.md),
    so one run is one sample of it.
    """
    if len(runs) == 1:
        return dict(runs[0])
    merged: dict[str, Any] = {key: statistics.median(run[key] for run in runs)
                              for key in ("p50", "p95", "p99", "mean", "max", "load_average")}
    merged["n"] = sum(run["n"] for run in runs)
    merged["empty_results"] = sum(run["empty_results"] for run in runs)
    common = [run["common_word_queries"] for run in runs]
    merged["common_word_queries"] = {"n": common[0]["n"], **{
        key: statistics.median(c[key] for c in common) if common[0][key] is not None else None
        for key in ("p50", "p95")}}
    merged["runs"] = [{"p50": run["p50"], "p95": run["p95"], "load_average": run["load_average"]} for run in runs]
    return merged


def throughput(url: str, queries: QuerySet, mode: SearchMode, clients: int, duration: float,
               model: str | None) -> dict[str, Any]:
    """Queries per second with ``clients`` threads, each on its own pooled connection, for ``duration`` s."""
    with open_pool(url, min_size=clients, max_size=clients, name=f"bench-{clients}") as pool:
        for i in range(clients * 2):
            run_query(pool, queries, i % len(queries.texts), mode, model)
        counts = [0] * clients
        timings: list[list[float]] = [[] for _ in range(clients)]
        barrier = threading.Barrier(clients + 1)
        deadline = [0.0]

        def client(k: int) -> None:
            barrier.wait()
            i = k * 7919
            while (now := time.perf_counter()) < deadline[0]:
                run_query(pool, queries, i % len(queries.texts), mode, model)
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
            "p50": statistics.median(every), "p95": percentile(every, 0.95), "load_average": load_average()[0]}


def corpus_vectors(url: str) -> tuple[list[Any], np.ndarray]:
    """Every chunk id and its vector, streamed (a million rows of Python objects would not fit twice)."""
    with psycopg.connect(url) as conn:
        register_vector(conn)
        total = conn.execute("select count(*) from quarry.embeddings where space = 'text'").fetchone()[0]  # type: ignore[index]
        ids: list[Any] = []
        matrix = np.empty((total, DIMENSION), dtype=np.float32)
        with conn.cursor(name="vectors") as cursor:
            cursor.itersize = 20_000
            cursor.execute("select chunk_id, embedding from quarry.embeddings where space = 'text'")
            for i, (chunk_id, embedding) in enumerate(cursor):
                ids.append(chunk_id)
                matrix[i] = embedding.to_numpy()
    return ids, matrix


def recall(url: str, pool: ConnectionPool, queries: QuerySet, count: int, model: str | None,
           depth: int = 50) -> dict[str, Any]:
    """Recall@10 of the SQL step (mode="vector", limit=10) against exact cosine top-10, and by hnsw.ef_search.

    The sweep reads what the vector leg reads, ``depth`` deep (the default candidates), its
    first 10: ``nearest_chunks``'s index scan at each ``hnsw.ef_search`` (the function itself
    sets the depth rule's value, ``quarry.hnsw_scan_depth``).
    """
    ids, matrix = corpus_vectors(url)
    sample = queries.vectors[:count]
    top: list[np.ndarray] = []
    for row in sample:  # one query at a time: a 100 x 1M similarity matrix is 400 MB
        similarities = matrix @ row  # unit vectors: cosine = dot
        best = np.argpartition(-similarities, 10)[:10]
        top.append(best[np.argsort(-similarities[best])])
        top[-1] = np.stack([top[-1], similarities[top[-1]]])
    exact = [{ids[int(j)] for j in pair[0]} for pair in top]
    found = []
    for i in range(count):
        hits = database_search(pool, queries.texts[i], sample[i], "vector", model)
        found.append(len(exact[i] & {hit.chunk_id for hit in hits}) / 10)
    with pool.connection() as conn:
        row = conn.execute("select quarry.hnsw_scan_depth(%s, quarry.indexed_vectors(array['text']))", (depth,)
                           ).fetchone()
    result: dict[str, Any] = {"queries": count, "recall_at_10": statistics.fmean(found), "min": min(found),
                              "ef_search_in_search": row[0] if row else None,  # quarry.hnsw_scan_depth
                              "nearest_neighbour_similarity": float(np.mean([pair[1][0] for pair in top])),
                              "tenth_neighbour_similarity": float(np.mean([pair[1][9] for pair in top]))}
    sweep = {}
    with pool.connection() as conn:
        space = conn.execute("select name, dimension from quarry.embedding_spaces where serves = 'text'").fetchone()
        assert space is not None
        # quarry.nearest_chunks's scan (same ORDER BY, so the same HNSW index), without the
        # hnsw.ef_search it sets for itself: here the sweep sets it
        scan = sql.SQL("select n.chunk_id from (select e.chunk_id, e.embedding::vector <=> %(q)s as distance"
                       " from quarry.embeddings e where e.space = {space}"
                       " order by (e.embedding::halfvec({dimension})) <=> %(q)s::halfvec({dimension})"
                       " limit %(depth)s) n order by n.distance limit 10").format(
            space=sql.Literal(space[0]), dimension=sql.Literal(space[1]))
        plan = "\n".join(row[0] for row in conn.execute(sql.SQL("explain ") + scan, {"q": sample[0], "depth": depth}))
        if "embeddings_hnsw_" not in plan:  # an exact scan would report recall 1.0 at every ef_search
            raise RuntimeError(f"the recall sweep's query no longer uses the HNSW index:\n{plan}")
        for ef in (50, 60, 100, 200, 400):
            with conn.transaction():
                conn.execute("select set_config('hnsw.ef_search', %s, true)", (str(ef),))
                conn.execute("select set_config('hnsw.iterative_scan', 'relaxed_order', true)")
                per = []
                for i in range(count):
                    rows = conn.execute(scan, {"q": sample[i], "depth": depth}).fetchall()
                    per.append(len(exact[i] & {r[0] for r in rows}) / 10)
            sweep[str(ef)] = statistics.fmean(per)
    result[f"nearest_chunks_depth_{depth}_first_10_by_ef_search"] = sweep
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
        rows = conn.execute("select name, current_setting(name) from pg_settings where name in"
                            " ('shared_buffers', 'work_mem', 'effective_cache_size', 'max_parallel_workers_per_gather',"
                            " 'server_version', 'jit')").fetchall()
        version = conn.execute("select extversion from pg_extension where extname = 'vector'").fetchone()
    return {**dict(rows), "pgvector": version[0] if version else "?"}


def prepared_database(args: argparse.Namespace, corpora: Sequence[RealCorpus],
                      scale: int) -> tuple[str, dict[str, Any]]:
    """DSN of the loaded corpus of ``scale`` chunks (loaded now unless a finished load of this generator exists)."""
    out: Path = args.out
    url = scale_database(out, str(scale), fresh=args.fresh)
    load_file = out / f"load-{scale}.json"
    if load_file.exists() and loaded_chunks(url) == scale:
        load = json.loads(load_file.read_text())
        if load.get("corpus_version") == CORPUS_VERSION and load.get("seed") == args.seed:
            print("  reusing the loaded corpus", flush=True)
            return url, load
    load = {"corpus_version": CORPUS_VERSION, "seed": args.seed, "load_average_before": load_average(),
            **load_scale(url, corpora, args.seed, scale)}
    load["sizes"] = sizes(url)
    load["load_average_after"] = load_average()
    load_file.write_text(json.dumps(load, indent=2))
    return url, load


def measure(url: str, queries: QuerySet, args: argparse.Namespace, model: str | None) -> dict[str, Any]:
    """Per-mode latency percentiles (one client), recall@10 when ``args.recall_queries``, QPS per client count."""
    report: dict[str, Any] = {"latency": {}, "throughput": {}, "load_average_before": load_average()}
    with open_pool(url, min_size=1, max_size=1, name="bench-latency") as pool:
        for mode in MODES:  # warm: every page the timed queries touch is read once before timing
            for i in range(len(queries.texts)):
                run_query(pool, queries, i, mode, model)
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for _ in range(args.repeat):  # modes take turns, so a drifting machine slows each alike
            for mode in MODES:
                lat = latencies(pool, queries, mode, model)
                lat["load_average"] = load_average()[0]
                runs[mode].append(lat)
                print(f"  {mode:7} p50 {lat['p50']:7.2f}  p95 {lat['p95']:7.2f}  p99 {lat['p99']:7.2f} ms"
                      f"  (load {lat['load_average']})", flush=True)
        for mode in MODES:
            report["latency"][mode] = median_run(runs[mode])
        if args.repeat > 1:
            for mode in MODES:
                lat = report["latency"][mode]
                print(f"  {mode:7} median of {args.repeat} runs: p50 {lat['p50']:7.2f}  p95 {lat['p95']:7.2f} ms",
                      flush=True)
        if args.recall_queries:
            report["recall"] = recall(url, pool, queries, min(args.recall_queries, len(queries.texts)), model)
            print(f"  recall@10 {report['recall']['recall_at_10']:.3f} (ef_search "
                  f"{report['recall']['ef_search_in_search']})  by ef_search "
                  f"{report['recall']['nearest_chunks_depth_50_first_10_by_ef_search']}", flush=True)
    for mode in MODES:
        report["throughput"][mode] = [throughput(url, queries, mode, n, args.duration, model) for n in args.clients]
        print(f"  {mode:7} QPS " + "  ".join(f"{t['clients']}: {t['qps']:.0f}" for t in report["throughput"][mode])
              + f"  (load {load_average()[0]})", flush=True)
    report["load_average_after"] = load_average()
    report["server"] = server_settings(url)
    report["schema"] = schema_state(url)
    report["schema"]["matches_working_tree"] = report["schema"].get("schema_fingerprint") == schema_fingerprint()
    return report


# ---------------------------------------------------------------------------- peers


def peer_rows(url: str) -> Iterator[tuple[str, str, Any]]:
    """Every chunk as the peers see it: id, the text Quarry's FTS indexes (headings + content), vector."""
    with psycopg.connect(url) as conn:
        register_vector(conn)
        with conn.cursor(name="peer_rows") as cursor:
            cursor.itersize = 20_000
            cursor.execute("select c.id::text, array_to_string(c.heading_path, ' ') || ' ' || c.content,"
                           " e.embedding::vector"
                           " from quarry.chunks c join quarry.embeddings e on e.chunk_id = c.id and e.space = 'text'")
            yield from cursor


def build_peer(peer: str, url: str, directory: Path, scale: int) -> dict[str, Any]:
    """Load one peer with the scale's chunks; seconds per step and bytes."""
    build: dict[str, Any] = {"chunks": scale, "load_average_before": load_average()}
    if peer == "lancedb":
        ids, texts, vectors = [], [], np.empty((scale, DIMENSION), dtype=np.float32)
        for i, (chunk_id, text, vector) in enumerate(peer_rows(url)):
            ids.append(chunk_id)
            texts.append(text)
            vectors[i] = vector.to_numpy()
        shutil.rmtree(directory, ignore_errors=True)
        _, timings = lancedb_table(directory, ids, texts, vectors, vector_index=LANCEDB_VECTOR_INDEX)
        sizes = {"total": sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())}
        for part in ("data", "_indices"):
            files = (directory / "documents.lance" / part).rglob("*")
            sizes[part] = sum(f.stat().st_size for f in files if f.is_file())
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("set maintenance_work_mem = '4GB'")  # as for Quarry's own index builds
            timings = build_supabase_tables(conn, peer_rows(url))
            sizes = {f"{'table' if kind == 'r' else 'index'}:{name}": int(size) for name, kind, size in conn.execute(
                "select c.relname, c.relkind::text, case c.relkind when 'r' then pg_table_size(c.oid)"
                " else pg_relation_size(c.oid) end from pg_class c join pg_namespace n on n.oid = c.relnamespace"
                " where n.nspname = %s and c.relkind in ('r', 'i')", (SCHEMA,)).fetchall()}
            sizes["total"] = sum(sizes.values())
    build.update(timings, seconds=sum(timings.values()), bytes=sizes, load_average_after=load_average())
    print(f"  {peer} built in {build['seconds']:.0f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
          + f"; {sizes['total'] / 2**20:,.0f} MiB (load {build['load_average_before'][0]} -> {load_average()[0]})",
          flush=True)
    return build


def prepared_peers(args: argparse.Namespace, url: str, scale: int, peers: Sequence[str],
                   load: dict[str, Any]) -> dict[str, Any]:
    """Each peer's copy of the scale's chunks, built now unless a build of this very corpus is recorded."""
    build_file = args.out / f"peer-builds-{scale}.json"
    builds: dict[str, Any] = json.loads(build_file.read_text()) if build_file.exists() else {}
    corpus = [load["corpus_version"], load["seed"], load.get("load_seconds")]  # a reload has other timings
    for peer in peers:
        if builds.get(peer, {}).get("corpus") == corpus and not args.fresh:
            print(f"  reusing the {peer} build", flush=True)
            continue
        builds[peer] = {"corpus": corpus, **build_peer(peer, url, args.out / f"lancedb-{scale}", scale)}
        build_file.write_text(json.dumps(builds, indent=2))
    return {peer: builds[peer] for peer in peers}


def compare_hybrid(url: str, queries: QuerySet, directory: Path, peers: Sequence[str]) -> dict[str, Any]:
    """Quarry hybrid and each peer's hybrid, one client, warm, limit 10, interleaved query by query."""
    report: dict[str, Any] = {"load_average_before": load_average()}
    with ExitStack() as stack:
        pool = stack.enter_context(open_pool(url, min_size=1, max_size=1, name="bench-peers"))
        runners: dict[str, Callable[[int], int]] = {"quarry": lambda i: run_query(pool, queries, i, "hybrid", MODEL)}
        if "lancedb" in peers:
            os.environ.setdefault("LANCEDB_LOG", "error")
            import lancedb
            from lancedb.rerankers import RRFReranker

            table, reranker = lancedb.connect(directory).open_table("documents"), RRFReranker()
            runners["lancedb"] = lambda i: len(lancedb_hybrid_ids(table, queries.texts[i], queries.vectors[i], 10,
                                                                  reranker))
        if "supabase" in peers:
            conn = stack.enter_context(psycopg.connect(url, autocommit=True))
            use_supabase_schema(conn)
            runners["supabase"] = lambda i: len(supabase_hybrid_ids(conn, queries.texts[i], queries.vectors[i], 10))
        names = list(runners)
        for i in range(len(queries.texts)):  # warm: every system reads what its timed queries touch once
            for name in names:
                runners[name](i)
        timings: dict[str, list[float]] = {name: [] for name in names}
        empty = dict.fromkeys(names, 0)
        for i in range(len(queries.texts)):
            for name in names[i % len(names):] + names[:i % len(names)]:  # nobody always goes first
                started = time.perf_counter()
                empty[name] += runners[name](i) == 0
                timings[name].append((time.perf_counter() - started) * 1000)
    quarry_p50, quarry_p95 = statistics.median(timings["quarry"]), percentile(timings["quarry"], 0.95)
    report["systems"] = {name: {
        "n": len(values), "p50": statistics.median(values), "p95": percentile(values, 0.95),
        "p99": percentile(values, 0.99), "mean": statistics.fmean(values), "empty_results": empty[name],
        "p50_ratio_to_quarry": statistics.median(values) / quarry_p50,
        "p95_ratio_to_quarry": percentile(values, 0.95) / quarry_p95} for name, values in timings.items()}
    report["load_average_after"] = load_average()
    for name, lat in report["systems"].items():
        print(f"  {name:9} hybrid p50 {lat['p50']:7.2f}  p95 {lat['p95']:7.2f}  p99 {lat['p99']:7.2f} ms"
              f"  x{lat['p50_ratio_to_quarry']:.2f}", flush=True)
    print(f"  (load {report['load_average_before'][0]} -> {report['load_average_after'][0]})", flush=True)
    return report


def benchmark_scale(args: argparse.Namespace, corpora: Sequence[RealCorpus],
                    scale: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The per-mode report (``quarry`` in ``--systems``) and the peer comparison (a peer in it)."""
    print(f"\n## {scale:,} chunks", flush=True)
    url, load = prepared_database(args, corpora, scale)
    peers = [system for system in args.systems if system in PEERS]
    builds = prepared_peers(args, url, scale, peers, load)
    storage = storage_breakdown(url)
    print_storage(storage)
    (args.out / f"storage-{scale}.json").write_text(json.dumps(storage, indent=2))
    if args.load_only:
        return None, None
    queries = mark_common(url, make_queries(corpora, args.seed, args.queries))
    report = ({"scale": scale, "load": load, "storage": storage, **measure(url, queries, args, MODEL)}
              if "quarry" in args.systems else None)
    directory = args.out / f"lancedb-{scale}"
    comparison = ({"scale": scale, "builds": builds, **compare_hybrid(url, queries, directory, peers)}
                  if peers else None)
    return report, comparison


def vector_search_layers(url: str, queries: QuerySet, rounds: int = 2) -> dict[str, float]:
    """Where a vector-mode search's time goes: each layer of the call stack as its own statement, p50 ms.

    Per query the layers run back to back (so drift slows each alike), after one untimed pass:
    a round trip, the vector leg alone, ``hybrid_search``, ``search_hits`` counted and returned,
    and ``search_hits()`` from Python. Each figure includes the ones before it.
    """
    layers: dict[str, Callable[[psycopg.Connection[Any], ConnectionPool, int], object]] = {
        "select 1": lambda conn, pool, i: conn.execute("select 1").fetchall(),
        "nearest_chunks": lambda conn, pool, i: conn.execute(
            "select count(*) from quarry.nearest_chunks('text', %b, 50)", (queries.vectors[i],)).fetchall(),
        "hybrid_search": lambda conn, pool, i: conn.execute(
            "select count(*) from quarry.hybrid_search(%s, %b, 'vector', 10)",
            ([queries.texts[i]], [queries.vectors[i]])).fetchall(),
        "search_hits, counted": lambda conn, pool, i: conn.execute(
            "select count(*) from quarry.search_hits(%s, %b, 'vector', 10)",
            ([queries.texts[i]], [queries.vectors[i]])).fetchall(),
        "search_hits, rows": lambda conn, pool, i: conn.execute(
            "select * from quarry.search_hits(%s, %b, 'vector', 10)",
            ([queries.texts[i]], [queries.vectors[i]])).fetchall(),
        "search_hits()": lambda conn, pool, i: run_query(pool, queries, i, "vector", None),
    }
    timings: dict[str, list[float]] = {name: [] for name in layers}
    with psycopg.connect(url, autocommit=True) as conn, \
            open_pool(url, min_size=1, max_size=1, name="bench-layers") as pool:
        register_vector(conn)
        for round_index in range(rounds + 1):  # the first round only warms
            for i in range(len(queries.texts)):
                for name, layer in layers.items():
                    started = time.perf_counter()
                    layer(conn, pool, i)
                    if round_index:
                        timings[name].append((time.perf_counter() - started) * 1000)
    report = {name: statistics.median(values) for name, values in timings.items()}
    print("  vector-mode layers, p50 ms: " + ", ".join(f"{name} {ms:.2f}" for name, ms in report.items()),
          flush=True)
    return report


def benchmark_ingested(args: argparse.Namespace, corpora: Sequence[RealCorpus], name: str) -> dict[str, Any]:
    """A corpus bench/quality.py ingested (chunked and embedded by Quarry), with its real test queries."""
    from bench.quarry_system import dataset_database_url

    corpus = next(corpus for corpus in corpora if corpus.name == name)
    url = dataset_database_url(args.quality_home, name)
    with psycopg.connect(url) as conn:
        counts = conn.execute("select (select count(*) from quarry.documents), (select count(*) from quarry.chunks)"
                              ).fetchone()
    print(f"\n## {name} as ingested: {counts[0]:,} documents, {counts[1]:,} chunks", flush=True)  # type: ignore[index]
    queries = mark_common(url, QuerySet(corpus.query_texts, corpus.query_vectors, []))
    args.recall_queries, args.clients = len(queries.texts), [1]  # recall over every test query
    report = {"scale": name, "documents": counts[0], "chunks": counts[1],  # type: ignore[index]
              **measure(url, queries, args, None)}
    if args.layers:
        report["vector_search_layers_p50_ms"] = vector_search_layers(url, queries)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder holding the BEIR datasets")
    parser.add_argument("--quality-home", type=Path, default=QUALITY_HOME,
                        help="bench/quality.py's --home: its vectors cache, and the databases --scifact / --cosqa read")
    parser.add_argument("--vectors", type=Path, default=None,
                        help="bench/quality.py's cache of the datasets' real MiniLM vectors"
                             " (default <quality-home>/vectors)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--recall-queries", type=int, default=200)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per throughput run")
    parser.add_argument("--repeat", type=int, default=1,
                        help="latency runs per mode, modes taking turns; figures are the medians over runs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fresh", action="store_true", help="drop and reload every scale")
    parser.add_argument("--load-only", action="store_true", help="load and index the scales, measure nothing")
    parser.add_argument("--scifact", action="store_true",
                        help="also measure the SciFact database bench/quality.py ingested (one client)")
    parser.add_argument("--cosqa", action="store_true",
                        help="also measure the CoSQA database bench/quality.py ingested (one client)")
    parser.add_argument("--layers", action="store_true",
                        help="with --scifact / --cosqa: also time each layer of a vector-mode search")
    parser.add_argument("--systems", nargs="+", choices=("quarry", *PEERS), default=["quarry"],
                        help="quarry: every mode, QPS, recall; a peer: its hybrid against Quarry's, interleaved")
    parser.add_argument("--plot", type=Path, default=None, help="also draw the results (e.g. docs/latency.png)")
    args = parser.parse_args()
    if any(scale % BLOCK for scale in args.scales):
        parser.error(f"scales must be multiples of {BLOCK}")
    args.out.mkdir(parents=True, exist_ok=True)
    corpora = read_corpora(args.data, args.vectors or args.quality_home / "vectors")
    command = "python -m bench.latency " + " ".join(map(str, sys.argv[1:]))
    for scale in args.scales:
        for prefix, report in zip(("results", "peers"), benchmark_scale(args, corpora, scale), strict=True):
            if report is not None:
                report.update(date=datetime.now(UTC).isoformat(timespec="seconds"), machine=machine(),
                              seed=args.seed, command=command)
                (args.out / f"{prefix}-{scale}.json").write_text(json.dumps(report, indent=2, default=str))
    for name in (name for name in DATASETS if getattr(args, name)):
        report = benchmark_ingested(args, corpora, name)
        report.update(date=datetime.now(UTC).isoformat(timespec="seconds"), machine=machine(), command=command)
        (args.out / f"{name}.json").write_text(json.dumps(report, indent=2, default=str))
    if args.plot is not None:
        from bench.latency_plot import plot_results

        plot_results(args.out, args.plot)


if __name__ == "__main__":
    main()
