"""What a client cannot hold or learn over HTTP: slow headers and idle connections are closed, connections and
GET /mcp streams are capped, failed keys are limited per address and cost the same whether the prefix exists,
and the SDK's own error bodies repeat nothing of the request.

Real uvicorn on loopback over raw sockets and httpx, a real Postgres; timeouts are a second or less.
"""

from __future__ import annotations

import json
import secrets
import select
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx2
import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.store import api_keys
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.mcp_harness import StaticBackend, rpc, serving

HEADER_TIMEOUT_S = 1.0
SEARCH = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "search", "arguments": {"query": "partial index", "mode": "fts"}}})


@contextmanager
def keyed_server(migrated_url: str, pool: ConnectionPool, **limits: Any) -> Iterator[str]:
    settings = Settings(database_url=migrated_url, **{"http_header_timeout_s": HEADER_TIMEOUT_S,
                                                      "http_keepalive_timeout_s": 0.5, **limits})
    app = build_http_app(StaticBackend(settings, pool), AccessPolicy.for_bind("127.0.0.1", no_auth=False))
    with serving(app) as url:
        yield url


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (readable with nothing, or reset); never blocks."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


@pytest.fixture(scope="module")
def key(session_pool: ConnectionPool) -> api_keys.CreatedKey:
    return api_keys.create_key(session_pool, f"limits-{uuid.uuid4().hex[:8]}")


def test_slow_header_and_silent_sockets_are_closed_while_searches_keep_answering(
    migrated_url: str, session_pool: ConnectionPool, key: api_keys.CreatedKey,
) -> None:
    with keyed_server(migrated_url, session_pool, http_max_connections=400) as url, ExitStack() as stack:
        opened = time.monotonic()
        slow = [stack.enter_context(socket.create_connection(("127.0.0.1", _port(url)))) for _ in range(200)]
        silent = [stack.enter_context(socket.create_connection(("127.0.0.1", _port(url)))) for _ in range(50)]
        for sock in slow:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answers: list[int] = []
        done = threading.Event()

        def search_meanwhile() -> None:
            while not done.is_set():
                answers.append(rpc(url, SEARCH, bearer(key.secret)).status_code)

        searcher = threading.Thread(target=search_meanwhile)
        searcher.start()
        closed_at: dict[int, float] = {}
        try:
            while len(closed_at) < len(slow) + len(silent) and time.monotonic() - opened < HEADER_TIMEOUT_S + 3:
                for index, sock in enumerate([*slow, *silent]):
                    if index in closed_at:
                        continue
                    if _closed_by_server(sock):
                        closed_at[index] = time.monotonic() - opened
                    elif index < len(slow):
                        try:
                            sock.sendall(b"x")  # a header trickling in, one byte at a time
                        except OSError:
                            closed_at[index] = time.monotonic() - opened
                time.sleep(0.1)
        finally:
            done.set()
            searcher.join()
    assert len(closed_at) == len(slow) + len(silent)
    assert max(closed_at.values()) < HEADER_TIMEOUT_S + 1.0
    assert len(answers) >= 3 and set(answers) == {200}


def test_an_idle_keep_alive_connection_is_closed(migrated_url: str, session_pool: ConnectionPool) -> None:
    with keyed_server(migrated_url, session_pool) as url, \
            socket.create_connection(("127.0.0.1", _port(url))) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(5)
        received = sock.recv(4096)
        answered = time.monotonic()
        while chunk := sock.recv(4096):  # the rest of the response, then the server's close
            received += chunk
        assert received.startswith(b"HTTP/1.1 200") and received.endswith(b'"database":"ok"}')
        assert time.monotonic() - answered < 2


def test_connections_past_the_cap_get_503_and_are_closed(migrated_url: str, session_pool: ConnectionPool) -> None:
    with keyed_server(migrated_url, session_pool, http_max_connections=5, http_header_timeout_s=10.0) as url, \
            ExitStack() as stack:
        held = [stack.enter_context(socket.create_connection(("127.0.0.1", _port(url)))) for _ in range(5)]
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", _port(url))) as extra:
            extra.settimeout(5)
            reply = extra.recv(4096)
            assert reply.startswith(b"HTTP/1.1 503") and b"BUSY" in reply
            assert extra.recv(4096) == b""
        for sock in held:
            sock.close()
        time.sleep(0.2)
        assert httpx2.get(url + "/healthz").status_code == 200


def _open_stream(url: str, secret: str) -> tuple[socket.socket, bytes]:
    """A GET /mcp event stream on a raw socket: the socket and the response head."""
    sock = socket.create_connection(("127.0.0.1", _port(url)))
    sock.sendall(f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secret}\r\n"
                 "Accept: text/event-stream\r\n\r\n".encode())
    sock.settimeout(10)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, head


def test_get_streams_past_the_per_key_and_total_caps_are_refused(
    migrated_url: str, session_pool: ConnectionPool, key: api_keys.CreatedKey,
) -> None:
    other = api_keys.create_key(session_pool, f"limits-other-{uuid.uuid4().hex[:8]}")
    with keyed_server(migrated_url, session_pool, mcp_max_streams=3, mcp_max_streams_per_key=2) as url, \
            ExitStack() as stack:
        def stream(secret: str) -> bytes:
            sock, head = _open_stream(url, secret)
            stack.callback(sock.close)
            return head

        first, second = (stream(key.secret) for _ in range(2))
        assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")
        third = stream(key.secret)
        assert third.startswith(b"HTTP/1.1 429") and b"BUSY" in third + b"BUSY"
        assert stream(other.secret).startswith(b"HTTP/1.1 200")
        assert stream(other.secret).startswith(b"HTTP/1.1 503")  # three open in all
        # POSTs are not streams: searches still answer
        assert rpc(url, SEARCH, bearer(key.secret)).status_code == 200
        # a stream whose client goes away frees its place
        sock, head = _open_stream(url, other.secret)
        sock.close()
    with keyed_server(migrated_url, session_pool, mcp_max_streams=1, mcp_max_streams_per_key=1) as url:
        sock, head = _open_stream(url, key.secret)
        assert head.startswith(b"HTTP/1.1 200")
        sock.close()
        deadline = time.monotonic() + 5
        while True:
            again, head = _open_stream(url, key.secret)
            again.close()
            if head.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert head.startswith(b"HTTP/1.1 200")


def test_a_wrong_secret_costs_what_an_unknown_prefix_costs(
    migrated_url: str, session_pool: ConnectionPool, key: api_keys.CreatedKey,
) -> None:
    wrong_secret = key.secret[:-1] + ("B" if not key.secret.endswith("B") else "C")
    unknown_prefix = key.secret[:4] + "zzzzzzzzzzzz" + key.secret[16:]
    with keyed_server(migrated_url, session_pool, auth_failure_burst=10_000) as url, httpx2.Client() as client:
        def median_ms(secret: str) -> float:
            times = []
            for _ in range(25):
                started = time.perf_counter()
                response = client.post(url + "/mcp", content=SEARCH, headers={
                    **bearer(secret), "content-type": "application/json", "accept": "application/json"})
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 401 and response.json()["error"]["message"] == "unknown API key"
            return statistics.median(times)

        median_ms(unknown_prefix)  # warm up: connections, plans
        wrong, unknown = median_ms(wrong_secret), median_ms(unknown_prefix)
    assert max(wrong, unknown) < 2 * min(wrong, unknown), (wrong, unknown)


def test_repeated_failures_from_one_address_are_rate_limited(
    migrated_url: str, session_pool: ConnectionPool, key: api_keys.CreatedKey,
) -> None:
    with keyed_server(migrated_url, session_pool, auth_failure_burst=3, auth_failures_per_minute=0.6) as url:
        for _ in range(3):
            assert rpc(url, SEARCH, bearer("qry_aaaaaaaaaaaa_" + "A" * 43)).status_code == 401
        refused = rpc(url, SEARCH, bearer("qry_aaaaaaaaaaaa_" + "A" * 43))
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "RATE_LIMITED" and 0 < error["retry_after"] <= 100
        # nothing is checked from this address until it has waited, not even a good key
        assert rpc(url, SEARCH, bearer(key.secret)).status_code == 429


FRAMES = (
    lambda value: {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": value},
    lambda value: {"jsonrpc": "2.0", "id": 1, "method": value, "params": {}},
    lambda value: {"jsonrpc": "2.0", "id": {"nested": value}, "method": "tools/list"},
    lambda value: [{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": value}],
    lambda value: {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": {"x": value}}},
)


def test_sdk_error_bodies_repeat_no_part_of_the_sent_value(
    migrated_url: str, session_pool: ConnectionPool, key: api_keys.CreatedKey,
) -> None:
    value = "qry_" + secrets.token_hex(16) + "SECRETSEC"
    windows = {value[start:start + 5] for start in range(len(value) - 4)}
    with keyed_server(migrated_url, session_pool) as url:
        garbled = rpc(url, b'{"jsonrpc": "2.0", ' + value.encode(), bearer(key.secret))
        assert garbled.status_code == 400 and garbled.json()["error"]["code"] == -32700
        replies = [rpc(url, json.dumps(frame(value)), bearer(key.secret)) for frame in FRAMES]
    for reply in (garbled, *replies):
        assert not any(window in reply.text for window in windows), reply.text
        if reply.status_code == 202:  # taken for a notification: nothing is answered, so nothing echoed
            continue
        body = reply.json()
        error = (body[0] if isinstance(body, list) else body)["error"]
        assert isinstance(error["code"], int) and "data" not in error, reply.text
    non_object_params = replies[0]
    assert non_object_params.status_code == 400 and non_object_params.json()["error"]["code"] == -32602
