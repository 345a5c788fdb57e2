"""Each chunk carries its document's length in chunks, which the fusion reads for every candidate.

``quarry.hybrid_search`` blends a chunk's score with its document's best evidence, the more so the
longer the document (``quarry.document_evidence_share``). It looked each candidate's document length
up with a backward scan of the chunks' ``(document_id, ordinal)`` index, about a hundred probes a
search: reading it from the chunk row instead takes 0.31-0.46 ms off a 6.1-6.8 ms ``hybrid_search``
at 1M chunks and 0.12-0.14 ms off 3.3-3.5 at SciFact's 13k vectors (docs/benchmarks-log.md § A chunk
carries its document's length). A document's chunks are written together and never apart (an
ingest COPYs a document's chunks whole, and a changed document's chunks are all deleted and written
again), so the count is known when a chunk is written. The check ``0 <= ordinal <
document_chunks`` stops a writer that gets it wrong.

Existing chunks get the count their document's ordinals give (the highest plus one, as the lookup
read it) while the table is rewritten once, by a change of the new column's type whose USING clause
computes it: an UPDATE would leave a dead copy of every row behind, and a CLUSTER in the same
transaction has to keep those copies (the deleting transaction has not committed). The rewrite takes
an exclusive lock, disk room for a second copy while it runs, and about ten seconds at a million
chunks (said on stderr through ``quarry migrate``).

Revision ID: 0027_chunk_document_length
Revises: 0026_text_postings_deferred
Create Date: 2026-12-07
"""

from alembic import op

revision = "0027_chunk_document_length"
down_revision = "0026_text_postings_deferred"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.chunks add column document_chunks int")
    op.execute("""
        create function pg_temp.document_length(document uuid) returns int
        language sql stable
        as $length$ select max(ordinal) + 1 from quarry.chunks where document_id = document $length$
    """)
    op.execute("""
        do $fill$
        begin
            -- shown by quarry migrate while it runs: about ten seconds at a million chunks
            raise notice 'quarry: storing each chunk''s document length in quarry.chunks (% chunks)',
                (select count(*) from quarry.chunks);
            perform set_config('statement_timeout', '0', true);
            -- one rewrite of the table: the lookup reads the table as it was, by its (document_id, ordinal) index
            alter table quarry.chunks
                alter column document_chunks type int using pg_temp.document_length(document_id),
                alter column document_chunks set not null,
                add constraint chunks_ordinal_within_document check (ordinal >= 0 and ordinal < document_chunks);
        end
        $fill$
    """)
    op.execute("drop function pg_temp.document_length(uuid)")
    op.execute("analyze quarry.chunks")  # the planner's statistics of the rewritten table


def downgrade() -> None:
    op.execute("alter table quarry.chunks drop column document_chunks")  # its check goes with it
