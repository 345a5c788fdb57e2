"""``route_sources``: which sources to ask for a natural-language intent, best first."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from engine.embed.base import TEXT_SPACE
from engine.retrieval.degradation import Degradation, embed_queries
from engine.retrieval.routing import WEIGHTS, RankedSource, rank_sources, recommended
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, QueryText
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

MAX_ROUTED_SOURCES = 5


class RouteSourcesArgs(BaseModel):
    model_config = _STRICT

    user_query: QueryText
    top_n: int = Field(default=3, ge=1, le=MAX_ROUTED_SOURCES)


def route(context: ToolContext, query: str) -> tuple[list[RankedSource], Degradation]:
    """Every source ranked for ``query``; a failed query embedding leaves the centroid signal out."""
    degradation = Degradation()
    vectors = embed_queries(context.backend, TEXT_SPACE, [query], degradation)
    ranked = rank_sources(context.backend.pool, query, query_vector=list(vectors[0]) if vectors is not None else None)
    return ranked, degradation


def ranked_row(rank: int, source: RankedSource) -> dict[str, Any]:
    signals = source.signals
    return {
        "rank": rank,
        "slug": signals.slug,
        "display_name": signals.display_name,
        "kind": signals.kind,
        "documents": signals.documents,
        "score": source.score,
        "signals": source.components,
        "evidence": {"description_match": round(signals.description_match, 4), "fts_hits": signals.fts_hits,
                     "fts_score": round(signals.fts_score, 4),
                     "centroid_similarity": None if signals.centroid_similarity is None
                     else round(signals.centroid_similarity, 4)},
    }


def run_route_sources(context: ToolContext, args: RouteSourcesArgs) -> str:
    ranked, degradation = route(context, args.user_query)
    best = recommended(ranked)
    rows = [ranked_row(rank, source) for rank, source in enumerate(ranked[:args.top_n], 1)]
    if best is not None:
        explanation = (f"'{best.signals.slug}' ranks first (score {best.score}); scores weigh the query's terms in "
                       f"source names {WEIGHTS['description']}, BM25 hits {WEIGHTS['fts']} and similarity to the "
                       f"source's mean vector {WEIGHTS['centroid']}")
    elif ranked:
        explanation = "no source has keyword, name or clear semantic evidence for this query: search every source"
    else:
        explanation = "nothing is indexed yet"
    payload: dict[str, Any] = {
        "sources": rows,
        "source_count": len(ranked),
        "ordered_by": "score, highest first",
        "recommended_source": best.signals.slug if best is not None else None,
        "explanation": explanation,
        **degradation.fields(),
        "truncated": False,
    }
    return bounded_json(payload, [], droppable=[rows], dropped_key="omitted_sources")


ROUTE_SOURCES = ToolSpec(
    name="route_sources",
    title="Pick the sources to ask",
    description="Rank the sources for a question and recommend one (null: search all).",
    arguments=RouteSourcesArgs,
    run=run_route_sources,
    cost=one_token,
    output_schema=shape({"sources": "array", "recommended_source": "string?"}),
)
