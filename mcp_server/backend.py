"""What the tools need from a running Quarry: settings, a connection pool, query embedders, a reranker.

``engine.runtime.Runtime`` is the real one; anything with the same attributes works
(tests serve a pool they already opened, or an embedder that fails on purpose).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import Embedder
from engine.rerank.base import Reranker


class Backend(Protocol):
    @property
    def settings(self) -> Settings: ...

    @property
    def pool(self) -> ConnectionPool: ...

    @property
    def embedders(self) -> Mapping[str, Embedder]:
        """Embedder per space; reading it may load a model, and may raise if the model cannot load."""
        ...

    @property
    def reranker(self) -> Reranker | None:
        """The configured reranker, or None when there is none (offline without a local model)."""
        ...
