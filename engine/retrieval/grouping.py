"""Documents from chunks: the one rule that ranks files by their chunks' evidence.

``group_by="document"`` (``advanced_search``, ``query_documents``), ``quarry eval`` and bench/ all rank
documents here, from the ranked chunk list of one search:

* a document's score is its best chunk's, plus ``SUPPORT_WEIGHT`` (0) times each of its next
  ``SUPPORTING_CHUNKS`` chunks': the best chunk decides, and the next ones break exact ties. Any
  blend measured costs some dev set: 0.02 took SciFact nDCG@10 from 0.731 to 0.726 for CoNaLa's
  0.538 -> 0.543, the rest unchanged (``bench/fusion_lab.py --task all --support 0 0.02``), and
  the mean of a document's two or three best chunks per leg took SWE-bench issue -> file R@10
  from 0.733 to 0.600, a long file's many weak matches outranking the file the issue is about
  (docs/benchmarks-log.md § Document evidence). The fused score already blends in each
  document's best evidence per leg (``quarry.document_evidence_share``);
* chunks are scored on the scale that ordered them: the rerank score for the chunks the
  reranker saw (all ranked ahead of the others, as in the chunk list), else the fused score;
* equal scores keep the order of the documents' best chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from engine.retrieval.highlights import Highlighter, opening_snippet

if TYPE_CHECKING:
    from engine.retrieval.pipeline import RankedHit

#: Chunks after a document's best that add to its score, and the share of its own score each adds.
SUPPORTING_CHUNKS = 2
SUPPORT_WEIGHT = 0.0
#: Spans a document row shows: its best chunks.
SPANS_PER_DOCUMENT = 3
#: Chunks ranked per document asked for, by default: a document's best chunk is rarely alone.
CHUNKS_PER_DOCUMENT = 4


@dataclass(frozen=True, slots=True)
class Span:
    """One of a document's best chunks as its row shows it: where it is, and what matched in a snippet."""

    chunk: RankedHit
    snippet: str | None
    #: [start, end) character offsets of the query's terms in ``snippet``
    highlights: list[tuple[int, int]] = field(default_factory=list)

    def as_row(self) -> dict[str, Any]:
        hit = self.chunk.hit
        row: dict[str, Any] = {"chunk_id": str(hit.chunk_id), "start_line": hit.start_line, "end_line": hit.end_line}
        if hit.symbol_path is not None:
            row["symbol_path"] = hit.symbol_path
        elif hit.heading_path:
            row["heading_path"] = hit.heading_path
        row["confidence"] = self.chunk.confidence
        if self.snippet is not None:
            row["snippet"] = self.snippet
            row["highlights"] = [{"start": start, "end": end} for start, end in self.highlights]
        return row


@dataclass(slots=True)
class RankedDocument:
    """A document at its place in the answer, with its chunks among the ranked hits (best first)."""

    rank: int
    score: float
    chunks: list[RankedHit]
    #: Finds the query's terms for the spans (None: the keyword leg did not run; spans show a chunk's start).
    highlighter: Highlighter | None = None

    def spans(self) -> list[Span]:
        """Its best chunks as its row shows them (highlighted when the row is made, not for every document)."""
        spans = []
        for ranked in self.chunks[:SPANS_PER_DOCUMENT]:
            content = ranked.hit.content
            found = self.highlighter.highlight(content) if self.highlighter is not None else None
            if self.highlighter is None or found is None or found.snippet is None:
                spans.append(Span(ranked, opening_snippet(content)))
                continue
            ranked.highlights = found
            spans.append(Span(ranked, found.snippet, self.highlighter.highlight(found.snippet).spans))
        return spans

    @property
    def best(self) -> RankedHit:
        return self.chunks[0]

    @property
    def document_id(self) -> UUID:
        return self.best.hit.document_id

    def as_row(self) -> dict[str, Any]:
        """The row of ``group_by="document"``: the file, how it ranked, and its best spans."""
        hit = self.best.hit
        return {
            "rank": self.rank,
            "document_id": str(hit.document_id),
            "title": hit.title,
            "path": hit.path,
            "url": hit.url,
            "source": {"slug": hit.source_slug, "display_name": hit.source_name, "kind": hit.source_kind},
            "content_type": hit.content_type,
            "language": hit.language,
            "score": round(self.score, 4),
            "confidence": self.best.confidence,
            "trust_score": hit.trust["score"],
            "version_match": hit.version_match,
            "reranked": self.best.reranked,
            "matched_chunks": len(self.chunks),
            "spans": [span.as_row() for span in self.spans()],
        }


def chunk_score(ranked: RankedHit) -> tuple[int, float]:
    """A chunk's place on the scale that ordered it: (1, rerank score) when reranked, else (0, fused score)."""
    if ranked.reranked and ranked.rerank_score is not None:
        return 1, ranked.rerank_score
    return 0, ranked.hit.fused_score


def documents_from_chunks(hits: Sequence[RankedHit], *, support_weight: float = SUPPORT_WEIGHT,
                          highlighter: Highlighter | None = None) -> list[RankedDocument]:
    """Every document of ``hits`` (ranked chunks, best first), ranked by the rule in the module docstring."""
    grouped: dict[UUID, list[RankedHit]] = {}
    for ranked in hits:
        grouped.setdefault(ranked.hit.document_id, []).append(ranked)
    scored: list[tuple[int, float, float, int, list[RankedHit]]] = []
    for first_seen, chunks in enumerate(grouped.values()):
        tier, best = chunk_score(chunks[0])
        support = sum(max(0.0, value) for other_tier, value in map(chunk_score, chunks[1:1 + SUPPORTING_CHUNKS])
                      if other_tier == tier)
        scored.append((tier, best + support_weight * support, support, first_seen, chunks))
    scored.sort(key=lambda entry: (-entry[0], -entry[1], -entry[2], entry[3]))
    return [RankedDocument(rank, score, chunks, highlighter)
            for rank, (_, score, _, _, chunks) in enumerate(scored, 1)]
