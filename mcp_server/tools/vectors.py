"""``vector_add``, ``vector_search``, ``vector_delete``, ``vector_count``: bring-your-own vector stores.

Callers store vectors they computed elsewhere (their model, a batch job) in named stores
(one dimension and metric each, see ``engine.store.vector_stores``) and search them by vector.
``vector_add`` and ``vector_delete`` write: over HTTP with keys they need a key with scope
``admin`` (``ToolContext.require_scope``), like the jobs tool's cancel and retry; over stdio,
or HTTP ``--no-auth`` on loopback, the caller is the local user, who owns the database anyway. The server's
database login writes no table: ``quarry.vector_upsert`` and ``quarry.vector_delete`` are definer
functions that check the caller's admin key themselves (``mcp_server.auth.admin_database``,
sql/095-vector-store-grants.sql).
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic_core import PydanticCustomError

from engine.store.vector_stores import (
    DEFAULT_STORE,
    MAX_DIMENSION,
    MAX_ID_CHARS,
    MAX_METADATA_BYTES,
    MAX_NAMESPACE_CHARS,
    STORE_NAME_PATTERN,
    SearchResult,
    add_vector,
    count_vectors,
    delete_vector,
    get_store,
    search_vectors,
)
from engine.vocabulary import Metric
from mcp_server.auth import admin_database
from mcp_server.bounds import bounded_json
from mcp_server.envelope import Problem, ToolFailure, to_json
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

#: Results of one vector_search, at most.
MAX_VECTOR_RESULTS: Final = 100
#: Keys of one metadata filter, at most, and the longest key and string value.
MAX_FILTER_KEYS: Final = 16
MAX_FILTER_KEY_CHARS: Final = 128
MAX_FILTER_STRING_CHARS: Final = 1_000

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise PydanticCustomError("blank", "must not contain NUL characters")
    return text


def _store_name(name: str) -> str:
    if not re.fullmatch(STORE_NAME_PATTERN, name):
        raise PydanticCustomError("incompatible",
                                  "must be letters, digits, _ . : or -, starting with a letter or digit")
    return name


def _scalar_filter(rules: dict[str, Any]) -> dict[str, Any]:
    for key, value in rules.items():
        if not 1 <= len(key) <= MAX_FILTER_KEY_CHARS or "\x00" in key:
            raise PydanticCustomError("incompatible", f"keys are 1 to {MAX_FILTER_KEY_CHARS} characters")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise PydanticCustomError(
                "incompatible", "values must be a string, number, boolean or null: each key is an equality test")
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("incompatible", "values must be finite numbers")
        if isinstance(value, str) and (len(value) > MAX_FILTER_STRING_CHARS or "\x00" in value):
            raise PydanticCustomError("incompatible",
                                      f"string values are at most {MAX_FILTER_STRING_CHARS} characters, without NUL")
    return rules


StoreName = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(_store_name)]
Namespace = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAMESPACE_CHARS), AfterValidator(_no_nul)]
VectorId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(_no_nul)]
Embedding = Annotated[list[float], Field(min_length=1, max_length=MAX_DIMENSION)]
MetadataFilter = Annotated[dict[str, Any], Field(min_length=1, max_length=MAX_FILTER_KEYS),
                           AfterValidator(_scalar_filter)]

_STORE_HELP = "The store (letters, digits, _ . : -). Created by its first vector_add."
_NAMESPACE_HELP = "A partition of the store (e.g. a tenant or a corpus); omit for the default namespace."


class VectorAddArgs(BaseModel):
    model_config = _STRICT

    id: VectorId = Field(description=f"Your id for the vector (1-{MAX_ID_CHARS} characters); adding it again "
                         "replaces its vector and metadata.")
    embedding: Embedding = Field(description="The vector: finite numbers, as many as the store's dimension "
                                 f"(the first vector of a new store fixes it, at most {MAX_DIMENSION}).")
    metadata: dict[str, Any] | None = Field(
        default=None, description=f"A JSON object kept with the vector and returned by vector_search (at most "
        f"{MAX_METADATA_BYTES} bytes as JSON); omitted means {{}}.")
    store_name: StoreName = Field(default=DEFAULT_STORE, description=_STORE_HELP)
    namespace: Namespace | None = Field(default=None, description=_NAMESPACE_HELP)
    metric: Metric | None = Field(
        default=None, description="For a new store: cosine (default), dot or euclidean. For an existing store it "
        "must match, or be omitted.")


class VectorSearchArgs(BaseModel):
    model_config = _STRICT

    query: Embedding = Field(description="The query vector, with the store's dimension.")
    k: int = Field(default=10, ge=1, le=MAX_VECTOR_RESULTS, description="Results to return.")
    store_name: StoreName = Field(default=DEFAULT_STORE, description="The store to search.")
    namespace: Namespace | None = Field(default=None, description="The namespace to search; omit for the default.")
    metadata_filter: MetadataFilter | None = Field(
        default=None, description="Keep only vectors whose metadata has each of these top-level keys equal to "
        "the given string, number, boolean or null, e.g. {\"lang\": \"en\", \"year\": 2024}.")
    metric: Metric | None = Field(
        default=None, description="Rank by another metric than the store's (an exact scan, slower on large "
        "stores); omit to use the store's metric and its index.")
    include_embeddings: bool = Field(default=False, description="Also return each result's vector.")


class VectorDeleteArgs(BaseModel):
    model_config = _STRICT

    id: VectorId = Field(description="The id given to vector_add.")
    store_name: StoreName = Field(default=DEFAULT_STORE, description="The store holding it.")
    namespace: Namespace | None = Field(default=None, description="Its namespace; omit for the default.")


class VectorCountArgs(BaseModel):
    model_config = _STRICT

    store_name: StoreName = Field(default=DEFAULT_STORE, description="The store to count.")
    namespace: Namespace | None = Field(default=None, description="The namespace to count; omit for the default.")


def run_vector_add(context: ToolContext, args: VectorAddArgs) -> str:
    context.require_scope("admin", "vector_add")
    if args.metadata is not None:
        size = len(json.dumps(args.metadata, ensure_ascii=False, separators=(",", ":")).encode())
        if size > MAX_METADATA_BYTES:
            raise ToolFailure("LIMIT", f"invalid arguments: metadata: must take at most {MAX_METADATA_BYTES} bytes "
                              "as JSON", problems=[Problem("metadata", f"must take at most {MAX_METADATA_BYTES} "
                                                           "bytes as JSON")])
    with admin_database(context) as (pool, api_key):
        added = add_vector(pool, args.store_name, args.id, args.embedding, metadata=args.metadata,
                           namespace=args.namespace, metric=args.metric, api_key=api_key)
    return to_json({"status": added.status, "id": args.id, "dimension": added.dimension,
                    "store_name": args.store_name, "namespace": args.namespace,
                    "store_created": added.store_created})


def run_vector_search(context: ToolContext, args: VectorSearchArgs) -> str:
    found = search_vectors(context.backend.pool, args.store_name, args.query, k=args.k, namespace=args.namespace,
                           metadata_filter=args.metadata_filter, metric=args.metric,
                           include_embeddings=args.include_embeddings)
    results = [_result(hit_id=hit.id, score=hit.score, metadata=hit.metadata, embedding=hit.embedding)
               for hit in found.hits]
    payload: dict[str, Any] = {
        "store_name": args.store_name, "namespace": args.namespace, "metric": found.metric,
        "order": _ORDER[found.metric], "ordered_by": _ORDER[found.metric], "search": "exact" if found.exact else "hnsw",
        "total_searched": found.total_searched, "result_count": len(results), "results": results,
        "truncated": False,
    }
    note = _note(found)
    if note:
        payload["note"] = note
    # Only metadata and embeddings can make a page large; trailing results go first.
    return bounded_json(payload, [], droppable=[results], dropped_key="omitted_results")


_ORDER: Final = {"cosine": "score is cosine similarity, highest first",
                 "dot": "score is the inner product, highest first",
                 "euclidean": "score is the euclidean distance, lowest first"}


def _result(*, hit_id: str, score: float, metadata: dict[str, Any], embedding: list[float] | None) -> dict[str, Any]:
    result: dict[str, Any] = {"id": hit_id, "score": score, "metadata": metadata}
    if embedding is not None:
        result["embedding"] = embedding
    return result


def _note(found: SearchResult) -> str | None:
    if found.store is None:
        return "there is no store of this name: nothing is searched (vector_add creates one)"
    if found.store.metric != found.metric:
        return f"the store's metric is {found.store.metric}; ranked by {found.metric} with an exact scan"
    return None


def run_vector_delete(context: ToolContext, args: VectorDeleteArgs) -> str:
    context.require_scope("admin", "vector_delete")
    with admin_database(context) as (pool, api_key):
        deleted = delete_vector(pool, args.store_name, args.id, namespace=args.namespace, api_key=api_key)
    return to_json({"deleted": deleted, "id": args.id, "store_name": args.store_name, "namespace": args.namespace})


def run_vector_count(context: ToolContext, args: VectorCountArgs) -> str:
    pool = context.backend.pool
    store = get_store(pool, args.store_name)
    count = count_vectors(pool, args.store_name, namespace=args.namespace) if store is not None else 0
    return to_json({"count": count, "store_name": args.store_name, "namespace": args.namespace,
                    "store_exists": store is not None, "dimension": store.dimension if store else None,
                    "metric": store.metric if store else None})


VECTOR_ADD = ToolSpec(
    name="vector_add",
    title="Add a vector to a store",
    description=(
        "Store your own vector with an id and metadata in a named store (created by its first vector: "
        "dimension and metric fixed). status: added, updated, or unchanged (same vector and metadata)."
    ),
    arguments=VectorAddArgs,
    run=run_vector_add,
    cost=one_token,
    read_only=False,
    output_schema=shape({"status": "string", "id": "string", "dimension": "integer"}),
    audience="admin",
)

VECTOR_SEARCH = ToolSpec(
    name="vector_search",
    title="Search a vector store",
    description=(
        "The k vectors of a store nearest a query vector (ordered_by: cosine or dot highest first, euclidean "
        "lowest first), with metadata; metadata_filter tests top-level keys for equality."
    ),
    arguments=VectorSearchArgs,
    run=run_vector_search,
    cost=one_token,
    output_schema=shape({"results": "array", "total_searched": "integer", "ordered_by": "string"}),
    audience="admin",
)

VECTOR_DELETE = ToolSpec(
    name="vector_delete",
    title="Delete a vector from a store",
    description=(
        "Delete a vector by id: deleted true, or false when there was none (deleting twice is harmless)."
    ),
    arguments=VectorDeleteArgs,
    run=run_vector_delete,
    cost=one_token,
    read_only=False,
    output_schema=shape({"deleted": "boolean", "id": "string"}),
    audience="admin",
)

VECTOR_COUNT = ToolSpec(
    name="vector_count",
    title="Count the vectors of a store",
    description=(
        "How many vectors a store's namespace holds (0 for an unknown store), with its dimension and metric."
    ),
    arguments=VectorCountArgs,
    run=run_vector_count,
    cost=one_token,
    output_schema=shape({"count": "integer", "store_name": "string"}),
    audience="admin",
)

VECTOR_TOOLS: Final = (VECTOR_ADD, VECTOR_SEARCH, VECTOR_DELETE, VECTOR_COUNT)
