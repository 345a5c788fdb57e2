"""Jobs that remove a source: ``add_source``/``refresh_source`` queue ingests, ``remove_source`` this kind.

Removing a large source deletes every chunk, vector and posting it has, in one transaction
(``quarry.remove_source``); as a durable job it is queued, shown and retried like an ingest.

Revision ID: 0017_source_jobs
Revises: 0016_wide_stores
Create Date: 2026-12-02
"""

from alembic import op

revision = "0017_source_jobs"
down_revision = "0016_wide_stores"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table quarry.jobs drop constraint jobs_kind_check")
    op.execute("alter table quarry.jobs add constraint jobs_kind_check"
               " check (kind in ('ingest', 'reembed', 'reindex', 'remove_source'))")


def downgrade() -> None:
    op.execute("delete from quarry.jobs where kind = 'remove_source'")
    op.execute("alter table quarry.jobs drop constraint jobs_kind_check")
    op.execute("alter table quarry.jobs add constraint jobs_kind_check"
               " check (kind in ('ingest', 'reembed', 'reindex'))")
