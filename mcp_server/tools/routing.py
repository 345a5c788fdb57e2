"""``route_sources``: which sources to ask for a natural-language intent, best first."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from engine.embed.base import TEXT_SPACE
from engine.retrieval.degradation import Degradation, embed_queries
from engine.retrieval.routing import CENTROID_SAMPLE, WEIGHTS, RankedSource, rank_sources, recommended
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, QueryText
from mcp_server.tools import ToolContext, ToolSpec, one_token

MAX_ROUTED_SOURCES = 5


class RouteSourcesArgs(BaseModel):
    model_config = _STRICT

    user_query: QueryText = Field(description="The user's question or intent, in natural language.")
    top_n: int = Field(default=3, ge=1, le=MAX_ROUTED_SOURCES, description="Sources to return (1-5), best first.")


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
        "recommended_source": best.signals.slug if best is not None else None,
        "explanation": explanation,
        **degradation.fields(),
        "truncated": False,
    }
    return bounded_json(payload, [], droppable=[rows], dropped_key="omitted_sources")


ROUTE_SOURCES = ToolSpec(
    name="route_sources",
    title="Pick the sources to ask",
    description=(
        "Rank the indexed sources for a natural-language question and recommend one: each source scores on "
        "the question's words in its name, slug and description, its BM25 keyword hits among the question's top "
        f"chunks, and the semantic similarity of the question to the mean of its vectors (up to {CENTROID_SAMPLE} "
        "per source). Returns top_n (1-5) sources with score, per-signal values and evidence, and "
        "recommended_source (null when no source has evidence: search them all). Follow with "
        "suggest_query_params for the recommended source, or use guided_query to do everything in one call."
    ),
    arguments=RouteSourcesArgs,
    run=run_route_sources,
    cost=one_token,
)
