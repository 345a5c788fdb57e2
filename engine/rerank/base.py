"""The reranker interface, and the failure it raises when a rerank cannot be done."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RerankResult:
    """One reranked document: its position in the input and its relevance in [0, 1]."""

    index: int
    relevance_score: float


class Reranker(Protocol):
    """Scores documents against a query; higher is more relevant."""

    @property
    def model_name(self) -> str: ...

    @property
    def follows_instructions(self) -> bool:
        """Whether ``rerank`` passes ``instructions`` to the model (callers report when it does not)."""
        ...

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        instructions: str | None = None,
        top_k: int | None = None,
    ) -> list[RerankResult]:
        """The documents' scores, best first, at most ``top_k`` of them.

        ``instructions`` steer relevance (e.g. "prefer TypeScript examples"); a reranker
        that cannot follow them (``follows_instructions`` false) accepts and ignores them. Raises ``ProviderError``
        when the model cannot answer (timeout, HTTP failure, open circuit breaker).
        """
        ...
