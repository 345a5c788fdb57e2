"""The Supabase-style peer: Supabase's documented ``hybrid_search`` SQL on the bench's own Postgres.

Lives in its own schema of the dataset's database (rebuilt each run, loaded with COPY) next to
Quarry's tables, so both run on the same server, with the same vectors. The function is used as
published, including its cap of 30 results (``least(match_count, 30)``), so its R@100 is really
R@30, and its full-text leg ``websearch_to_tsquery``, which ANDs every query term.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg import sql

from bench.beir import Document, Query
from bench.runs import SystemRun, top_documents
from engine.embed.base import Vectors

SCHEMA = "supabase_peer"
SQL_FILE = Path(__file__).resolve().parent / "supabase_hybrid_search.sql"


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
        conn.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("create schema {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("set search_path to {}, public").format(sql.Identifier(SCHEMA)))
        # Supabase projects run with the english text search configuration by default, which the
        # function's one-argument websearch_to_tsquery relies on.
        conn.execute("set default_text_search_config = 'pg_catalog.english'")
        register_vector(conn)
        conn.execute(SQL_FILE.read_text(encoding="utf-8"))
        with conn.transaction(), conn.cursor().copy(
            "copy documents (id, content, embedding) from stdin with (format binary)"
        ) as copy:
            copy.set_types(["text", "text", "vector"])
            for document, vector in zip(documents, document_vectors, strict=True):
                copy.write_row((document.id, document.full_text, vector))
        conn.execute("analyze documents")
        result.index_seconds = time.perf_counter() - started

        started = time.perf_counter()
        for query, vector in zip(queries, query_vectors, strict=True):
            rows = conn.execute(
                "select id from hybrid_search(%s, %s, %s)", (query.text, Vector(vector), depth)
            ).fetchall()
            result.run[query.id] = top_documents((str(row[0]) for row in rows), depth)
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
