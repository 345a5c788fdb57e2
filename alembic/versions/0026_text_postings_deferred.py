"""A first ingest into an empty text index writes its BM25 postings once, at its end.

Every batch of an ingest tokenized its chunks and wrote their postings as rows with impacts from the
average length known so far; a first ingest then rebuilt them all from the final average, so every
posting was written twice, while the model waited (about 0.09 s per 256 chunks of the PostgreSQL
manual, in a 100-page first ingest 0.2 s of 7.3: docs/benchmarks-log.md). Now, when the text index
is empty as an ingest starts, its batches leave the postings to the rebuild that closes it.

``quarry.text_stats.postings_deferred`` says that committed chunks may lack postings: each batch that
leaves them sets it in its own transaction, under ``quarry.lock_corpus_statistics``, and
``quarry.rebuild_text_index`` clears it under the same lock after indexing every chunk. The next
ingest to finish (of any source, the killed run's or another) rebuilds while it is set, as a killed
load's deferred HNSW index is built by the next ingest.

Revision ID: 0026_text_postings_deferred
Revises: 0025_version_facet_source_totals
Create Date: 2026-12-06
"""

from alembic import op

revision = "0026_text_postings_deferred"
down_revision = "0025_version_facet_source_totals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.text_stats add column postings_deferred boolean not null default false")


def downgrade() -> None:
    op.execute("alter table quarry.text_stats drop column if exists postings_deferred")
