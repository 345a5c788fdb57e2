"""How far to trust a result, and why: a score in [0, 1] from explainable factors.

trust_score = sum(weight_i * value_i) / sum(weight_i), each value in [0, 1]:

- attribution: official 1.0, maintainer 0.8, community 0.5, unknown 0.3
- verified: 1.0 when an admin verified the source, else 0.5
- freshness: 0.5 ** (age_days / half_life_days), half-life per source kind
  (docs sites age faster than code; standalone pages slowest)
- deprecation: 0.0 when the document or its source is deprecated, else 1.0, and a
  deprecated result's trust is additionally capped at ``DEPRECATED_CAP``
- version_match: exact 1.0, compatible 0.8, unknown 0.6, mismatch 0.0

Weights live in ``TrustWeights`` (configurable); ``confidence_factors`` carries each
factor's raw value, weight and contribution so a client can say why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

VersionMatch = Literal["exact", "compatible", "unknown", "mismatch"]

ATTRIBUTION_VALUE = {"official": 1.0, "maintainer": 0.8, "community": 0.5, "unknown": 0.3}
VERSION_MATCH_VALUE: dict[str, float] = {"exact": 1.0, "compatible": 0.8, "unknown": 0.6, "mismatch": 0.0}
FRESHNESS_HALF_LIFE_DAYS = {"docs_site": 365.0, "code_repo": 540.0, "standalone": 730.0, "mixed": 365.0}
DEPRECATED_CAP = 0.2


@dataclass(frozen=True, slots=True)
class TrustWeights:
    attribution: float = 0.35
    verified: float = 0.15
    freshness: float = 0.15
    deprecation: float = 0.2
    version_match: float = 0.15


@dataclass(frozen=True, slots=True)
class TrustInputs:
    attribution: str
    verified: bool
    deprecated: bool
    source_kind: str
    changed_at: datetime
    version_match: VersionMatch = "unknown"


def trust_score(
    inputs: TrustInputs, weights: TrustWeights | None = None, now: datetime | None = None
) -> tuple[float, dict[str, dict[str, float | str | bool]]]:
    """The trust score and its per-factor breakdown (raw value, weight, contribution)."""
    weights = weights or TrustWeights()
    now = now or datetime.now(UTC)
    age_days = max(0.0, (now - inputs.changed_at).total_seconds() / 86_400)
    half_life = FRESHNESS_HALF_LIFE_DAYS.get(inputs.source_kind, 365.0)
    factors: list[tuple[str, float, str | bool | float, float]] = [
        ("attribution", ATTRIBUTION_VALUE.get(inputs.attribution, 0.3), inputs.attribution, weights.attribution),
        ("verified", 1.0 if inputs.verified else 0.5, inputs.verified, weights.verified),
        ("freshness", 0.5 ** (age_days / half_life), round(age_days, 2), weights.freshness),
        ("deprecation", 0.0 if inputs.deprecated else 1.0, inputs.deprecated, weights.deprecation),
        ("version_match", VERSION_MATCH_VALUE[inputs.version_match], inputs.version_match, weights.version_match),
    ]
    total_weight = sum(weight for _, _, _, weight in factors) or 1.0
    breakdown: dict[str, dict[str, float | str | bool]] = {}
    score = 0.0
    for name, value, raw, weight in factors:
        contribution = weight * value / total_weight
        score += contribution
        breakdown[name] = {"raw": raw, "value": round(value, 4), "weight": weight,
                           "contribution": round(contribution, 4)}
    if inputs.deprecated:
        score = min(score, DEPRECATED_CAP)
    return round(min(1.0, max(0.0, score)), 4), breakdown
