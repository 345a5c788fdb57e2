"""The hosted endpoint: API keys, per-key rate limits, Host/Origin checks, body bound, /healthz,
degradation when the embedder fails, and the ``quarry serve`` / ``quarry keys`` commands.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx2
import psycopg
import pytest
from mcp.shared.exceptions import MCPError
from psycopg_pool import ConnectionPool

from engine.config import Settings, get_settings
from engine.embed.base import SPACES, Embedder
from engine.embed.local import LocalMiniLM
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.store import api_keys
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from mcp_server.ratelimit import RatePolicy
from mcp_server.schemas import NoArgs
from mcp_server.tools import ToolContext, ToolSpec, all_tools, one_token
from tests.corpus import write_corpus
from tests.mcp_harness import REPO, StaticBackend, http_transport, mcp_session, rpc, serving

# Ten tokens, refilled at one per 100 s: a test's few seconds add almost nothing.
SLOW_RATE = RatePolicy(per_minute=0.6, burst=10)


@pytest.fixture(scope="module")
def small_corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
                 tmp_path_factory: pytest.TempPathFactory) -> None:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path_factory.mktemp("http-corpus")), SourceSpec(slug="sample"))


@pytest.fixture(scope="module")
def backend(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
            small_corpus: None) -> StaticBackend:
    return StaticBackend(Settings(database_url=migrated_url), session_pool, dict.fromkeys(SPACES, local_embedder))


@pytest.fixture(scope="module")
def keyed_url(backend: StaticBackend) -> Iterator[str]:
    """A server that requires keys, metered at ``SLOW_RATE``."""
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False), SLOW_RATE)
    with serving(app) as url:
        yield url


def new_key(pool: ConnectionPool) -> api_keys.CreatedKey:
    return api_keys.create_key(pool, f"test-{uuid.uuid4().hex[:8]}")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def refused_by_http(error: BaseException) -> bool:
    """Whether the SDK client failed because the server answered with an HTTP error (here: 401)."""
    if isinstance(error, BaseExceptionGroup):
        return any(refused_by_http(inner) for inner in error.exceptions)
    return isinstance(error, MCPError) and "error response" in str(error)


def tool_call(name: str, arguments: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}})


def tool_result(response: httpx2.Response) -> dict[str, object]:
    assert response.status_code == 200, response.text
    result: dict[str, object] = response.json()["result"]
    return result


# --- health and the request gate --------------------------------------------------------------------------------


def test_healthz_answers_without_a_key(keyed_url: str) -> None:
    response = httpx2.get(keyed_url + "/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok", "database": "ok"}


def test_a_request_without_a_key_is_unauthorized(keyed_url: str) -> None:
    response = rpc(keyed_url, tool_call("status", {}))
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    with pytest.raises(BaseException) as failed, mcp_session(http_transport(keyed_url + "/mcp")) as session:
        session.call("status")
    assert refused_by_http(failed.value)


@pytest.mark.parametrize(("key", "reason"), [
    ("not-a-key", "malformed"),
    ("qry_aaaaaaaaaaaa_" + "A" * 43, "unknown API key"),
])
def test_a_bad_key_is_unauthorized(keyed_url: str, key: str, reason: str) -> None:
    response = rpc(keyed_url, tool_call("status", {}), bearer(key))
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "UNAUTHORIZED" and reason in error["message"]


def test_a_wrong_secret_for_a_real_prefix_is_unauthorized(keyed_url: str, session_pool: ConnectionPool) -> None:
    key = new_key(session_pool)
    forged = key.secret[: -4] + ("AAAA" if not key.secret.endswith("AAAA") else "BBBB")
    response = rpc(keyed_url, tool_call("status", {}), bearer(forged))
    assert response.status_code == 401 and response.json()["error"]["message"] == "unknown API key"


def test_a_valid_key_works_and_a_revoked_one_stops_at_once(keyed_url: str, session_pool: ConnectionPool) -> None:
    key = new_key(session_pool)
    with mcp_session(http_transport(keyed_url + "/mcp", bearer(key.secret))) as session:
        assert session.ok("search", {"query": "partial index", "mode": "fts"})["results"]
        body = session.ok("status")
        assert body["rate_limit"]["burst"] == 10
        api_keys.revoke_key(session_pool, key.name)
        with pytest.raises(BaseException) as failed:
            session.call("status")
        assert refused_by_http(failed.value)
    response = rpc(keyed_url, tool_call("status", {}), bearer(key.secret))
    assert response.status_code == 401 and "revoked" in response.json()["error"]["message"]
    listed = {summary.id: summary for summary in api_keys.list_keys(session_pool)}
    assert listed[key.id].revoked_at is not None and listed[key.id].last_used_at is not None


def test_foreign_hosts_and_origins_are_refused(keyed_url: str, session_pool: ConnectionPool) -> None:
    key = new_key(session_pool)
    port = keyed_url.rsplit(":", 1)[1]
    rebound = rpc(keyed_url, tool_call("status", {}), {**bearer(key.secret), "host": f"attacker.example:{port}"})
    assert rebound.status_code == 421 and rebound.json()["error"]["code"] == "INVALID"
    cross_site = rpc(keyed_url, tool_call("status", {}), {**bearer(key.secret), "origin": "https://attacker.example"})
    assert cross_site.status_code == 403
    local_page = rpc(keyed_url, tool_call("status", {}), {**bearer(key.secret), "origin": f"http://localhost:{port}"})
    assert local_page.status_code == 200


def test_an_oversized_request_body_is_refused(keyed_url: str, session_pool: ConnectionPool) -> None:
    key = new_key(session_pool)
    response = rpc(keyed_url, tool_call("search", {"query": "x" * (1024 * 1024 + 1)}), bearer(key.secret))
    assert response.status_code == 413


def test_no_auth_is_only_allowed_on_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        AccessPolicy.for_bind("0.0.0.0", no_auth=True)
    assert AccessPolicy.for_bind("::1", no_auth=True).require_key is False
    assert AccessPolicy.for_bind("0.0.0.0", no_auth=False).allowed_hosts is None


# --- NaN and Infinity arrive only as raw JSON (the SDK client sends them as null) ------------------------------


FINITE_RULE = "must be a finite number: NaN and Infinity are not accepted"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_rejected(keyed_url: str, session_pool: ConnectionPool, literal: str) -> None:
    key = new_key(session_pool)
    for tool, arguments, path in [
        ("search", '{"query": "x", "limit": %s}', "limit"),
        ("advanced_search", '{"queries": ["x"], "filters": {"verified": {"any_of": [%s]}}}',
         "filters.verified.any_of[0]"),
    ]:
        # Python's json reads these literals; the SDK client would have sent null instead.
        body = tool_call(tool, {}).replace('"arguments": {}', '"arguments": ' + arguments % literal)
        result = tool_result(rpc(keyed_url, body, bearer(key.secret)))
        assert result["isError"] is True
        error = json.loads(result["content"][0]["text"])["error"]  # type: ignore[index]
        assert error["code"] == "INVALID"
        assert error["problems"] == [{"path": path, "rule": FINITE_RULE}]


# --- rate limits --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026 per-request protocol and the handshake era
def test_keys_are_metered_one_token_per_distinct_query(keyed_url: str, session_pool: ConnectionPool,
                                                       backend: StaticBackend, mode: str) -> None:
    key = new_key(session_pool)
    with mcp_session(http_transport(keyed_url + "/mcp", bearer(key.secret)), mode=mode) as session:
        eight = [f"index {i}" for i in range(8)]
        assert not session.call("advanced_search", {"queries": [*eight, eight[0]], "mode": "fts"}).is_error
        refused = session.call("advanced_search", {"queries": ["a", "b", "c"], "mode": "fts"})
        error = refused.error
        assert error["code"] == "RATE_LIMITED"
        assert 90 < error["retry_after"] <= 100  # one token short, at 0.01 tokens/s
        assert session.call("advanced_search", {"queries": ["dump", "dump"], "mode": "fts"}).is_error is False
        invalid = session.call("search", {"query": "x", "limit": 0})
        assert invalid.error["code"] == "INVALID"  # rejected before it is metered
        assert not session.call("search", {"query": "backup", "mode": "fts"}).is_error
        assert session.call("status").error["code"] == "RATE_LIMITED"

    # Buckets live in Postgres: another replica sees the same empty bucket.
    replica = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False), SLOW_RATE)
    with serving(replica) as other_url, \
            mcp_session(http_transport(other_url + "/mcp", bearer(key.secret))) as session:
        assert session.call("status").error["code"] == "RATE_LIMITED"
    fresh = new_key(session_pool)
    with mcp_session(http_transport(keyed_url + "/mcp", bearer(fresh.secret))) as session:
        assert not session.call("status").is_error


def test_the_bucket_refills_with_time(session_pool: ConnectionPool) -> None:
    key = api_keys.KeyVerifier(session_pool).verify(new_key(session_pool).secret)
    fast = {"capacity": 10.0, "refill_per_second": 50.0}
    assert api_keys.take_rate_tokens(session_pool, key, 10, **fast).granted
    refused = api_keys.take_rate_tokens(session_pool, key, 5, **fast)
    assert not refused.granted and 0 < refused.retry_after <= 0.1
    time.sleep(refused.retry_after + 0.02)
    assert api_keys.take_rate_tokens(session_pool, key, 5, **fast).granted


# --- degradation --------------------------------------------------------------------------------------------------


@pytest.fixture()
def broken_embedder(local_embedder: Embedder, tmp_path: Path) -> LocalMiniLM:
    """The real local embedder over a model cache whose prepared model file is corrupt."""
    assert isinstance(local_embedder, LocalMiniLM)
    prepared = local_embedder.prepare()
    (tmp_path / prepared.name).write_bytes(b"this is not an ONNX model")
    return LocalMiniLM(tmp_path)


def test_hybrid_search_falls_back_to_keywords_when_the_embedder_fails(
    backend: StaticBackend, broken_embedder: LocalMiniLM
) -> None:
    degraded_backend = StaticBackend(backend.settings, backend.pool, dict.fromkeys(SPACES, broken_embedder))
    app = build_http_app(degraded_backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        body = session.ok("search", {"query": "how do I create a partial index"})
        assert body["degraded"] is True and body["hybrid_leg_failed"] == "vector"
        assert "query_embedding_failed (text space)" in body["degradation_reason"]
        assert body["mode"] == "hybrid" and body["mode_used"] == "fts"
        assert body["results"] and all(result["vector_rank"] is None for result in body["results"])
        assert body["results"][0]["path"] == "docs/indexes.md"
        vector = session.call("search", {"query": "partial index", "mode": "vector"})
        assert vector.error["code"] == "UNAVAILABLE" and vector.error["error_id"]
        keyword = session.ok("search", {"query": "partial index", "mode": "fts"})
        assert keyword["degraded"] is False and keyword["hybrid_leg_failed"] is None


# --- failures the client sees only as codes ------------------------------------------------------------------------


class _BrokenPool:
    """A backend with a programming error in it: reading its pool (which every search does) raises."""

    def __init__(self, settings: Settings, embedders: Mapping[str, Embedder]) -> None:
        self.settings = settings
        self.embedders = embedders
        self.reranker = None

    @property
    def pool(self) -> ConnectionPool:
        raise RuntimeError("secret internal detail /etc/quarry.conf")


def test_an_unexpected_error_reaches_the_client_only_as_internal_with_an_id(
    backend: StaticBackend, caplog: pytest.LogCaptureFixture
) -> None:
    broken = _BrokenPool(backend.settings, backend.embedders)
    app = build_http_app(broken, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        reply = session.call("search", {"query": "partial index", "mode": "fts"})
    error = reply.error
    assert error["code"] == "INTERNAL" and error["error_id"] in error["message"]
    assert "secret internal detail" not in reply.text and "Traceback" not in reply.text
    logged = [record for record in caplog.records if error["error_id"] in record.getMessage()]
    assert logged and logged[0].exc_info is not None  # the traceback stays in the server log


def test_a_database_outage_is_unavailable_and_reported_by_health_checks(backend: StaticBackend) -> None:
    dead = ConnectionPool("postgresql://quarry@127.0.0.1:9/quarry?connect_timeout=1", open=False, timeout=1,
                          min_size=0, max_size=1)
    dead.open(wait=False)
    try:
        app = build_http_app(StaticBackend(backend.settings, dead, backend.embedders),
                             AccessPolicy.for_bind("127.0.0.1", no_auth=True))
        with serving(app) as url:
            assert httpx2.get(url + "/healthz", timeout=30).status_code == 503
            with mcp_session(http_transport(url + "/mcp")) as session:
                failed = session.call("search", {"query": "partial index", "mode": "fts"})
                assert failed.error["code"] == "UNAVAILABLE" and failed.error["error_id"]
                status = session.ok("status")
                assert status["healthy"] is False and status["database"]["reachable"] is False
    finally:
        dead.close()


# --- the commands -------------------------------------------------------------------------------------------------


@pytest.fixture()
def cli_env(migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("DATABASE_URL", migrated_url)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_keys_commands_create_list_and_revoke(cli_env: None, session_pool: ConnectionPool,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli.main import main

    name = f"cli-{uuid.uuid4().hex[:8]}"
    assert main(["keys", "create", name, "--scope", "admin"]) == 0
    secret = capsys.readouterr().out.strip()
    verified = api_keys.KeyVerifier(session_pool).verify(secret)
    assert verified.name == name and verified.scopes == ["admin"] and verified.allows("search")
    assert main(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert name in listing and secret not in listing and secret[4:16] in listing
    assert main(["keys", "create", name]) == 2  # names are unique among active keys
    assert main(["keys", "revoke", name]) == 0
    with pytest.raises(api_keys.KeyRejected, match="revoked"):
        api_keys.KeyVerifier(session_pool).verify(secret)
    assert main(["keys", "revoke", name]) == 2


def test_serve_refuses_no_auth_on_a_public_address(cli_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli.main import main

    assert main(["serve", "--host", "0.0.0.0", "--no-auth"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_quarry_serve_runs_http_with_healthz(migrated_url: str, model_cache: Path, tmp_path: Path,
                                            small_corpus: None) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": migrated_url, "QUARRY_MODEL_CACHE": str(model_cache),
           "QUARRY_HOME": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--http", "--no-auth", "--port",
                                str(port)], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            try:
                if httpx2.get(url + "/healthz").status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, "quarry serve did not come up"
            time.sleep(0.1)
        with mcp_session(http_transport(url + "/mcp")) as session:
            assert session.ok("search", {"query": "parseUserId", "mode": "fts"})["results"]
    finally:
        process.terminate()
        process.wait(timeout=20)


# --- overload ------------------------------------------------------------------------------------------------------


def test_as_many_calls_as_tool_threads_run_at_once_even_past_the_shared_thread_pool(backend: StaticBackend) -> None:
    """anyio's shared worker pool has 40 threads; more tool threads than that must not queue calls behind it."""
    parties = 42
    together = threading.Barrier(parties, timeout=20)

    def meet(_: ToolContext, __: NoArgs) -> str:
        together.wait()  # breaks (and the call fails) unless all the calls run at the same time
        return "{}"

    meeting = ToolSpec(name="meet", title="Meet", description="Returns once all the test's calls are running.",
                       arguments=NoArgs, run=meet, cost=one_token)
    wide = StaticBackend(Settings(database_url=backend.settings.database_url, max_in_flight=parties,
                                  tool_threads=parties), backend.pool, backend.embedders)
    app = build_http_app(wide, AccessPolicy.for_bind("127.0.0.1", no_auth=True), tools=[meeting])
    errors: list[object] = []

    def call(url: str) -> None:
        with mcp_session(http_transport(url + "/mcp")) as session:
            reply = session.call("meet", {})
            if reply.is_error:
                errors.append(reply.error)

    with serving(app) as url:
        callers = [threading.Thread(target=call, args=(url,)) for _ in range(parties)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(60)
    assert errors == [] and not together.broken


def test_admitted_calls_past_the_tool_threads_wait_their_turn(backend: StaticBackend) -> None:
    """Of max_in_flight admitted calls, tool_threads run at once; the others run as threads come free."""
    lock, release = threading.Lock(), threading.Event()
    running: list[int] = []  # how many ran at once, as each call entered
    entered = threading.Semaphore(0)
    now = [0]

    def hold(_: ToolContext, __: NoArgs) -> str:
        with lock:
            now[0] += 1
            running.append(now[0])
        entered.release()
        release.wait(30)
        with lock:
            now[0] -= 1
        return "{}"

    holding = ToolSpec(name="hold", title="Hold", description="Holds a tool thread until the test releases it.",
                       arguments=NoArgs, run=hold, cost=one_token)
    narrow = StaticBackend(Settings(database_url=backend.settings.database_url, max_in_flight=4, tool_threads=2),
                           backend.pool, backend.embedders)
    app = build_http_app(narrow, AccessPolicy.for_bind("127.0.0.1", no_auth=True), tools=[holding])
    replies: list[bool] = []

    def call(url: str) -> None:
        with mcp_session(http_transport(url + "/mcp")) as session:
            replies.append(session.call("hold", {}).is_error)

    with serving(app) as url:
        callers = [threading.Thread(target=call, args=(url,)) for _ in range(4)]
        for caller in callers:
            caller.start()
        assert entered.acquire(timeout=30) and entered.acquire(timeout=30)
        assert not entered.acquire(timeout=1)  # the other two wait for a thread, admitted but not running
        with mcp_session(http_transport(url + "/mcp")) as fifth:
            assert fifth.call("hold", {}).error["code"] == "BUSY"  # past the ceiling: refused at once
        release.set()
        for caller in callers:
            caller.join(60)
    assert replies == [False] * 4 and len(running) == 4 and max(running) == 2


def test_calls_past_the_in_flight_ceiling_are_refused_with_busy_not_queued(backend: StaticBackend) -> None:
    entered, release = threading.Event(), threading.Event()

    def hold(_: ToolContext, __: NoArgs) -> str:
        entered.set()
        release.wait(30)
        return "{}"

    holding = ToolSpec(name="hold", title="Hold", description="Holds a call slot until the test releases it.",
                       arguments=NoArgs, run=hold, cost=one_token)
    tools = [holding, *all_tools()]
    busy_backend = StaticBackend(Settings(database_url=backend.settings.database_url, max_in_flight=1),
                                 backend.pool, backend.embedders)
    app = build_http_app(busy_backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True), tools=tools)
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as first, \
            mcp_session(http_transport(url + "/mcp")) as second:
        held = threading.Thread(target=first.call, args=("hold", {}))
        held.start()
        assert entered.wait(30)
        started = time.monotonic()
        refused = second.call("search", {"query": "partial index", "mode": "fts"})
        assert time.monotonic() - started < 2  # refused at once, not after waiting for the slot
        assert refused.error["code"] == "BUSY" and refused.error["retry_after"] > 0
        release.set()
        held.join(30)
        assert not second.call("search", {"query": "partial index", "mode": "fts"}).is_error
