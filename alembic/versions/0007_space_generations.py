"""Embedding-space generations: a logical space (text, code) is served by one physical space.

``quarry reembed`` fills a new generation (``code_g2``) beside the serving one while
searches keep using the old vectors, then switches ``serves`` in one short transaction.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.embedding_spaces add column serves text")
    op.execute("update quarry.embedding_spaces set serves = name")
    op.execute("create unique index embedding_spaces_serves_idx on quarry.embedding_spaces (serves)")
    op.execute("""
        comment on column quarry.embedding_spaces.serves is
        'The logical space (text, code) this generation answers searches for; null while a re-embed fills it.'
    """)


def downgrade() -> None:
    op.execute("alter table quarry.embedding_spaces drop column serves")
