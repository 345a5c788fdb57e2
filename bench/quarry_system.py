"""Quarry under test: a dedicated database per dataset, filled by the real ingestion pipeline.

The documents are written as files (``<_id>.md`` holding ``# title`` and the text; code corpora
as ``<_id>.py`` so the code parser chunks them along symbols) and ingested like any user's tree.
The pipeline is incremental, so a rerun only re-checks hashes. Searches go through
the retrieval pipeline MCP serves (``bench.pipeline``); chunk hits become documents by path stem,
each at its best chunk's rank.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from bench.beir import Document
from bench.pipeline import bench_backend
from bench.runs import SystemRun
from bench.tasks import Corpus, Task
from engine.embed.base import SPACES, Embedder, Vectors
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.ingest.summary import IngestSummary
from engine.retrieval.pipeline import retrieve
from engine.retrieval.request import SearchMode, SearchRequest
from engine.store.db import embedded_database_url
from engine.store.migrations import ensure_migrated

#: Datasets whose documents are source code, and the file extension that routes them to their parser.
CODE_SUFFIX = {"cosqa": ".py"}


def bench_database_url(home: Path, name: str, *, fresh: bool = False) -> str:
    """DSN of database ``name`` on the bench's embedded server under ``home`` (created on demand, not migrated).

    ``fresh`` drops it first.
    """
    server_url = embedded_database_url(home)  # boots the server under home/pgdata
    with psycopg.connect(server_url, autocommit=True) as conn:
        if fresh:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    return psycopg.conninfo.make_conninfo(server_url, dbname=name)


def dataset_database_url(home: Path, dataset: str, *, fresh: bool = False) -> str:
    """DSN of database ``bench_<dataset>`` on the bench's embedded server (created and migrated on demand).

    ``fresh`` drops it first, so everything is ingested and embedded again with the current code.
    """
    url = bench_database_url(home, f"bench_{dataset}", fresh=fresh)
    ensure_migrated(url)
    return url


def schema_state(url: str) -> dict[str, str]:
    """Which Quarry schema the numbers were measured on (the search SQL changes as the engine evolves)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "select fingerprint, migrated_at::text, current_setting('server_version'),"
            " (select extversion from pg_extension where extname = 'vector') from quarry.schema_state"
        ).fetchone()
    if row is None:
        return {}
    return {"schema_fingerprint": row[0], "migrated_at": row[1], "postgres": row[2], "pgvector": row[3]}


def document_file(document: Document, suffix: str) -> tuple[str, str]:
    """File name and content representing one BEIR document."""
    if suffix == ".md":
        body = f"# {document.title}\n\n{document.text}\n" if document.title else f"{document.text}\n"
        return f"{document.id}.md", body
    return f"{document.id}{suffix}", document.text


def ingest_dataset(
    pool: ConnectionPool, embedder: Embedder, dataset: str, documents: Sequence[Document]
) -> IngestSummary:
    suffix = CODE_SUFFIX.get(dataset, ".md")
    with tempfile.TemporaryDirectory(prefix=f"quarry-bench-{dataset}-") as directory:
        root = Path(directory)
        for document in documents:
            name, content = document_file(document, suffix)
            (root / name).write_text(content, encoding="utf-8")
        ingestor = Ingestor(pool, {"text": embedder}, max_file_bytes=2_000_000)
        return ingestor.ingest(root, SourceSpec(slug=dataset), wait_for_lock=True)


def ingest_corpus(pool: ConnectionPool, embedder: Embedder, corpus: Corpus) -> IngestSummary:
    """Ingest a task's corpus as ``quarry ingest`` does with the local default: both spaces, one model."""
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, embedder), max_file_bytes=2_000_000)
    return ingestor.ingest(corpus.root, SourceSpec(slug=corpus.slug, kind=corpus.kind), wait_for_lock=True)


def quarry_run(
    pool: ConnectionPool,
    model_name: str,
    query_vectors: Vectors,
    task: Task,
    mode: SearchMode,
    depth: int,
    chunk_depth: int,
) -> SystemRun:
    """Rank ``chunk_depth`` chunks per query (both legs ``chunk_depth`` deep) into ``depth`` documents.

    Documents are ranked by the engine's own rule (``group_by="document"``, ``engine.retrieval.grouping``),
    as ``quarry eval``, ``query_documents`` and ``advanced_search`` rank them.

    ``query_vectors`` holds one precomputed vector per query of the task, in order (fts mode ignores
    them); a task of several corpora searches each query in its own (a ``source_slug`` filter).
    """
    result = SystemRun(f"Quarry {mode}")
    started = time.perf_counter()
    short = 0
    backend = bench_backend(pool, model_name, [query.text for query in task.queries], query_vectors)
    several = len(task.corpora) > 1
    for query in task.queries:
        sources = (task.corpus_of[query.id],) if several else ()
        retrieval = retrieve(backend, SearchRequest((query.text,), mode, limit=depth, rerank=False, sources=sources,
                                                    group_by="document", chunk_depth=chunk_depth))
        if retrieval.degradation.degraded:
            raise RuntimeError(f"degraded search: {'; '.join(retrieval.degradation.reasons)}")
        result.run[query.id] = [document.best.hit.path for document in retrieval.documents or ()]
        short += len(result.run[query.id]) < depth and len(retrieval.hits) == chunk_depth
    result.search_seconds = time.perf_counter() - started
    if short:
        result.notes.append(f"{short} queries filled fewer than {depth} documents from {chunk_depth} chunks")
    return result
