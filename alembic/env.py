"""Alembic environment: Quarry runs migrations on a connection it hands over.

``engine.store.migrations.upgrade`` puts a SQLAlchemy connection in
``config.attributes["connection"]``; the version table lives in the ``quarry`` schema.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table_schema="quarry",
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
