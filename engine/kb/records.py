"""Graph records: write, read, find, traverse and delete nodes and relations of the catalogue.

Requests are checked against ``engine.kb.catalog`` here (types, identity property, endpoint
types travel with each item) and written by ``quarry.kb_write``, which resolves identities and
references in one transaction; reads are the select-only functions of sql/088-knowledge-base.sql.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError
from engine.kb.catalog import node_type, relation_type

__all__ = ["FoundRecord", "Neighbourhood", "RecordRow", "delete_records", "find_records", "neighbours",
           "read_records", "type_counts", "utc", "write_records"]


@dataclass(frozen=True, slots=True)
class RecordRow:
    id: UUID
    kind: str
    type: str
    label: str | None
    properties: dict[str, Any]
    source_id: UUID | None
    target_id: UUID | None
    first_seen: datetime
    last_seen: datetime
    evidence: list[str]

    def as_dict(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"id": str(self.id), "kind": self.kind, "type": self.type, "label": self.label,
                                 "properties": self.properties, "first_seen": utc(self.first_seen),
                                 "last_seen": utc(self.last_seen), "evidence_ids": self.evidence}
        if self.kind == "relation":
            shown["source_id"], shown["target_id"] = str(self.source_id), str(self.target_id)
        return shown


def utc(moment: datetime) -> str:
    """Fixed six-digit UTC, as the contract's outputs are."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _node_item(index: int, item: dict[str, Any]) -> dict[str, Any]:
    address = f"nodes[{index}]"
    if "id" in item:
        return item  # a patch: its type and identity property are the stored node's
    kind = node_type(item.get("type") or "")
    if kind is None:
        raise InvalidRequestError(f"{address}.type: creating a node needs a catalogue type (kb_types lists them)",
                                  argument=f"{address}.type")
    identity = (item.get("properties") or {}).get(kind.identity)
    if not isinstance(identity, str) or not identity.strip():
        raise InvalidRequestError(f"{address}.properties.{kind.identity}: a {kind.name} node needs a non-empty "
                                  f"string {kind.identity!r} (its identity)",
                                  argument=f"{address}.properties.{kind.identity}")
    return {**item, "identity_property": kind.identity}


def _relation_item(index: int, item: dict[str, Any]) -> dict[str, Any]:
    address = f"relations[{index}]"
    if "id" in item:
        return item
    kind = relation_type(item.get("type") or "")
    if kind is None:
        raise InvalidRequestError(f"{address}.type: creating a relation needs a catalogue type (kb_types lists "
                                  "them)", argument=f"{address}.type")
    return {**item, "source_types": list(kind.source_types), "target_types": list(kind.target_types)}


def write_records(pool: ConnectionPool, nodes: Sequence[dict[str, Any]], relations: Sequence[dict[str, Any]],
                  observed: datetime, *, api_key: str | None) -> dict[str, Any]:
    """Write the nodes, then the relations (which may name a node by its index in ``nodes``), atomically."""
    request = {"nodes": [_node_item(i, dict(item)) for i, item in enumerate(nodes)],
               "relations": [_relation_item(i, dict(item)) for i, item in enumerate(relations)]}
    with pool.connection() as conn:
        row = conn.execute("select quarry.kb_write(%s, %s, %s)", (api_key, Jsonb(request), observed)).fetchone()
    assert row is not None
    written: dict[str, Any] = row[0]
    return written


def read_records(pool: ConnectionPool, ids: Sequence[UUID]) -> dict[UUID, RecordRow]:
    with pool.connection() as conn:
        rows = conn.execute("select * from quarry.kb_record_rows(%s)", (list(ids),)).fetchall()
    return {row[0]: RecordRow(*row) for row in rows}


@dataclass(frozen=True, slots=True)
class FoundRecord:
    id: UUID
    kind: str
    type: str
    label: str | None
    search_text: str
    rank: float


def find_records(pool: ConnectionPool, kind: str, record_type: str | None, *, literal: str | None,
                 words: Sequence[str] | None, by_relevance: bool, after: UUID | None, limit: int,
                 properties: Mapping[str, Any] | None = None) -> list[FoundRecord]:
    """Records of ``kind`` (and ``record_type``) whose properties hold ``properties`` exactly, matching the text."""
    with pool.connection() as conn:
        rows = conn.execute("select * from quarry.kb_find_records(%s, %s, %s, %s, %s, %s, %s, %s)",
                            (kind, record_type, None if properties is None else Jsonb(dict(properties)), literal,
                             list(words) if words is not None else None, by_relevance, after, limit)).fetchall()
    return [FoundRecord(*row) for row in rows]


@dataclass(slots=True)
class Neighbourhood:
    nodes: dict[UUID, int] = field(default_factory=dict)  # node -> depth reached at
    relations: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    reason: str | None = None
    frontier: list[UUID] = field(default_factory=list)


def neighbours(pool: ConnectionPool, start: UUID, *, direction: str, relation_types: Sequence[str] | None,
               max_depth: int, max_nodes: int, max_relations: int) -> Neighbourhood:
    """Breadth first from ``start`` over stored relations, within the budgets; ``frontier`` is where it stopped."""
    found = Neighbourhood(nodes={start: 0})
    level = [start]
    seen: set[UUID] = set()
    types = list(relation_types) if relation_types else None
    with pool.connection() as conn:
        for depth in range(1, max_depth + 2):
            rows = [row for row in conn.execute("select * from quarry.kb_relations_of(%s, %s, %s)",
                                                (level, direction, types)).fetchall() if row[0] not in seen]
            if not rows:
                return found
            if depth > max_depth:
                found.truncated, found.reason, found.frontier = True, "max_depth", level
                return found
            following: list[UUID] = []
            for relation_id, kind, label, properties, source_id, target_id, other in rows:
                if len(found.relations) >= max_relations or (other not in found.nodes
                                                             and len(found.nodes) >= max_nodes):
                    found.truncated = True
                    found.reason = "max_relations" if len(found.relations) >= max_relations else "max_nodes"
                    found.frontier = level
                    return found
                seen.add(relation_id)
                found.relations.append({"id": str(relation_id), "type": kind, "label": label,
                                        "properties": properties, "source_id": str(source_id),
                                        "target_id": str(target_id), "depth": depth})
                if other not in found.nodes:
                    found.nodes[other] = depth
                    following.append(other)
            if not following:
                return found
            level = following
    return found


def delete_records(pool: ConnectionPool, ids: Sequence[str], *, cascade: bool, api_key: str | None) -> dict[str, int]:
    with pool.connection() as conn:
        row = conn.execute("select quarry.kb_delete(%s, %s, %s)", (api_key, list(ids), cascade)).fetchone()
    assert row is not None
    deleted: dict[str, int] = row[0]
    return deleted


def type_counts(pool: ConnectionPool) -> dict[tuple[str, str], int]:
    with pool.connection() as conn:
        return {(kind, name): int(ready)
                for kind, name, ready in conn.execute("select * from quarry.kb_type_counts()").fetchall()}
