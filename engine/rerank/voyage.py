"""Voyage AI reranking behind ``Reranker``: ``rerank-2.5`` by default.

Per-request limits, from https://docs.voyageai.com/reference/reranker-api: at most 1,000 documents;
the query at most 8,000 tokens (rerank-2.5 and -lite; 4,000 for rerank-2, 2,000 for rerank-2-lite);
the query plus any one document at most 32,000 (16,000; 8,000); and "query tokens x documents +
all document tokens" at most 600K. Documents are clipped by our (over-)estimate so that a document
never pushes a request over, and candidates that would exceed a request's limits are split across
requests run concurrently. A cross-encoder scores each (query, document) pair on its own, so
scores from separate requests are comparable and merge into one ranking.

Instructions: the rerank-2.5 series follows natural-language instructions given in the query text
(https://docs.voyageai.com/docs/reranker; announcement, 2025-08-11:
https://www.mongodb.com/company/blog/product-release-announcements/rerank-2-5-and-rerank-2-5-lite-instruction-following-rerankers);
the API has no separate field for them. We prepend them,
``"<instructions>\\n\\nQuery: <query>"``, and clip the instructions rather than the query when the
two exceed the query limit (Voyage would truncate the end, i.e. the query). Models without
instruction-following ignore them, as ``Reranker`` allows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.embed.voyage import (
    TEXT_OVERHEAD_TOKENS,
    clip_to_tokens,
    estimate_tokens,
    load_voyage_client,
    voyage_failure,
)
from engine.errors import ProviderError
from engine.providers.resilience import CircuitBreaker, ResilientCaller, RetryPolicy
from engine.rerank.base import RerankResult

__all__ = ["MAX_DOCUMENTS_PER_REQUEST", "VoyageReranker"]

MAX_DOCUMENTS_PER_REQUEST = 1_000

Scores = list[tuple[int, float]]  # (index within the request, relevance score)


@dataclass(frozen=True, slots=True)
class _Model:
    query_tokens: int
    context_tokens: int  # query + one document
    request_tokens: int  # query tokens x documents + document tokens
    follows_instructions: bool


_MODELS = {
    "rerank-2.5": _Model(8_000, 32_000, 600_000, follows_instructions=True),
    "rerank-2.5-lite": _Model(8_000, 32_000, 600_000, follows_instructions=True),
    "rerank-2": _Model(4_000, 16_000, 600_000, follows_instructions=False),
    "rerank-2-lite": _Model(2_000, 8_000, 600_000, follows_instructions=False),
}


class VoyageReranker:
    """Voyage's cross-encoder reranker; ``timeout_s`` bounds one ``rerank`` call, retries included."""

    def __init__(
        self,
        model: str = "rerank-2.5",
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 5.0,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 (frozen, so sharing the default is safe)
        max_concurrency: int = 4,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if model not in _MODELS:
            raise ValueError(f"unknown Voyage rerank model {model!r}; known: {', '.join(_MODELS)}")
        if not api_key:
            raise ValueError("a Voyage API key is required")
        load_voyage_client()
        self._model = model
        self._limits = _MODELS[model]
        self._api_key = api_key
        self._base_url = base_url.rstrip("/") if base_url else None
        self._caller = ResilientCaller(
            timeout_s=timeout_s,
            retry=retry,
            breaker=breaker if breaker is not None else CircuitBreaker(),
            max_concurrency=max_concurrency,
            thread_name=f"voyage-rerank-{model}",
        )

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def follows_instructions(self) -> bool:
        return self._limits.follows_instructions

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        instructions: str | None = None,
        top_k: int | None = None,
    ) -> list[RerankResult]:
        if isinstance(documents, str):
            raise TypeError("rerank a sequence of documents, not a single str")
        if top_k is not None and top_k < 0:
            raise ValueError("top_k cannot be negative")
        if not documents or top_k == 0:
            return []
        query_text = self._query_text(query, instructions)
        groups = self._groups(query_text, documents)
        requests = [self._request(query_text, texts, top_k) for _, texts in groups]
        scores = self._caller.run(requests)
        merged = [
            RerankResult(start + index, score)
            for (start, _), part in zip(groups, scores, strict=True)
            for index, score in part
        ]
        merged.sort(key=lambda result: (-result.relevance_score, result.index))
        return merged[:top_k] if top_k is not None else merged

    def close(self) -> None:
        """Release the worker threads; the reranker stays usable."""
        self._caller.close()

    def _query_text(self, query: str, instructions: str | None) -> str:
        budget = self._limits.query_tokens - TEXT_OVERHEAD_TOKENS
        query = clip_to_tokens(query, budget) or " "
        instructions = instructions.strip() if instructions and self._limits.follows_instructions else ""
        if not instructions:
            return query
        suffix = f"\n\nQuery: {query}"
        instructions = clip_to_tokens(instructions, budget - estimate_tokens(suffix))
        return f"{instructions}{suffix}" if instructions else query

    def _groups(self, query_text: str, documents: Sequence[str]) -> list[tuple[int, list[str]]]:
        """Documents, clipped, in consecutive groups that each fit one request: (start, texts)."""
        query_cost = estimate_tokens(query_text) + TEXT_OVERHEAD_TOKENS
        room = self._limits.context_tokens - query_cost - TEXT_OVERHEAD_TOKENS
        groups: list[tuple[int, list[str]]] = []
        texts: list[str] = []
        start = tokens = 0
        for position, document in enumerate(documents):
            clipped = clip_to_tokens(document, room) or " "  # Voyage rejects empty strings
            cost = query_cost + estimate_tokens(clipped) + TEXT_OVERHEAD_TOKENS
            if texts and (len(texts) == MAX_DOCUMENTS_PER_REQUEST or tokens + cost > self._limits.request_tokens):
                groups.append((start, texts))
                start, texts, tokens = position, [], 0
            texts.append(clipped)
            tokens += cost
        groups.append((start, texts))
        return groups

    def _request(self, query_text: str, texts: list[str], top_k: int | None) -> Callable[[float], Scores]:
        def attempt(timeout_s: float) -> Scores:
            from voyageai.client import Client
            from voyageai.error import VoyageError

            client = Client(api_key=self._api_key, max_retries=0, timeout=timeout_s, base_url=self._base_url)
            try:
                result = client.rerank(
                    query_text,
                    texts,
                    model=self._model,
                    top_k=min(top_k, len(texts)) if top_k is not None else None,
                    truncation=True,
                )
            except VoyageError as error:
                raise voyage_failure(error) from error
            except (AttributeError, IndexError, KeyError, TypeError) as error:
                raise ProviderError("malformed rerank response") from error
            scores = [(int(item.index), float(item.relevance_score)) for item in result.results]
            if any(not 0 <= index < len(texts) for index, _ in scores):
                raise ProviderError("rerank response names a document that was not sent")
            return scores

        return attempt
