"""The pieces a running Quarry needs, built once: settings, database, pool, models."""

from __future__ import annotations

from functools import cached_property

from psycopg_pool import ConnectionPool

from engine.config import Settings, get_settings
from engine.embed.base import Embedder
from engine.rerank.base import Reranker
from engine.store.db import READER_ROLE, database_url, open_pool
from engine.store.migrations import ensure_migrated
from engine.store.replicas import ReplicaSet


class Runtime:
    """Opens the database (booting the embedded server and migrating on first use) and loads models lazily."""

    def __init__(self, settings: Settings | None = None, *, read_only: bool = False) -> None:
        """``read_only``: connections run as ``quarry_reader`` (the search server), which cannot write the corpus."""
        self.settings = settings or get_settings()
        self.database_url = database_url(self.settings)
        self.read_only = read_only
        ensure_migrated(self.database_url)

    @cached_property
    def pool(self) -> ConnectionPool:
        return open_pool(self.database_url, self.settings, role=READER_ROLE if self.read_only else None)

    @cached_property
    def replicas(self) -> ReplicaSet | None:
        """The read replicas (``READ_DATABASE_URLS``), health checks running; None when there are none."""
        if not self.settings.read_database_urls:
            return None
        return ReplicaSet(self.settings.read_database_urls, self.pool, self.database_url, self.settings,
                          role=READER_ROLE if self.read_only else None)

    @cached_property
    def embedders(self) -> dict[str, Embedder]:
        """Embedder per space (``text``, ``code``), as configured; see ``engine.providers.selection``."""
        from engine.providers.selection import build_embedders

        return build_embedders(self.settings)

    @cached_property
    def reranker(self) -> Reranker | None:
        from engine.providers.selection import build_reranker

        return build_reranker(self.settings)

    def close(self) -> None:
        replicas = self.__dict__.get("replicas")
        if replicas is not None:
            replicas.close()
        if "pool" in self.__dict__:
            self.pool.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
