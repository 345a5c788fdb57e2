"""What a search asks for: the request every surface builds, with the request defaults defined once.

Defaults live in one place each. The request-shape defaults below (mode, code_mode,
limit, version matching, reranking) are Python's: every surface (MCP tools, the CLI,
``quarry eval``, bench/) builds a ``SearchRequest`` and gets them. ``quarry.search_hits``
and ``quarry.hybrid_search`` repeat them as parameter defaults for psql users, and
tests/test_search_defaults.py fails when the two drift. The ranking defaults (fusion,
vector weights, RRF k, candidates per leg) are SQL's, in ``quarry.ranking_defaults()``:
Python leaves them out unless a caller overrides one in ``Ranking``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from engine.errors import InvalidRequestError

SearchMode = Literal["hybrid", "fts", "vector"]
CodeMode = Literal["on", "off", "exclusive"]
VersionMatchMode = Literal["strict", "permissive"]
VersionMatch = Literal["exact", "compatible", "unknown", "mismatch"]
Fusion = Literal["rrf", "convex"]
#: chunk: rows are chunks; document: rows are documents ranked by their chunks (``engine.retrieval.grouping``).
GroupBy = Literal["chunk", "document"]
#: A retrieval leg: keyword (BM25), the general vector space, the code vector space.
Leg = Literal["fts", "vector", "code"]
LEGS: tuple[Leg, ...] = ("fts", "vector", "code")

FacetValue = str | bool
#: ``{"language": {"any_of": ["python"]}, "sdk_dependency": {"any_of": ["react"], "version_satisfies": "^18"}}``
Filters = Mapping[str, Mapping[str, Sequence[FacetValue] | str]]

DEFAULT_MODE: SearchMode = "hybrid"
DEFAULT_CODE_MODE: CodeMode = "on"
DEFAULT_LIMIT = 10
#: Chunks of one document a result list shows at most: one page should not fill an assistant's top 5.
DEFAULT_PER_DOCUMENT = 2
DEFAULT_VERSION_MATCH: VersionMatchMode = "permissive"
#: Rows one search may return: ``quarry.hybrid_search`` refuses more.
MAX_DEPTH = 1000
NO_RERANK_REQUESTED = "rerank=false was requested"

#: ``grep`` (engine.retrieval.grep): matching lines per page, and lines of context around each.
DEFAULT_GREP_LIMIT = 20
MAX_GREP_LIMIT = 100
DEFAULT_CONTEXT_LINES = 2
MAX_CONTEXT_LINES = 10


@dataclass(frozen=True, slots=True)
class Ranking:
    """Overrides of ``quarry.ranking_defaults()`` (None keeps SQL's value): for benchmarks and sweeps."""

    fusion: Fusion | None = None
    vector_weight: float | None = None
    code_vector_weight: float | None = None
    rrf_k: int | None = None
    candidates: int | None = None

    def arguments(self) -> dict[str, object]:
        """The ``quarry.search_hits`` arguments this overrides, by parameter name."""
        named = {"fusion": self.fusion, "vector_weight": self.vector_weight,
                 "code_vector_weight": self.code_vector_weight, "rrf_k": self.rrf_k,
                 "candidate_count": self.candidates}
        return {name: value for name, value in named.items() if value is not None}


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search: distinct queries (phrasings of one need), how to search them and how many rows to return."""

    queries: tuple[str, ...]
    mode: SearchMode = DEFAULT_MODE
    #: on: also a vector leg over the code space; exclusive: only that one; off: the general space only.
    code_mode: CodeMode = DEFAULT_CODE_MODE
    limit: int = DEFAULT_LIMIT
    rerank: bool = True
    rerank_instructions: str | None = None
    filters: Filters | None = None
    #: Source slugs to search (empty: all); the same as a ``source_slug`` any_of filter.
    sources: tuple[str, ...] = ()
    version_match: VersionMatchMode = DEFAULT_VERSION_MATCH
    ranking: Ranking = field(default_factory=Ranking)
    #: Why reranking is off when ``rerank`` is False, as the response reports it.
    no_rerank_reason: str = NO_RERANK_REQUESTED
    #: At most this many chunks of one document, the rest left out (None: every chunk). Unused with
    #: ``group_by="document"``, whose rows are documents.
    per_document: int | None = DEFAULT_PER_DOCUMENT
    #: document: ``limit`` documents, each ranked by its chunks' evidence, with its best spans.
    group_by: GroupBy = "chunk"
    #: With ``group_by="document"``: chunks ranked before they are grouped (legs rank at least as many); None:
    #: ``limit`` times ``grouping.CHUNKS_PER_DOCUMENT``, at least ``pipeline.RERANK_CANDIDATES``, at most ``MAX_DEPTH``.
    chunk_depth: int | None = None

    def __post_init__(self) -> None:
        if not self.queries or any(not query.strip() for query in self.queries):
            raise InvalidRequestError("a search needs at least one query with a non-space character")
        if not 1 <= self.limit <= MAX_DEPTH:
            raise InvalidRequestError(f"limit must be between 1 and {MAX_DEPTH}, got {self.limit}")
        if self.per_document is not None and self.per_document < 1:
            raise InvalidRequestError(f"per_document must be at least 1 (or null for no cap), got {self.per_document}")
        if self.group_by not in ("chunk", "document"):
            raise InvalidRequestError(f"group_by must be 'chunk' or 'document', got {self.group_by!r}")
        if self.chunk_depth is not None and not 1 <= self.chunk_depth <= MAX_DEPTH:
            raise InvalidRequestError(f"chunk_depth must be between 1 and {MAX_DEPTH}, got {self.chunk_depth}")

    @property
    def distinct_queries(self) -> list[str]:
        return list(dict.fromkeys(self.queries))

    def combined_filters(self) -> dict[str, Mapping[str, Sequence[FacetValue] | str]]:
        combined: dict[str, Mapping[str, Sequence[FacetValue] | str]] = dict(self.filters or {})
        if self.sources:
            combined["source_slug"] = {"any_of": list(self.sources)}
        return combined


def filters_json(filters: Filters | None) -> str | None:
    """Filters as the jsonb ``quarry.hybrid_search`` evaluates; booleans become 'true'/'false'."""
    if not filters:
        return None

    def text(value: FacetValue) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else value

    return json.dumps({
        facet: {rule: values if isinstance(values, str) else [text(value) for value in values]
                for rule, values in rules.items()}
        for facet, rules in filters.items()
    })
