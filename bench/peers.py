"""The peers run in-process: bm25s (BM25 reference), exact dense cosine, and LanceDB hybrid.

Each is set up the way its documentation shows, with its defaults; all of them see the same
document texts (title + " " + text, BEIR's convention) and the same MiniLM vectors.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.beir import Document, Query
from bench.runs import SystemRun, top_documents
from engine.embed.base import Vectors

_CAMEL_CASE = re.compile(r"([a-z0-9])([A-Z])")
_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")


def split_identifiers(text: str) -> str:
    """``parseHTTPResponse_code`` -> ``parse HTTP Response code``: the words Quarry's FTS sees in identifiers.

    Mirrors ``quarry.identifier_words`` (camelCase and acronym boundaries) plus the underscore
    splitting Postgres's text parser does; dots and other punctuation already separate bm25s tokens.
    """
    return _ACRONYM.sub(r"\1 \2", _CAMEL_CASE.sub(r"\1 \2", text)).replace("_", " ")


def bm25s_run(
    documents: Sequence[Document], queries: Sequence[Query], depth: int, *, code_words: bool = False
) -> SystemRun:
    """bm25s defaults (Lucene BM25, k1=1.5, b=0.75) with English stopwords and the Snowball stemmer.

    ``code_words`` splits identifiers first (for code corpora): bm25s's tokenizer keeps
    ``read_file`` and ``readFile`` whole, so a query saying "read file" would miss them.
    """
    import bm25s  # type: ignore[import-untyped]
    import Stemmer  # type: ignore[import-not-found]

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs index building at DEBUG
    result = SystemRun("bm25s (BM25, identifiers split)" if code_words else "bm25s (BM25)")
    prepare = split_identifiers if code_words else str
    stemmer = Stemmer.Stemmer("english")
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([prepare(d.full_text) for d in documents], stopwords="en", stemmer=stemmer,
                       show_progress=False),
        show_progress=False,
    )
    result.index_seconds = time.perf_counter() - started

    started = time.perf_counter()
    tokens = bm25s.tokenize([prepare(q.text) for q in queries], stopwords="en", stemmer=stemmer, show_progress=False)
    found, scores = retriever.retrieve(tokens, k=min(depth, len(documents)), show_progress=False, n_threads=1)
    for row, query in enumerate(queries):
        # bm25s pads with score-0 rows when fewer documents match than k: those are not retrieved.
        result.run[query.id] = [documents[int(i)].id for i, s in zip(found[row], scores[row], strict=True) if s > 0]
    result.search_seconds = time.perf_counter() - started
    return result


def exact_dense_run(
    documents: Sequence[Document], document_vectors: Vectors, queries: Sequence[Query], query_vectors: Vectors,
    depth: int,
) -> SystemRun:
    """Brute-force cosine (the vectors are normalised, so a dot product) over whole documents."""
    result = SystemRun("dense (exact cosine)")
    started = time.perf_counter()
    similarities = query_vectors @ document_vectors.T
    for row, query in enumerate(queries):
        top = np.argpartition(-similarities[row], min(depth, len(documents) - 1))[:depth]
        order = top[np.lexsort((top, -similarities[row, top]))]  # by similarity, ties by position
        result.run[query.id] = [documents[int(i)].id for i in order]
    result.search_seconds = time.perf_counter() - started
    return result


def lancedb_table(
    directory: Path, ids: Sequence[str], texts: Sequence[str], vectors: Vectors, *, vector_index: str | None = None,
) -> tuple[Any, dict[str, float]]:
    """A LanceDB table of ``ids``/``texts``/``vectors`` with its native FTS index (default tokenizer).

    Without ``vector_index`` the vector leg scans every row (flat, LanceDB's default); with it
    (e.g. ``"IVF_HNSW_SQ"``), that index is built with its defaults. Returns seconds per step.
    """
    # Its Rust logger warns on every query that `_score`/`_distance` will stop being auto-selected.
    os.environ.setdefault("LANCEDB_LOG", "error")
    import lancedb
    import pyarrow as pa  # type: ignore[import-untyped]

    timings: dict[str, float] = {}
    started = time.perf_counter()
    table = lancedb.connect(directory).create_table(
        "documents",
        data=pa.table({
            "id": pa.array(ids, pa.string()),
            "text": pa.array(texts, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(np.float32).ravel()), vectors.shape[1]),
        }),
        mode="overwrite",
    )
    timings["load_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    table.create_fts_index("text", replace=True)
    timings["fts_index_seconds"] = time.perf_counter() - started
    if vector_index is not None:
        started = time.perf_counter()
        table.create_index(vector_column_name="vector", index_type=vector_index)  # type: ignore[call-overload]
        timings["vector_index_seconds"] = time.perf_counter() - started
    return table, timings


def lancedb_hybrid_ids(table: Any, text: str, vector: np.ndarray, limit: int, reranker: Any) -> list[str]:
    """LanceDB's documented hybrid query (FTS + vector, ``reranker`` fuses): the ids, best first."""
    rows = (
        table.search(query_type="hybrid").vector(vector.tolist()).text(text).rerank(reranker).limit(limit)
        .select(["id"]).to_list()
    )
    return [str(row["id"]) for row in rows]


def lancedb_hybrid_run(
    directory: Path,
    documents: Sequence[Document],
    document_vectors: Vectors,
    queries: Sequence[Query],
    query_vectors: Vectors,
    depth: int,
) -> SystemRun:
    """LanceDB's documented hybrid query: native FTS index (default tokenizer) + flat vector search, RRF (k=60)."""
    os.environ.setdefault("LANCEDB_LOG", "error")  # before lancedb's first import, see lancedb_table
    from lancedb.rerankers import RRFReranker

    result = SystemRun("LanceDB hybrid (FTS + vector, RRF)")
    started = time.perf_counter()
    table, _ = lancedb_table(directory, [d.id for d in documents], [d.full_text for d in documents], document_vectors)
    result.index_seconds = time.perf_counter() - started

    reranker = RRFReranker()
    started = time.perf_counter()
    for query, vector in zip(queries, query_vectors, strict=True):
        ids = lancedb_hybrid_ids(table, query.text, vector, depth, reranker)
        result.run[query.id] = top_documents(ids, depth)
    result.search_seconds = time.perf_counter() - started
    return result
