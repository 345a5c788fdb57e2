"""The rerank step: reorder the top fused candidates; on failure keep the fused order and say why."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.errors import ProviderError, new_error_id
from engine.rerank.base import Reranker
from engine.retrieval.degradation import Degradation
from engine.retrieval.hits import SearchHit
from engine.retrieval.request import SearchRequest

if TYPE_CHECKING:
    from engine.retrieval.pipeline import RankedHit

logger = logging.getLogger("quarry.search")

#: Characters of a chunk the reranker sees (with its title and headings in front).
RERANK_DOCUMENT_CHARS = 4_000
NO_RERANKER = ("no reranker is configured on this server (set VOYAGE_API_KEY, or QUARRY_RERANKER="
               "cross-encoder:/path/to/model); results keep the fused retrieval order")


@dataclass(frozen=True, slots=True)
class RerankOutcome:
    """Whether a rerank was tried; ``reordered`` replaces ``reordered_from`` (the candidates) when it succeeded."""

    attempted: bool = False
    note: str | None = None
    reordered: list[RankedHit] | None = None
    reordered_from: Sequence[RankedHit] = field(default_factory=list)


def rerank(reranker: Reranker, request: SearchRequest, queries: list[str], candidates: list[RankedHit],
           degradation: Degradation, *, keep_all: bool = False) -> RerankOutcome:
    """Score ``candidates`` against the first query; the best ``request.limit`` of them (``keep_all``: every
    one), best first."""
    if not candidates:
        return RerankOutcome(attempted=True)
    documents = [rerank_text(candidate.hit) for candidate in candidates]
    try:
        scored = reranker.rerank(queries[0], documents, instructions=request.rerank_instructions,
                                 top_k=len(candidates) if keep_all else min(request.limit, len(candidates)))
    except ProviderError as error:
        degradation.note(f"rerank_failed: {error.reason}; results keep the fused order")
        return RerankOutcome(attempted=True)
    except Exception as error:
        error_id = new_error_id()
        logger.warning("rerank failed %s", error_id, exc_info=error)
        degradation.note(f"rerank_failed: {type(error).__name__}, error_id {error_id}; results keep the fused order")
        return RerankOutcome(attempted=True)
    reordered = []
    for item in scored:
        candidate = candidates[item.index]
        score = round(item.relevance_score, 4)
        candidate.fused_rank, candidate.reranked = candidate.rank, True
        candidate.rerank_score = candidate.confidence = score
        reordered.append(candidate)
    note = f"reranked by {reranker.model_name}"
    if len(queries) > 1:
        note += " against the first query"
    if request.rerank_instructions is not None and not reranker.follows_instructions:
        note += "; this reranker cannot follow rerank_instructions, so they were not applied"
    return RerankOutcome(attempted=True, note=note, reordered=reordered, reordered_from=candidates)


def rerank_text(hit: SearchHit) -> str:
    context = hit.symbol_path or " > ".join([hit.title, *hit.heading_path[1:]] if hit.heading_path else [hit.title])
    return f"{context}\n{hit.content}"[:RERANK_DOCUMENT_CHARS]
