"""Query suggestions: which filters and tool suit a question asked of one source.

Rules, each stated in the suggestion's ``explanation``:

- the source itself: ``source_slug`` any_of [source];
- a language, package or version-facet value of the source that the question names as
  a word (``python``, ``react``) becomes an ``any_of`` filter; a version number in the
  question (``0.17``, ``v18.2``) becomes ``version_satisfies: "^<version>"`` on the
  version facet it names;
- the question asks for code ("source code", "implementation") and the source holds
  code: ``content_type`` any_of [code];
- the tool: ``count`` for "how many / number of / count", and for a question with no
  selective term (it names no subject: "documents"); ``query_documents`` for a whole
  page or document ("the entire guide"); ``advanced_search`` otherwise (it takes the
  filters, which ``search`` does not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from psycopg_pool import ConnectionPool

from engine.corpus.facets import FacetSummary, facet_values
from engine.errors import NotFoundError
from engine.retrieval.counting import selective_terms

RecommendedTool = Literal["count", "query_documents", "advanced_search"]

#: Facets whose values are matched against the question's words.
NAMED_FACETS = ("language", "package", "language_target", "sdk_dependency")
#: Values listed per facet in ``available_values``.
VALUES_PER_FACET = 10

_COUNTING = re.compile(r"\b(how many|how much|number of|count|total)\b", re.IGNORECASE)
_WHOLE = re.compile(r"\b(whole|entire|full|complete|all of)\b.{0,40}?\b(page|document|doc|guide|file|article|"
                    r"chapter|reference|readme)s?\b", re.IGNORECASE)
_CODE = re.compile(r"\b(source code|implementation|implemented|code for|code of|code that)\b", re.IGNORECASE)
_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+){0,2})(?![\w.]*\w)")
_WORD = re.compile(r"[\w@/.+#-]+")


@dataclass(frozen=True, slots=True)
class Suggestion:
    source: str
    filters: dict[str, dict[str, Any]]
    recommended_tool: RecommendedTool
    use_count_tool: bool
    selective_terms: list[str]
    explanation: list[str]
    #: The most common values of each facet in the source, to refine the filters by hand.
    available_values: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def suggest_query_params(pool: ConnectionPool, source: str, query: str) -> Suggestion:
    """Filters and a tool for ``query`` asked of ``source`` (a slug; ``NotFoundError`` when unknown)."""
    with pool.connection() as conn:
        if conn.execute("select 1 from quarry.sources where slug = %s", (source,)).fetchone() is None:
            raise NotFoundError("source: no source has this slug; list them with list_sources or route_sources")
    scope: dict[str, dict[str, Any]] = {"source_slug": {"any_of": [source]}}
    summaries = facet_values(pool, [*NAMED_FACETS, "content_type"], filters=scope, limit=VALUES_PER_FACET)
    filters = dict(scope)
    explanation = [f"source_slug limits the search to '{source}'"]
    words = {word.lower().strip(".") for word in _WORD.findall(query)}
    version = _VERSION.search(query)
    for summary in summaries:
        if summary.facet not in NAMED_FACETS:
            continue
        named = [count.value for count in summary.values if isinstance(count.value, str)
                 and count.value.lower() in words]
        if not named:
            continue
        rule: dict[str, Any] = {"any_of": named}
        reason = f"{summary.facet} {', '.join(map(repr, named))} is named in the question"
        if version is not None and summary.facet in ("language_target", "sdk_dependency"):
            rule["version_satisfies"] = "^" + version.group(1)
            reason += f", with version {version.group(1)} (compatible versions: ^{version.group(1)})"
        filters[summary.facet] = rule
        explanation.append(reason)
    if _CODE.search(query) and _has_value(summaries, "content_type", "code"):
        filters["content_type"] = {"any_of": ["code"]}
        explanation.append("the question asks for code and the source holds code: content_type code")
    terms = selective_terms(pool, query)
    tool: RecommendedTool
    if _COUNTING.search(query):
        tool = "count"
        explanation.append("the question asks how many: count returns the number of matching documents")
    elif not terms:
        tool = "count"
        explanation.append("the question names no subject (no selective term): count the documents passing "
                           "the filters, or list values with facets")
    elif _WHOLE.search(query):
        tool = "query_documents"
        explanation.append("the question asks for a whole page: query_documents returns whole documents")
    else:
        tool = "advanced_search"
        explanation.append("advanced_search takes these filters (search does not)")
    available = {summary.facet: [{"value": count.value, "documents": count.documents}
                                 for count in summary.values if count.documents > 0]
                 for summary in summaries}
    return Suggestion(source, filters, tool, tool == "count", terms, explanation, available)


def _has_value(summaries: list[FacetSummary], facet: str, value: str) -> bool:
    return any(count.value == value and count.documents > 0
               for summary in summaries if summary.facet == facet for count in summary.values)
