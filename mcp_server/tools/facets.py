"""``facets``: which filter values exist, with document counts, so a client can filter knowingly."""

from __future__ import annotations

from typing import Any

from engine.corpus.facets import FIXED_FACETS, facet_values
from engine.retrieval.pipeline import check_version_ranges
from mcp_server.bounds import bounded_json
from mcp_server.schemas import FacetsArgs
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape


def run_facets(context: ToolContext, args: FacetsArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    check_version_ranges(context.backend.pool, filters)
    summaries = facet_values(context.backend.pool, [args.facet] if args.facet is not None else None,
                             filters=filters or None, prefix=args.prefix, limit=args.limit)
    facets: dict[str, dict[str, Any]] = {}
    lists: list[list[Any]] = []
    for summary in summaries:
        values = [{"value": count.value, "documents": count.documents} for count in summary.values]
        lists.append(values)
        facets[summary.facet] = {
            "set": "fixed" if summary.facet in FIXED_FACETS else "open",
            "values": values,
            "total_values": summary.total_values,
            "more_values": summary.total_values - len(values),
        }
    payload: dict[str, Any] = {
        "facets": facets,
        "filters_applied": bool(filters),
        "counts": "documents passing the filters that have each value",
        "ordered_by": "documents, most first (fixed sets: then the set's order)",
        "truncated": False,
    }
    return bounded_json(payload, [], droppable=lists, dropped_key="omitted_values")


FACETS = ToolSpec(
    name="facets",
    title="Discover filter values",
    description="Filter values per facet with document counts, most first; more_values > 0: raise limit or use prefix.",
    arguments=FacetsArgs,
    run=run_facets,
    cost=one_token,
    output_schema=shape({"facets": "object", "ordered_by": "string"}),
)
