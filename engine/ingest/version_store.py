"""Storing what versions documents state: their constraints (ranges parsed once, in SQL) and manifests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg import Connection

from engine.ingest.manifest_paths import manifest_directory
from engine.ingest.versions import VersionConstraint

_INSERT_CONSTRAINTS = """
    insert into quarry.version_constraints
        (document_id, source_id, facet, name, range_text, version_range, raw, origin)
    select r.document_id, r.source_id, r.facet, r.name, r.range_text, r.version_range, r.raw, r.origin
    from unnest(%s::uuid[], %s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
         as u (document_id, source_id, facet, name, range_text, raw, origin)
    -- a range the SQL parser refuses is skipped, not allowed to fail the whole batch
    cross join lateral (select u.*, quarry.try_version_range(u.range_text) as version_range) r
    where r.version_range is not null
"""


@dataclass(frozen=True, slots=True)
class StatedVersions:
    """One stored document and what it says about versions."""

    document_id: UUID
    source_id: int
    path: str
    manifest_kind: str | None  # set when the document is a dependency manifest
    constraints: Sequence[VersionConstraint]


def store_versions(conn: Connection[Any], documents: Sequence[StatedVersions]) -> int:
    """Insert the documents' constraints and manifest rows; returns the number of constraints stored."""
    manifests = [(doc.document_id, doc.source_id, doc.manifest_kind, manifest_directory(doc.path))
                 for doc in documents if doc.manifest_kind is not None]
    if manifests:
        conn.cursor().executemany(
            "insert into quarry.manifests (document_id, source_id, kind, scope) values (%s, %s, %s, %s)", manifests)
    rows = [(doc.document_id, doc.source_id, c.facet, c.name or "", c.range, c.raw[:500], c.origin)
            for doc in documents for c in doc.constraints]
    if not rows:
        return 0
    cursor = conn.execute(_INSERT_CONSTRAINTS, [list(column) for column in zip(*rows, strict=True)])
    return cursor.rowcount
