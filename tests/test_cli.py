"""The ``quarry`` command line against the test database: exit codes, JSON, psql."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.corpus import write_corpus

REPO = Path(__file__).resolve().parents[1]


def _quarry(database_url: str, model_cache: Path, *args: str,
            python_options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache)}
    return subprocess.run([sys.executable, *python_options, "-m", "engine.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _imported_modules(run: subprocess.CompletedProcess[str]) -> set[str]:
    """The modules a ``python -X importtime`` run imported, from its stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}


def test_ingest_search_and_psql(database_url: str, model_cache: Path, tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "corpus")
    (root / "broken.md").write_bytes(b"# Broken\n\n\xff\xfe\n")

    ingest = _quarry(database_url, model_cache, "ingest", str(root), "--source", "cli-test", "--json")
    assert ingest.returncode == 1, ingest.stderr  # one file failed to parse: reported, not fatal
    summary = json.loads(ingest.stdout)
    assert summary["added"] == 4 and [f["path"] for f in summary["failed"]] == ["broken.md"]

    search = _quarry(database_url, model_cache, "search", "partial index", "--mode", "fts", "--json", "--limit", "2")
    assert search.returncode == 0, search.stderr
    results = json.loads(search.stdout)["results"]
    assert results[0]["path"] == "docs/indexes.md" and results[0]["source"]["slug"] == "cli-test"

    # What a command does not use it does not import: numpy and onnxruntime (0.1-0.2 s) only to embed,
    # the manifest readers (packaging) only to read a manifest (docs/BENCHMARKS.md, CLI and re-ingest)
    unchanged = _quarry(database_url, model_cache, "ingest", str(root), "--source", "cli-test", "--json",
                        python_options=("-X", "importtime"))
    assert unchanged.returncode == 1, unchanged.stderr  # broken.md fails again
    assert json.loads(unchanged.stdout)["unchanged"] == 4
    keyword_search = _quarry(database_url, model_cache, "search", "partial index", "--mode", "fts",
                             python_options=("-X", "importtime"))
    assert keyword_search.returncode == 0, keyword_search.stderr
    for run in (unchanged, keyword_search):
        modules = _imported_modules(run)
        assert "engine.cli.main" in modules  # the stderr parsed is importtime's
        assert not modules & {"numpy", "onnxruntime", "packaging", "engine.ingest.manifests"}

    # One row per file, with the lines of its best spans; a kind filter keeps prose out.
    grouped = _quarry(database_url, model_cache, "search", "partial index", "--mode", "fts", "--group-by",
                      "document", "--limit", "2")
    assert grouped.returncode == 0, grouped.stderr
    rows = [line for line in grouped.stdout.splitlines() if not line.startswith("    ")]  # spans are indented
    assert rows[0].startswith(" 1. [cli-test] docs/indexes.md  score ") and len(rows) <= 2
    assert len({row.split()[2] for row in rows}) == len(rows)  # each file once
    code_only = _quarry(database_url, model_cache, "search", "parse user id", "--mode", "fts", "--json",
                        "--chunk-kind", "definition")
    assert code_only.returncode == 0, code_only.stderr
    assert {hit["path"] for hit in json.loads(code_only.stdout)["results"]} == {"src/users.py"}
    lines = _quarry(database_url, model_cache, "grep", "def ", "--chunk-kind", "definition")
    assert lines.returncode == 0 and lines.stdout.startswith("cli-test:src/users.py:"), lines.stdout

    psql = _quarry(database_url, model_cache, "psql", "-At", "-c", "select slug from quarry.source_stats")
    assert psql.returncode == 0, psql.stderr
    assert psql.stdout.strip() == "cli-test"

    status = _quarry(database_url, model_cache, "status")
    assert status.returncode == 0, status.stderr
    assert "source cli-test: 4 documents" in status.stdout


def test_usage_errors_exit_2(database_url: str, model_cache: Path, tmp_path: Path) -> None:
    missing = _quarry(database_url, model_cache, "ingest", str(tmp_path / "nope"), "--source", "x")
    assert missing.returncode == 2 and "not a directory" in missing.stderr
    bad_slug = _quarry(database_url, model_cache, "ingest", str(tmp_path), "--source", "Not A Slug!")
    assert bad_slug.returncode == 2
    bad_limit = _quarry(database_url, model_cache, "search", "x", "--limit", "500")
    assert bad_limit.returncode == 2 and "--limit" in bad_limit.stderr
