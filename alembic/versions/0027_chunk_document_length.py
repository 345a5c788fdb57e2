"""Each chunk carries its document's length in chunks, which the fusion reads for every candidate.

``quarry.hybrid_search`` blends a chunk's score with its document's best evidence, the more so the
longer the document (``quarry.document_evidence_share``). It looked each candidate's document length
up with a backward scan of the chunks' ``(document_id, ordinal)`` index: about a hundred probes a
search, 0.7-0.9 ms of a 6.6-7.3 ms ``hybrid_search`` at 1M chunks and 0.33-0.38 ms of 3.9-4.1 at
SciFact's 13k vectors (docs/benchmarks-log.md § A chunk carries its document's length). A
document's chunks are written together, once (an ingest COPYs a document's chunks whole, and a
changed document is written again under a new id), so the count is known when a chunk is written,
and the chunk row the fusion already reads can carry it. The check ``0 <= ordinal <
document_chunks`` stops a writer that gets it wrong.

Existing chunks get the count their document's ordinals give (the highest plus one, as the lookup
read it), then the table is rewritten as 0023 does (CLUSTER on the primary key), so the update
leaves no dead copy of every row behind: an exclusive lock, disk room for a second copy while it
runs, minutes at a million chunks (said on stderr through ``quarry migrate``).

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
        do $fill$
        begin
            -- shown by quarry migrate while it runs: minutes at a million chunks
            raise notice 'quarry: storing each chunk''s document length in quarry.chunks (% chunks)',
                (select count(*) from quarry.chunks);
            perform set_config('statement_timeout', '0', true);
            update quarry.chunks c set document_chunks = d.chunks
            from (select document_id, max(ordinal) + 1 as chunks from quarry.chunks group by document_id) d
            where d.document_id = c.document_id;
            alter table quarry.chunks
                alter column document_chunks set not null,
                add constraint chunks_ordinal_within_document check (ordinal >= 0 and ordinal < document_chunks);
            cluster quarry.chunks using chunks_pkey;
        end
        $fill$
    """)
    op.execute("analyze quarry.chunks")  # the planner's statistics of the rewritten table


def downgrade() -> None:
    op.execute("alter table quarry.chunks drop column document_chunks")  # its check goes with it
