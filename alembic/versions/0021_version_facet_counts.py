"""Version facet counts kept per source and in total, and which sources' counts are stale.

- ``quarry.version_facet_counts``: documents per (source, version facet, name): what the
  source-filtered ``facets`` call reads for ``language_target`` and ``sdk_dependency`` instead of
  resolving every manifest directory's inherited names live (at 1M chunks, 200 sources: about
  33k directory x name rows a call, 1.2 s).
- ``quarry.version_facet_totals``: the same summed over every source, what an unfiltered ``facets``
  call reads when no source is stale (at 1M chunks, the 28k per-source rows summed per call took
  8 ms hashed, 25 ms sorted); kept by triggers on the per-source rows.
- ``quarry.version_facets_stale``: sources whose documents, manifests or version constraints
  changed since their counts were computed. Statement-level triggers mark a source in the
  transaction that changes it, so a reader never trusts a count its snapshot does not match:
  ``quarry.facet_values`` computes a stale source's version facets live, and
  ``quarry.refresh_version_facet_counts`` (the end of an ingest, a reindex, every migrate)
  recomputes them and clears the mark.

Every source starts stale: the counts are first computed by the refresh at the end of this migrate.

Revision ID: 0021_version_facet_counts
Revises: 0020_documents
Create Date: 2026-12-03
"""

from alembic import op

revision = "0021_version_facet_counts"
down_revision = "0020_documents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.version_facet_counts (
            source_id bigint not null references quarry.sources (id) on delete cascade,
            facet text not null check (facet in ('language_target', 'sdk_dependency')),
            name text not null,
            documents bigint not null check (documents > 0),
            primary key (source_id, facet, name)
        )
    """)
    op.execute("""
        create table quarry.version_facet_totals (
            facet text not null check (facet in ('language_target', 'sdk_dependency')),
            name text not null,
            documents bigint not null,  -- no check: a total that drifted must not fail a write (reindex recounts)
            primary key (facet, name)
        )
    """)
    op.execute("""
        create table quarry.version_facets_stale (
            source_id bigint primary key references quarry.sources (id) on delete cascade
        )
    """)
    op.execute("insert into quarry.version_facets_stale (source_id) select id from quarry.sources")


def downgrade() -> None:
    op.execute("drop table if exists quarry.version_facets_stale, quarry.version_facet_totals,"
               " quarry.version_facet_counts")
