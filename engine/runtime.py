"""The pieces a running Quarry needs, built once: settings, database, pool, models."""

from __future__ import annotations

from functools import cached_property

from psycopg_pool import ConnectionPool

from engine.config import Settings, get_settings
from engine.db import database_url, open_pool
from engine.embed.base import Embedder
from engine.migrations import ensure_migrated


class Runtime:
    """Opens the database (booting the embedded server and migrating on first use) and loads models lazily."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.database_url = database_url(self.settings)
        ensure_migrated(self.database_url)

    @cached_property
    def pool(self) -> ConnectionPool:
        return open_pool(self.database_url, self.settings)

    @cached_property
    def embedders(self) -> dict[str, Embedder]:
        """Embedder per space. The local model is the embedded default."""
        from engine.embed.local import LocalMiniLM

        return {"text": LocalMiniLM(self.settings.model_dir)}

    def close(self) -> None:
        if "pool" in self.__dict__:
            self.pool.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
