"""BM25 postings: per-term impact lists kept current by ingestion.

Postgres' ts_rank has no IDF and ranks every matching row. Quarry keeps, per
lexeme, its chunk frequency, and per (lexeme, chunk) the BM25 term-frequency
part (saturated and length-normalised), indexed in descending order. A query
then reads only the top of each of its terms' lists and multiplies by IDF.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.text_terms (
            id int generated always as identity primary key,
            lexeme text not null unique,
            chunk_frequency int not null default 0 check (chunk_frequency >= 0)
        )
    """)
    op.execute("""
        create table quarry.text_postings (
            term_id int not null,
            chunk_id uuid not null,
            term_frequency real not null,
            chunk_length real not null,
            impact real not null
        )
    """)
    # The query path: a term's postings, highest impact first, without heap visits.
    op.execute("create index text_postings_impact_idx on quarry.text_postings"
               " (term_id, impact desc) include (chunk_id)")
    # No foreign keys: checking two per posting halved ingest speed. A statement-level
    # trigger on chunks (sql/018) deletes the postings of deleted chunks instead.
    op.execute("create index text_postings_chunk_idx on quarry.text_postings (chunk_id)")
    op.execute("""
        create table quarry.text_stats (
            singleton boolean primary key default true check (singleton),
            chunk_count bigint not null default 0,
            total_length double precision not null default 0
        )
    """)
    op.execute("insert into quarry.text_stats default values")


def downgrade() -> None:
    op.execute("drop table if exists quarry.text_postings, quarry.text_terms, quarry.text_stats")
