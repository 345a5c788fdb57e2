"""Documents: no checked_at, and a byte-order index on (source_id, path) for path-prefix counts.

``documents.checked_at`` said when an ingest last confirmed a document current. Every completed
ingest confirms every document of its source, so it always equalled ``sources.last_ingested_at``;
nothing read it, and keeping it cost an update of every document row per ingest (153 ms for the
1,167 pages of the PostgreSQL manual, linear in a source's size) in a re-ingest whose own work
after one changed file is a few hundred milliseconds.

``documents_source_path_bytes_idx`` orders paths by bytes (collate "C") within a source, so
the documents under a directory are one range read whatever the database's collation:
``quarry.facet_values`` counts version facets per manifest directory that way (at 1M chunks,
that step 210-320 ms without it, 32-36 ms with it).

Revision ID: 0020_documents
Revises: 0019_knowledge_base
Create Date: 2026-12-02
"""

from alembic import op

revision = "0020_documents"
down_revision = "0019_knowledge_base"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.documents drop column checked_at")
    op.execute('create index documents_source_path_bytes_idx on quarry.documents (source_id, path collate "C")')


def downgrade() -> None:
    op.execute("drop index quarry.documents_source_path_bytes_idx")
    op.execute("alter table quarry.documents add column checked_at timestamptz not null default now()")
