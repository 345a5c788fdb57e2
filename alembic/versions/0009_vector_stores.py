"""Bring-your-own vector stores: named stores of caller-computed vectors, each with its own
dimension and metric, partitioned by store.

``store_vectors`` is list-partitioned by ``store_id``: each store is one partition, made by
``quarry.create_vector_store`` (sql/075-vector-stores.sql) with a CHECK on its dimension and
one HNSW index on the dimension-typed expression with its metric's operator class. A store
is created, bulk-loaded, re-indexed or dropped without locking or scanning the others.
The default namespace is stored as ``''`` (a caller-given namespace is never empty);
``vector_namespaces`` keeps each namespace's vector count.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(r"""
        create table quarry.vector_stores (
            id integer generated always as identity primary key,   -- names the store's partition
            name text not null unique check (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
            dimension integer not null check (dimension between 1 and 2000),  -- 2000: HNSW's limit for vector
            metric text not null check (metric in ('cosine', 'dot', 'euclidean')),
            created_at timestamptz not null default now()
        )
    """)
    op.execute("""
        create table quarry.store_vectors (
            store_id integer not null references quarry.vector_stores (id) on delete cascade,
            namespace text not null default '' check (length(namespace) <= 128),
            id text not null check (length(id) between 1 and 256),
            embedding vector not null,
            metadata jsonb not null default '{}' check (jsonb_typeof(metadata) = 'object'),
            created_at timestamptz not null default now(),
            updated_at timestamptz not null default now(),
            primary key (store_id, namespace, id)
        ) partition by list (store_id)
    """)
    # Vectors per namespace, kept by statement-level triggers (sql/075-vector-stores.sql):
    # a search reports how many vectors it ranked without counting a partition each time.
    op.execute("""
        create table quarry.vector_namespaces (
            store_id integer not null references quarry.vector_stores (id) on delete cascade,
            namespace text not null,
            vectors bigint not null check (vectors >= 0),
            primary key (store_id, namespace)
        )
    """)
    # Metadata filters are containment (@>): this lets the planner answer a selective one exactly.
    op.execute("create index store_vectors_metadata_idx on quarry.store_vectors using gin (metadata jsonb_path_ops)")


def downgrade() -> None:
    op.execute("drop table if exists quarry.store_vectors, quarry.vector_namespaces, quarry.vector_stores")
