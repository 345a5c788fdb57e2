"""The ``vectors`` profile: the vector-store contract (contracts/001_…) over Quarry's vector stores.

The contract's four tools, arguments and result fields, each a call of Quarry's own tool
(``mcp_server.tools.vectors``, whose database calls pass the caller's key for the admin check)
with its answer reshaped: ``vector_add`` answers ``added`` or ``updated`` (re-adding an identical
vector is ``updated``: the contract's client knows no third status), and failures are
``{"error": "<message>"}`` (with ``code`` beside it), the two invalid-input messages word for word.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from engine.config import Settings
from engine.store.vector_stores import DEFAULT_STORE, MAX_DIMENSION
from mcp_server.envelope import ErrorStyle, Problem, ToolFailure, to_json
from mcp_server.profiles import Profile
from mcp_server.schemas import _STRICT, ArgsT, parse_arguments
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape
from mcp_server.tools.vectors import (
    MAX_VECTOR_RESULTS,
    VECTOR_ADD,
    VECTOR_COUNT,
    VECTOR_DELETE,
    VECTOR_SEARCH,
    MetadataFilter,
    Namespace,
    StoreName,
    VectorAddArgs,
    VectorCountArgs,
    VectorDeleteArgs,
    VectorId,
    VectorSearchArgs,
    run_vector_add,
    run_vector_count,
    run_vector_delete,
    run_vector_search,
)

EMPTY_EMBEDDING = "Embedding must be a non-empty array of numbers"
EMPTY_QUERY = "Query embedding must be a non-empty array"


class AddArgs(BaseModel):
    model_config = _STRICT

    id: VectorId
    embedding: list[float] = Field(max_length=MAX_DIMENSION)
    metadata: dict[str, Any] | None = None
    store_name: StoreName = DEFAULT_STORE
    namespace: Namespace | None = None


class SearchArgs(BaseModel):
    model_config = _STRICT

    query: list[float] = Field(max_length=MAX_DIMENSION)
    k: int = Field(default=10, ge=1, le=MAX_VECTOR_RESULTS)
    store_name: StoreName = DEFAULT_STORE
    namespace: Namespace | None = None
    metadata_filter: MetadataFilter | None = None


class DeleteArgs(BaseModel):
    model_config = _STRICT

    id: VectorId
    store_name: StoreName = DEFAULT_STORE
    namespace: Namespace | None = None


class CountArgs(BaseModel):
    model_config = _STRICT

    store_name: StoreName = DEFAULT_STORE
    namespace: Namespace | None = None


def string_error(error: ToolFailure) -> dict[str, Any]:
    """``{"error": message, "code": code}``: the contract's string, and Quarry's code for a client that wants it."""
    return {"error": error.message, "code": error.code}


def _embedding_error(argument: str, message: str) -> ErrorStyle:
    def style(error: ToolFailure) -> dict[str, Any]:
        if error.code == "INVALID" and any(problem.path.split("[")[0] == argument for problem in error.problems):
            return {"error": message, "code": error.code}
        return string_error(error)

    return style


def _nonempty(values: list[float], message: str, argument: str) -> None:
    if not values:
        raise ToolFailure("INVALID", message, problems=[Problem(argument, "must not be empty")])


def _as(model: type[ArgsT], args: BaseModel) -> ArgsT:
    """The contract's arguments as Quarry's tool takes them (checked again: a failure is INVALID, not INTERNAL)."""
    return parse_arguments(model, args.model_dump(exclude_none=True))


def add(context: ToolContext, args: AddArgs) -> str:
    _nonempty(args.embedding, EMPTY_EMBEDDING, "embedding")
    added = json.loads(run_vector_add(context, _as(VectorAddArgs, args)))
    return to_json({"status": "added" if added["status"] == "added" else "updated", "id": added["id"],
                    "dimension": added["dimension"]})


def search(context: ToolContext, args: SearchArgs) -> str:
    _nonempty(args.query, EMPTY_QUERY, "query")
    found = json.loads(run_vector_search(context, _as(VectorSearchArgs, args)))
    return to_json({"results": found["results"], "total_searched": found["total_searched"],
                    "ordered_by": found["ordered_by"]})


def delete(context: ToolContext, args: DeleteArgs) -> str:
    deleted = json.loads(run_vector_delete(context, _as(VectorDeleteArgs, args)))
    return to_json({"deleted": deleted["deleted"], "id": deleted["id"]})


def count(context: ToolContext, args: CountArgs) -> str:
    counted = json.loads(run_vector_count(context, _as(VectorCountArgs, args)))
    return to_json({"count": counted["count"], "store_name": counted["store_name"]})


def vector_tools() -> list[ToolSpec[Any]]:
    """The contract's tools, named, costed and annotated as Quarry's ``vector_*`` are."""
    return [
        ToolSpec(name="vector_add", title=VECTOR_ADD.title, arguments=AddArgs, run=add, cost=one_token,
                 read_only=False, audience="admin", errors=_embedding_error("embedding", EMPTY_EMBEDDING),
                 description="Add a vector with optional metadata; overwrites an existing id. status: added or "
                             "updated.",
                 output_schema=shape({"status": "string", "id": "string", "dimension": "integer"})),
        ToolSpec(name="vector_search", title=VECTOR_SEARCH.title, arguments=SearchArgs, run=search, cost=one_token,
                 errors=_embedding_error("query", EMPTY_QUERY),
                 description="Similarity search with a query embedding: results ordered by score (cosine/dot "
                             "highest first, euclidean lowest first).",
                 output_schema=shape({"results": "array", "total_searched": "integer"})),
        ToolSpec(name="vector_delete", title=VECTOR_DELETE.title, arguments=DeleteArgs, run=delete, cost=one_token,
                 read_only=False, audience="admin", errors=string_error,
                 description="Remove a vector by id; deleted false when it did not exist.",
                 output_schema=shape({"deleted": "boolean", "id": "string"})),
        ToolSpec(name="vector_count", title=VECTOR_COUNT.title, arguments=CountArgs, run=count, cost=one_token,
                 errors=string_error, description="The number of vectors in a store or namespace (0 for none).",
                 output_schema=shape({"count": "integer", "store_name": "string"})),
    ]


VECTORS_INSTRUCTIONS = """\
A vector store: vector_add (admin keys) stores embeddings with metadata in named stores and namespaces, \
vector_search finds the nearest, vector_delete removes one, vector_count counts. Errors: {"error": "<message>"}."""


def vectors_profile(_: Settings) -> Profile:
    return Profile("vectors", tuple(vector_tools()), VECTORS_INSTRUCTIONS)


__all__ = ["EMPTY_EMBEDDING", "EMPTY_QUERY", "vector_tools", "vectors_profile"]
