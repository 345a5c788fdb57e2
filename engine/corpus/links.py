"""Relations between documents: storing the links and imports read at ingest, and walking them.

Edges keep their target *paths* (``engine.ingest.relations``) and are resolved to
documents when read (``quarry.relation_target``): a target ingested later, replaced
under a new id or renamed needs no write to the edges that name it. ``neighbors``
walks them breadth first in one SQL call (``quarry.neighbors``), bounded by a depth
(at most 3) and a budget of results.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg import Connection
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.errors import NotFoundError
from engine.ingest.references import Relation
from engine.ingest.relations import references_in_document

__all__ = [
    "MAX_BUDGET", "MAX_DEPTH", "Direction", "Hop", "Neighbor", "NeighborWalk", "neighbors", "store_relations",
]

MAX_DEPTH = 3
MAX_BUDGET = 1000

Direction = Literal["out", "in", "both"]


@dataclass(frozen=True, slots=True)
class Hop:
    """One edge of a path: ``source`` refers to ``target_document`` (null when unresolved) by ``target``."""

    source: UUID
    relation: Relation
    target_document: UUID | None
    target: str
    line: int


@dataclass(frozen=True, slots=True)
class Neighbor:
    level: int  # 0: the start document
    document_id: UUID | None  # None: an unresolved or external target
    path: str | None
    title: str | None
    relation: Relation | None  # of the last hop
    target: str | None  # the last hop's target as written
    hops: list[Hop]
    frontier: bool  # its neighbours were not all returned


@dataclass(frozen=True, slots=True)
class NeighborWalk:
    start: Neighbor
    neighbors: list[Neighbor]
    truncated: bool
    reason: str | None

    @property
    def frontier(self) -> list[UUID]:
        """Documents to walk on from: their neighbours were cut by the budget."""
        return [node.document_id for node in (self.start, *self.neighbors)
                if node.frontier and node.document_id is not None]


@dataclass(frozen=True, slots=True)
class _Row:
    level: int
    document_id: UUID | None
    path: str | None
    title: str | None
    via: Relation | None
    target: str | None
    hops: list[dict[str, Any]]
    frontier: bool
    truncated: bool
    reason: str | None


def store_relations(conn: Connection[Any], source_id: int, documents: Iterable[tuple[UUID, str, bytes]]) -> int:
    """Read and insert the links and imports of ``(document_id, path, raw)``; returns the edges stored."""
    rows = [
        (document_id, source_id, ref.relation, ref.target, list(ref.candidates), ref.anchored, ref.line)
        for document_id, path, raw in documents
        for ref in references_in_document(path, raw.decode("utf-8", errors="replace"))
    ]
    if not rows:
        return 0
    with conn.cursor().copy(
        "copy quarry.relations (document_id, source_id, relation, target, candidates, anchored, line)"
        " from stdin with (format binary)"
    ) as copy:
        copy.set_types(["uuid", "int8", "text", "text", "text[]", "bool", "int4"])
        for row in rows:
            copy.write_row(row)
    return len(rows)


def neighbors(pool: ConnectionPool, start: UUID, *, relation: Relation | None = None, depth: int = 1,
              budget: int = 100, direction: Direction = "out") -> NeighborWalk:
    """Documents reachable from ``start`` (a document or chunk id), with the path taken to each.

    Raises ``NotFoundError`` when ``start`` is neither a document nor a chunk.
    """
    with pool.connection() as conn, conn.cursor(row_factory=class_row(_Row)) as cursor:
        try:
            rows = cursor.execute(
                "select * from quarry.neighbors(%s, relation => %s, depth => %s, budget => %s, direction => %s)",
                (start, relation, depth, budget, direction),
            ).fetchall()
        except psycopg.errors.NoDataFound:
            raise NotFoundError(f"no document or chunk with id {start}") from None
    first, *rest = [_neighbor(row) for row in rows]
    return NeighborWalk(first, rest, rows[0].truncated, rows[0].reason)


def _neighbor(row: _Row) -> Neighbor:
    return Neighbor(row.level, row.document_id, row.path, row.title, row.via, row.target,
                    _hops(row.hops), row.frontier)


def _hops(hops: Sequence[dict[str, Any]]) -> list[Hop]:
    return [Hop(UUID(hop["from"]), hop["relation"], UUID(hop["to"]) if hop["to"] else None, hop["target"],
                hop["line"]) for hop in hops]
