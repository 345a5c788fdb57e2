"""Which model serves each embedding space and reranking, from the settings.

``auto`` picks Voyage when an API key is configured and the local default otherwise.
Spaces configured with the same model share one embedder object, so ingestion
computes their vectors once (see ``Ingestor._model_groups``).
"""

from __future__ import annotations

from pathlib import Path

from engine.config import Settings
from engine.embed.base import CODE_SPACE, TEXT_SPACE, Embedder
from engine.errors import InvalidRequestError
from engine.providers.resilience import CircuitBreaker, RetryPolicy
from engine.rerank.base import Reranker

LOCAL = "local"
_AUTO_VOYAGE = {TEXT_SPACE: "voyage-3.5", CODE_SPACE: "voyage-code-3"}
_VOYAGE_RERANKER = "rerank-2.5"


def model_choice(settings: Settings, space: str) -> str:
    """The model name a space uses: ``local`` or a Voyage model."""
    configured = settings.text_model if space == TEXT_SPACE else settings.code_model
    if configured != "auto":
        return configured
    if settings.voyage_api_key is None:
        return LOCAL
    return _AUTO_VOYAGE[space]


def build_embedders(settings: Settings) -> dict[str, Embedder]:
    """An embedder per space; one object per distinct model."""
    by_model: dict[str, Embedder] = {}
    embedders: dict[str, Embedder] = {}
    for space in (TEXT_SPACE, CODE_SPACE):
        model = model_choice(settings, space)
        if model not in by_model:
            by_model[model] = _embedder(settings, model)
        embedders[space] = by_model[model]
    return embedders


def build_reranker(settings: Settings) -> Reranker | None:
    """The configured reranker, or None (the offline default: no cross-encoder ships in a package)."""
    choice = settings.reranker
    if choice == "auto":
        choice = f"voyage:{_VOYAGE_RERANKER}" if settings.voyage_api_key is not None else "none"
    if choice == "none":
        return None
    kind, _, argument = choice.partition(":")
    if kind == "voyage":
        from engine.rerank.voyage import VoyageReranker

        return VoyageReranker(argument or _VOYAGE_RERANKER, api_key=_voyage_key(settings),
                              base_url=settings.voyage_base_url, timeout_s=settings.provider_timeout_ms / 1000,
                              retry=_retry(settings), max_concurrency=settings.provider_concurrency,
                              breaker=_breaker(settings))
    if kind == "cross-encoder" and argument:
        from engine.rerank.cross_encoder import CrossEncoderReranker

        return CrossEncoderReranker(Path(argument).expanduser())
    raise InvalidRequestError(
        f"QUARRY_RERANKER={settings.reranker!r} is not understood: use auto, none, voyage:<model> or "
        "cross-encoder:/path/to/model-directory")


def _embedder(settings: Settings, model: str) -> Embedder:
    if model == LOCAL:
        from engine.embed.local import LocalMiniLM

        return LocalMiniLM(settings.model_dir)
    from engine.embed.voyage import VoyageEmbedder

    return VoyageEmbedder(model, api_key=_voyage_key(settings), base_url=settings.voyage_base_url,
                          timeout_s=settings.provider_timeout_ms / 1000,
                          documents_timeout_s=settings.provider_documents_timeout_ms / 1000, retry=_retry(settings),
                          max_concurrency=settings.provider_concurrency, breaker=_breaker(settings))


def _voyage_key(settings: Settings) -> str:
    if settings.voyage_api_key is None:
        raise InvalidRequestError("a Voyage model is configured but VOYAGE_API_KEY is not set")
    return settings.voyage_api_key.get_secret_value()


def _retry(settings: Settings) -> RetryPolicy:
    return RetryPolicy(max_retries=settings.provider_max_retries)


def _breaker(settings: Settings) -> CircuitBreaker:
    # one breaker per model endpoint: a failing reranker must not stop embeddings
    return CircuitBreaker(failure_threshold=settings.breaker_failures, cool_down_s=settings.breaker_cool_down_s)
