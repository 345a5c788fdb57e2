"""The benchmarks' ranking metrics: the same code ``quarry eval`` gates CI with (``engine.evaluation.metrics``)."""

from engine.evaluation.metrics import (
    METRICS,
    Qrels,
    Run,
    evaluate,
    ndcg_at_k,
    per_query,
    recall_at_k,
    reciprocal_rank_at_k,
)

__all__ = ["METRICS", "Qrels", "Run", "evaluate", "ndcg_at_k", "per_query", "recall_at_k", "reciprocal_rank_at_k"]
