"""Per-key rate limits: a token bucket per API key, kept in Postgres so every replica shares it.

A search costs one token per distinct query in the request; every other tool costs
one token. Requests without a key (stdio, or HTTP on loopback with ``--no-auth``)
are not metered.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from engine.store.api_keys import VerifiedKey, take_rate_tokens
from mcp_server.envelope import ToolFailure
from mcp_server.limits import MAX_QUERIES


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """``per_minute`` tokens refill each minute; a bucket holds at most ``burst``."""

    per_minute: float = 120.0
    burst: float = 60.0

    def __post_init__(self) -> None:
        if self.per_minute <= 0:
            raise ValueError("the rate limit must be positive")
        if self.burst < MAX_QUERIES:
            # A bucket smaller than the largest valid request would refuse it forever.
            raise ValueError(f"the burst must be at least {MAX_QUERIES} (the most queries one request may carry)")

    @property
    def refill_per_second(self) -> float:
        return self.per_minute / 60.0

    def as_dict(self) -> dict[str, float | str]:
        return {"tokens_per_minute": self.per_minute, "burst": self.burst,
                "cost": "one token per distinct query of a search; one per call of any other tool"}


class RateLimiter:
    def __init__(self, pool: ConnectionPool, policy: RatePolicy) -> None:
        self.pool = pool
        self.policy = policy

    def charge(self, caller: VerifiedKey, cost: int) -> None:
        """Take ``cost`` tokens from the caller's bucket or raise ``RATE_LIMITED``. Blocking (one statement)."""
        decision = take_rate_tokens(self.pool, caller, cost, capacity=self.policy.burst,
                                    refill_per_second=self.policy.refill_per_second)
        if not decision.granted:
            raise ToolFailure(
                "RATE_LIMITED",
                f"rate limit reached: this request needs {cost} token(s) and the key has "
                f"{decision.tokens_left:.1f}; retry after {decision.retry_after:.1f} seconds",
                retry_after=decision.retry_after,
            )
