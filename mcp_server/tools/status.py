"""``list_sources`` and ``status``: what is indexed, and whether the server and its indexes are healthy."""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from engine.errors import new_error_id
from engine.store.replicas import describe_reads
from mcp_server import limits
from mcp_server.backend import ReadRoute, replicas_of
from mcp_server.bounds import bounded_json
from mcp_server.envelope import to_json
from mcp_server.schemas import NoArgs
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

logger = logging.getLogger("quarry.mcp")

_SOURCES = """
    select st.slug, st.display_name, st.kind, st.attribution, st.verified, st.deprecated, st.version,
           -- a fetched location (URL, package, repository); a folder's path on the ingesting machine is not shown
           case when s.metadata -> 'fetch' <> '{}'::jsonb then s.metadata ->> 'location' end as location,
           st.base_url, st.last_ingested_at,
           st.documents, st.chunks, st.embeddings
    from quarry.source_stats st
    join quarry.sources s on s.slug = st.slug
    order by st.slug
"""

_SPACES = """
    select sp.name, sp.serves, sp.model, sp.dimension,
           (select count(*) from quarry.embeddings e where e.space = sp.name) as embeddings,
           (select count(*) from quarry.chunks c
             -- the code space holds code chunks only; a generation being filled counts for its space
             where (coalesce(sp.serves, regexp_replace(sp.name, '_g[0-9]+$', '')) <> 'code' or c.is_code)
               and not exists (select 1 from quarry.embeddings e where e.chunk_id = c.id and e.space = sp.name))
             as pending_chunks,
           quarry.space_index_name(sp.name) as index_name,
           i.indisvalid as index_valid,
           pg_relation_size(i.indexrelid) as index_bytes
    from quarry.embedding_spaces sp
    left join pg_index i on i.indexrelid = to_regclass('quarry.' || quarry.space_index_name(sp.name))
    order by sp.name
"""

_TOTALS = """
    select current_setting('server_version') as postgres,
           (select extversion from pg_extension where extname = 'vector') as pgvector,
           (select count(*) from quarry.sources) as sources,
           (select count(*) from quarry.documents) as documents,
           (select count(*) from quarry.chunks) as chunks,
           -- the BM25 text index: its postings' B-trees (sql/018), each present and valid
           (select count(*) = 4 and bool_and(indisvalid) from pg_index
            where indexrelid in (to_regclass('quarry.text_posting_blocks_key'),
                                 to_regclass('quarry.text_postings_impact_idx'),
                                 to_regclass('quarry.text_postings_chunk_idx'),
                                 to_regclass('quarry.chunk_terms_pkey'))) as fts_index_valid,
           -- chunks a first ingest (or a killed one) has not given postings yet: the keyword leg misses them
           (select postings_deferred from quarry.text_stats) as fts_postings_deferred
"""


def run_list_sources(context: ToolContext, _: NoArgs) -> str:
    with context.backend.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        rows = cursor.execute(_SOURCES).fetchall()
    sources = [{**row, "last_ingested_at": row["last_ingested_at"].isoformat() if row["last_ingested_at"] else None}
               for row in rows]
    payload: dict[str, Any] = {"sources": sources, "source_count": len(sources), "ordered_by": "slug",
                               "truncated": False}
    return bounded_json(payload, [], droppable=[sources], dropped_key="omitted_sources")


def run_status(context: ToolContext, _: NoArgs) -> str:
    payload: dict[str, Any] = {"server": {"name": "quarry", "version": _version()},
                               "read_replicas": describe_reads(replicas_of(context.backend))}
    try:
        with context.backend.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            totals = cursor.execute(_TOTALS).fetchone() or {}
            spaces = cursor.execute(_SPACES).fetchall()
    except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
        error_id = new_error_id()
        logger.error("status: database unreachable %s", error_id, exc_info=error)
        payload |= {"healthy": False, "database": {"reachable": False, "error_id": error_id,
                                                   "served_by": _served_by(context)}}
        return to_json(payload)
    pending = sum(space["pending_chunks"] for space in spaces if space["serves"] is not None)
    indexes_valid = (all(space["index_valid"] for space in spaces) and bool(totals.get("fts_index_valid"))
                     and not totals.get("fts_postings_deferred"))
    payload |= {
        "healthy": indexes_valid,
        "database": {"reachable": True, "postgres": totals.get("postgres"), "pgvector": totals.get("pgvector"),
                     "served_by": _served_by(context)},
        "corpus": {key: totals.get(key) for key in ("sources", "documents", "chunks")},
        "embedding_spaces": [
            {"space": space["name"], "serves": space["serves"], "model": space["model"],
             "dimension": space["dimension"],
             "embeddings": space["embeddings"], "pending_chunks": space["pending_chunks"],
             "index": {"name": space["index_name"], "valid": space["index_valid"], "bytes": space["index_bytes"]}}
            for space in spaces
        ],
        "pending_embedding_work": pending,
        "fts_index_valid": totals.get("fts_index_valid"),
        "fts_postings_deferred": totals.get("fts_postings_deferred"),
        "query_models": _query_models(context),
        "reranker": _reranker(context),
        "limits": limits.as_dict(),
        "rate_limit": context.rate_policy.as_dict() if context.rate_policy is not None
        else "not metered on this connection (stdio, or HTTP without keys)",
    }
    return to_json(payload)


def _served_by(context: ToolContext) -> str:
    """Which database answered this call: the primary, or a read replica (its DSN, password redacted)."""
    backend = context.backend
    if not isinstance(backend, ReadRoute):
        return "primary"
    replicas = replicas_of(backend)
    dsn = replicas.dsn_of(backend.pool) if replicas is not None else None
    return f"replica {dsn}" if dsn is not None else "replica"


def _query_models(context: ToolContext) -> dict[str, Any]:
    """The model behind each embedding space's queries (what a search embeds with now)."""
    try:
        return {space: embedder.model_name for space, embedder in context.backend.embedders.items()}
    except Exception as error:  # a model that cannot load is a status to report, not a failure
        error_id = new_error_id()
        logger.warning("status: embedders unavailable %s", error_id, exc_info=error)
        return {"error": f"the embedding models did not load (error_id {error_id})"}


def _reranker(context: ToolContext) -> dict[str, Any]:
    try:
        reranker = context.backend.reranker
    except Exception as error:
        error_id = new_error_id()
        logger.warning("status: reranker unavailable %s", error_id, exc_info=error)
        return {"configured": True, "available": False, "error_id": error_id}
    if reranker is None:
        return {"configured": False, "note": "no reranker is configured (set VOYAGE_API_KEY, or QUARRY_RERANKER="
                "cross-encoder:/path/to/model); searches keep the fused order"}
    return {"configured": True, "available": True, "model": reranker.model_name,
            "follows_instructions": reranker.follows_instructions}


def _version() -> str:
    try:
        return metadata.version("quarry")
    except metadata.PackageNotFoundError:
        return "unknown"


LIST_SOURCES = ToolSpec(
    name="list_sources",
    title="List indexed sources",
    description="Indexed sources: slug (for filters), kind, version, counts, last ingest.",
    arguments=NoArgs,
    run=run_list_sources,
    cost=one_token,
    output_schema=shape({"sources": "array", "ordered_by": "string"}),
)

STATUS = ToolSpec(
    name="status",
    title="Server health and limits",
    description="Health: database, corpus, embedding spaces, reranker, limits, replicas.",
    arguments=NoArgs,
    run=run_status,
    cost=one_token,
    output_schema=shape({"healthy": "boolean", "database": "object"}),
)
