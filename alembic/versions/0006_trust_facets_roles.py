"""Trust weights, facet counts kept by ingestion, and the reader / admin roles.

- ``quarry.trust_weights``: the one place trust-factor weights live; admins tune them
  in psql and the next search uses them (``quarry.trust_factors`` reads the table).
- ``quarry.facet_counts``: documents per (source, facet, value), kept current by
  statement-level triggers on documents, so the unfiltered ``facets`` call reads a
  few hundred rows instead of scanning the corpus.
- Roles: ``quarry_reader`` (the search server: reads the corpus, writes only API-key
  usage and rate-limit buckets) and ``quarry_admin`` (ingestion and psql).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.trust_weights (
            factor text primary key
                check (factor in ('attribution', 'verified', 'freshness', 'deprecation', 'version_match')),
            weight double precision not null check (weight >= 0 and weight <= 100)
        )
    """)
    op.execute("""
        insert into quarry.trust_weights (factor, weight) values
            ('attribution', 0.35), ('verified', 0.15), ('freshness', 0.15),
            ('deprecation', 0.2), ('version_match', 0.15)
    """)
    op.execute("""
        create table quarry.facet_counts (
            source_id bigint not null references quarry.sources (id) on delete cascade,
            facet text not null,
            value text not null,
            documents bigint not null check (documents >= 0),
            primary key (source_id, facet, value)
        )
    """)
    op.execute("""
        insert into quarry.facet_counts (source_id, facet, value, documents)
        select d.source_id, f.facet, f.value, count(*)
        from quarry.documents d
        cross join lateral (values ('content_type', d.content_type), ('language', d.language),
                                   ('package', d.package), ('deprecated', d.deprecated::text)) f (facet, value)
        where f.value is not null
        group by 1, 2, 3
    """)
    op.execute("""
        do $$
        begin
            if not exists (select 1 from pg_roles where rolname = 'quarry_reader') then
                create role quarry_reader nologin;
            end if;
            if not exists (select 1 from pg_roles where rolname = 'quarry_admin') then
                create role quarry_admin nologin;
            end if;
        end
        $$
    """)


def downgrade() -> None:
    op.execute("drop table if exists quarry.facet_counts, quarry.trust_weights")
