"""Facet counts kept per combination of document facet values, for the version facets too, and which are stale.

At 1M chunks in 200 sources (bench/facets_latency.py), ``facets`` took 207 ms unfiltered, 45 ms
for one source and 1,003 ms under a language filter: the version facets were resolved live from
every manifest directory's inherited names, and a document-level filter read every matching
document. These tables let each be read from counts:

- ``quarry.facet_combinations``: documents per source and combination of document facet values
  (content type, language, package, the document's own deprecated mark), kept by the trigger
  that keeps ``quarry.facet_counts``. A filter on those facets is answered from the
  combinations it allows, and ``quarry.allowed_facet_values`` reads them instead of every
  document of the sources.
- ``quarry.version_facet_combinations``: documents per source, combination, version facet and
  name, recounted per source by ``quarry.refresh_version_facet_counts`` (the end of an ingest,
  a reindex, every migrate): a manifest governs every document below it, so writes do not
  adjust these counts, they mark the source stale.
- ``quarry.version_facet_totals`` and ``quarry.version_facet_combination_totals``: the same
  summed over every source, per facet and name (what an unfiltered ``facets`` call reads when no
  source is stale: 403 rows at 1M chunks rather than 12,824 to sum) and per combination too (what
  one filtering on document facets only reads); kept by triggers on the per-source rows.
- ``quarry.version_facets_stale``: sources whose documents, manifests or version constraints
  changed since their counts were computed. Statement-level triggers mark a source in the
  transaction that changes it, so a reader never trusts a count its snapshot does not match:
  ``quarry.facet_values`` counts a stale source's version facets live.

A combination is ``array[content_type, language, package, deprecated::text]``: one value that
joins by hash (arrays compare nulls as equal; separate columns would need ``is not distinct
from``, which does not hash). Every source starts stale: the refresh at the end of this migrate
counts them.

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
        create table quarry.facet_combinations (
            source_id bigint not null references quarry.sources (id) on delete cascade,
            content_type text not null,
            language text,
            package text,
            deprecated boolean not null,  -- the document's own mark; its source's is read with it
            documents bigint not null check (documents >= 0),
            unique nulls not distinct (source_id, content_type, language, package, deprecated)
        )
    """)
    op.execute("""
        insert into quarry.facet_combinations (source_id, content_type, language, package, deprecated, documents)
        select source_id, content_type, language, package, deprecated, count(*)
        from quarry.documents group by 1, 2, 3, 4, 5
    """)
    op.execute("""
        create table quarry.version_facet_combinations (
            source_id bigint not null references quarry.sources (id) on delete cascade,
            combination text[] not null,
            facet text not null check (facet in ('language_target', 'sdk_dependency')),
            name text not null,
            documents bigint not null check (documents > 0),
            primary key (source_id, facet, name, combination)
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
        create table quarry.version_facet_combination_totals (
            combination text[] not null,
            facet text not null check (facet in ('language_target', 'sdk_dependency')),
            name text not null,
            documents bigint not null,  -- no check: a total that drifted must not fail a write (reindex recounts)
            primary key (facet, name, combination)
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
               " quarry.version_facet_combination_totals, quarry.version_facet_combinations,"
               " quarry.facet_combinations")
