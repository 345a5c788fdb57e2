"""The knowledge base of the ``kb`` tool profile: graph records, exact evidence bytes, their links.

Canonical, written only through the definer functions of sql/088-knowledge-base.sql (which check
the caller's admin key):

- ``kb_records``: nodes and relations of the fixed catalogue (``engine.kb.catalog``), under
  stable UUIDs. A node's ``identity`` (its type's identity properties, canonical JSON) is unique
  per type, so writing the same thing twice finds the first record; a relation is unique per
  type and endpoints. ``search_text`` is the label and properties as text, what ``kb_search``
  matches.
- ``kb_evidence``: the exact bytes a client gave, named ``e_`` + their SHA-256, with the media
  type and encoding it declared. Derived from it, and rebuilt by ``kb_reindex``: the documents of
  the ``kb`` standalone source (one per text evidence), which the ingest pipeline chunks, embeds
  and indexes like any other document, so evidence is found by the one retrieval pipeline.
- ``kb_evidence_links``: which evidence supports which record.

Jobs gain the kind ``kb_index``: indexing evidence text, run by ``quarry jobs run`` (or inline
for the local owner).

Revision ID: 0019_knowledge_base
Revises: 0018_least_privilege
Create Date: 2026-12-02
"""

from alembic import op

revision = "0019_knowledge_base"
down_revision = "0018_least_privilege"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.kb_records (
            id uuid primary key,
            kind text not null check (kind in ('node', 'relation')),
            type text not null,
            -- nodes: the identity properties as canonical JSON; relations: null (their endpoints are)
            identity text,
            label text,
            properties jsonb not null default '{}'::jsonb,
            source_record uuid references quarry.kb_records (id),
            target_record uuid references quarry.kb_records (id),
            search_text text not null default '',
            first_seen timestamptz not null,
            last_seen timestamptz not null,
            written_at timestamptz not null default now(),
            check ((kind = 'relation') = (source_record is not null and target_record is not null)),
            check ((kind = 'node') = (identity is not null))
        )
    """)
    op.execute("create unique index kb_nodes_identity_idx on quarry.kb_records (type, identity) where kind = 'node'")
    op.execute("create unique index kb_relations_identity_idx on quarry.kb_records (type, source_record, target_record)"
               " where kind = 'relation'")
    op.execute("create index kb_relations_source_idx on quarry.kb_records (source_record) where kind = 'relation'")
    op.execute("create index kb_relations_target_idx on quarry.kb_records (target_record) where kind = 'relation'")
    op.execute("""
        create table quarry.kb_evidence (
            id text primary key check (id ~ '^e_[0-9a-f]{64}$'),
            bytes bytea not null,
            media_type text not null,
            encoding text not null,
            -- what produced it, as the client named it ("nuclei", "design review")
            origin text,
            index_state text not null
                check (index_state in ('pending', 'ready', 'not_applicable', 'failed')),
            index_error text,
            created_at timestamptz not null default now()
        )
    """)
    op.execute("""
        create table quarry.kb_evidence_links (
            record_id uuid not null references quarry.kb_records (id) on delete cascade,
            evidence_id text not null references quarry.kb_evidence (id),
            linked_at timestamptz not null default now(),
            primary key (record_id, evidence_id)
        )
    """)
    op.execute("create index kb_evidence_links_evidence_idx on quarry.kb_evidence_links (evidence_id)")
    op.execute("alter table quarry.jobs drop constraint jobs_kind_check")
    op.execute("alter table quarry.jobs add constraint jobs_kind_check"
               " check (kind in ('ingest', 'reembed', 'reindex', 'remove_source', 'kb_index'))")


def downgrade() -> None:
    op.execute("delete from quarry.jobs where kind = 'kb_index'")
    op.execute("alter table quarry.jobs drop constraint jobs_kind_check")
    op.execute("alter table quarry.jobs add constraint jobs_kind_check"
               " check (kind in ('ingest', 'reembed', 'reindex', 'remove_source'))")
    op.execute("drop table if exists quarry.kb_evidence_links")
    op.execute("drop table if exists quarry.kb_evidence")
    op.execute("drop table if exists quarry.kb_records")
