"""How a retrieval fell short, and the response fields that say so (``degraded``, ``hybrid_leg_failed``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from engine.embed.base import TEXT_SPACE, Embedder
from engine.errors import ProviderError, new_error_id
from engine.retrieval.hits import LegFailure
from engine.retrieval.request import LEGS, Leg

if TYPE_CHECKING:  # numpy (~80 ms) is imported by what embeds, not by every search: fts needs none
    from engine.embed.base import Vectors

logger = logging.getLogger("quarry.search")


@dataclass(slots=True)
class Degradation:
    """Legs left out and other shortfalls (a failed rerank), in the order they happened."""

    reasons: list[str] = field(default_factory=list)
    #: Each leg left out, with why.
    failed_legs: dict[Leg, str] = field(default_factory=dict)

    def leg_failed(self, failure: LegFailure) -> None:
        reason = failure.describe()
        self.failed_legs.setdefault(failure.leg, reason)
        self.reasons.append(reason)

    def shares_failure(self, leg: Leg, of: Leg) -> None:
        """``leg`` is out for the reason ``of`` is (one model serves both): reported once."""
        self.failed_legs[leg] = self.failed_legs[of]

    def note(self, reason: str) -> None:
        self.reasons.append(reason)

    @property
    def degraded(self) -> bool:
        return bool(self.reasons)

    def fields(self) -> dict[str, object]:
        return {"degraded": self.degraded, "degradation_reason": "; ".join(self.reasons) or None,
                "hybrid_leg_failed": leg_summary(self.failed_legs)}


def leg_summary(failed_legs: Iterable[Leg]) -> str | None:
    """hybrid_leg_failed: "fts", "vector" (the general vector leg, or every vector leg), "code" (only
    the code-space leg); legs joined by '+' when the keyword leg and a vector leg both failed."""
    legs = set(failed_legs)
    if {"vector", "code"} <= legs:
        legs -= {"code"}
    return "+".join(leg for leg in LEGS if leg in legs) or None


def leg_of(space: str) -> Leg:
    return "vector" if space == TEXT_SPACE else "code"


class HasEmbedders(Protocol):
    @property
    def embedders(self) -> Mapping[str, Embedder]:
        """Embedder per space; reading it may load a model, and may raise if the model cannot load."""
        ...


def embed_queries(backend: HasEmbedders, space: str, queries: Sequence[str],
                  degradation: Degradation) -> Vectors | None:
    """Query vectors in ``space``, or None (recorded in ``degradation``) when the model fails or cannot load."""
    try:
        return backend.embedders[space].embed_queries(queries)
    except Exception as error:  # any model failure: the other legs can still answer
        if isinstance(error, ProviderError):
            detail = f"query_embedding_failed ({space} space): {error.reason}"
        else:
            error_id = new_error_id()
            logger.warning("query embedding failed %s", error_id, exc_info=error)
            detail = f"query_embedding_failed ({space} space): {type(error).__name__}, error_id {error_id}"
        degradation.leg_failed(LegFailure(leg_of(space), "embedding_failed", detail))
        return None


