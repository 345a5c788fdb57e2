"""Bring-your-own vector stores: vectors computed elsewhere, kept and searched in Postgres.

A *store* is named and fixes a dimension (1-4000, HNSW's limit; above 2000 the index holds
half-precision copies, so every value must lie within ±65504) and a metric when it is
created, by its first vector (metric ``cosine`` unless given) or by ``quarry vectors
load``. Inside a store, vectors live in *namespaces* (``None`` is the default namespace;
a namespace never sees another's vectors) under a caller's id of up to 256 characters,
with an optional JSON-object metadata.

Scores: ``cosine`` is cosine similarity and ``dot`` the inner product, highest first;
``euclidean`` is the L2 distance, lowest first. A search uses the store's HNSW index, or
scans exactly when that is cheap, when the metadata filter leaves too few vectors for
the index scan to find, or when asked for another metric than the store's.

Writes are idempotent: adding an id again with the same vector and metadata changes
nothing and reports ``unchanged`` (``added``: a new id; ``updated``: vector or metadata
replaced). The SQL side is sql/075-vector-stores.sql; each store is one partition of
``quarry.store_vectors`` (alembic 0009).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError
from engine.vocabulary import Metric

__all__ = [
    "DEFAULT_STORE",
    "MAX_DIMENSION",
    "MAX_ID_CHARS",
    "MAX_METADATA_BYTES",
    "MAX_NAMESPACE_CHARS",
    "STORE_NAME_PATTERN",
    "AddStatus",
    "Added",
    "Hit",
    "LoadSummary",
    "SearchResult",
    "StagedVector",
    "VectorStore",
    "add_vector",
    "as_vector",
    "count_vectors",
    "delete_vector",
    "drop_store",
    "get_store",
    "load_vectors",
    "search_vectors",
]

AddStatus = Literal["added", "updated", "unchanged"]

DEFAULT_STORE: Final = "default"
STORE_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
MAX_DIMENSION: Final = 4000
MAX_ID_CHARS: Final = 256
MAX_NAMESPACE_CHARS: Final = 128
MAX_METADATA_BYTES: Final = 4096
"""Serialised (compact JSON, UTF-8) size of one vector's metadata, at most."""

_FLOAT32_MAX: Final = float(np.finfo(np.float32).max)


@dataclass(frozen=True, slots=True)
class VectorStore:
    name: str
    dimension: int
    metric: Metric
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Added:
    status: AddStatus
    dimension: int
    store_created: bool


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float
    metadata: dict[str, Any]
    embedding: list[float] | None


@dataclass(frozen=True, slots=True)
class SearchResult:
    """``total_searched``: vectors in the namespace that pass the filter (what the ranking covers)."""

    hits: list[Hit]
    total_searched: int
    metric: Metric
    exact: bool
    store: VectorStore | None


@dataclass(frozen=True, slots=True)
class StagedVector:
    """One row of a bulk load."""

    id: str
    embedding: npt.NDArray[np.float32]
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class LoadSummary:
    store: str
    namespace: str | None
    dimension: int
    metric: Metric
    store_created: bool
    read: int
    added: int
    updated: int
    unchanged: int
    index_rebuilt: bool
    seconds: float

    def one_line(self) -> str:
        where = self.store + (f"/{self.namespace}" if self.namespace else "")
        return (f"quarry: {where} ({self.dimension} dims, {self.metric}): {self.read} read, {self.added} added, "
                f"{self.updated} updated, {self.unchanged} unchanged"
                + (", index rebuilt" if self.index_rebuilt else "") + f" in {self.seconds:.1f}s")


@dataclass(frozen=True, slots=True)
class _SearchRow:
    id: str
    score: float
    metadata: dict[str, Any]
    embedding: Any
    total_searched: int
    exact_search: bool


@dataclass(frozen=True, slots=True)
class _EnsuredStore:
    store_id: int
    store_dimension: int
    store_metric: Metric
    created: bool


def as_vector(values: Sequence[float] | npt.NDArray[Any], what: str = "embedding") -> npt.NDArray[np.float32]:
    """``values`` as a float32 vector, or ``InvalidRequestError`` saying what is wrong with it."""
    if isinstance(values, np.ndarray):
        array = values
        if array.ndim != 1:
            raise InvalidRequestError(f"{what} must be a flat list of numbers, not an array of shape {array.shape}")
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise InvalidRequestError(f"{what} must hold numbers, not {array.dtype}")
    else:
        for index, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidRequestError(f"{what}[{index}] must be a number, not {type(value).__name__}")
        array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise InvalidRequestError(f"{what} is empty: a vector needs at least one dimension")
    if array.size > MAX_DIMENSION:
        raise InvalidRequestError(f"{what} has {array.size} dimensions; a store holds at most {MAX_DIMENSION}")
    as_float = array.astype(np.float64, copy=False)
    bad = np.flatnonzero(~np.isfinite(as_float) | (np.abs(as_float) > _FLOAT32_MAX))
    if bad.size:
        raise InvalidRequestError(f"{what}[{int(bad[0])}] must be a finite number that fits a 32-bit float "
                                  f"(NaN, Infinity and |x| > 3.4e38 are not accepted)")
    return array.astype(np.float32)


def _metadata(metadata: Mapping[str, Any] | None) -> Jsonb:
    if metadata is None:
        return Jsonb({})
    if not isinstance(metadata, Mapping):
        raise InvalidRequestError("metadata must be a JSON object")
    try:
        text = json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidRequestError(f"metadata must be plain JSON with finite numbers ({error})") from None
    if len(text.encode()) > MAX_METADATA_BYTES:
        raise InvalidRequestError(f"metadata takes {len(text.encode())} bytes as JSON; at most "
                                  f"{MAX_METADATA_BYTES} are kept per vector")
    if _holds_nul(metadata):
        raise InvalidRequestError("metadata must not contain NUL characters (Postgres text cannot hold them)")
    return Jsonb(dict(metadata))


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def _namespace(namespace: str | None) -> str:
    """The stored form: the default namespace is ``''``, which callers cannot name."""
    if namespace is None:
        return ""
    if not 1 <= len(namespace) <= MAX_NAMESPACE_CHARS:
        raise InvalidRequestError(f"a namespace is 1 to {MAX_NAMESPACE_CHARS} characters (omit it for the default)")
    return namespace


def _vector_id(vector_id: str) -> str:
    if not 1 <= len(vector_id) <= MAX_ID_CHARS or "\x00" in vector_id:
        raise InvalidRequestError(f"a vector id is 1 to {MAX_ID_CHARS} characters, without NUL")
    return vector_id


def get_store(pool: ConnectionPool, name: str) -> VectorStore | None:
    with pool.connection() as conn, conn.cursor(row_factory=class_row(VectorStore)) as cursor:
        return cursor.execute("select name, dimension, metric, created_at from quarry.vector_stores where name = %s",
                              (name,)).fetchone()


def add_vector(pool: ConnectionPool, store_name: str, vector_id: str, embedding: Sequence[float] | npt.NDArray[Any],
               *, metadata: Mapping[str, Any] | None = None, namespace: str | None = None,
               metric: Metric | None = None, api_key: str | None = None) -> Added:
    """Add or replace one vector; creates the store (with ``metric``, default cosine) on first use.

    ``api_key``: an admin key, which the database checks itself; None on the owner's connection.
    """
    vector = as_vector(embedding)
    with pool.connection() as conn, conn.cursor(row_factory=class_row(Added)) as cursor:
        added = cursor.execute(
            "select status, dimension, store_created from quarry.vector_upsert(%s, %s, %s, %s, %s, %s, %s)",
            (store_name, _vector_id(vector_id), vector, _metadata(metadata), _namespace(namespace), metric,
             api_key),
        ).fetchone()
    assert added is not None
    return added


def search_vectors(pool: ConnectionPool, store_name: str, query: Sequence[float] | npt.NDArray[Any], *, k: int = 10,
                   namespace: str | None = None, metadata_filter: Mapping[str, Any] | None = None,
                   metric: Metric | None = None, include_embeddings: bool = False,
                   exact: bool | None = None) -> SearchResult:
    """The ``k`` nearest vectors; ``exact`` None lets the database choose between HNSW and a scan."""
    vector = as_vector(query, "query")
    with pool.connection() as conn:
        store = _store(conn, store_name)
        with conn.cursor(row_factory=class_row(_SearchRow)) as cursor:
            rows = cursor.execute(
                "select id, score, metadata, embedding, total_searched, exact_search"
                " from quarry.vector_search(%s, %s, %s, %s, %s, %s, %s, %s)",
                (store_name, vector, k, _namespace(namespace),
                 None if metadata_filter is None else Jsonb(dict(metadata_filter)), metric, exact,
                 include_embeddings),
            ).fetchall()
    used: Metric = metric or (store.metric if store is not None else "cosine")
    hits = [Hit(row.id, float(row.score), row.metadata, _floats(row.embedding) if include_embeddings else None)
            for row in rows]
    return SearchResult(hits, rows[0].total_searched if rows else 0, used,
                        rows[0].exact_search if rows else True, store)


def _store(conn: Any, name: str) -> VectorStore | None:
    with conn.cursor(row_factory=class_row(VectorStore)) as cursor:
        found: VectorStore | None = cursor.execute(
            "select name, dimension, metric, created_at from quarry.vector_stores where name = %s", (name,)).fetchone()
        return found


def _floats(value: Any) -> list[float]:
    """A stored vector as plain floats (float32 values, shown with the shortest exact decimal)."""
    array = value.to_numpy() if hasattr(value, "to_numpy") else np.asarray(value, dtype=np.float32)
    return [float(str(item)) for item in array.astype(np.float32)]


def delete_vector(pool: ConnectionPool, store_name: str, vector_id: str, *, namespace: str | None = None,
                  api_key: str | None = None) -> bool:
    """Whether a vector was deleted (False when it, or the store, did not exist); ``api_key`` as for add_vector."""
    with pool.connection() as conn:
        row = conn.execute("select quarry.vector_delete(%s, %s, %s, %s)",
                           (store_name, _vector_id(vector_id), _namespace(namespace), api_key)).fetchone()
    return bool(row and row[0])


def count_vectors(pool: ConnectionPool, store_name: str, *, namespace: str | None = None,
                  metadata_filter: Mapping[str, Any] | None = None) -> int:
    """Vectors in a namespace (passing ``metadata_filter``); 0 for an unknown store."""
    with pool.connection() as conn:
        row = conn.execute("select quarry.vector_count(%s, %s, %s)",
                           (store_name, _namespace(namespace),
                            None if metadata_filter is None else Jsonb(dict(metadata_filter)))).fetchone()
    return int(row[0]) if row else 0


def drop_store(pool: ConnectionPool, store_name: str) -> bool:
    """Remove a store, its vectors and its index (needs the admin role); False when there is none."""
    with pool.connection() as conn:
        row = conn.execute("select quarry.drop_vector_store(%s)", (store_name,)).fetchone()
    return bool(row and row[0])


def load_vectors(pool: ConnectionPool, store_name: str, rows: Iterable[StagedVector], *,
                 namespace: str | None = None, dimension: int | None = None,
                 metric: Metric | None = None) -> LoadSummary:
    """Bulk-load vectors in one transaction: COPY into a staging table, then one merge.

    Idempotent like ``add_vector`` (a repeated id keeps its last row). When the load at
    least doubles the store, its HNSW index is dropped first and rebuilt after the merge,
    which is much faster than inserting into it; searches of this store wait meanwhile,
    other stores are not touched. Rows are checked as they stream: a bad one aborts the
    whole load, naming its position.
    """
    try:
        return _load(pool, store_name, rows, namespace, dimension, metric)
    except psycopg.errors.InvalidParameterValue as error:  # the store's own checks (dimension, metric, name)
        raise InvalidRequestError(error.diag.message_primary or str(error)) from None


def _load(pool: ConnectionPool, store_name: str, rows: Iterable[StagedVector], namespace: str | None,
          dimension: int | None, metric: Metric | None) -> LoadSummary:
    started = time.monotonic()
    stored_namespace = _namespace(namespace)
    iterator = iter(rows)
    first = next(iterator, None)
    if first is None and dimension is None:
        raise InvalidRequestError("nothing to load: the file holds no vectors (give --dimension to create an "
                                  "empty store)")
    with pool.connection() as conn:
        # a load and its index build take as long as they take: the pool's timeout is for queries
        conn.execute("select set_config('statement_timeout', '0', true)")
        with conn.cursor(row_factory=class_row(_EnsuredStore)) as cursor:
            store = cursor.execute(
                "select store_id, store_dimension, store_metric, created from quarry.ensure_vector_store(%s, %s, %s)",
                (store_name, dimension if dimension is not None else len(first.embedding) if first else None,
                 metric),
            ).fetchone()
        assert store is not None
        conn.execute("create temporary table vector_load (ordinal bigint generated always as identity, "
                     "id text not null, embedding vector not null, metadata jsonb not null) on commit drop")
        read = 0
        with conn.cursor().copy("copy vector_load (id, embedding, metadata) from stdin (format binary)") as copy:
            copy.set_types(["text", "vector", "jsonb"])
            for row in _chain(first, iterator):
                read += 1
                copy.write_row(_staged(row, read, store))
        # The first staged vector the store's index cannot hold raises (InvalidParameterValue). The
        # index type is tested first, on the bound dimension: folded at planning, so a store of up to
        # 2,000 dimensions reads no row (checking each row cost 0.5 s per 100k vectors).
        conn.execute("select quarry.require_vector_fits_store(%(name)s, %(dimension)s, s.embedding,"
                     "   format('vector %%s (id %%L)', s.ordinal, left(s.id, 80)))"
                     " from (select l.ordinal, l.id, l.embedding from vector_load l"
                     "       where quarry.vector_store_index_type(%(dimension)s) = 'halfvec'"
                     "         and not quarry.vector_fits_store_index(l.embedding, %(dimension)s)"
                     "       order by l.ordinal limit 1) s",
                     {"name": store_name, "dimension": store.store_dimension})
        partition = sql.Identifier("quarry", f"store_vectors_{store.store_id}")
        staged_row = conn.execute("select count(distinct id) from vector_load").fetchone()
        existing_row = conn.execute(sql.SQL("select count(*) from {}").format(partition)).fetchone()
        staged = int(staged_row[0]) if staged_row else 0
        existing = int(existing_row[0]) if existing_row else 0
        rebuild = staged > 0 and staged >= existing
        if rebuild:
            conn.execute("select quarry.drop_vector_store_index(%s)", (store.store_id,))
        merged = conn.execute(sql.SQL("""
            insert into quarry.store_vectors as v (store_id, namespace, id, embedding, metadata)
            select {store_id}, {namespace}, s.id, s.embedding, s.metadata
            from (select distinct on (l.id) l.id, l.embedding, l.metadata from vector_load l
                  order by l.id, l.ordinal desc) s
            on conflict (store_id, namespace, id) do update
                set embedding = excluded.embedding, metadata = excluded.metadata, updated_at = now()
                where (v.embedding, v.metadata) is distinct from (excluded.embedding, excluded.metadata)
            returning v.created_at = now()
        """).format(store_id=sql.Literal(store.store_id), namespace=sql.Literal(stored_namespace))).fetchall()
        added = sum(1 for (is_new,) in merged if is_new)
        if rebuild:
            # HNSW builds fastest when the graph fits in memory; never lower a larger setting.
            conn.execute("select set_config('maintenance_work_mem', '512MB', true) "
                         "where pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes('512MB')")
            conn.execute("select quarry.create_vector_store_index(%s)", (store.store_id,))
        conn.execute(sql.SQL("analyze {}").format(partition))
    return LoadSummary(store_name, namespace, store.store_dimension, store.store_metric, store.created, read, added,
                       len(merged) - added, staged - len(merged), rebuild, time.monotonic() - started)


def _chain(first: StagedVector | None, rest: Iterable[StagedVector]) -> Iterable[StagedVector]:
    if first is not None:
        yield first
    yield from rest


def _staged(row: StagedVector, position: int, store: _EnsuredStore) -> tuple[str, npt.NDArray[np.float32], Jsonb]:
    try:
        vector = as_vector(row.embedding)
        if vector.size != store.store_dimension:
            raise InvalidRequestError(f"embedding has {vector.size} dimensions; the store holds "
                                      f"{store.store_dimension}-dimensional vectors")
        if store.store_metric == "cosine" and not np.any(vector):
            raise InvalidRequestError("a zero vector has no cosine similarity to anything")
        return _vector_id(row.id), vector, _metadata(row.metadata)
    except InvalidRequestError as error:
        raise InvalidRequestError(f"vector {position} (id {row.id[:80]!r}): {error}") from None
