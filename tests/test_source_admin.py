"""Managing sources: ``quarry remove`` and the MCP admin tools add_source / refresh_source /
remove_source, which queue durable jobs that ``quarry jobs run`` carries out."""

from __future__ import annotations

import argparse
import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.admin.jobs import list_jobs, show_job
from engine.admin.sources import remove_source
from engine.cli.jobs import add_jobs_arguments, run_jobs
from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.errors import NotFoundError
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.runtime import Runtime
from engine.store import api_keys
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import write_corpus
from tests.mcp_harness import StaticBackend, http_transport, mcp_session, serving
from tests.test_ingest_locations import site  # noqa: F401 - a loopback docs site


def _counts(pool: ConnectionPool, slug: str) -> tuple[int, int, int]:
    """(documents of the source, chunks of the source, chunks the BM25 statistics count in all)."""
    with pool.connection() as conn:
        row = conn.execute(
            "select (select count(*) from quarry.documents d join quarry.sources s on s.id = d.source_id"
            "        where s.slug = %(slug)s),"
            "       (select count(*) from quarry.chunks c join quarry.sources s on s.id = c.source_id"
            "        where s.slug = %(slug)s),"
            "       (select chunk_count from quarry.text_stats)", {"slug": slug}).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2] or 0)


def test_removing_a_source_takes_everything_it_holds_and_keeps_the_statistics_exact(
    pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path
) -> None:
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(tmp_path / "kept"), SourceSpec(slug="admin-kept"))
    ingestor.ingest(write_corpus(tmp_path / "gone"), SourceSpec(slug="admin-gone"))
    kept = _counts(pool, "admin-kept")
    documents, chunks, total = _counts(pool, "admin-gone")
    assert documents == 4 and chunks > 0

    removed = remove_source(pool, "admin-gone", tmp_path / "fetch")
    assert removed.documents == 4
    assert _counts(pool, "admin-gone") == (0, 0, total - chunks)
    assert _counts(pool, "admin-kept")[:2] == kept[:2]
    with pool.connection() as conn:
        assert conn.execute("select count(*) from quarry.sources where slug = 'admin-gone'").fetchone() == (0,)
    [job] = list_jobs(pool, kind="remove_source").jobs
    assert job.status == "succeeded" and job.counts == {"documents_removed": 4}
    with pytest.raises(NotFoundError, match="admin-gone"):
        remove_source(pool, "admin-gone", tmp_path / "fetch")


def test_admin_tools_queue_jobs_only_for_admin_keys_and_only_for_remote_locations(
    pool: ConnectionPool, reader_pool: ConnectionPool, migrated_url: str, model_cache: Path,
    local_embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path / "docs"), SourceSpec(slug="admin-mcp"))
    search_key = api_keys.create_key(pool, f"src-search-{uuid.uuid4().hex[:8]}", ["search"])
    admin_key = api_keys.create_key(pool, f"src-admin-{uuid.uuid4().hex[:8]}", ["admin"])
    backend = StaticBackend(Settings(database_url=migrated_url), reader_pool)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False))
    with serving(app) as url:
        with mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {search_key.secret}"})) as session:
            for tool, arguments in (("add_source", {"source": "x", "location": "pypi:six"}),
                                    ("refresh_source", {"source": "admin-mcp"}),
                                    ("remove_source", {"source": "admin-mcp"})):
                error = session.call(tool, arguments).error
                assert error["code"] == "UNAUTHORIZED" and "admin" in error["message"], tool
        with mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {admin_key.secret}"})) as session:
            # The worker must not read its own disk or the network behind it on a key's say-so.
            for location in (str(tmp_path), "git+file:///srv/repo.git@main", "http://127.0.0.1:9/docs/",
                             "https://localhost/docs/"):
                error = session.call("add_source", {"source": "x", "location": location}).error
                assert error["code"] == "INVALID", location
            # refresh_source: this source came from a local folder, which only `quarry ingest` may read.
            assert session.call("refresh_source", {"source": "admin-mcp"}).error["code"] == "INVALID"
            assert session.call("remove_source", {"source": "nosuch"}).error["code"] == "NOT_FOUND"
            assert session.call("add_source", {"source": "x", "location": "ftp://host/x"}).error["code"] == "INVALID"

            queued = session.ok("remove_source", {"source": "admin-mcp"})
            again = session.ok("remove_source", {"source": "admin-mcp"})
            assert queued["status"] == "queued" and queued["new"] and "quarry jobs run" in queued["note"]
            assert again["job_id"] == queued["job_id"] and not again["new"]  # asked twice: queued once
            shown = session.ok("jobs", {"action": "show", "job_id": queued["job_id"]})["job"]
            assert shown["kind"] == "remove_source" and shown["status"] == "queued"

    parser = argparse.ArgumentParser()
    add_jobs_arguments(parser.add_subparsers(dest="command"))
    settings = Settings(database_url=migrated_url, model_cache=model_cache, text_model="local", code_model="local",
                        home=tmp_path / "home")
    with Runtime(settings) as runtime:
        assert run_jobs(runtime, parser.parse_args(["jobs", "run", "--json"])) == 0
    ran = json.loads(capsys.readouterr().out)
    assert ran["kind"] == "remove_source" and ran["summary"]["documents"] == 4
    assert show_job(pool, uuid.UUID(queued["job_id"])).job.status == "succeeded"
    assert _counts(pool, "admin-mcp")[:2] == (0, 0)


def test_a_source_added_over_mcp_is_fetched_by_the_worker_and_searchable(
    pool: ConnectionPool, reader_pool: ConnectionPool, migrated_url: str, model_cache: Path,
    site: tuple[str, Path, Counter[int]], tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
) -> None:
    base, _, _ = site
    # A loopback site is a private address: this deployment allows it, on the server and on the worker.
    backend = StaticBackend(Settings(database_url=migrated_url, fetch_private_hosts=True), reader_pool)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    parser = argparse.ArgumentParser()
    add_jobs_arguments(parser.add_subparsers(dest="command"))
    allowed = Settings(database_url=migrated_url, model_cache=model_cache, text_model="local", code_model="local",
                       home=tmp_path / "home", fetch_private_hosts=True)
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        queued = session.ok("add_source", {"source": "mcp-guide", "location": f"{base}/guide/", "max_pages": 5,
                                           "attribution": "official"})
        with Runtime(allowed) as runtime:
            assert run_jobs(runtime, parser.parse_args(["jobs", "run", "--json"])) == 0
        ran = json.loads(capsys.readouterr().out)
        assert ran["job_id"] == queued["job_id"] and ran["summary"]["added"] == 5  # --max-pages 5, as asked
        with pool.connection() as conn:
            row = conn.execute("select kind, attribution, metadata ->> 'location' from quarry.sources"
                               " where slug = 'mcp-guide'").fetchone()
        assert row == ("docs_site", "official", f"{base}/guide/")
        listed = {source["slug"]: source for source in session.ok("list_sources")["sources"]}
        assert listed["mcp-guide"]["location"] == f"{base}/guide/" and listed["mcp-guide"]["documents"] == 5
        assert listed["mcp-guide"]["version"] is None

        # The worker checks again: a job queued for a private host runs only where that is allowed.
        session.ok("refresh_source", {"source": "mcp-guide"})
        with Runtime(allowed.model_copy(update={"fetch_private_hosts": False})) as runtime:
            assert run_jobs(runtime, parser.parse_args(["jobs", "run", "--json"])) == 1
    refused = json.loads(capsys.readouterr().out)
    assert "private" in refused["summary"]["error"]
