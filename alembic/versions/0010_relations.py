"""Links and imports between documents, extracted at ingest (``engine.ingest.relations``).

An edge stores its target as written and the candidate *paths* it may name in the
same source, not a document id: which candidate exists is resolved at query time
(``quarry.relation_target`` in sql/078-relations.sql), so a target ingested later,
re-ingested under a new id, deleted or renamed is always answered from the current
documents, and no write ever has to revisit the edges pointing at a document.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.relations (
            id bigint generated always as identity primary key,
            -- the document stating the link or import
            document_id uuid not null references quarry.documents (id) on delete cascade,
            source_id bigint not null references quarry.sources (id) on delete cascade,
            relation text not null check (relation in ('links_to', 'imports', 'external')),
            target text not null,                     -- as written: '../a.md#setup', 'engine.errors', a URL
            candidates text[] not null default '{}',  -- source paths it may name, best first
            -- false: each candidate may sit under any directory enclosing the document, the root first
            anchored boolean not null default true,
            line int not null                         -- 1-based line of the document where it is written
        )
    """)
    op.execute("create index relations_document_idx on quarry.relations (document_id)")
    # Incoming edges: which edges may name a path (a document's path or one of its suffixes).
    op.execute("create index relations_candidates_idx on quarry.relations using gin (candidates)")


def downgrade() -> None:
    op.execute("drop table if exists quarry.relations")
