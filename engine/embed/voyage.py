"""Voyage AI embeddings behind ``Embedder``: ``voyage-3.5`` for the text space, ``voyage-code-3`` for code.

Requests go through the official ``voyageai`` client with its own retries off (``max_retries=0``):
retries, the deadline, the breaker and the thread pool are ``engine.providers.resilience``'s, so they are
bounded and testable. ``base_url`` (a ``voyageai.Client`` constructor argument in the installed 0.5.0) points
it at a stand-in in tests; by default the client picks ``https://api.voyageai.com/v1``.

Per-request limits, from https://docs.voyageai.com/reference/embeddings-api: at most 1,000 texts,
and at most 320K tokens in total for voyage-3.5, 1M for voyage-3.5-lite, 120K for voyage-3-large
and voyage-code-3. Each model reads 32,000 tokens of a text and truncates the rest
(``truncation=True``; https://docs.voyageai.com/docs/embeddings). We have no tokenizer offline, so
``estimate_tokens`` over-counts on purpose and batches are cut by it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from engine.embed.base import Vectors
from engine.errors import ProviderError
from engine.providers.resilience import CircuitBreaker, ResilientCaller, RetryPolicy, TransientFailure, http_failure

__all__ = [
    "DIMENSION",
    "MAX_TEXTS_PER_REQUEST",
    "TEXT_OVERHEAD_TOKENS",
    "VoyageEmbedder",
    "clip_to_tokens",
    "estimate_tokens",
    "load_voyage_client",
    "voyage_failure",
]

DIMENSION = 1024  # pinned with output_dimension, so a changed model default cannot change column width
MAX_TEXTS_PER_REQUEST = 1_000
# Tokens a text costs beyond its own: special tokens, and the prompt Voyage prepends for an
# input_type ("Represent the document for retrieval: " is 7 tokens).
TEXT_OVERHEAD_TOKENS = 16


@dataclass(frozen=True, slots=True)
class _Model:
    context_tokens: int  # read per text; the rest is truncated
    request_tokens: int  # total per request


_MODELS = {
    "voyage-3.5": _Model(32_000, 320_000),
    "voyage-3.5-lite": _Model(32_000, 1_000_000),
    "voyage-3-large": _Model(32_000, 120_000),
    "voyage-code-3": _Model(32_000, 120_000),
}

InputType = Literal["document", "query"]


def estimate_tokens(text: str) -> int:
    """An upper estimate of a text's tokens under Voyage's byte-level BPE tokenizers.

    ASCII prose and code run ~4 characters a token, so a third of the characters over-counts them;
    digits may be split one per token; anything else counts its UTF-8 bytes, which byte-level BPE
    cannot exceed. Cheap: a few C-level passes, no Python loop over characters.
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    digits = sum(map(text.count, "0123456789"))
    other_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    return -(-(ascii_chars - digits) // 3) + digits + other_bytes


def clip_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` whose estimate is within ``max_tokens``."""
    if estimate_tokens(text) <= max_tokens:
        return text
    low, high = 0, len(text)  # estimate(text[:low]) fits, estimate(text[:high]) does not
    while high - low > 1:
        middle = (low + high) // 2
        if estimate_tokens(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle
    return text[:low]


def load_voyage_client() -> None:
    """Import the ``voyageai`` client now (~0.7 s: it pulls in aiohttp, PIL, ...), so that the cost
    falls on construction rather than inside the first call's deadline, and not on ``import engine``."""
    importlib.import_module("voyageai.client")


def voyage_failure(error: Exception) -> Exception:
    """What a ``voyageai`` client exception means for ``engine.providers.resilience``."""
    from voyageai import error as voyage_errors

    if isinstance(error, voyage_errors.Timeout):
        return TransientFailure("timeout")
    if isinstance(error, voyage_errors.APIConnectionError):
        return TransientFailure("connection error")
    status = getattr(error, "http_status", None)
    if isinstance(status, int):
        headers: Any = getattr(error, "headers", None) or {}
        return http_failure(status, getattr(error, "user_message", None), headers.get("retry-after"))
    return ProviderError(f"unexpected provider error ({type(error).__name__})")


class VoyageEmbedder:
    """Voyage embeddings, L2-normalised float32, ``DIMENSION`` wide.

    ``timeout_s`` bounds one call (all its requests, retries and waits); ``documents_timeout_s``
    overrides it for ``embed_documents``, whose bulk batches may need longer than a query.
    Batches of one call run at most ``max_concurrency`` at a time.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 5.0,
        documents_timeout_s: float | None = None,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 (frozen, so sharing the default is safe)
        max_concurrency: int = 4,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if model not in _MODELS:
            raise ValueError(f"unknown Voyage embedding model {model!r}; known: {', '.join(_MODELS)}")
        if not api_key:
            raise ValueError("a Voyage API key is required")
        if documents_timeout_s is not None and documents_timeout_s <= 0:
            raise ValueError("documents_timeout_s must be > 0")
        load_voyage_client()
        self._model = model
        self._limits = _MODELS[model]
        self._api_key = api_key
        self._base_url = base_url.rstrip("/") if base_url else None
        self._documents_timeout_s = documents_timeout_s
        self._caller = ResilientCaller(
            timeout_s=timeout_s,
            retry=retry,
            breaker=breaker if breaker is not None else CircuitBreaker(),
            max_concurrency=max_concurrency,
            thread_name=f"voyage-embed-{model}",
        )

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts, "document", self._documents_timeout_s)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts, "query", None)

    def close(self) -> None:
        """Release the worker threads; the embedder stays usable (a new pool starts on demand)."""
        self._caller.close()

    def _batches(self, texts: Sequence[str]) -> list[list[str]]:
        """The texts as sent: clipped to the model's context, grouped into requests within limits."""
        budget = self._limits.request_tokens
        batches: list[list[str]] = []
        batch: list[str] = []
        tokens = 0
        for text in texts:
            # Voyage rejects empty strings; clipping keeps any single text within a request's budget.
            clipped = clip_to_tokens(text, self._limits.context_tokens) or " "
            cost = estimate_tokens(clipped) + TEXT_OVERHEAD_TOKENS
            if batch and (len(batch) == MAX_TEXTS_PER_REQUEST or tokens + cost > budget):
                batches.append(batch)
                batch, tokens = [], 0
            batch.append(clipped)
            tokens += cost
        if batch:
            batches.append(batch)
        return batches

    def _embed(self, texts: Sequence[str], input_type: InputType, timeout_s: float | None) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("embed a sequence of texts, not a single str")
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        requests = [self._request(batch, input_type) for batch in self._batches(texts)]
        parts = self._caller.run(requests, timeout_s)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _request(self, texts: list[str], input_type: InputType) -> Callable[[float], Vectors]:
        def attempt(timeout_s: float) -> Vectors:
            from voyageai.client import Client
            from voyageai.error import VoyageError

            client = Client(api_key=self._api_key, max_retries=0, timeout=timeout_s, base_url=self._base_url)
            try:
                result = client.embed(
                    texts, model=self._model, input_type=input_type, truncation=True, output_dimension=DIMENSION
                )
            except VoyageError as error:
                raise voyage_failure(error) from error
            except (AttributeError, KeyError, TypeError, ValueError) as error:  # e.g. bad base64
                raise ProviderError("malformed embeddings response") from error
            return _normalised(result.embeddings, len(texts))

        return attempt


def _normalised(embeddings: object, count: int) -> Vectors:
    try:
        vectors = np.asarray(embeddings, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise ProviderError("malformed embeddings in response") from error
    if vectors.shape != (count, DIMENSION):
        raise ProviderError(f"expected {count} embeddings of {DIMENSION} dims, got shape {vectors.shape}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    result: Vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return result
