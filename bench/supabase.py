"""The Supabase-style peer: Supabase's documented ``hybrid_search`` SQL on the bench's own Postgres.

Lives in its own schema of the dataset's database (rebuilt each run, loaded with COPY) next to
Quarry's tables, so both run on the same server, with the same vectors. The function is used as
published, including its cap of 30 results (``least(match_count, 30)``), so its R@100 is really
R@30, and its full-text leg ``websearch_to_tsquery``, which ANDs every query term. Its two
indexes are the published ones, built after the COPY (the same indexes, built once instead of
row by row).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg import sql

from bench.beir import Document, Query
from bench.runs import SystemRun, top_documents
from engine.embed.base import Vectors

SCHEMA = "supabase_peer"
SQL_FILE = Path(__file__).resolve().parent / "supabase_hybrid_search.sql"


def use_supabase_schema(conn: psycopg.Connection[Any]) -> None:
    """Point ``conn`` at the peer's schema, the way a Supabase project would see it."""
    conn.execute(sql.SQL("set search_path to {}, public").format(sql.Identifier(SCHEMA)))
    # Supabase projects run with the english text search configuration by default, which the
    # function's one-argument websearch_to_tsquery relies on.
    conn.execute("set default_text_search_config = 'pg_catalog.english'")
    register_vector(conn)


def build_supabase_tables(conn: psycopg.Connection[Any], rows: Iterable[tuple[str, str, Any]]) -> dict[str, float]:
    """(Re)create the schema from the published SQL and COPY ``(id, content, embedding)`` rows in; seconds per step.

    ``conn`` must be in autocommit mode; it is left pointing at the schema.
    """
    timings: dict[str, float] = {}
    conn.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL("create schema {}").format(sql.Identifier(SCHEMA)))
    use_supabase_schema(conn)
    conn.execute(SQL_FILE.read_text(encoding="utf-8"))
    definitions = conn.execute(
        "select indexname, indexdef from pg_indexes where schemaname = %s and tablename = 'documents'"
        " and indexname <> 'documents_pkey'", (SCHEMA,)).fetchall()
    for name, _ in definitions:
        conn.execute(sql.SQL("drop index {}").format(sql.Identifier(name)))
    started = time.perf_counter()
    with conn.transaction(), conn.cursor().copy(
        "copy documents (id, content, embedding) from stdin with (format binary)"
    ) as copy:
        copy.set_types(["text", "text", "vector"])
        for row in rows:
            copy.write_row(row)
    timings["load_seconds"] = time.perf_counter() - started
    for _, definition in definitions:
        started = time.perf_counter()
        conn.execute(definition)
        timings[f"{'hnsw' if ' hnsw ' in definition else 'gin'}_index_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    conn.execute("analyze documents")
    timings["analyze_seconds"] = time.perf_counter() - started
    return timings


def supabase_hybrid_ids(conn: psycopg.Connection[Any], text: str, vector: np.ndarray, count: int) -> list[str]:
    """``hybrid_search(text, vector, count)`` as published: the ids, best first (at most 30)."""
    rows = conn.execute("select id from hybrid_search(%s, %s, %s)", (text, Vector(vector), count)).fetchall()
    return [str(row[0]) for row in rows]


def supabase_hybrid_run(
    url: str,
    documents: Sequence[Document],
    document_vectors: Vectors,
    queries: Sequence[Query],
    query_vectors: Vectors,
    depth: int,
) -> SystemRun:
    result = SystemRun("Supabase hybrid_search (SQL)")
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        build_supabase_tables(conn, ((d.id, d.full_text, v) for d, v in zip(documents, document_vectors, strict=True)))
        result.index_seconds = time.perf_counter() - started

        started = time.perf_counter()
        for query, vector in zip(queries, query_vectors, strict=True):
            result.run[query.id] = top_documents(supabase_hybrid_ids(conn, query.text, vector, depth), depth)
        result.search_seconds = time.perf_counter() - started
        row = conn.execute(
            "select count(*) from unnest(%s::text[]) as q (query_text)"
            " where not exists (select 1 from documents where fts @@ websearch_to_tsquery(q.query_text))",
            ([query.text for query in queries],),
        ).fetchone()
        empty_text_leg = int(row[0]) if row else 0
    result.notes.append(
        f"returns at most 30 rows (R@100 is R@30); full-text leg empty for {empty_text_leg}/{len(queries)} queries"
    )
    return result
