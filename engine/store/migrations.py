"""``quarry migrate``: alembic's run-once DDL, then every ``sql/*.sql`` file re-applied.

Both run in one transaction under an advisory lock, so concurrent first uses (two
CLI commands, several server replicas) migrate once and nobody sees half a schema.
A fingerprint of the migration scripts and the SQL files is stored; when it matches,
``ensure_migrated`` costs one query and a hash of those files (alembic and SQLAlchemy, ~0.4 s
to import, are imported only to migrate: every CLI command and server start checks first).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from alembic.config import Config

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # engine/
_REPO_DIR = _PACKAGE_DIR.parent

# Functions created by alembic migrations: how a chunk is tokenized (the BM25 postings are made
# from it, so changing it needs a migration and a reindex; alembic 0023's downgrade generates a
# column from it). Every other routine in the schema belongs to sql/ and is recreated on each migrate.
_MIGRATION_OWNED_ROUTINES = ("identifier_words", "chunk_tsvector")

# Arbitrary constant shared by every Quarry process: "a migration is running".
_MIGRATION_LOCK_KEY = 0x5155_4152_5259  # "QUARRY"


def _resource_dir(installed_name: str, repo_name: str) -> Path:
    """Locate sql/ or alembic/: inside the wheel when installed, at the repo root in a checkout."""
    installed = _PACKAGE_DIR / installed_name
    return installed if installed.is_dir() else _REPO_DIR / repo_name


def sql_dir() -> Path:
    return _resource_dir("_sql", "sql")


def alembic_dir() -> Path:
    return _resource_dir("_alembic", "alembic")


def sql_files() -> list[Path]:
    return sorted(sql_dir().glob("*.sql"))


def alembic_config() -> Config:
    """Alembic's configuration for Quarry's migrations (the caller hands it a connection)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(alembic_dir()))
    return config


def schema_fingerprint() -> str:
    """Hash of every migration script and SQL file (names and text): any change to either re-migrates."""
    digest = hashlib.sha256()
    for path in [*sorted((alembic_dir() / "versions").glob("*.py")), *sql_files()]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _stored_fingerprint(url: str) -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("select to_regclass('quarry.schema_state') is not null").fetchone()
        if row is None or not row[0]:
            return None
        found = conn.execute("select fingerprint from quarry.schema_state").fetchone()
        return None if found is None else str(found[0])


def ensure_migrated(url: str) -> bool:
    """Migrate when the database is behind this code; returns whether anything ran."""
    if _stored_fingerprint(url) == schema_fingerprint():
        return False
    upgrade(url)
    return True


def upgrade(url: str) -> None:
    """Run alembic upgrade to head and re-apply the SQL files, atomically."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from alembic import command

    fingerprint = schema_fingerprint()
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(url), poolclass=NullPool
    )
    try:
        with engine.begin() as connection:
            driver = connection.connection.driver_connection
            assert isinstance(driver, psycopg.Connection)
            driver.add_notice_handler(_report_progress)
            driver.execute("select pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            driver.execute("create schema if not exists quarry")
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            _drop_replaceable_routines(driver)
            for path in sql_files():
                driver.execute(path.read_text(encoding="utf-8"))
            driver.execute(
                "insert into quarry.schema_state (fingerprint) values (%s) "
                "on conflict (singleton) do update set fingerprint = excluded.fingerprint, migrated_at = now()",
                (fingerprint,),
            )
    finally:
        engine.dispose()


def _report_progress(notice: psycopg.errors.Diagnostic) -> None:
    """Say on stderr what a long step is doing (alembic 0014 rebuilds indexes: minutes at 1M vectors)."""
    message = notice.message_primary or ""
    if message.startswith("quarry: "):
        print(message, file=sys.stderr, flush=True)


def _drop_replaceable_routines(conn: psycopg.Connection[Any]) -> None:
    """Drop the routines sql/ defines, so a changed signature never leaves a stale overload behind."""
    rows = conn.execute(
        "select p.oid::regprocedure::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
        " where n.nspname = 'quarry' and p.proname <> all(%s)",
        (list(_MIGRATION_OWNED_ROUTINES),),
    ).fetchall()
    for (signature,) in rows:
        # regprocedure text is a qualified, quoted signature: safe to splice as SQL.
        conn.execute(sql.SQL("drop routine if exists {} cascade").format(sql.SQL(signature)))
