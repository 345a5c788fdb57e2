"""Vector stores hold up to 4,000 dimensions: wider than 2,000, their HNSW graph is half precision.

pgvector's HNSW indexes ``vector`` up to 2,000 dimensions and ``halfvec`` up to 4,000, and
common embeddings are wider than 2,000 (OpenAI's text-embedding-3-large: 3,072; Voyage's
largest: 2,048). Such a store's index holds half-precision copies
(``quarry.vector_store_index_type``, sql/075-vector-stores.sql) while its rows keep single
precision. Existing stores are all at most 2,000 wide and keep their indexes as they are.
The downgrade fails while a wider store exists: its vectors would not fit the old check.

Revision ID: 0016_wide_stores
Revises: 0015_code_b
Create Date: 2026-11-30
"""

from alembic import op

revision = "0016_wide_stores"
down_revision = "0015_code_b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.vector_stores drop constraint vector_stores_dimension_check")
    op.execute("alter table quarry.vector_stores add constraint vector_stores_dimension_check"
               " check (dimension between 1 and 4000)")  # 4000: HNSW's limit for halfvec


def downgrade() -> None:
    op.execute("alter table quarry.vector_stores drop constraint vector_stores_dimension_check")
    op.execute("alter table quarry.vector_stores add constraint vector_stores_dimension_check"
               " check (dimension between 1 and 2000)")
