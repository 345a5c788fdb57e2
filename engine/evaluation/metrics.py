"""Ranking metrics over a run (query id -> ranked document ids) and BEIR qrels.

Shared by ``quarry eval`` and the benchmarks (``bench/metrics.py`` re-exports them), so the CI
gate and the published figures are computed by the same lines.

Definitions follow trec_eval as BEIR calls it through pytrec_eval:

* nDCG@k: linear gain ``rel``, discount ``log2(rank + 1)``, ideal DCG from *all* judged
  relevant documents of the query (not only the retrieved ones), cut at k;
* MRR@k: ``1 / rank`` of the first document with ``rel > 0`` within the top k, else 0;
* Recall@k: relevant documents in the top k over all relevant documents of the query.

A document counts as relevant when its judgment is > 0. Queries without relevant documents
are skipped (trec_eval does the same); a query with judgments but no results scores 0.
Rankings are used as given: callers deduplicate (a repeated id counts at its first rank only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[str]]

#: Metric names in report order, as (name, kind, cutoff).
METRICS: tuple[tuple[str, str, int], ...] = (
    ("nDCG@10", "ndcg", 10),
    ("MRR@10", "mrr", 10),
    ("R@10", "recall", 10),
    ("R@100", "recall", 100),
)


def first_occurrences(ranking: Iterable[str], k: int) -> list[str]:
    """The first ``k`` distinct ids in rank order: a repeated id keeps its best rank."""
    seen: set[str] = set()
    top: list[str] = []
    for doc_id in ranking:
        if doc_id not in seen:
            seen.add(doc_id)
            top.append(doc_id)
            if len(top) == k:
                break
    return top


def ndcg_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranking against one query's judgments (graded or binary)."""
    ideal = sorted((rel for rel in judgments.values() if rel > 0), reverse=True)[:k]
    ideal_dcg = sum(rel / math.log2(rank + 1) for rank, rel in enumerate(ideal, start=1))
    if ideal_dcg == 0:
        return 0.0
    dcg = sum(
        judgments.get(doc_id, 0) / math.log2(rank + 1)
        for rank, doc_id in enumerate(first_occurrences(ranking, k), start=1)
        if judgments.get(doc_id, 0) > 0
    )
    return dcg / ideal_dcg


def reciprocal_rank_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the top k, else 0."""
    for rank, doc_id in enumerate(first_occurrences(ranking, k), start=1):
        if judgments.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


def recall_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """Share of the query's relevant documents found in the top k."""
    relevant = {doc_id for doc_id, rel in judgments.items() if rel > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(first_occurrences(ranking, k))) / len(relevant)


_BY_KIND = {"ndcg": ndcg_at_k, "mrr": reciprocal_rank_at_k, "recall": recall_at_k}


def per_query(run: Run, qrels: Qrels) -> dict[str, dict[str, float]]:
    """Every metric of ``METRICS`` for every judged query with at least one relevant document."""
    scores: dict[str, dict[str, float]] = {}
    for query_id, judgments in qrels.items():
        if not any(rel > 0 for rel in judgments.values()):
            continue
        ranking = run.get(query_id, ())
        scores[query_id] = {name: _BY_KIND[kind](ranking, judgments, k) for name, kind, k in METRICS}
    return scores


def evaluate(run: Run, qrels: Qrels) -> dict[str, float]:
    """Mean of every metric over the judged queries."""
    scores = per_query(run, qrels)
    if not scores:
        raise ValueError("no judged query has a relevant document")
    return {name: sum(s[name] for s in scores.values()) / len(scores) for name, _, _ in METRICS}
