"""The one SQL call of a search: ``quarry.search_hits`` by named arguments, rows as ``SearchHit``.

Arguments travel by name, and only those a caller sets: a parameter left out takes the
SQL default (``quarry.ranking_defaults()`` for ranking), so no default is spelled twice.
Legs the database left out come back as data (``legs_left_out``), never as message text, and the
query's lexemes (for highlights) with the rows, so a search is one round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from uuid import UUID

from pgvector import Vector
from psycopg import Cursor, sql
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool

from engine.retrieval.request import LEGS, Leg, VersionMatch
from engine.store.db import autocommit

if TYPE_CHECKING:  # numpy (~80 ms) is imported by what embeds, not by every search: fts needs none
    from engine.embed.base import Vectors

logger = logging.getLogger("quarry.search")

#: Why a leg was left out: its query embedding failed (Python), it errored in the database,
#: or its space holds vectors of another model than the query's.
LegFailureReason = Literal["embedding_failed", "error", "model_mismatch"]


@dataclass(frozen=True, slots=True)
class LegFailure:
    leg: Leg
    reason: LegFailureReason
    #: Client-safe detail (a provider's short reason, the two model names); never a database message.
    detail: str | None = None

    def describe(self) -> str:
        if self.reason == "error" or self.detail is None:
            return f"the {self.leg} leg failed in the database and was left out"
        return f"{self.detail}; the {self.leg} leg was left out"


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked chunk, with where it comes from and how each leg ranked it."""

    chunk_id: UUID
    document_id: UUID
    source_slug: str
    source_name: str
    source_kind: str
    attribution: str
    verified: bool
    deprecated: bool
    changed_at: datetime
    path: str
    title: str
    url: str | None
    heading_path: list[str]
    symbol_path: str | None
    start_line: int
    end_line: int
    content: str
    content_type: str
    language: str | None
    is_code: bool
    fused_score: float
    #: quarry.retrieval_confidence: how much the retrieval evidence supports the hit, in [0, 1].
    confidence: float
    fts_rank: int | None
    vector_rank: int | None
    code_rank: int | None
    fts_score: float | None
    vector_similarity: float | None
    code_similarity: float | None
    version_match: VersionMatch
    #: ``{"score": 0.82, "factors": {"attribution": {"raw", "value", "weight", "contribution"}, ...}}``
    trust: dict[str, Any]
    #: The vector leg's weight in this hit's fusion (by chunk kind, lowered for a long query; mean over queries).
    vector_weight_used: float | None
    #: The share of the score taken from the hit's document's best evidence per leg (0 for a one-chunk document).
    document_share: float | None


@dataclass(frozen=True, slots=True)
class HitPage:
    """Ranked hits, and the legs the database left out."""

    hits: list[SearchHit]
    failed_legs: list[LegFailure] = field(default_factory=list)
    #: Legs left out because another leg already ranks the same vectors (the code leg, one model serving both).
    redundant_legs: list[Leg] = field(default_factory=list)
    #: What the keyword leg searched for over every query (``quarry.query_lexemes``; empty in vector mode and
    #: when nothing was found).
    lexemes: frozenset[str] = frozenset()
    #: Chunks the per-document cap left out before the page filled (0 without a cap).
    passed_over: int = 0


def search_hits(
    pool: ConnectionPool,
    texts: Sequence[str],
    *,
    mode: str,
    limit: int,
    text_vectors: Vectors | None = None,
    code_vectors: Vectors | None = None,
    code_mode: str,
    version_match: str,
    filters: str | None = None,
    query_model: str | None = None,
    code_query_model: str | None = None,
    overrides: Mapping[str, object] | None = None,
    per_document: int | None = None,
    page_size: int | None = None,
) -> HitPage:
    """``quarry.search_hits`` for distinct ``texts``; vectors have one row per text, in order.

    With ``per_document``, the database keeps at most that many chunks of one document while walking the
    ``limit`` fused hits in order, and returns at most ``page_size`` of them.
    """
    arguments: dict[str, object] = {
        "query_texts": list(texts), "search_mode": mode, "match_count": limit, "code_mode": code_mode,
        "version_matching": version_match,
        **(overrides or {}),
    }
    optional = {"query_embeddings": _as_vectors(text_vectors, texts),
                "code_embeddings": _as_vectors(code_vectors, texts),
                "filters": filters, "query_model": query_model, "code_query_model": code_query_model,
                "per_document": per_document, "page_size": page_size}
    arguments.update({name: value for name, value in optional.items() if value is not None})
    # One read statement: in autocommit it is its own transaction, without BEGIN and COMMIT round trips.
    with pool.connection() as conn, autocommit(conn), conn.cursor(row_factory=_hit_or_failures) as cursor:
        rows = cursor.execute(_statement(tuple(arguments)), arguments).fetchall()
    hits = [row.hit for row in rows if row.hit is not None]
    if not rows:
        return HitPage(hits)
    first = rows[0]  # the search-wide columns come on the first row only
    left_out: Mapping[str, Mapping[str, str]] = first.legs_left_out or {}
    redundant = [leg for leg in LEGS if left_out.get(leg, {}).get("reason") == "redundant"]
    return HitPage(hits, _failures({leg: why for leg, why in left_out.items() if leg not in redundant}), redundant,
                   frozenset(first.query_lexemes or ()), first.passed_over or 0)


@lru_cache(maxsize=64)
def _statement(names: tuple[str, ...]) -> bytes:
    """``select * from quarry.search_hits(name => %(name)s, ...)``: one text per argument set, so it is prepared
    (and composed once: psycopg composes an ``sql.Composed`` again on every call, 0.1 ms)."""
    def placeholder(name: str) -> sql.Placeholder:
        # vectors travel as binary floats: as text the client prints and the server parses 384 decimals each
        return sql.Placeholder(name, "b" if name.endswith("embeddings") else "s")

    def cast(name: str) -> sql.Composable:
        return sql.SQL("{}::jsonb").format(placeholder(name)) if name == "filters" else placeholder(name)

    return sql.SQL("select * from quarry.search_hits({})").format(
        sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(name), cast(name)) for name in names)
    ).as_bytes(None)


class _HitRow(NamedTuple):
    """One row of ``quarry.search_hits``: the hit (None on the failure-only row), then the search-wide columns."""

    hit: SearchHit | None
    legs_left_out: Mapping[str, Mapping[str, str]] | None
    query_lexemes: list[str] | None
    passed_over: int | None


def _hit_or_failures(cursor: Cursor[Any]) -> RowMaker[_HitRow]:
    names = [column.name for column in cursor.description or ()]

    def make(values: Sequence[Any]) -> _HitRow:
        row = dict(zip(names, values, strict=True))
        search_wide = row.pop("legs_left_out"), row.pop("query_lexemes"), row.pop("passed_over")
        # with no hit but a failed leg, the database sends one row without a chunk
        return _HitRow(SearchHit(**row) if row["chunk_id"] is not None else None, *search_wide)

    return make


def _failures(reported: Mapping[str, Mapping[str, str]] | None) -> list[LegFailure]:
    failures = []
    for leg in LEGS:
        failure = (reported or {}).get(leg)
        if failure is None:
            continue
        if failure["reason"] == "model_mismatch":
            failures.append(LegFailure(leg, "model_mismatch", failure.get("detail")))
        else:
            logger.warning("search leg %s failed in the database (its message is in the database's log)", leg)
            failures.append(LegFailure(leg, "error"))
    return failures


def _as_vectors(vectors: Vectors | None, texts: Sequence[str]) -> list[Vector] | None:
    if vectors is None:
        return None
    if len(vectors) != len(texts):
        raise ValueError(f"got {len(vectors)} query vectors for {len(texts)} distinct queries")
    return [Vector(vector) for vector in vectors]
