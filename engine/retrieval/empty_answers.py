"""Why a search found nothing when the reason is the corpus, not the query: nothing ingested, or a source
named that does not exist (a typo would otherwise read as "no results")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

from engine.errors import NotFoundError

INGEST_HINT = "quarry ingest DIR --source NAME"


def nothing_to_search(pool: ConnectionPool, sources: Sequence[str]) -> str | None:
    """Why a search of ``sources`` (all when empty) cannot find anything, or None when there is something.

    Raises ``NotFoundError`` naming the unknown sources and the known ones.
    """
    with pool.connection() as conn:
        holding: dict[str, bool] = dict(conn.execute(
            "select s.slug, exists (select 1 from quarry.chunks c where c.source_id = s.id)"
            " from quarry.sources s order by s.slug").fetchall())
    unknown = [slug for slug in sources if slug not in holding]
    if unknown:
        names = ", ".join(map(repr, unknown))
        known = ", ".join(holding) or f"none yet ({INGEST_HINT})"
        raise NotFoundError(f"no source named {names}; the sources are: {known}")
    if not any(holding.values()):
        return f"the corpus is empty: ingest something first ({INGEST_HINT})"
    if sources and not any(holding[slug] for slug in sources):
        return f"no documents in {', '.join(sources)} yet: ingest first (quarry ingest DIR --source {sources[0]})"
    return None
