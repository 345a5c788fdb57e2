"""BM25 postings compacted into per-term blocks, with each chunk's terms in one row.

At 1M chunks the postings took 7,093 of 12,578 bytes per chunk: one heap row per (term, chunk)
(60 bytes with its line pointer) and two B-tree entries of 36 bytes each, one per direction
(term -> chunks by impact for candidates, chunk -> terms for exact scores). Two tables hold the
same postings in about a fifth of that:

- ``quarry.chunk_terms``: one row per chunk with its length and, as parallel arrays, its term
  ids and impacts. The exact scoring of candidates reads it by primary key, and it is what the
  BM25 statistics count: a chunk's postings are added and removed with its row.
- ``quarry.text_posting_blocks``: each term's postings in impact order, cut into blocks of
  about 32 (chunk ids and impacts as parallel arrays). A block is keyed by its first posting
  (highest impact, then highest chunk id), so reading a term's list is a backward scan of the
  key index, and the block a posting belongs to is the one with the smallest key at or above
  it. A block holds at most 64 postings (1.3 KB), under the TOAST threshold, and
  ``toast_tuple_target`` keeps even larger rows inline and uncompressed: a read never detours
  through TOAST.

``quarry.text_postings`` keeps its shape and becomes the postings written since the last
compaction (``quarry.compact_text_postings``, sql/018), which an ingest runs at its end once
they are many, and ``quarry.rebuild_text_index`` leaves empty. Its statistics triggers move to
``quarry.chunk_terms``. This migration fills ``chunk_terms`` from the postings; the compaction
at the end of every migrate moves them into blocks.

Revision ID: 0022_text_posting_blocks
Revises: 0021_version_facet_counts
Create Date: 2026-12-03
"""

from alembic import op

revision = "0022_text_posting_blocks"
down_revision = "0021_version_facet_counts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.chunk_terms (
            chunk_id uuid primary key,
            chunk_length real not null,
            term_ids int[] not null,
            impacts real[] not null,
            check (cardinality(term_ids) = cardinality(impacts))
        )
    """)
    op.execute("""
        create table quarry.text_posting_blocks (
            term_id int not null,
            top_impact real not null,
            top_chunk_id uuid not null,
            chunk_ids uuid[] not null,
            impacts real[] not null,
            check (cardinality(chunk_ids) = cardinality(impacts) and cardinality(chunk_ids) > 0)
        ) with (toast_tuple_target = 8160)
    """)
    op.execute("create unique index text_posting_blocks_key on quarry.text_posting_blocks"
               " (term_id, top_impact, top_chunk_id)")
    # The statistics now follow chunk_terms (sql/018); these would count the moves into blocks.
    op.execute("drop trigger if exists text_postings_inserted on quarry.text_postings")
    op.execute("drop trigger if exists text_postings_deleted on quarry.text_postings")
    op.execute("drop trigger if exists text_postings_truncated on quarry.text_postings")
    op.execute("drop function if exists quarry.text_postings_changed(), quarry.text_postings_truncated()")
    # sql/018's replacement also counts the postings not yet in blocks
    op.execute("drop function if exists quarry.change_term_statistics(int[], bigint[], bigint, double precision)")
    op.execute("""
        alter table quarry.text_stats
            add column postings bigint not null default 0 check (postings >= 0),
            add column recent_postings bigint not null default 0 check (recent_postings >= 0)
    """)
    op.execute("update quarry.text_stats set postings = (select count(*) from quarry.text_postings),"
               " recent_postings = (select count(*) from quarry.text_postings)")
    # Rows and blocks order a term's postings alike, ties by chunk id: a query reads the same
    # postings whichever holds them.
    op.execute("drop index quarry.text_postings_impact_idx")
    op.execute("create index text_postings_impact_idx on quarry.text_postings"
               " (term_id, impact desc, chunk_id desc)")
    op.execute("""
        insert into quarry.chunk_terms (chunk_id, chunk_length, term_ids, impacts)
        select chunk_id, max(chunk_length), array_agg(term_id order by term_id), array_agg(impact order by term_id)
        from quarry.text_postings group by chunk_id
    """)


def downgrade() -> None:
    # Back to one posting row per (term, chunk), each with its term frequency again (recomputed
    # from the chunk as quarry.insert_chunk_postings computes it). The earlier sql/018, applied
    # by that version's migrate, brings back the statistics triggers.
    op.execute("""
        insert into quarry.text_postings (term_id, chunk_id, term_frequency, chunk_length, impact)
        select b.term_id, u.chunk_id, f.term_frequency, ct.chunk_length, u.impact
        from quarry.text_posting_blocks b
        cross join lateral unnest(b.chunk_ids, b.impacts) as u (chunk_id, impact)
        join quarry.chunk_terms ct on ct.chunk_id = u.chunk_id
        join quarry.chunks c on c.id = u.chunk_id
        join quarry.text_terms t on t.id = b.term_id
        join lateral quarry.weighted_term_frequencies(c.search_vector) f on f.lexeme = t.lexeme
    """)
    op.execute("drop view if exists quarry.text_index_postings")  # sql/030's, over the blocks
    op.execute("drop table quarry.text_posting_blocks, quarry.chunk_terms")
    op.execute("alter table quarry.text_stats drop column postings, drop column recent_postings")
    op.execute("drop index quarry.text_postings_impact_idx")
    op.execute("create index text_postings_impact_idx on quarry.text_postings"
               " (term_id, impact desc) include (chunk_id)")
