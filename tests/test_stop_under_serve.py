"""``quarry stop`` under a running ``quarry serve``, and a server whose embedded database goes away.

A real ``quarry serve`` on its own embedded Postgres (a temporary ``QUARRY_HOME``): ``quarry stop``
refuses while it runs, naming it; ``quarry stop --force`` stops the database anyway, and so does a
crash (``kill -9`` of the postmaster); each time the server starts it again and answers, and its log
says so once per outage, with no traceback per failed call.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from engine.embed.base import Embedder
from engine.store.db import (
    SERVERS_DIRECTORY,
    EmbeddedServerClaim,
    EmbeddedServerUser,
    embedded_server_running,
    embedded_server_users,
)
from tests.mcp_harness import McpSession, http_transport, mcp_session

REPO = Path(__file__).resolve().parents[1]
#: How long a request may wait for a pooled connection: short, so a call during an outage ends soon.
POOL_TIMEOUT_MS = 1_500
#: Any call while the database is down answers within this (the pool timeout plus slack).
CALL_BOUND_S = POOL_TIMEOUT_MS / 1000 + 2.0
RECOVERY_BOUND_S = 20.0


def _env(home: Path, model_cache: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "QUARRY_DATABASE_URL"}}
    env.update(QUARRY_HOME=str(home), QUARRY_MODEL_CACHE=str(model_cache), QUARRY_POOL_TIMEOUT_MS=str(POOL_TIMEOUT_MS))
    return env


def _quarry_stop(env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine.cli", "stop", *options], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_healthy(server: subprocess.Popen[str], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, f"quarry serve exited:\n{log.read_text(encoding='utf-8')}"
        try:
            if httpx2.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"quarry serve did not come up:\n{log.read_text(encoding='utf-8')}")


def _calls_until_answered(session: McpSession) -> list[str]:
    """``list_sources`` until it answers (reading the database), each call quick: the codes seen on the way."""
    codes = []
    deadline = time.monotonic() + RECOVERY_BOUND_S
    while time.monotonic() < deadline:
        started = time.monotonic()
        reply = session.call("list_sources")
        assert time.monotonic() - started < CALL_BOUND_S
        codes.append(reply.body["error"]["code"] if reply.is_error else "ok")
        if not reply.is_error:
            return codes
        time.sleep(0.2)
    pytest.fail(f"the server did not recover within {RECOVERY_BOUND_S} s: {codes}")


def _postmaster_pid(home: Path) -> int:
    return int((home / "pgdata" / "postmaster.pid").read_text(encoding="ascii").split("\n", 1)[0])


def _wait_for_a_new_postmaster(home: Path, crashed: int) -> None:
    deadline = time.monotonic() + RECOVERY_BOUND_S
    while not (embedded_server_running(home) and _postmaster_pid(home) != crashed):
        assert time.monotonic() < deadline, f"the server did not restart the database within {RECOVERY_BOUND_S} s"
        time.sleep(0.2)


def test_quarry_stop_refuses_under_a_server_which_restarts_a_database_stopped_anyway_or_crashed(
        home: Path, model_cache: Path, local_embedder: Embedder) -> None:
    # local_embedder: the model the server loads is prepared in model_cache before it starts
    env = _env(home, model_cache)
    port = _free_port()
    log = home / "serve.log"
    with log.open("w", encoding="utf-8") as output:
        server = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--no-auth", "--port", str(port)],
                                  cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_until_healthy(server, url, log)
        with mcp_session(http_transport(f"{url}/mcp")) as session:
            assert _calls_until_answered(session) == ["ok"]

            refused = _quarry_stop(env)
            assert refused.returncode != 0 and embedded_server_running(home)
            assert f"pid {server.pid}: quarry serve --no-auth --port {port}" in refused.stderr
            assert "--force" in refused.stderr

            forced = _quarry_stop(env, "--force")
            assert forced.returncode == 0 and "embedded Postgres stopped" in forced.stdout
            assert set(_calls_until_answered(session)) <= {"UNAVAILABLE", "ok"}

            crashed = _postmaster_pid(home)
            os.kill(crashed, signal.SIGKILL)  # a crash: postmaster.pid stays behind
            _wait_for_a_new_postmaster(home, crashed)  # meanwhile a pooled session may still answer
            assert set(_calls_until_answered(session)) <= {"UNAVAILABLE", "ok"}
    finally:
        server.terminate()
        server.wait(timeout=30)

    served = log.read_text(encoding="utf-8")
    assert served.count("went away (stopped or crashed)") == 2 and served.count("is back after") == 2, served
    assert "Traceback" not in served and "PoolTimeout" not in served, served
    assert "psycopg.pool WARNING" not in served, served  # each failed reconnection attempt, held back
    # the server is gone, and so is its registration: nothing to force any more
    assert embedded_server_users(home) == []
    stopped = _quarry_stop(env)
    assert stopped.returncode == 0 and "embedded Postgres stopped" in stopped.stdout, stopped.stderr


def test_a_registration_names_its_server_until_released_or_the_server_is_killed(tmp_path: Path) -> None:
    claim = EmbeddedServerClaim(tmp_path)
    try:
        [user] = embedded_server_users(tmp_path)
        assert user.pid == os.getpid() and user.command.split()[0] == "quarry"
    finally:
        claim.release()
    assert embedded_server_users(tmp_path) == []

    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, time; from pathlib import Path;"
                               " from engine.store.db import EmbeddedServerClaim;"
                               " claim = EmbeddedServerClaim(Path(os.environ['QUARRY_HOME']));"
                               " print('held', flush=True); time.sleep(60)", "serve", "--port", "1"],
        cwd=REPO, env={**os.environ, "QUARRY_HOME": str(tmp_path)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert embedded_server_users(tmp_path) == [EmbeddedServerUser(holder.pid, "quarry serve --port 1")]
    finally:
        holder.kill()  # no chance to release: the lock ends with the process
        holder.wait(timeout=30)
    assert embedded_server_users(tmp_path) == []
    assert list((tmp_path / SERVERS_DIRECTORY).iterdir()) == []  # the dead server's file is removed
