"""Chunks lose their stored search vector and its GIN index: the BM25 postings are the text index.

At 1M chunks the stored ``search_vector`` took about 660 bytes per chunk (heap and TOAST) and its
GIN index 286, of 7,295 in all (docs/BENCHMARKS.md, storage). Since the postings moved into blocks
(0022) only two things read it:

- ``quarry.insert_chunk_postings`` (sql/018), which now tokenizes each chunk with
  ``quarry.chunk_tsvector`` as it writes the chunk's postings: the same function the generated
  column called, once per chunk as before, and no GIN entry to maintain beside it;
- the keyword leg of ``quarry.count_candidate_documents`` (sql/065), which now reads the rarest
  selective term's postings and checks the others in each candidate's ``quarry.chunk_terms`` row.

Dropping a column frees nothing until each row is rewritten, so the table is rewritten here:
CLUSTER on the primary key (ids are time-ordered, so that is about the order the rows were
written in), which takes an exclusive lock, disk room for a second copy of the table while it
runs, and about as long as copying the table and building its indexes again (it says so on
stderr through ``quarry migrate``).

Revision ID: 0023_chunks_no_search_vector
Revises: 0022_text_posting_blocks
Create Date: 2026-12-06
"""

from alembic import op

revision = "0023_chunks_no_search_vector"
down_revision = "0022_text_posting_blocks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.chunks drop column search_vector")  # its GIN index goes with it
    op.execute("""
        do $rewrite$
        begin
            -- shown by quarry migrate while it runs: minutes at a million chunks
            raise notice 'quarry: rewriting quarry.chunks without its stored search vector (% chunks)',
                (select count(*) from quarry.chunks);
            cluster quarry.chunks using chunks_pkey;
        end
        $rewrite$
    """)
    op.execute("analyze quarry.chunks")  # the planner's statistics of the rewritten table


def downgrade() -> None:
    op.execute("""
        alter table quarry.chunks add column search_vector tsvector generated always as
            (quarry.chunk_tsvector(title, heading_path, symbol_path, content)) stored
    """)
    op.execute("create index chunks_search_vector_idx on quarry.chunks using gin (search_vector)")
