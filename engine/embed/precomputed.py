"""Query vectors computed ahead of time, served as an embedder: a batch embeds once, searches look up.

Benchmarks and evaluations embed every query in one batch, then send each search through
the retrieval pipeline like any caller; this embedder answers those searches' query
embeddings from the batch. A query it was not given is an error, not a silent embed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.embed.base import Embedder, Vectors


class PrecomputedQueries:
    """``embed_queries`` from vectors given up front (one row per text); ``embed_documents`` is not offered."""

    def __init__(self, model_name: str, texts: Sequence[str], vectors: Vectors) -> None:
        if len(texts) != len(vectors):
            raise ValueError(f"got {len(vectors)} vectors for {len(texts)} texts")
        self._model_name = model_name
        self._dimension = int(vectors.shape[1])
        self._rows = {text: row for row, text in enumerate(texts)}
        self._vectors = vectors

    @classmethod
    def embed(cls, embedder: Embedder, texts: Sequence[str]) -> PrecomputedQueries:
        """Embed ``texts`` with ``embedder`` in one batch (duplicates once)."""
        distinct = list(dict.fromkeys(texts))
        return cls(embedder.model_name, distinct, embedder.embed_queries(distinct))

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        raise NotImplementedError("precomputed query vectors do not embed documents")

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        missing = [text for text in texts if text not in self._rows]
        if missing:
            raise KeyError(f"{len(missing)} queries were not precomputed, e.g. {missing[0][:80]!r}")
        return np.asarray(self._vectors[[self._rows[text] for text in texts]], dtype=np.float32)
