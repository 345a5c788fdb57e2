"""The ``kb`` profile: the knowledge-base contract (contracts/003_…) over ``engine.kb``.

Eleven tools with the contract's names and envelopes: success ``{"status": "ok", "data": ...}``,
failure ``{"status": "error", "error": "CODE: message"}`` (plus a bounded ``details`` object with
the rejected argument paths), codes from the contract's list. Graph records, evidence and their
links are ``engine.kb``; evidence text is indexed by the ingest pipeline and searched by the one
retrieval pipeline; jobs are Quarry's jobs. Writes go through definer functions that check the
caller's admin key (``mcp_server.auth.admin_database``); for the local owner (stdio, ``--no-auth``)
the indexing of a small evidence runs inline, so the call answers ``completed``; otherwise it is a
durable ``kb_index`` job (``accepted``) that ``quarry jobs run`` runs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID, uuid4

import psycopg
from pydantic import AfterValidator, BaseModel, Field, JsonValue, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from engine.config import Settings
from engine.errors import InvalidRequestError
from engine.kb import catalog, evidence, records
from engine.kb.evidence import EVIDENCE_ID_PATTERN, Encoding, PathDenied
from mcp_server.auth import admin_database
from mcp_server.envelope import ErrorCode, Problem, ToolFailure, to_json
from mcp_server.profiles import Profile
from mcp_server.schemas import _STRICT
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

__all__ = ["KB_INSTRUCTIONS", "kb_profile", "kb_tools"]

#: The contract's fixed limits.
MAX_LIST = 100
PAGE_DEFAULT = 20
MAX_ENVELOPE_BYTES = 256 * 1024
READ_DEFAULT = 16 * 1024
READ_MAX = 64 * 1024
MAX_QUERY_TOKENS = 32
MAX_QUERY_BYTES = 2048
SNIPPET_BYTES = 512
#: Evidence up to this size is indexed within the call for the local owner (the contract's short lane).
SHORT_LANE_BYTES = 256 * 1024
MAX_NEIGHBOUR_DEPTH = 3
MAX_NEIGHBOUR_RELATIONS = 200
#: How far past the server's clock an ``observed_at`` may lie.
FUTURE_SLACK = timedelta(minutes=5)

_GRAPH_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_CANONICAL_GRAPH_ID = "non-canonical graph id: use the lowercase 8-4-4-4-12 spelling"
_CANONICAL_EVIDENCE_ID = "non-canonical evidence id: use e_ and 64 lowercase hexadecimal characters"


def _graph_id(text: str) -> str:
    if not re.fullmatch(_GRAPH_ID_PATTERN, text):
        raise PydanticCustomError("incompatible", _CANONICAL_GRAPH_ID)
    return text


def _evidence_id(text: str) -> str:
    if not re.fullmatch(EVIDENCE_ID_PATTERN, text):
        raise PydanticCustomError("incompatible", _CANONICAL_EVIDENCE_ID)
    return text


def _any_id(text: str) -> str:
    return _evidence_id(text) if text.startswith("e_") else _graph_id(text)


# The patterns are published (a client can check before sending); the validators are the acceptance.
GraphId = Annotated[str, AfterValidator(_graph_id),
                    WithJsonSchema({"type": "string", "minLength": 36, "maxLength": 36, "pattern": _GRAPH_ID_PATTERN})]
EvidenceId = Annotated[str, AfterValidator(_evidence_id),
                       WithJsonSchema({"type": "string", "minLength": 66, "maxLength": 66,
                                       "pattern": EVIDENCE_ID_PATTERN})]
AnyId = Annotated[str, AfterValidator(_any_id),
                  WithJsonSchema({"type": "string", "anyOf": [{"pattern": _GRAPH_ID_PATTERN},
                                                              {"pattern": EVIDENCE_ID_PATTERN}]})]
Pointer = Annotated[str, Field(pattern=r"^(/([^~/]|~[01])*)+$", max_length=1024)]
Cursor = Annotated[str, Field(min_length=1, max_length=512)]
Properties = dict[str, Any]


# -- envelope -----------------------------------------------------------------

_CONTRACT_CODE: dict[str, str] = {
    # Quarry's codes the contract does not have, as its nearest: a key without the admin scope is the
    # deployment's configuration; a rate limit or a full server is BUSY; a database away is IO.
    "UNAUTHORIZED": "CONFIGURATION", "RATE_LIMITED": "BUSY", "UNAVAILABLE": "IO_ERROR", "FLOW_GATE": "INVALID",
}


def kb_error(error: ToolFailure) -> dict[str, Any]:
    """``{"status": "error", "error": "CODE: message", "details"?: {"problems": [...]}}``."""
    code = _CONTRACT_CODE.get(error.code, error.code)
    message = error.message
    if error.code == "INVALID" and error.problems:
        message = "invalid tool request; " + "; ".join(f"{problem.path}: {problem.rule}" for problem in error.problems)
    body: dict[str, Any] = {"status": "error", "error": f"{code}: {message}"}
    details: dict[str, Any] = {}
    if error.problems:
        details["problems"] = [{"path": problem.path, "rule": problem.rule} for problem in error.problems[:20]]
    if error.retry_after is not None:
        details["retry_after"] = round(error.retry_after, 3)
    if error.error_id is not None:
        details["error_id"] = error.error_id
    if details:
        body["details"] = details
    return body


def _ok(data: Any) -> str:
    text = to_json({"status": "ok", "data": data})
    if len(text.encode()) > MAX_ENVELOPE_BYTES:
        raise ToolFailure("LIMIT", f"the result takes more than {MAX_ENVELOPE_BYTES} bytes; ask for less")
    return text


_DATABASE_CODES: dict[str, ErrorCode] = {
    "P0002": "NOT_FOUND",       # no_data_found: an unknown id
    "23505": "CONFLICT",        # unique_violation: DEPENDENCIES_EXIST, a taken identity
    "23503": "CONFLICT",        # foreign_key_violation: a record still referenced
    "22023": "INVALID",         # invalid_parameter_value: the item and rule are in the message
    "22P02": "INVALID",         # invalid_text_representation
}


@contextmanager
def _database_failures() -> Iterator[None]:
    """The knowledge base's SQL refusals as the contract's codes; their messages name the item."""
    try:
        yield
    except PathDenied as denied:
        raise ToolFailure("PATH_DENIED", str(denied)) from None
    except InvalidRequestError as invalid:
        raise ToolFailure("INVALID", str(invalid),
                          problems=[Problem(invalid.argument, invalid.rule or str(invalid))]
                          if invalid.argument else ()) from None
    except psycopg.errors.InsufficientPrivilege:
        raise ToolFailure("UNAUTHORIZED", "this action needs an API key with the admin scope") from None
    except psycopg.Error as error:
        code = _DATABASE_CODES.get(error.sqlstate or "")
        if code is None:
            raise
        raise ToolFailure(code, error.diag.message_primary or code) from None


# -- cursors --------------------------------------------------------------------


def _selection_key(selection: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(selection, sort_keys=True).encode()).hexdigest()[:16]


def _cursor(selection: dict[str, Any], after: str) -> str:
    """An opaque position bound to the selection it pages (not a snapshot, not a permission)."""
    packed = json.dumps({"s": _selection_key(selection), "a": after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(packed).decode().rstrip("=")


def _after(cursor: str | None, selection: dict[str, Any]) -> str | None:
    if cursor is None:
        return None
    try:
        unpacked = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        bound, after = unpacked["s"], unpacked["a"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ToolFailure("INVALID", "cursor: not a cursor this server issued",
                          problems=[Problem("cursor", "not a cursor this server issued")]) from None
    if bound != _selection_key(selection) or not isinstance(after, str):
        raise ToolFailure("INVALID", "cursor: it pages another selection; keep the filters it was issued with",
                          problems=[Problem("cursor", "bound to another selection")])
    return after


T = TypeVar("T")


def _page(rows: Sequence[T], limit: int, selection: dict[str, Any],
          key: Callable[[T], str]) -> tuple[list[T], str | None]:
    """The first ``limit`` rows of ``limit + 1`` fetched, and the cursor after them when more remain."""
    shown = list(rows[:limit])
    return shown, (_cursor(selection, key(shown[-1])) if len(rows) > limit and shown else None)


# -- kb_status ------------------------------------------------------------------------


class StatusArgs(BaseModel):
    model_config = _STRICT


def run_status(context: ToolContext, _: StatusArgs) -> str:
    with context.backend.pool.connection() as conn:
        row = conn.execute("select quarry.kb_health()").fetchone()
    assert row is not None
    settings = context.backend.settings
    return _ok({
        "health": "ok", "counts": row[0],
        "scope": {"caller": "owner" if context.caller is None else ",".join(context.caller.scopes),
                  "evidence_root": str(settings.kb_root) if settings.kb_root is not None else None},
        "indexing": "inline for the local owner" if context.caller is None
                    else "kb_index jobs, run by `quarry jobs run`",
        "limits": {"list_max": MAX_LIST, "page_default": PAGE_DEFAULT, "page_max": MAX_LIST,
                   "envelope_max_bytes": MAX_ENVELOPE_BYTES, "read_default_bytes": READ_DEFAULT,
                   "read_max_bytes": READ_MAX, "evidence_max_bytes": evidence.MAX_EVIDENCE_BYTES,
                   "query_max_tokens": MAX_QUERY_TOKENS, "query_max_bytes": MAX_QUERY_BYTES,
                   "snippet_max_bytes": SNIPPET_BYTES, "neighbors_max_depth": MAX_NEIGHBOUR_DEPTH},
    })


# -- kb_types ---------------------------------------------------------------------------

TypeKind = Literal["nodes", "relations", "evidence"]


class TypesArgs(BaseModel):
    model_config = _STRICT

    kind: TypeKind | None = None
    type: str | None = Field(default=None, min_length=1, max_length=64)
    limit: int = Field(default=PAGE_DEFAULT, ge=1, le=MAX_LIST)
    cursor: Cursor | None = None


def _catalogue(counts: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [
        {"kind": "nodes", "type": node.name, "description": node.description,
         "required": {node.identity: "string"}, "identity": {"properties": [node.identity]},
         "ready_count": counts.get(("node", node.name), 0)} for node in catalog.NODE_TYPES]
    entries += [
        {"kind": "relations", "type": relation.name, "description": relation.description,
         "source_types": list(relation.source_types), "target_types": list(relation.target_types),
         "identity": {"properties": ["type", "source_id", "target_id"]},
         "ready_count": counts.get(("relation", relation.name), 0)} for relation in catalog.RELATION_TYPES]
    entries.append({"kind": "evidence", "type": catalog.EVIDENCE_TYPE,
                    "description": "Exact bytes (kb_ingest_evidence), named e_ + their SHA-256; text is indexed.",
                    "ready_count": counts.get(("evidence", "evidence"), 0)})
    return entries


def run_types(context: ToolContext, args: TypesArgs) -> str:
    selection = {"tool": "kb_types", "kind": args.kind, "type": args.type}
    after = _after(args.cursor, selection)
    entries = [entry for entry in _catalogue(records.type_counts(context.backend.pool))
               if args.kind in (None, entry["kind"]) and args.type in (None, entry["type"])]
    if args.type is not None and not entries:
        raise ToolFailure("NOT_FOUND", f"type: no {args.kind or 'record'} type {args.type!r}")
    keyed = [entry for entry in entries if after is None or f"{entry['kind']}/{entry['type']}" > after]
    keyed.sort(key=lambda entry: f"{entry['kind']}/{entry['type']}")
    shown, next_cursor = _page(keyed, args.limit, selection, lambda entry: f"{entry['kind']}/{entry['type']}")
    return _ok({"types": shown, "next_cursor": next_cursor})


# -- kb_write -------------------------------------------------------------------------------


class NodeRef(BaseModel):
    model_config = _STRICT

    id: GraphId | None = None
    node_index: int | None = Field(default=None, ge=0, lt=MAX_LIST)

    @model_validator(mode="after")
    def _one(self) -> NodeRef:
        if (self.id is None) == (self.node_index is None):
            raise PydanticCustomError("incompatible",
                                      "give exactly one of id (a stored node) or node_index (a node of this request)")
        return self


class _RecordWrite(BaseModel):
    model_config = _STRICT

    id: GraphId | None = None
    type: str | None = Field(default=None, min_length=1, max_length=64)
    label: str | None = Field(default=None, max_length=1000)
    properties: Properties | None = None
    remove_properties: list[Pointer] = Field(default_factory=list, max_length=MAX_LIST)
    evidence_add: list[EvidenceId] = Field(default_factory=list, max_length=MAX_LIST)
    evidence_remove: list[EvidenceId] = Field(default_factory=list, max_length=MAX_LIST)

    @model_validator(mode="after")
    def _create_or_patch(self) -> _RecordWrite:
        if self.id is not None and self.type is not None:
            raise PydanticCustomError("incompatible", "a patch names the record by id only (its type cannot change)")
        if self.id is None and self.type is None:
            raise PydanticCustomError("incompatible", "give type (to create) or id (to patch)")
        return self

    def as_item(self) -> dict[str, Any]:
        item = self.model_dump(exclude_unset=True, exclude={"remove_properties"})
        item["remove_properties"] = [_pointer_path(pointer) for pointer in self.remove_properties]
        return item


class NodeWrite(_RecordWrite):
    @model_validator(mode="after")
    def _creation_has_properties(self) -> NodeWrite:
        if self.id is None and self.properties is None:
            raise PydanticCustomError("incompatible", "creating a node needs properties (with its identity property)")
        return self


class RelationWrite(_RecordWrite):
    source_ref: NodeRef | None = None
    target_ref: NodeRef | None = None

    @model_validator(mode="after")
    def _endpoints(self) -> RelationWrite:
        if self.id is None and (self.source_ref is None or self.target_ref is None):
            raise PydanticCustomError("incompatible", "creating a relation needs source_ref and target_ref")
        if self.id is not None and (self.source_ref is not None or self.target_ref is not None):
            raise PydanticCustomError("incompatible", "a relation's endpoints cannot change")
        return self

    def as_item(self) -> dict[str, Any]:
        item = super().as_item()
        for side in ("source_ref", "target_ref"):
            ref = getattr(self, side)
            if ref is not None:
                item[side] = ref.model_dump(exclude_none=True)
        return item


def _pointer_path(pointer: str) -> list[str]:
    """An RFC 6901 pointer as the key path Postgres's ``#-`` takes ("/a~1b/0" -> ["a/b", "0"])."""
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]


class WriteArgs(BaseModel):
    model_config = _STRICT

    nodes: list[NodeWrite] = Field(default_factory=list, max_length=MAX_LIST)
    relations: list[RelationWrite] = Field(default_factory=list, max_length=MAX_LIST)
    observed_at: datetime | None = Field(default=None, description="When the facts were observed (default: now).")

    @model_validator(mode="after")
    def _something(self) -> WriteArgs:
        if not self.nodes and not self.relations:
            raise PydanticCustomError("incompatible", "give nodes or relations to write")
        if self.observed_at is not None and self.observed_at.tzinfo is None:
            raise PydanticCustomError("incompatible", "observed_at needs Z or a numeric offset")
        return self


def run_write(context: ToolContext, args: WriteArgs) -> str:
    context.require_scope("admin", "kb_write")
    now = datetime.now(UTC)
    observed = args.observed_at or now
    if observed > now + FUTURE_SLACK:
        raise ToolFailure("INVALID", "observed_at: more than five minutes past the server's clock",
                          problems=[Problem("observed_at", "more than five minutes in the future")])
    with _database_failures(), admin_database(context) as (pool, api_key):
        written = records.write_records(pool, [node.as_item() for node in args.nodes],
                                        [relation.as_item() for relation in args.relations], observed,
                                        api_key=api_key)
    return _ok(written)


# -- kb_get ----------------------------------------------------------------------------------

GetKind = Literal["nodes", "relations", "evidence", "links"]


class GetArgs(BaseModel):
    model_config = _STRICT

    kind: GetKind
    ids: list[AnyId] = Field(default_factory=list, max_length=MAX_LIST,
                             description="nodes, relations, evidence: the records to read, in this order.")
    id: AnyId | None = Field(default=None, description="links: the record or evidence whose links to list.")
    limit: int = Field(default=PAGE_DEFAULT, ge=1, le=MAX_LIST)
    cursor: Cursor | None = None

    @model_validator(mode="after")
    def _view(self) -> GetArgs:
        if self.kind == "links" and (self.id is None or self.ids):
            raise PydanticCustomError("incompatible", "kind links takes id (a record or evidence), not ids")
        if self.kind != "links" and (not self.ids or self.id is not None or self.cursor is not None):
            raise PydanticCustomError("incompatible", f"kind {self.kind} takes ids (1-100), and no id or cursor")
        return self


def _bounded_records(rows: Sequence[dict[str, Any]], ids: Sequence[str]) -> dict[str, Any]:
    """Records in the order asked, as many as fit the envelope; the rest in ``remaining_ids``."""
    budget = MAX_ENVELOPE_BYTES - 1024
    shown: list[dict[str, Any]] = []
    used = 0
    for position, row in enumerate(rows):
        size = len(to_json(row).encode()) + 1
        if used + size > budget:
            if not shown:
                raise ToolFailure("LIMIT", f"record {ids[position]} alone takes more than {MAX_ENVELOPE_BYTES} bytes")
            return {"records": shown, "remaining_ids": list(ids[position:])}
        shown.append(row)
        used += size
    return {"records": shown, "remaining_ids": []}


def run_get(context: ToolContext, args: GetArgs) -> str:
    pool = context.backend.pool
    if args.kind == "links":
        assert args.id is not None
        selection = {"tool": "kb_get", "id": args.id}
        after = _after(args.cursor, selection)
        with pool.connection() as conn:
            rows = conn.execute("select * from quarry.kb_links_of(%s, %s, %s)",
                                (args.id, after, args.limit + 1)).fetchall()
        by_evidence = args.id.startswith("e_")
        links, next_cursor = _page(rows, args.limit, selection, lambda row: str(row[0] if by_evidence else row[1]))
        return _ok({"id": args.id, "links": [{"record_id": str(record), "evidence_id": linked_evidence,
                                               "linked_at": records.utc(linked_at)}
                                              for record, linked_evidence, linked_at in links],
                    "next_cursor": next_cursor})
    if len(set(args.ids)) != len(args.ids):
        raise ToolFailure("INVALID", "ids: each id once", problems=[Problem("ids", "must be unique")])
    if args.kind == "evidence":
        if not all(identifier.startswith("e_") for identifier in args.ids):
            raise ToolFailure("INVALID", "ids: kind evidence takes e_ ids", problems=[Problem("ids", "e_ ids only")])
        found = {row.id: row for row in evidence.evidence_rows(pool, args.ids)}
        shown = [found[identifier].as_dict() for identifier in args.ids if identifier in found]
    else:
        if any(identifier.startswith("e_") for identifier in args.ids):
            raise ToolFailure("INVALID", f"ids: kind {args.kind} takes graph ids (UUIDs)",
                              problems=[Problem("ids", "graph ids only")])
        wanted = "node" if args.kind == "nodes" else "relation"
        stored = records.read_records(pool, [UUID(identifier) for identifier in args.ids])
        shown = [stored[UUID(identifier)].as_dict() for identifier in args.ids
                 if UUID(identifier) in stored and stored[UUID(identifier)].kind == wanted]
    present = {row["id"] for row in shown}
    data = _bounded_records(shown, [row["id"] for row in shown])
    data["missing_ids"] = [identifier for identifier in args.ids if identifier not in present]
    return _ok(data)


# -- kb_search -------------------------------------------------------------------------------

SearchKind = Literal["nodes", "relations", "evidence"]


class SearchArgs(BaseModel):
    model_config = _STRICT

    kind: SearchKind = "nodes"
    query: str | None = Field(default=None, min_length=1, max_length=MAX_QUERY_BYTES)
    query_mode: Literal["literal", "words"] = "literal"
    sort: Literal["id", "relevance"] = "id"
    type: str | None = Field(default=None, min_length=1, max_length=64)
    properties: dict[str, JsonValue] | None = Field(
        default=None, min_length=1, max_length=MAX_LIST,
        description="Exact filter: records whose properties hold each of these keys with exactly this value "
                    "(nested objects match by containment).")
    limit: int = Field(default=PAGE_DEFAULT, ge=1, le=MAX_LIST)
    cursor: Cursor | None = None
    include_evidence: bool = True

    @model_validator(mode="after")
    def _query_rules(self) -> SearchArgs:
        if self.query is not None:
            if len(self.query.encode()) > MAX_QUERY_BYTES:
                raise PydanticCustomError("incompatible", f"query may take at most {MAX_QUERY_BYTES} UTF-8 bytes")
            if len(self.query.split()) > MAX_QUERY_TOKENS:
                raise PydanticCustomError("incompatible", f"query may hold at most {MAX_QUERY_TOKENS} tokens")
            if not self.query.strip():
                raise PydanticCustomError("incompatible", "query needs a non-space character")
        if self.sort == "relevance" and (self.query is None or self.cursor is not None):
            raise PydanticCustomError("incompatible", "sort relevance needs a query and has no cursor (it returns the "
                                      "best 100 at most)")
        if self.kind == "evidence" and (self.type is not None or self.properties is not None):
            raise PydanticCustomError("incompatible", "evidence has no type and no properties")
        return self


def _snippet(text: str, query: str | None) -> str:
    """At most SNIPPET_BYTES of ``text`` around the query's first occurrence."""
    start = max(0, text.find(query) - 80) if query and query in text else 0
    return text[start:].encode()[:SNIPPET_BYTES].decode(errors="ignore")


def run_search(context: ToolContext, args: SearchArgs) -> str:
    pool = context.backend.pool
    literal = args.query if args.query_mode == "literal" else None
    words = sorted(set(args.query.split())) if args.query is not None and args.query_mode == "words" else None
    selection = {"tool": "kb_search", **args.model_dump(exclude={"cursor", "limit"})}
    after = _after(args.cursor, selection)
    if args.kind == "evidence":
        if args.sort == "relevance":
            assert args.query is not None
            return _ok({"results": _evidence_by_relevance(context, args.query, args.limit), "next_cursor": None,
                        "ordered_by": "relevance"})
        found = evidence.find_evidence(pool, literal=literal, words=words, after=after, limit=args.limit + 1)
        shown, next_cursor = _page(found, args.limit, selection, lambda row: row.id)
        return _ok({"results": [{**row.as_dict(), "snippet": _snippet(row.matched or "", args.query)}
                                for row in shown], "next_cursor": next_cursor, "ordered_by": "id"})
    rows = records.find_records(pool, "node" if args.kind == "nodes" else "relation", args.type, literal=literal,
                                words=words, by_relevance=args.sort == "relevance",
                                after=UUID(after) if after else None, limit=args.limit + (args.sort == "id"),
                                properties=args.properties)
    shown_rows, next_cursor = (_page(rows, args.limit, selection, lambda row: str(row.id)) if args.sort == "id"
                               else (list(rows), None))
    linked = records.read_records(pool, [row.id for row in shown_rows]) if args.include_evidence else {}
    results = []
    for row in shown_rows:
        result: dict[str, Any] = {"id": str(row.id), "kind": row.kind, "type": row.type, "label": row.label,
                                  "snippet": _snippet(row.search_text, args.query)}
        if args.sort == "relevance":
            result["score"] = round(row.rank, 6)
        if args.include_evidence and row.id in linked:
            result["evidence_ids"] = linked[row.id].evidence
        results.append(result)
    return _ok({"results": results, "next_cursor": next_cursor, "ordered_by": args.sort})


def _evidence_by_relevance(context: ToolContext, query: str, limit: int) -> list[dict[str, Any]]:
    """Evidence ranked by the one retrieval pipeline over the ``kb`` source's indexed text."""
    from engine.retrieval.pipeline import retrieve
    from engine.retrieval.request import SearchRequest

    retrieval = retrieve(context.backend, SearchRequest(queries=(query,), sources=("kb",), limit=min(limit, 50),
                                                        rerank=False))
    best: dict[str, dict[str, Any]] = {}
    for ranked in retrieval.hits:
        identifier = ranked.hit.path.removeprefix("evidence/").split(".", 1)[0]
        if identifier not in best:
            best[identifier] = {"id": identifier, "score": round(ranked.confidence, 6),
                                "snippet": ranked.hit.content.encode()[:SNIPPET_BYTES].decode(errors="ignore"),
                                "start_line": ranked.hit.start_line, "end_line": ranked.hit.end_line}
    return list(best.values())[:limit]


# -- kb_neighbors ------------------------------------------------------------------------------


class NeighborsArgs(BaseModel):
    model_config = _STRICT

    id: GraphId
    direction: Literal["out", "in", "both"] = "both"
    relation_types: list[str] | None = Field(default=None, min_length=1, max_length=MAX_LIST)
    max_depth: int = Field(default=1, ge=1, le=MAX_NEIGHBOUR_DEPTH)
    max_nodes: int = Field(default=50, ge=1, le=MAX_LIST)
    max_relations: int = Field(default=MAX_LIST, ge=1, le=MAX_NEIGHBOUR_RELATIONS)


def run_neighbors(context: ToolContext, args: NeighborsArgs) -> str:
    pool = context.backend.pool
    start = UUID(args.id)
    stored = records.read_records(pool, [start])
    if start not in stored or stored[start].kind != "node":
        raise ToolFailure("NOT_FOUND", f"id: no node {args.id}")
    found = records.neighbours(pool, start, direction=args.direction, relation_types=args.relation_types,
                               max_depth=args.max_depth, max_nodes=args.max_nodes, max_relations=args.max_relations)
    nodes = records.read_records(pool, list(found.nodes))
    return _ok({
        "start_id": args.id,
        "nodes": [{"id": str(node), "type": nodes[node].type, "label": nodes[node].label, "depth": depth,
                   "properties": nodes[node].properties} for node, depth in found.nodes.items() if node in nodes],
        "relations": found.relations, "truncated": found.truncated, "reason": found.reason,
        "frontier": [str(node) for node in found.frontier],
    })


# -- kb_delete ----------------------------------------------------------------------------------


class DeleteArgs(BaseModel):
    model_config = _STRICT

    ids: list[AnyId] = Field(min_length=1, max_length=MAX_LIST)
    cascade: bool = False

    @model_validator(mode="after")
    def _unique(self) -> DeleteArgs:
        if len(set(self.ids)) != len(self.ids):
            raise PydanticCustomError("incompatible", "ids must be unique")
        return self


def run_delete(context: ToolContext, args: DeleteArgs) -> str:
    context.require_scope("admin", "kb_delete")
    with _database_failures(), admin_database(context) as (pool, api_key):
        deleted = records.delete_records(pool, args.ids, cascade=args.cascade, api_key=api_key)
    return _ok({"status": "completed", "ids": args.ids, "deleted": deleted})


# -- kb_ingest_evidence ----------------------------------------------------------------------------


class IngestEvidenceArgs(BaseModel):
    model_config = _STRICT

    path: str | None = Field(default=None, min_length=1, max_length=4096,
                             description="A file under the server's evidence root (QUARRY_KB_ROOT).")
    text: str | None = Field(default=None, max_length=SHORT_LANE_BYTES)
    base64: str | None = Field(default=None, max_length=(SHORT_LANE_BYTES * 4) // 3 + 4)
    media_type: str | None = Field(default=None, min_length=3, max_length=255)
    encoding: Encoding = "auto"
    source: str | None = Field(default=None, min_length=1, max_length=200,
                               description="What produced the evidence (a tool, a meeting), as you name it.")

    @model_validator(mode="after")
    def _exactly_one(self) -> IngestEvidenceArgs:
        given = [name for name in ("path", "text", "base64") if getattr(self, name) is not None]
        if len(given) != 1:
            raise PydanticCustomError("incompatible", "give exactly one of path, text or base64")
        return self


def _content(context: ToolContext, args: IngestEvidenceArgs) -> bytes:
    if args.text is not None:
        return args.text.encode()
    if args.base64 is not None:
        try:
            return base64.b64decode(args.base64, validate=True)
        except binascii.Error:
            raise ToolFailure("INVALID", "base64: not strict base64",
                              problems=[Problem("base64", "must be strict base64 (RFC 4648, padded)")]) from None
    assert args.path is not None
    with _database_failures():
        found = evidence.resolve_evidence_path(context.backend.settings.kb_root, args.path)
    try:
        if found.stat().st_size > evidence.MAX_EVIDENCE_BYTES:
            raise ToolFailure("LIMIT", f"path: the file takes more than {evidence.MAX_EVIDENCE_BYTES} bytes")
        return found.read_bytes()
    except OSError as error:
        raise ToolFailure("IO_ERROR", f"path: could not read it: {error.strerror}") from None


def run_ingest_evidence(context: ToolContext, args: IngestEvidenceArgs) -> str:
    context.require_scope("admin", "kb_ingest_evidence")
    content = _content(context, args)
    warnings: list[str] = []
    media_type = args.media_type
    if media_type is None:
        media_type = "text/plain" if args.text is not None else "application/octet-stream"
        if args.text is None:
            warnings.append("MEDIA_TYPE_DEFAULTED_TEXT_INDEX_SKIPPED")
    with _database_failures(), admin_database(context) as (pool, api_key):
        stored = evidence.store_evidence(pool, content, media_type, args.encoding, args.source, api_key=api_key)
    index_state, status = stored.index_state, "completed"
    if stored.job_id is not None:
        status = "accepted"
        if context.caller is None and len(content) <= SHORT_LANE_BYTES:
            _index_now(context, stored.job_id)
            row = evidence.evidence_rows(context.backend.pool, [stored.id])[0]
            if row.index_state == "failed":
                raise ToolFailure("INDEX_ERROR", f"{stored.id} is stored, but its text could not be indexed: "
                                  f"{row.index_error}")
            index_state = row.index_state
            status = "accepted" if index_state == "pending" else "completed"
    return _ok({"evidence_id": stored.id, "status": status, "created": stored.created, "index_state": index_state,
                "job_id": str(stored.job_id) if stored.job_id and status == "accepted" else None,
                "size": stored.size, "media_type": stored.media_type, "encoding": stored.encoding,
                "warnings": warnings})


def _index_now(context: ToolContext, job_id: UUID) -> None:
    """Run the queued ``kb_index`` job now, as the local owner (a worker that took it first runs it there).

    On a pool of its own: an ingest holds a lock connection and writes on others, more than the small
    owner pool of ``admin_database`` has.
    """
    from engine.admin.jobs import JobRun
    from engine.kb.indexing import index_evidence
    from engine.store.db import database_url, open_pool

    settings = context.backend.settings
    with open_pool(database_url(settings), settings) as pool:
        claimed = JobRun.claim(pool, job_id)
        if claimed is not None:
            with claimed:
                index_evidence(pool, context.backend.embedders, settings, claimed)


# -- kb_read_evidence --------------------------------------------------------------------------------


class ReadEvidenceArgs(BaseModel):
    model_config = _STRICT

    evidence_id: EvidenceId
    offset: int = Field(default=0, ge=0)
    length: int = Field(default=READ_DEFAULT, ge=1, le=READ_MAX)
    format: Literal["base64", "text"] = "base64"


def run_read_evidence(context: ToolContext, args: ReadEvidenceArgs) -> str:
    read = evidence.read_range(context.backend.pool, args.evidence_id, args.offset, args.length)
    if read is None:
        raise ToolFailure("NOT_FOUND", f"evidence_id: no evidence {args.evidence_id}")
    content, size, media_type = read
    if args.offset > size:
        raise ToolFailure("INVALID", f"offset: {args.offset} is beyond the evidence's {size} bytes",
                          problems=[Problem("offset", f"must be at most {size}")])
    data: str
    if args.format == "base64":
        data = base64.b64encode(content).decode()
    else:
        try:
            data = content.decode()
        except UnicodeDecodeError:
            raise ToolFailure("INVALID", "format text: this range splits a character or is not UTF-8; read it as "
                              "base64, or move offset/length", problems=[Problem("format", "range is not text")]) \
                from None
    return _ok({"evidence_id": args.evidence_id, "offset": args.offset, "length": len(content), "size": size,
                "eof": args.offset + len(content) >= size, "media_type": media_type, "format": args.format,
                "data": data})


# -- kb_jobs -----------------------------------------------------------------------------------------


class JobsArgs(BaseModel):
    model_config = _STRICT

    action: Literal["list", "get", "cancel", "retry"] = "list"
    job_id: GraphId | None = None
    limit: int = Field(default=PAGE_DEFAULT, ge=1, le=MAX_LIST)
    cursor: Cursor | None = None

    @model_validator(mode="after")
    def _job_for_one(self) -> JobsArgs:
        if (self.action == "list") != (self.job_id is None):
            raise PydanticCustomError("incompatible", "job_id is for get, cancel and retry (and only those)")
        return self


def run_jobs(context: ToolContext, args: JobsArgs) -> str:
    from engine.admin.jobs import enqueue_retry, list_jobs, request_cancel, show_job

    pool = context.backend.pool
    if args.action == "list":
        selection = {"tool": "kb_jobs"}
        listed = list_jobs(pool, cursor=_after(args.cursor, selection), limit=args.limit)
        return _ok({"jobs": [job.as_dict() for job in listed.jobs],
                    "next_cursor": _cursor(selection, listed.next_cursor) if listed.next_cursor else None})
    assert args.job_id is not None
    job_id = UUID(args.job_id)
    with _database_failures():
        if args.action == "get":
            return _ok(show_job(pool, job_id).as_dict())
        context.require_scope("admin", f"kb_jobs {args.action}")
        with admin_database(context) as (admin_pool, api_key):
            if args.action == "cancel":
                return _ok({"job_id": args.job_id, "cancel": request_cancel(admin_pool, job_id, api_key=api_key)})
            retried = enqueue_retry(admin_pool, job_id, api_key=api_key)
    return _ok({"job_id": str(retried), "retry_of": args.job_id, "status": "accepted"})


# -- kb_reindex ----------------------------------------------------------------------------------------


class ReindexArgs(BaseModel):
    model_config = _STRICT


def run_reindex(context: ToolContext, _: ReindexArgs) -> str:
    context.require_scope("admin", "kb_reindex")
    with _database_failures(), admin_database(context) as (pool, api_key):
        with pool.connection() as conn:
            row = conn.execute("select quarry.kb_reindex(%s, %s)", (api_key, uuid4())).fetchone()
        assert row is not None
    job_id: UUID = row[0]
    status = "accepted"
    if context.caller is None:
        _index_now(context, job_id)
        status = "completed"
    return _ok({"job_id": str(job_id), "status": status})


# -- the profile -----------------------------------------------------------------------------------------

_DATA = {"status": "string", "data": "object"}


def kb_tools() -> list[ToolSpec[Any]]:
    def tool(name: str, title: str, arguments: type[Any], run: Callable[[ToolContext, Any], str], description: str,
             *, writes: bool = False) -> ToolSpec[Any]:
        return ToolSpec(name=name, title=title, arguments=arguments, run=run, cost=one_token, description=description,
                        read_only=not writes, audience="admin" if writes else "everyone", errors=kb_error,
                        output_schema=shape(_DATA))

    return [
        tool("kb_status", "Knowledge base status", StatusArgs, run_status,
             "Health, counts, index and job queue state, scope and the fixed limits."),
        tool("kb_types", "Record types", TypesArgs, run_types,
             "The fixed node and relation types (required and identity properties, endpoint types) with ready "
             "counts; cursor pages of 20 (max 100)."),
        tool("kb_write", "Write records", WriteArgs, run_write,
             "Atomically create or patch nodes and relations and add/remove evidence links. Create: type + "
             "properties (a node is found again by its identity property); patch: id (objects merge, "
             "remove_properties takes RFC 6901 pointers). Relations name endpoints by {id} or {node_index}.",
             writes=True),
        tool("kb_get", "Read records", GetArgs, run_get,
             "Read nodes, relations or evidence by ids (in order; remaining_ids when the 256 KiB cap is hit), or "
             "kind links: the evidence links of a record or evidence (cursor)."),
        tool("kb_search", "Search records and evidence", SearchArgs, run_search,
             "Find nodes, relations or evidence: query literal (exact text and case) or words (every word, any "
             "order); sort id (cursor) or relevance (best 100; evidence ranked by Quarry's hybrid search)."),
        tool("kb_neighbors", "Traverse relations", NeighborsArgs, run_neighbors,
             "Nodes and relations around a node, breadth first within max_depth/max_nodes/max_relations; "
             "truncated, reason and frontier say where it stopped."),
        tool("kb_delete", "Delete records", DeleteArgs, run_delete,
             "Delete 1-100 records or evidence atomically; a node with relations or linked evidence is refused "
             "(CONFLICT: DEPENDENCIES_EXIST) unless cascade.", writes=True),
        tool("kb_ingest_evidence", "Store evidence", IngestEvidenceArgs, run_ingest_evidence,
             "Store exact bytes from exactly one of path (under the evidence root), text or base64 as evidence "
             "e_<sha256>, and index its text when media_type is text.", writes=True),
        tool("kb_read_evidence", "Read evidence bytes", ReadEvidenceArgs, run_read_evidence,
             "A byte range of evidence (length default 16 KiB, max 64 KiB) as base64 or UTF-8 text."),
        tool("kb_jobs", "Jobs", JobsArgs, run_jobs,
             "List jobs (cursor), get one, or (admin) cancel or retry it."),
        tool("kb_reindex", "Rebuild indexes", ReindexArgs, run_reindex,
             "Rebuild what is derived from the records and evidence (search text, the evidence index).",
             writes=True),
    ]


KB_INSTRUCTIONS = """\
A knowledge base beside the indexed docs and code: nodes and relations of fixed types (kb_types) backed by \
evidence (exact bytes, kb_ingest_evidence). Write with kb_write, read with kb_get, find with kb_search, walk \
with kb_neighbors. Answers are {"status":"ok","data":...} or {"status":"error","error":"CODE: message"}."""


def kb_profile(_: Settings) -> Profile:
    return Profile("kb", tuple(kb_tools()), KB_INSTRUCTIONS)
