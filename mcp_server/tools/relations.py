"""``neighbors``: walk from a search hit to what it links to or imports (or what refers to it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.corpus.links import MAX_DEPTH, Direction, Hop, Neighbor, neighbors
from engine.ingest.references import Relation
from mcp_server.bounds import bounded_json, wire_size
from mcp_server.envelope import to_json
from mcp_server.limits import MAX_RESPONSE_BYTES
from mcp_server.schemas import AnyUuid
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

#: Results one call returns, at most: 200 results three hops deep stay well under the response bound
#: (the SQL function allows 1000, for psql).
MAX_NEIGHBORS_BUDGET = 200


class NeighborsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    id: AnyUuid = Field(description="A document_id or chunk_id.")
    relation: Relation | None = Field(default=None, description="Omit for every relation.")
    depth: int = Field(default=1, ge=1, le=MAX_DEPTH)
    budget: int = Field(default=100, ge=1, le=MAX_NEIGHBORS_BUDGET, description="Results at most.")
    direction: Direction = Field(default="out")


def _hop(hop: Hop) -> dict[str, Any]:
    return {"from": str(hop.source), "relation": hop.relation,
            "to": None if hop.target_document is None else str(hop.target_document),
            "target": hop.target, "line": hop.line}


def _neighbor(node: Neighbor) -> dict[str, Any]:
    return {"document_id": None if node.document_id is None else str(node.document_id), "path": node.path,
            "title": node.title, "depth": node.level, "relation": node.relation, "target": node.target,
            "resolved": node.document_id is not None, "hops": [_hop(hop) for hop in node.hops]}


def run_neighbors(context: ToolContext, args: NeighborsArgs) -> str:
    walk = neighbors(context.backend.pool, args.id, relation=args.relation, depth=args.depth,
                     budget=args.budget, direction=args.direction)
    results = [_neighbor(node) for node in walk.neighbors]
    payload: dict[str, Any] = {
        "start": {"document_id": str(walk.start.document_id), "path": walk.start.path, "title": walk.start.title},
        "result_count": len(results),
        "ordered_by": "depth (breadth first), then the order links appear",
        "results": results,
        "truncated": walk.truncated,
        "reason": walk.reason,
        "frontier": [str(document_id) for document_id in walk.frontier],
    }
    # Results carry no long text and the budget is capped to fit; should a walk still not fit
    # (very long titles), its last results are dropped and counted (omitted_results), and it says why.
    if wire_size(to_json(payload)) > MAX_RESPONSE_BYTES - 4096:
        payload["reason"] = f"{walk.reason or 'the walk was complete'}; the last results did not fit the response " \
                            "size bound (omitted_results counts them): ask for a smaller budget or depth"
    return bounded_json(payload, [], droppable=[results], dropped_key="omitted_results")


NEIGHBORS = ToolSpec(
    name="neighbors",
    title="Follow links and imports",
    description="Documents a document links to or imports (direction in: what refers to it), up to depth hops.",
    arguments=NeighborsArgs,
    run=run_neighbors,
    cost=one_token,
    output_schema=shape({"results": "array", "ordered_by": "string", "truncated": "boolean"}),
)
