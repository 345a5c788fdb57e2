"""Searches in tests go through the one retrieval pipeline, as every surface does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import CODE_SPACE, TEXT_SPACE, Embedder
from engine.retrieval.hits import SearchHit
from engine.retrieval.pipeline import Retrieval, retrieve
from engine.retrieval.request import Ranking, SearchRequest
from tests.mcp_harness import StaticBackend

_RANKING = {"fusion", "vector_weight", "code_vector_weight", "rrf_k", "candidates"}


def search_outcome(pool: ConnectionPool, embedder: Embedder | None, queries: str | Sequence[str], *,
                   code_embedder: Embedder | None = None, **arguments: Any) -> Retrieval:
    """``retrieve`` with ``embedder`` for the text space and ``code_embedder`` (else ``embedder``) for code.

    Keyword arguments are ``SearchRequest``'s, plus ``Ranking``'s overrides; ``sources`` may be a list.
    """
    embedders = {space: model for space, model in ((TEXT_SPACE, embedder), (CODE_SPACE, code_embedder or embedder))
                 if model is not None}
    ranking = Ranking(**{name: arguments.pop(name) for name in _RANKING & set(arguments)})
    if "sources" in arguments:
        arguments["sources"] = tuple(arguments["sources"] or ())
    texts = (queries,) if isinstance(queries, str) else tuple(queries)
    backend = StaticBackend(Settings(database_url="postgresql://unused"), pool, embedders)
    return retrieve(backend, SearchRequest(texts, ranking=ranking, **arguments))


def search(pool: ConnectionPool, embedder: Embedder | None, queries: str | Sequence[str], **arguments: Any
           ) -> list[SearchHit]:
    """The hits of a search that must not degrade."""
    outcome = search_outcome(pool, embedder, queries, **arguments)
    assert not outcome.degradation.degraded, outcome.degradation.reasons
    return [ranked.hit for ranked in outcome.hits]
