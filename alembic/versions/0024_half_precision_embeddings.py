"""Stored vectors in half precision, as the HNSW graphs already hold them.

Since 0014 every space's HNSW index holds ``halfvec`` copies and decides which chunks a vector
leg returns; the single-precision column only gave the returned rows their exact distances (and
seeded reused vectors and centroids). It took 1,642 bytes a row at 384 dimensions, about 22 % of
a chunk's bytes at 1M (docs/BENCHMARKS.md, storage); as ``halfvec`` it takes about half. The
distance of a returned row is now computed from its stored half-precision vector against the
full-precision query: an error of about 1e-3 of the cosine distance, which reorders only rows
whose distances tie at that precision (docs/BENCHMARKS.md, quality after this change). A
component beyond half precision's range (65,504) cannot be stored: embedding models' vectors
are unit length.

The column's new type rewrites the table and builds every index on it again, the HNSW graphs
included (minutes at 1M vectors, and disk room for the new copy while the old one exists;
``quarry migrate`` says so on stderr). Their definitions stay
as they are: ``embedding::halfvec(n)`` of a ``halfvec`` column only checks the dimension.

Revision ID: 0024_half_precision_embeddings
Revises: 0023_chunks_no_search_vector
Create Date: 2026-12-06
"""

from alembic import op

revision = "0024_half_precision_embeddings"
down_revision = "0023_chunks_no_search_vector"
branch_labels = None
depends_on = None

_RETYPE = """
do $retype$
declare
    vectors bigint := (select count(*) from quarry.embeddings);
    widest int := (select coalesce(max(dimension), 0) from quarry.embedding_spaces);
    -- as alembic 0014: an HNSW build is fast while its graph fits in maintenance_work_mem
    memory bigint := least(({bytes} * widest + 1024) * vectors * 5 / 4, 1024 * 1024 * 1024);
begin
    perform set_config('statement_timeout', '0', true);
    if memory > pg_size_bytes(current_setting('maintenance_work_mem')) then
        perform set_config('maintenance_work_mem', (memory / 1024) || 'kB', true);
    end if;
    raise notice 'quarry: storing % vectors in {precision} precision and rebuilding their indexes', vectors;
    alter table quarry.embeddings alter column embedding type {type} using embedding::{type};
    analyze quarry.embeddings;  -- a new type drops the column's statistics
end
$retype$
"""


def upgrade() -> None:
    op.execute(_RETYPE.format(type="halfvec", precision="half", bytes=2))


def downgrade() -> None:
    op.execute(_RETYPE.format(type="vector", precision="single", bytes=2))
