"""What an empty strict-version search can offer instead: the versions that are indexed."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from engine.retrieval.request import Filters, filters_json


def version_hint(pool: ConnectionPool, filters: Filters, limit: int = 20) -> list[dict[str, Any]]:
    """Versions indexed for the packages / languages a filter's version rules name (for an empty strict search)."""
    with pool.connection() as conn:
        rows = conn.execute("select * from quarry.version_hint(%s::jsonb, %s)", (filters_json(filters), limit))
        return [{"facet": facet, "name": name or None, "versions": range_text, "as_written": written,
                 "documents": documents}
                for facet, name, range_text, written, documents in rows.fetchall()]


def has_version_rule(filters: Filters) -> bool:
    return any("version_satisfies" in filters.get(facet, {}) for facet in ("language_target", "sdk_dependency"))
