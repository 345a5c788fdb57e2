"""The README's two commands, run as written (minus the install, which the test run already did)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.mcp_harness import http_transport, mcp_session

REPO = Path(__file__).resolve().parents[1]
INSTALL = "pip install -e . && "


def _install_and_run_commands() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Install and run", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    main_command, test_command = _install_and_run_commands()[:2]
    assert main_command.startswith(INSTALL)
    assert test_command == "pip install -e '.[dev]' && pytest"
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci_lines


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: pytest-timeout's limit for the main command's test (pyproject.toml's global one, stated where the deadline is).
MAIN_COMMAND_TIMEOUT_S = 300
#: What the test leaves after the server came up: one search (seconds: the model is loaded by then) and the
#: teardown (up to 30 s for the server to exit, then the embedded Postgres stops).
AFTER_STARTUP_S = 60
#: How long the main command may take to serve (first boot, migrations, ingest, model: 100-180 s on two
#: cores). Below the timeout, so a slow machine gets this test's message and the command's output, not a
#: bare timeout.
STARTUP_DEADLINE_S = MAIN_COMMAND_TIMEOUT_S - AFTER_STARTUP_S


def _output_after_stopping(server: subprocess.Popen[str]) -> str:
    server.terminate()
    output, _ = server.communicate(timeout=30)
    return output[-4000:]


@pytest.mark.slow
@pytest.mark.exclusive  # its deadline assumes the machine's cores, not half of them
@pytest.mark.timeout(MAIN_COMMAND_TIMEOUT_S)
def test_main_command_ingests_quarrys_docs_and_serves_them_over_mcp(home: Path, model_cache: Path) -> None:
    main_command = _install_and_run_commands()[0].removeprefix(INSTALL)
    port = _free_port()
    env = {key: value for key, value in os.environ.items()
           if key not in {"DATABASE_URL", "QUARRY_DATABASE_URL"}}  # the embedded default, as a user gets it
    env.update(QUARRY_HOME=str(home), QUARRY_MODEL_CACHE=str(model_cache), QUARRY_PORT=str(port),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    server = subprocess.Popen(["bash", "-c", main_command], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while True:
            assert server.poll() is None, f"{shlex.quote(main_command)} exited: {server.stdout.read()}"  # type: ignore[union-attr]
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not come up within {STARTUP_DEADLINE_S} s; its output:\n"
                            f"{_output_after_stopping(server)}")
            time.sleep(1)
        with mcp_session(http_transport(f"http://127.0.0.1:{port}/mcp")) as session:
            body = session.ok("search", {"query": "reciprocal rank fusion of the full-text and vector legs"})
        results = body["results"]
        assert results and all(hit["source"]["slug"] == "quarry" for hit in results)
        assert any(hit["title"] and hit["content"] for hit in results)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_main_command_test_gives_up_before_pytest_timeout_does(request: pytest.FixtureRequest) -> None:
    marks = [mark for mark in getattr(test_main_command_ingests_quarrys_docs_and_serves_them_over_mcp, "pytestmark", [])
             if mark.name == "timeout"]
    timeout = float(marks[0].args[0]) if marks else float(request.config.getini("timeout") or 0)
    assert 0 < STARTUP_DEADLINE_S + AFTER_STARTUP_S <= timeout <= float(request.config.getini("timeout"))


def test_readme_sql_runs_in_psql(database_url: str) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sql\n(.+?)\n```", readme, flags=re.S)
    assert blocks
    env = {**os.environ, "DATABASE_URL": database_url}
    for block in blocks:
        result = subprocess.run([sys.executable, "-m", "engine.cli", "psql", "-v", "ON_ERROR_STOP=1", "-c", block],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
