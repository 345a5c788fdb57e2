"""HNSW indexes a bulk ingest dropped, to build once after the load instead of per inserted row.

A load that adds at least half as many vectors as a small space holds drops the space's
HNSW index first (``DROP INDEX CONCURRENTLY``: searches keep running, as exact scans) and
builds it again when the load ends: less wall time than maintaining it row by row.
The definition is kept here while the index is gone, so any later ingest rebuilds it
exactly as it was, even after the load that dropped it was killed
(``quarry.restore_space_indexes`` in sql/025-corpus-writes.sql).

Revision ID: 0011_ingest
Revises: 0010
Create Date: 2026-11-30
"""

from alembic import op

revision = "0011_ingest"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.deferred_vector_indexes (
            space text primary key references quarry.embedding_spaces (name) on delete cascade,
            index_name text not null,
            definition text not null,  -- pg_get_indexdef of the dropped index, schema-qualified
            deferred_at timestamptz not null default now()
        )
    """)


def downgrade() -> None:
    op.execute("drop table if exists quarry.deferred_vector_indexes")
