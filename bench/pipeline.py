"""Benchmarks search through the retrieval pipeline MCP serves, with query vectors embedded once per dataset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder, Vectors
from engine.embed.precomputed import PrecomputedQueries
from engine.rerank.base import Reranker
from engine.retrieval.hits import SearchHit
from engine.retrieval.pipeline import retrieve
from engine.retrieval.request import Ranking, SearchMode, SearchRequest


@dataclass
class BenchBackend:
    """The pipeline's backend over a bench database: its pool, precomputed query vectors, no reranker."""

    pool: ConnectionPool
    embedders: Mapping[str, Embedder]
    settings: Settings = field(default_factory=lambda: Settings(database_url="postgresql://bench"))
    reranker: Reranker | None = None


def bench_backend(pool: ConnectionPool, model_name: str, texts: Sequence[str], vectors: Vectors) -> BenchBackend:
    """Every space answered by one precomputed model, as the local default serves both."""
    queries = PrecomputedQueries(model_name, list(texts), vectors)
    return BenchBackend(pool, dict.fromkeys(SPACES, queries))


def ranked_chunks(backend: BenchBackend, text: str, mode: SearchMode, depth: int,
                  ranking: Ranking | None = None, sources: tuple[str, ...] = ()) -> list[SearchHit]:
    """The first ``depth`` chunks for one query, both legs as deep; a degraded search is an error, not a figure."""
    retrieval = retrieve(backend, SearchRequest((text,), mode, limit=depth, rerank=False, sources=sources,
                                                ranking=ranking or Ranking(), per_document=None))
    if retrieval.degradation.degraded:
        raise RuntimeError(f"degraded search: {'; '.join(retrieval.degradation.reasons)}")
    return [ranked.hit for ranked in retrieval.hits]
