"""Re-embed a space with another model while searches keep using the old vectors.

``quarry reembed --space code`` (after changing ``QUARRY_CODE_MODEL``) fills a new
generation of the space (``code_g2``) in committed batches, so an interrupted run
resumes where it stopped; searches go on reading the serving generation. When every
chunk the space covers has a new vector, one short transaction makes the new
generation serve (``quarry.switch_space_generation``), and the old one is dropped.
Chunks an ingest adds meanwhile are picked up before the switch: the switch checks,
under a lock that holds off chunk writes, that nothing is missing.

Each run is recorded as a job (kind ``reembed``, ``engine.admin.jobs``); a cancel stops it
between batches, leaving the new generation to be finished by a retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.embed.base import CODE_SPACE, Embedder
from engine.ingest.batch import (
    EMBEDDINGS_COPY,
    EMBEDDINGS_COPY_TYPES,
    chunk_embedding_input,
    input_hash,
    stored_vector,
)

BATCH_CHUNKS = 256

#: Chunks a space covers that still lack a vector in ``generation`` (the code space holds code only).
_MISSING = """
    select c.id, d.title, c.heading_path, c.symbol_path, c.content
    from quarry.chunks c join quarry.documents d on d.id = c.document_id
    where (%(space)s <> %(code)s or c.is_code)
      and not exists (select 1 from quarry.embeddings e where e.chunk_id = c.id and e.space = %(generation)s)
    order by c.id
    limit %(limit)s
"""


@dataclass(slots=True)
class ReembedSummary:
    space: str
    model: str
    generation: str
    replaced: str | None = None
    embedded: int = 0
    seconds: float = 0.0
    already_current: bool = False

    def one_line(self) -> str:
        if self.already_current:
            return f"quarry: space {self.space!r} is already embedded with {self.model}; nothing to do"
        return (f"quarry: space {self.space!r} now served by {self.generation} ({self.model}): "
                f"{self.embedded} chunks embedded in {self.seconds:.1f} s; {self.replaced} dropped")


def reembed_space(
    pool: ConnectionPool,
    space: str,
    embedder: Embedder,
    *,
    batch_chunks: int = BATCH_CHUNKS,
    progress: Callable[[int], None] | None = None,
    job: JobRun | None = None,
) -> ReembedSummary:
    """Fill a new generation of ``space`` with ``embedder``'s vectors and make it serve; ``job``: a claimed job."""
    with job or JobRun.create(pool, "reembed", None, {"space": space}) as run:
        run.start()

        def batch_done(embedded: int) -> None:
            if progress is not None:
                progress(embedded)
            run.progress({"embedded": embedded})  # stops here when cancelled

        summary = _reembed(pool, space, embedder, batch_chunks, batch_done)
        run.succeed({"embedded": summary.embedded, "already_current": int(summary.already_current)})
    return summary


def _reembed(
    pool: ConnectionPool, space: str, embedder: Embedder, batch_chunks: int, progress: Callable[[int], None]
) -> ReembedSummary:
    started = time.perf_counter()
    with pool.connection() as conn:
        row = conn.execute("select model, dimension from quarry.embedding_spaces where serves = %s",
                           (space,)).fetchone()
        if row is not None and (row[0], row[1]) == (embedder.model_name, embedder.dimension):
            return ReembedSummary(space, embedder.model_name, space, already_current=True)
        generation_row = conn.execute("select quarry.begin_space_generation(%s, %s, %s)",
                                      (space, embedder.model_name, embedder.dimension)).fetchone()
    assert generation_row is not None
    summary = ReembedSummary(space, embedder.model_name, str(generation_row[0]))
    while True:
        while _fill_batch(pool, space, summary, embedder, batch_chunks):
            progress(summary.embedded)
        with pool.connection() as conn, conn.transaction():
            # SHARE mode holds off ingestion's chunk writes (not searches) for this short check
            conn.execute("lock table quarry.chunks in share mode")
            if _missing(conn, space, summary.generation, 1):
                continue  # an ingest added chunks meanwhile: embed them too
            replaced = conn.execute("select quarry.switch_space_generation(%s, %s)",
                                    (space, summary.generation)).fetchone()
        break
    summary.replaced = str(replaced[0]) if replaced is not None else None
    with pool.connection() as conn, conn.transaction():
        conn.execute("select quarry.drop_embedding_space(%s)", (summary.replaced,))
    summary.seconds = time.perf_counter() - started
    return summary


def _missing(conn: Connection[Any], space: str, generation: str, limit: int) -> list[tuple[Any, ...]]:
    return conn.execute(_MISSING, {"space": space, "code": CODE_SPACE, "generation": generation,
                                   "limit": limit}).fetchall()


def _fill_batch(
    pool: ConnectionPool, space: str, summary: ReembedSummary, embedder: Embedder, batch_chunks: int
) -> bool:
    """Embed and store one batch of missing chunks; False when none are left."""
    with pool.connection() as conn:
        rows = _missing(conn, space, summary.generation, batch_chunks)
    if not rows:
        return False
    inputs = [chunk_embedding_input(title, headings, symbol, content) for _, title, headings, symbol, content in rows]
    vectors = embedder.embed_documents(inputs)
    try:
        with pool.connection() as conn, conn.transaction(), conn.cursor().copy(EMBEDDINGS_COPY) as copy:
            copy.set_types(EMBEDDINGS_COPY_TYPES)
            for (chunk_id, *_), text, vector in zip(rows, inputs, vectors, strict=True):
                copy.write_row((chunk_id, summary.generation, input_hash(text), stored_vector(vector)))
    except psycopg.errors.ForeignKeyViolation:
        return True  # an ingest replaced some of these chunks meanwhile: read the batch again
    summary.embedded += len(rows)
    return True
