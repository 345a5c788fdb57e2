"""The one SQL call of a search: ``quarry.search_hits`` by named arguments, rows as ``SearchHit``.

Arguments travel by name, and only those a caller sets: a parameter left out takes the
SQL default (``quarry.ranking_defaults()`` for ranking), so no default is spelled twice.
Legs the database left out come back as data (``legs_left_out``), never as message text, and the
query's lexemes (for highlights) with the rows, so a search is one round trip.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from uuid import UUID

import psycopg
from pgvector import Vector
from psycopg import Connection, Cursor, sql
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool, PoolTimeout

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
    # Read statements in autocommit: each is its own transaction, without BEGIN and COMMIT round trips.
    with pool.connection() as conn, autocommit(conn):
        if (mode == "hybrid" and ("query_embeddings" in arguments or "code_embeddings" in arguments)
                and _indexed_vectors(pool, conn) >= LEGS_AT_ONCE_MIN_VECTORS):
            arguments.update(_legs_at_once(pool, conn, arguments))
        with conn.cursor(row_factory=_hit_or_failures) as cursor:
            rows = cursor.execute(_statement(tuple(arguments)), arguments).fetchall()
    hits = [row.hit for row in rows if row.hit is not None]
    if not rows:
        return HitPage(hits)
    first = rows[0]  # the search-wide columns come on the first row only
    left_out: Mapping[str, Mapping[str, str]] = first.legs_left_out or {}
    redundant = [leg for leg in LEGS if left_out.get(leg, {}).get("reason") == "redundant"]
    return HitPage(hits, _failures({leg: why for leg, why in left_out.items() if leg not in redundant}), redundant,
                   frozenset(first.query_lexemes or ()), first.passed_over or 0)


#: Running a hybrid search's legs at once pays from about this many indexed vectors. Below it each leg takes
#: about a millisecond, and the two statements more and the second connection cost more than they save: one
#: client, p50 of search_hits, at 5k chunks +0.7 ms, at 100k -1.5 ms, at 1M -1.8 ms (docs/benchmarks-log.md,
#: "A hybrid search's legs at once"; the crossover between 5k and 100k was not bisected).
LEGS_AT_ONCE_MIN_VECTORS = 50_000

#: How long a pool's count of indexed vectors is reused before it is read again (a catalog read).
INDEXED_VECTORS_TTL_S = 60.0

_indexed_vector_counts: weakref.WeakKeyDictionary[ConnectionPool, tuple[float, float]] = weakref.WeakKeyDictionary()


def _indexed_vectors(pool: ConnectionPool, conn: Connection[Any]) -> float:
    """``quarry.indexed_vectors`` of the spaces a search reads, read through ``conn`` once a minute per pool."""
    now = time.monotonic()
    read_at, count = _indexed_vector_counts.get(pool, (-INDEXED_VECTORS_TTL_S, 0.0))
    if now - read_at >= INDEXED_VECTORS_TTL_S:
        row = conn.execute("select quarry.indexed_vectors(array['text', 'code'])").fetchone()
        count = float(row[0]) if row is not None else 0.0
        _indexed_vector_counts[pool] = (now, count)
    return count


#: How long a search waits for a second pooled connection when the pool has none idle but may open one. Not
#: zero: the pool then refuses even an idle connection; and a wait it gives up on grows the pool for the next.
SPARE_CONNECTION_WAIT_S = 0.0005

#: ``quarry.search_leg_hits``' arguments besides ``legs``: the search's own, as ``quarry.search_hits`` takes them.
_LEG_ARGUMENTS = frozenset({
    "query_texts", "query_embeddings", "search_mode", "match_count", "filters", "embedding_space", "candidate_count",
    "code_embeddings", "code_mode", "version_matching", "query_model", "code_query_model"})

#: ``quarry.search_leg_hits``' columns, which ``quarry.search_hits`` takes as arguments of the same names.
_LEG_HIT_ARGUMENTS = ("leg_hit_legs", "leg_hit_ordinals", "leg_hit_chunks", "leg_hit_scores")


def _legs_at_once(pool: ConnectionPool, conn: Connection[Any], arguments: Mapping[str, object]) -> dict[str, object]:
    """The legs' rows as ``quarry.search_hits``' ``leg_hit_*`` arguments, the keyword leg on a second connection
    while ``conn`` runs the vector legs; empty when no connection is free or a leg fails.

    In one statement the legs run one after the other; at once, a hybrid search takes about the longer leg's
    time instead of both (docs/benchmarks-log.md, "A hybrid search's legs at once"). Only an idle pooled
    connection is taken, so a busy pool runs the one statement instead of waiting. Given nothing, the one
    statement runs the legs itself, and leaves out a leg that fails there, as before.
    """
    measures = pool.get_stats()
    if measures["pool_available"] == 0 and measures["pool_size"] >= measures["pool_max"]:
        return {}  # every connection is busy (or there is one): waiting for another would only slow this search
    try:
        spare = pool.getconn(timeout=SPARE_CONNECTION_WAIT_S)
    except PoolTimeout:
        return {}
    leg_arguments = {name: value for name, value in arguments.items() if name in _LEG_ARGUMENTS}
    names = tuple(leg_arguments)
    try:
        # in a pipeline the keyword leg is sent at once and read after the vector legs
        with autocommit(spare), spare.pipeline():
            keyword = spare.execute(_leg_statement(("fts",), names), leg_arguments)
            vector_legs = conn.execute(_leg_statement(("vector", "code"), names), leg_arguments).fetchone()
            keyword_leg = keyword.fetchone()
    except psycopg.errors.QueryCanceled:
        raise  # the statement timeout: the one statement would only wait as long again
    except psycopg.Error as error:
        logger.info("search legs at once failed (%s); the one statement runs them", type(error).__name__)
        return {}
    finally:
        pool.putconn(spare)
    if keyword_leg is None or vector_legs is None:
        return {}
    return {name: _joined_arrays(keyword_leg[i], vector_legs[i]) for i, name in enumerate(_LEG_HIT_ARGUMENTS)}


def _joined_arrays(first: str, second: str) -> str:
    """Two array literals as one. The legs' arrays travel as text, not decoded in between (a tenth of a
    millisecond each way as Python lists); none of their elements (leg names, ints, UUIDs, floats) is quoted."""
    elements = [literal[1:-1] for literal in (first, second) if literal != "{}"]
    return "{" + ",".join(elements) + "}"


@lru_cache(maxsize=64)
def _statement(names: tuple[str, ...]) -> bytes:
    """``select * from quarry.search_hits(name => %(name)s, ...)``: one text per argument set, so it is prepared
    (and composed once: psycopg composes an ``sql.Composed`` again on every call)."""
    return sql.SQL("select * from quarry.search_hits({})").format(_named_arguments(names)).as_bytes(None)


@lru_cache(maxsize=64)
def _leg_statement(legs: tuple[str, ...], names: tuple[str, ...]) -> bytes:
    """``quarry.search_leg_hits(legs => '{...}', name => %(name)s, ...)``, its arrays as text."""
    return sql.SQL("select {} from quarry.search_leg_hits(legs => {}, {})").format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(name)) for name in _LEG_HIT_ARGUMENTS),
        sql.Literal(list(legs)), _named_arguments(names)).as_bytes(None)


#: The types of the arguments that travel as text and are not inferred from their Python values.
_ARGUMENT_TYPES = {"filters": "jsonb", "leg_hit_legs": "text[]", "leg_hit_ordinals": "int[]",
                   "leg_hit_chunks": "uuid[]", "leg_hit_scores": "double precision[]"}


def _named_arguments(names: Sequence[str]) -> sql.Composed:
    def argument(name: str) -> sql.Composable:
        # vectors travel as binary floats: as text the client prints and the server parses 384 decimals each
        placeholder = sql.Placeholder(name, "b" if name.endswith("embeddings") else "s")
        cast = _ARGUMENT_TYPES.get(name)
        return placeholder if cast is None else sql.SQL("{}::{}").format(placeholder, sql.SQL(cast))

    return sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(name), argument(name)) for name in names)


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
