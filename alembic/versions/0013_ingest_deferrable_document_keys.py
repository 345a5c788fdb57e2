"""Chunks and relations may name a document written later in the same transaction.

Ingestion writes batches on two connections at once (``engine.ingest.pipeline``). Writing a
batch's documents updates shared rows (facet counts by trigger; with them, BM25 term and corpus
statistics), which one transaction at a time may hold, so each batch writes its chunks
(tsvector, GIN), vectors and relations first, concurrently with the other batch, and its
documents, versions and postings last, under ``quarry.lock_corpus_statistics``. For that the
foreign keys from chunks and relations to their document are checked at commit in those
transactions (``set constraints ... deferred``); everywhere else they stay immediate, and the
cascades on delete are never deferred.

Revision ID: 0013_ingest
Revises: 0012_text
Create Date: 2026-11-30
"""

from alembic import op

revision = "0013_ingest"
down_revision = "0012_text"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.chunks alter constraint chunks_document_id_fkey deferrable initially immediate")
    op.execute("alter table quarry.relations alter constraint relations_document_id_fkey"
               " deferrable initially immediate")


def downgrade() -> None:
    op.execute("alter table quarry.chunks alter constraint chunks_document_id_fkey not deferrable")
    op.execute("alter table quarry.relations alter constraint relations_document_id_fkey not deferrable")
