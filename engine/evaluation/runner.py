"""Run judged queries through the live search and score the rankings (see ``engine.evaluation``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError
from engine.evaluation.metrics import METRICS, Qrels, evaluate, first_occurrences, per_query
from engine.retrieval.grouping import RankedDocument
from engine.retrieval.pipeline import Retrieval, RetrievalBackend, retrieve
from engine.retrieval.request import DEFAULT_CODE_MODE, DEFAULT_MODE, MAX_DEPTH, CodeMode, SearchMode, SearchRequest

DocId = Literal["path", "stem"]
#: Documents ranked per query: the deepest cutoff of ``METRICS`` (R@100).
DOCUMENT_DEPTH = max(cutoff for _, _, cutoff in METRICS)
MAX_CHUNK_DEPTH = MAX_DEPTH


@dataclass(frozen=True, slots=True)
class EvalSettings:
    """How the queries are searched (the MCP defaults) and how hits become judged documents."""

    mode: SearchMode = DEFAULT_MODE
    code_mode: CodeMode = DEFAULT_CODE_MODE
    doc_id: DocId = "path"
    sources: tuple[str, ...] = ()
    #: Chunks (and candidates per leg) ranked per query before documents are deduplicated,
    #: as bench/quality.py does; a query filling fewer than 100 documents is rerun deeper.
    chunk_depth: int = 200


@dataclass(frozen=True, slots=True)
class MetricResult:
    name: str
    value: float
    threshold: float | None = None

    @property
    def passed(self) -> bool:
        return self.threshold is None or self.value >= self.threshold


@dataclass(frozen=True, slots=True)
class EvalReport:
    """Metric means over the scored queries, each with its threshold; ``passed`` is the gate."""

    settings: EvalSettings
    metrics: list[MetricResult]
    queries: int
    per_query: dict[str, dict[str, float]]
    #: Judged corpus ids no document of the searched sources answers to (renamed? deleted? a typo?).
    missing_documents: list[str]
    #: Search legs left out for at least one query (leg -> reason): the figures measure a degraded search.
    failed_legs: dict[str, str]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(metric.passed for metric in self.metrics)

    @property
    def failures(self) -> list[MetricResult]:
        return [metric for metric in self.metrics if not metric.passed]

    def as_dict(self, *, with_per_query: bool = False) -> dict[str, Any]:
        report: dict[str, Any] = {
            "passed": self.passed,
            "queries": self.queries,
            "metrics": {m.name: {"value": m.value, "threshold": m.threshold, "passed": m.passed}
                        for m in self.metrics},
            "settings": {"mode": self.settings.mode,
                         "code_mode": self.settings.code_mode if self.settings.mode != "fts" else "off",
                         "doc_id": self.settings.doc_id, "sources": list(self.settings.sources),
                         "chunk_depth": self.settings.chunk_depth},
            "missing_documents": self.missing_documents,
            "failed_legs": self.failed_legs,
            "notes": self.notes,
            "seconds": round(self.seconds, 2),
        }
        if with_per_query:
            report["per_query"] = self.per_query
        return report


def document_key(path: str, doc_id: DocId) -> str:
    """What a document is called in qrels: its path in the source, or its file name without extension."""
    return PurePosixPath(path).stem if doc_id == "stem" else path


def judged_id(slug: str, key: str, judged: Collection[str]) -> str:
    """The corpus id a document answers to: ``slug:key`` or ``key``, whichever the qrels use.

    A document nobody judged keeps ``slug:key``, so two sources' files of the same name stay
    two documents in the ranking.
    """
    qualified = f"{slug}:{key}"
    if qualified in judged or key not in judged:
        return qualified
    return key


def judged_ranking(documents: Iterable[RankedDocument], judged: Collection[str], doc_id: DocId,
                   depth: int = DOCUMENT_DEPTH) -> list[str]:
    """Ranked documents (``group_by="document"``) -> the first ``depth`` distinct corpus ids they answer to."""
    return first_occurrences((judged_id(document.best.hit.source_slug, document_key(document.best.hit.path, doc_id),
                                        judged) for document in documents), depth)


def evaluate_corpus(
    backend: RetrievalBackend,
    queries: Mapping[str, str],
    qrels: Qrels,
    settings: EvalSettings,
    thresholds: Mapping[str, float | None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """Search every judged query of ``qrels`` through the retrieval pipeline and score the rankings.

    The search is MCP's (``engine.retrieval.pipeline.retrieve``, its reranker included). Raises
    ``InvalidRequestError`` when a judged query is not in ``queries``, a source does not exist, or
    the searched corpus is empty: a gate must not pass or fail on a misconfiguration.
    """
    started = time.perf_counter()
    scored = {query_id: judgments for query_id, judgments in qrels.items()
              if any(score > 0 for score in judgments.values())}
    if not scored:
        raise InvalidRequestError("the qrels hold no relevant judgment (every score is 0)")
    lacking = [query_id for query_id in scored if query_id not in queries]
    if lacking:
        raise InvalidRequestError(f"{len(lacking)} judged queries are not in the queries file, e.g. "
                                  f"{', '.join(map(repr, lacking[:3]))}")
    judged = {doc for judgments in scored.values() for doc in judgments}
    corpus = _corpus_ids(backend.pool, settings)
    texts = [queries[query_id] for query_id in scored]
    searcher = _Searcher(backend, texts, settings)
    run: dict[str, list[str]] = {}
    for index, query_id in enumerate(scored):
        run[query_id] = searcher.documents(index, judged)
        if progress is not None:
            progress(index + 1, len(scored))

    means = evaluate(run, scored)
    limits = thresholds or {}
    missing = sorted(judged - corpus)
    return EvalReport(
        settings=settings,
        metrics=[MetricResult(name, round(means[name], 4), limits.get(name)) for name, _, _ in METRICS],
        queries=len(scored),
        per_query={query_id: {name: round(value, 4) for name, value in values.items()}
                   for query_id, values in per_query(run, scored).items()},
        missing_documents=missing,
        failed_legs=searcher.failed_legs,
        notes=_notes(settings, queries, qrels, scored, missing, searcher),
        seconds=time.perf_counter() - started,
    )


class _Searcher:
    """One query at a time through the retrieval pipeline, as deep as the ranking needs."""

    def __init__(self, backend: RetrievalBackend, texts: Sequence[str], settings: EvalSettings) -> None:
        self.backend, self.settings, self.texts = backend, settings, texts
        self.failed_legs: dict[str, str] = {}
        self.capped = 0  # queries short of 100 documents at the deepest search (not merely a small corpus)

    def documents(self, index: int, judged: Collection[str]) -> list[str]:
        """The query's top documents, searching deeper until 100 are filled or the corpus runs out."""
        depth = min(self.settings.chunk_depth, MAX_CHUNK_DEPTH)
        while True:
            retrieval = self._search(index, depth)
            ranking = judged_ranking(retrieval.documents or (), judged, self.settings.doc_id)
            exhausted = len(retrieval.hits) < depth
            if len(ranking) >= DOCUMENT_DEPTH or exhausted or depth >= MAX_CHUNK_DEPTH:
                break
            depth = min(2 * depth, MAX_CHUNK_DEPTH)
        self.capped += len(ranking) < DOCUMENT_DEPTH and not exhausted
        return ranking

    def _search(self, index: int, depth: int) -> Retrieval:
        # Deeper than MCP's 50 rows: both legs go as deep as the chunk list (SQL ranks
        # max(candidates, limit) per leg), so the vector leg's normalisation spans more rows.
        # Documents are ranked as group_by='document' ranks them; every one of them is kept (limit: the chunk
        # depth) until they are mapped to judged ids.
        request = SearchRequest((self.texts[index],), self.settings.mode, self.settings.code_mode, limit=depth,
                                sources=self.settings.sources, group_by="document", chunk_depth=depth)
        retrieval = retrieve(self.backend, request)
        for leg, reason in retrieval.degradation.failed_legs.items():
            self.failed_legs.setdefault(leg, reason)
        return retrieval


def _corpus_ids(pool: ConnectionPool, settings: EvalSettings) -> set[str]:
    """Every corpus id the searched documents answer to; refuses unknown sources and an empty corpus."""
    wanted = list(settings.sources) or None
    with pool.connection() as conn:
        known = {slug for (slug,) in conn.execute("select slug from quarry.sources").fetchall()}
        rows = conn.execute(
            "select s.slug, d.path from quarry.documents d join quarry.sources s on s.id = d.source_id"
            " where %(slugs)s::text[] is null or s.slug = any(%(slugs)s::text[])", {"slugs": wanted},
        ).fetchall()
    unknown = sorted(set(settings.sources) - known)
    if unknown:
        raise InvalidRequestError(f"no source named {', '.join(map(repr, unknown))}; "
                                  f"sources: {', '.join(sorted(known)) or 'none'}")
    if not rows:
        raise InvalidRequestError("the corpus to evaluate holds no documents: ingest it first")
    ids: set[str] = set()
    for slug, path in rows:
        key = document_key(path, settings.doc_id)
        ids.update((f"{slug}:{key}", key))
    return ids


def _notes(settings: EvalSettings, queries: Mapping[str, str], qrels: Qrels, scored: Qrels, missing: list[str],
           searcher: _Searcher) -> list[str]:
    """What a reader of the figures should know: queries not scored, judged documents absent, degraded legs."""
    notes = []
    unjudged = len(set(queries) - set(qrels))
    if unjudged:
        notes.append(f"{unjudged} queries of the queries file have no judgments and were not run")
    negative_only = len(qrels) - len(scored)
    if negative_only:
        notes.append(f"{negative_only} judged queries have no relevant document (every score 0) and are not scored")
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        notes.append(f"{len(missing)} judged documents are not in the searched corpus "
                     f"(--doc-id {settings.doc_id}): {shown}")
    if searcher.capped:
        notes.append(f"{searcher.capped} queries filled fewer than {DOCUMENT_DEPTH} documents from "
                     f"{MAX_CHUNK_DEPTH} chunks: their R@{DOCUMENT_DEPTH} counts the documents found")
    for leg, reason in searcher.failed_legs.items():
        notes.append(f"degraded search ({leg} leg, at least one query): {reason}")
    return notes
