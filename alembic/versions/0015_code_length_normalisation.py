"""BM25 impacts of code chunks are recomputed with their own length normalisation, b = 0.9.

Prose keeps b = 0.4; code chunks now normalise length harder (``quarry.insert_chunk_postings``,
sql/018-text-index.sql, which says why and what it measured). New postings get the new
impacts from the SQL functions; this brings the postings already stored in line, with the
corpus's current average length, as ``quarry.rebuild_text_index`` would. Only code chunks'
postings are rewritten (CoSQA's 147k in 0.9 s on 2 cores; the old row versions are left for
autovacuum); the term and corpus statistics do not change. The formula repeats
``quarry.insert_chunk_postings``'s, which runs after this migration.

Revision ID: 0015_code_b
Revises: 0014_hnsw
Create Date: 2026-11-30
"""

from alembic import op

revision = "0015_code_b"
down_revision = "0014_hnsw"
branch_labels = None
depends_on = None

_RECOMPUTE = """
do $recompute$
declare
    k1 constant double precision := 0.9;
    b constant double precision := {b};
    average_length double precision := (select s.total_length / s.chunk_count
                                        from quarry.text_stats s where s.chunk_count > 0);
    code_postings bigint;
begin
    if average_length is null then
        return;  -- no postings yet
    end if;
    perform set_config('statement_timeout', '0', true);
    select count(*) into code_postings
    from quarry.text_postings p join quarry.chunks c on c.id = p.chunk_id
    where c.is_code;
    if code_postings = 0 then
        return;
    end if;
    -- shown by quarry migrate (and the first command after an upgrade) while it rewrites them
    raise notice 'quarry: recomputing the BM25 impacts of % code postings (length normalisation b = %)',
        code_postings, b;
    update quarry.text_postings p
    set impact = p.term_frequency * (k1 + 1)
                 / (p.term_frequency + k1 * (1 - b + b * p.chunk_length / greatest(average_length, 1)))
    from quarry.chunks c
    where c.id = p.chunk_id and c.is_code;
end
$recompute$
"""


def upgrade() -> None:
    op.execute(_RECOMPUTE.format(b=0.9))


def downgrade() -> None:
    op.execute(_RECOMPUTE.format(b=0.4))
