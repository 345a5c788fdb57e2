"""What every benchmarked system hands back: ranked document ids per query, and how long it took."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class SystemRun:
    """One system's rankings over a query set (query id -> document ids, best first)."""

    system: str
    run: dict[str, list[str]] = field(default_factory=dict)
    index_seconds: float = 0.0  # building the system's own index or table (0 when reused)
    search_seconds: float = 0.0  # all queries, one client, sequential
    notes: list[str] = field(default_factory=list)


def top_documents(ranked_ids: Iterable[str], depth: int) -> list[str]:
    """The first ``depth`` distinct ids in rank order: a document keeps the rank of its best chunk."""
    seen: set[str] = set()
    top: list[str] = []
    for doc_id in ranked_ids:
        if doc_id not in seen:
            seen.add(doc_id)
            top.append(doc_id)
            if len(top) == depth:
                break
    return top
