"""Facets: the keys a search can filter on, their valid values, and document counts per value.

Fixed-set facets have a closed list of values (every value is reported, with 0 when no
document has it, so a client learns what it may filter on). Open-set facets take
whatever ingestion found; ``facet_values`` reads them from ``quarry.facet_values``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, get_args

from engine.retrieval.request import FacetValue, Filters, filters_json
from engine.vocabulary import CHUNK_KINDS, Attribution, SourceKind

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

#: Document content types the parsers produce (``ParsedDocument.content_type``).
CONTENT_TYPES: tuple[str, ...] = ("markdown", "rst", "html", "text", "code")

FIXED_FACETS: dict[str, tuple[FacetValue, ...]] = {
    "kind": get_args(SourceKind),
    "attribution": get_args(Attribution),
    "content_type": CONTENT_TYPES,
    "verified": (True, False),
    "deprecated": (True, False),
    "chunk_kind": CHUNK_KINDS,
}
#: Facets counted only when named: they read every matching document's chunks, where the others read counts.
ON_REQUEST_FACETS: tuple[str, ...] = ("chunk_kind",)
OPEN_FACETS: tuple[str, ...] = ("source_slug", "language", "package")
#: Facets over version constraints: values are languages / packages, and a rule may
#: also carry ``version_satisfies`` (a node-semver range).
VERSION_FACETS: tuple[str, ...] = ("language_target", "sdk_dependency")
FACET_KEYS: tuple[str, ...] = (*OPEN_FACETS, *VERSION_FACETS, *FIXED_FACETS)
#: Filters over where a chunk is, by pattern rather than value: ``path`` globs (``src/**/*.py``) and ``symbol``
#: names (``Client.connect``, matching whole dotted segments of a chunk's symbol_path). No value counts.
LOCATION_FILTERS: tuple[str, ...] = ("path", "symbol")
FILTER_KEYS: tuple[str, ...] = (*FACET_KEYS, *LOCATION_FILTERS)
BOOLEAN_FACETS: frozenset[str] = frozenset({"verified", "deprecated"})


@dataclass(frozen=True, slots=True)
class FacetCount:
    value: FacetValue
    documents: int


@dataclass(frozen=True, slots=True)
class FacetSummary:
    """The most common values of one facet; ``total_values`` counts every value that matched."""

    facet: str
    values: list[FacetCount]
    total_values: int


@dataclass(frozen=True, slots=True)
class _FacetRow:
    facet_key: str
    facet_value: str
    documents: int
    total_values: int


def facet_values(
    pool: ConnectionPool,
    facets: Sequence[str] | None = None,
    *,
    filters: Filters | None = None,
    prefix: str | None = None,
    limit: int = 50,
) -> list[FacetSummary]:
    """Values and document counts per facet (when ``facets`` is None, all but ``ON_REQUEST_FACETS``), under ``filters``.

    A chunk facet (``chunk_kind``) counts the documents having a chunk of that value that passes the filters.
    """
    wanted = list(facets) if facets is not None else [name for name in FACET_KEYS if name not in ON_REQUEST_FACETS]
    unknown = [name for name in wanted if name not in FACET_KEYS]
    if unknown:
        raise ValueError(f"unknown facets {unknown}: expected {', '.join(FACET_KEYS)}")
    single = wanted[0] if len(wanted) == 1 else None
    from psycopg.rows import class_row  # here: the CLI builds its arguments from this module's vocabularies

    with pool.connection() as conn, conn.cursor(row_factory=class_row(_FacetRow)) as cursor:
        cursor.execute(
            "select * from quarry.facet_values(%s, %s::jsonb, %s, %s)",
            (single, filters_json(filters), prefix, limit),
        )
        rows = cursor.fetchall()
    found: dict[str, list[_FacetRow]] = {}
    for row in rows:
        found.setdefault(row.facet_key, []).append(row)
    return [_summary(name, found.get(name, []), prefix, limit) for name in wanted]


def _summary(name: str, rows: list[_FacetRow], prefix: str | None, limit: int) -> FacetSummary:
    if name not in FIXED_FACETS:
        return FacetSummary(name, [FacetCount(row.facet_value, row.documents) for row in rows],
                            rows[0].total_values if rows else 0)
    counts = {row.facet_value: row.documents for row in rows}
    candidates = [value for value in FIXED_FACETS[name] if _matches(_text(value), prefix)]
    ordered = sorted(candidates, key=lambda value: (-counts.get(_text(value), 0), _text(value)))
    return FacetSummary(name, [FacetCount(value, counts.get(_text(value), 0)) for value in ordered[:limit]],
                        len(candidates))


def _text(value: FacetValue) -> str:
    """How SQL spells a facet value (booleans as 'true'/'false')."""
    return ("true" if value else "false") if isinstance(value, bool) else value


def _matches(value: str, prefix: str | None) -> bool:
    return prefix is None or value.lower().startswith(prefix.lower())
