"""What the tools need from a running Quarry: settings, a connection pool, query embedders, a reranker.

``engine.runtime.Runtime`` is the real one; anything with the same attributes works
(tests serve a pool they already opened, or an embedder that fails on purpose).

A backend may also have ``replicas`` (an ``engine.store.replicas.ReplicaSet``, or None): then the
server runs each read-only tool on a ``ReadRoute``, the same backend with a replica's pool,
while API-key checks, rate limits and every tool that writes keep the primary's ``pool``.
And a ``database_keeper`` (an ``engine.runtime.EmbeddedServerKeeper``, or None): while it restarts
an embedded database that went away, the server answers calls with UNAVAILABLE at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import Embedder
from engine.rerank.base import Reranker
from engine.retrieval.pipeline import RetrievalBackend
from engine.runtime import EmbeddedServerKeeper
from engine.store.replicas import ReplicaSet


class Backend(RetrievalBackend, Protocol):
    """What the tools need: exactly what retrieval needs (settings, pool, embedders, reranker)."""


@dataclass(frozen=True, slots=True)
class ReadRoute:
    """``primary`` as a read-only tool sees it when a replica serves the call: only the pool differs."""

    primary: Backend
    pool: ConnectionPool

    @property
    def settings(self) -> Settings:
        return self.primary.settings

    @property
    def embedders(self) -> Mapping[str, Embedder]:
        return self.primary.embedders

    @property
    def reranker(self) -> Reranker | None:
        return self.primary.reranker


def replicas_of(backend: Backend) -> ReplicaSet | None:
    """The backend's read replicas: None when it has none (no ``READ_DATABASE_URLS``, or a test backend)."""
    if isinstance(backend, ReadRoute):
        backend = backend.primary
    replicas = getattr(backend, "replicas", None)
    return replicas if isinstance(replicas, ReplicaSet) else None


def database_keeper_of(backend: Backend) -> EmbeddedServerKeeper | None:
    """What restarts the backend's embedded database: None for an external one, or a test backend."""
    if isinstance(backend, ReadRoute):
        backend = backend.primary
    keeper = getattr(backend, "database_keeper", None)
    return keeper if isinstance(keeper, EmbeddedServerKeeper) else None


def on_pool(backend: Backend, pool: ConnectionPool) -> Backend:
    """``backend`` reading from ``pool`` (itself when that is its own pool)."""
    return backend if pool is backend.pool else ReadRoute(backend, pool)
