"""Every embedding space's HNSW index is rebuilt over half-precision copies of its vectors.

The stored vectors stay single precision; only the graph holds ``halfvec`` copies: at 1M
chunks the index is 1.1 GB instead of 2.0 and builds in 0.84x the time, and on SciFact's 13k
chunks a 50-deep scan takes 0.92x; halfvec also indexes up to 4,000 dimensions where
``vector`` stops at 2,000 (docs/BENCHMARKS.md). The vector leg (``quarry.nearest_chunks``)
orders by the new expression, so the old indexes would no longer be used: each is dropped and
built again here, which takes as long as a build: 6 minutes at 1M vectors on 2 cores when the
graph fits in maintenance_work_mem, 18.5 minutes under the 1 GB this sets at most. A space
whose index a killed bulk load left deferred gets the new definition, for the next ingest
to build. The statement repeats ``quarry.space_index_definition`` (sql/010), which runs
after this migration.

Revision ID: 0014_hnsw
Revises: 0013_ingest
Create Date: 2026-11-30
"""

from alembic import op

revision = "0014_hnsw"
down_revision = "0013_ingest"
branch_labels = None
depends_on = None

_REBUILD = """
do $rebuild$
declare
    each_space record;
    index_name text;
    statement text;
    vectors bigint;
    memory bigint;
    vector_schema name := (select n.nspname from pg_extension x join pg_namespace n on n.oid = x.extnamespace
                           where x.extname = 'vector');
begin
    perform set_config('statement_timeout', '0', true);
    for each_space in
        -- not reading quarry.embeddings: an open scan of it would forbid the CREATE INDEX below
        select s.name, s.dimension,
               exists (select from quarry.deferred_vector_indexes d where d.space = s.name) as deferred
        from quarry.embedding_spaces s
    loop
        index_name := 'embeddings_hnsw_' || each_space.name;
        -- schema-qualified: quarry.restore_space_indexes runs a deferred one on pg_catalog alone
        statement := format(
            'create index if not exists %I on quarry.embeddings using hnsw ((embedding::%I.%s(%s)) %I.%s) '
            'with (m = 16, ef_construction = 128) where space = %L',
            index_name, vector_schema, '{type}', each_space.dimension, vector_schema, '{opclass}', each_space.name);
        if each_space.deferred then
            update quarry.deferred_vector_indexes d set definition = statement where d.space = each_space.name;
            continue;
        end if;
        execute format('drop index if exists quarry.%I', index_name);
        -- as quarry.restore_space_indexes: the build is fast while the graph fits in memory
        select count(*) into vectors from quarry.embeddings e where e.space = each_space.name;
        memory := least(({bytes} * each_space.dimension + 1024) * vectors * 5 / 4, 1024 * 1024 * 1024);
        if memory > pg_size_bytes(current_setting('maintenance_work_mem')) then
            perform set_config('maintenance_work_mem', (memory / 1024) || 'kB', true);
        end if;
        -- shown by quarry migrate (and the first command after an upgrade) while it builds
        raise notice 'quarry: rebuilding the HNSW index of embedding space % ({type}, % vectors)',
            each_space.name, vectors;
        execute statement;
    end loop;
end
$rebuild$
"""


def upgrade() -> None:
    op.execute(_REBUILD.format(type="halfvec", opclass="halfvec_cosine_ops", bytes=2))


def downgrade() -> None:
    op.execute(_REBUILD.format(type="vector", opclass="vector_cosine_ops", bytes=4))
