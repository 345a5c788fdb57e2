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

#: Results one call returns, at most: 200 results three hops deep stay well under the response bound
#: (the SQL function allows 1000, for psql).
MAX_NEIGHBORS_BUDGET = 200


class NeighborsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    id: AnyUuid = Field(description="A document_id or a chunk_id from a search result (a chunk means its document).")
    relation: Relation | None = Field(
        default=None, description="Only this relation: links_to (a link to a document of the same source), "
        "imports (a code import), external (a URL, or a module outside the source). Omit for all.")
    depth: int = Field(default=1, ge=1, le=MAX_DEPTH, description="Hops to walk, 1-3.")
    budget: int = Field(default=100, ge=1, le=MAX_NEIGHBORS_BUDGET,
                        description="Results to return at most; the walk stops there and says so.")
    direction: Direction = Field(default="out", description="out: what the document links to or imports; "
                                 "in: what links to or imports it; both.")


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
    description=(
        "Documents reachable from a document or chunk (an id from a search result) over the links between "
        "documents (Markdown, HTML, reStructuredText) and the imports between code files (Python, "
        "JavaScript/TypeScript, C, Rust, Java, Go), breadth first up to `depth` hops (1-3). Each result has its "
        "path, title, depth and `hops`: the path taken, as [{from, relation, to, target, line}]. Targets outside "
        "the corpus (URLs, packages) come back with document_id null and resolved false. At most `budget` "
        "results: when the walk was cut, truncated is true, `reason` says where, and `frontier` lists the "
        "documents to call neighbors on to continue. direction='in' finds what links to or imports it."
    ),
    arguments=NeighborsArgs,
    run=run_neighbors,
    cost=one_token,
)
