"""Version facet counts kept per source and name, summed over the source's combinations.

A ``facets`` call filtered on a source facet that many sources share (``kind: code_repo``, 150 of
200 sources at 1M chunks in bench/facets_latency.py) summed every allowed source's rows of
``quarry.version_facet_combinations``: a row per combination of document facet values and name,
96,000 rows and about 25 of the call's 30 ms. Per source and name there are 28,000 rows over all
200 sources, and summing the allowed sources' takes about 4 ms.

``quarry.version_facet_source_totals`` holds them. ``quarry.refresh_version_facet_counts`` writes
a source's rows in the statement after it writes the source's combinations, so they are exact
whenever the combinations are (no trigger keeps them by difference, and nothing drifts); removing
a source removes them. They are filled here from the combinations already counted.

Revision ID: 0025_version_facet_source_totals
Revises: 0024_half_precision_embeddings
Create Date: 2026-12-06
"""

from alembic import op

revision = "0025_version_facet_source_totals"
down_revision = "0024_half_precision_embeddings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.version_facet_source_totals (
            source_id bigint not null references quarry.sources (id) on delete cascade,
            facet text not null check (facet in ('language_target', 'sdk_dependency')),
            name text not null,
            documents bigint not null check (documents > 0),
            primary key (source_id, facet, name)
        )
    """)
    op.execute("""
        insert into quarry.version_facet_source_totals (source_id, facet, name, documents)
        select source_id, facet, name, sum(documents) from quarry.version_facet_combinations group by 1, 2, 3
    """)


def downgrade() -> None:
    op.execute("drop table if exists quarry.version_facet_source_totals")
