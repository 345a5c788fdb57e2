"""grep over stored text: exact and regex matches with exact lines and spans, filters, cursors, bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from uuid import uuid4

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.errors import InvalidRequestError, LimitError
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.retrieval.grep import _match, grep
from tests.corpus import FILES, write_corpus

REPO = Path(__file__).resolve().parents[1]

EXTRA = {
    "src/client.py": '''\
"""A client."""


class Client:
    def connect(self, url: str) -> None:
        self.url = url  # Client.connect keeps the url


def make_client() -> Client:
    return Client()
''',
    "docs/long.md": "# Long\n\n" + "".join(f"Line {n} mentions pg_stat_statements here.\n\n" for n in range(1, 61)),
}


@pytest.fixture()
def corpus(pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path) -> tuple[ConnectionPool, Path]:
    root = write_corpus(tmp_path / "repo", {**FILES, **EXTRA})
    Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000).ingest(root, SourceSpec(slug="repo"))
    return pool, root


def _lines_holding(root: Path, path: str, text: str) -> list[int]:
    return [number for number, line in enumerate((root / path).read_text().splitlines(), 1) if text in line]


def test_an_identifier_matches_exactly_on_its_lines(corpus: tuple[ConnectionPool, Path]) -> None:
    pool, root = corpus
    page = grep(pool, "parse_user_id")
    assert [(m.path, m.line) for m in page.matches] == [("src/users.py", n)
                                                        for n in _lines_holding(root, "src/users.py", "parse_user_id")]
    for match in page.matches:
        assert match.text[match.start:match.end] == "parse_user_id"
    assert page.next_cursor is None and not page.truncated
    dotted = grep(pool, "Client.connect")
    assert [(m.path, m.line) for m in dotted.matches] == [("src/client.py", 6)]
    assert dotted.matches[0].before[-1] == "    def connect(self, url: str) -> None:"


def test_case_and_regular_expressions(corpus: tuple[ConnectionPool, Path]) -> None:
    pool, root = corpus
    assert grep(pool, "create index").matches == []
    insensitive = grep(pool, "create index", case_sensitive=False)
    assert insensitive.matches and all(m.text[m.start:m.end].lower() == "create index" for m in insensitive.matches)
    defs = grep(pool, r"^\s*def (parse_user_id|load|connect)\(", regex=True)
    assert [(m.path, m.line) for m in defs.matches] == sorted(
        [("src/client.py", 5), *(("src/users.py", n) for n in _lines_holding(root, "src/users.py", "def "))])
    for match in defs.matches:
        assert match.start == 0 and match.text[match.start:match.end].rstrip("(").strip().startswith("def ")


def test_context_lines_and_a_huge_line_stays_bounded(corpus: tuple[ConnectionPool, Path]) -> None:
    pool, _ = corpus
    page = grep(pool, "self.url = url", context_lines=1)
    match = page.matches[0]
    # context stays within the match's chunk: here the method, which ends at the match
    assert match.before == ["    def connect(self, url: str) -> None:"] and match.after == []
    line = "x" * 5000 + " needle " + "y" * 5000
    document, chunk = uuid4(), uuid4()
    huge = _match((document, chunk, 3, line, 5001, 5007, [], []), {document: ("repo", "min.js")})
    assert len(huge.text) == 400 and huge.text[huge.start:huge.end] == "needle"
    assert line[huge.cut_before + huge.start:huge.cut_before + huge.end] == "needle"


def test_filters_and_a_cursor_page_through_in_order(corpus: tuple[ConnectionPool, Path]) -> None:
    pool, _ = corpus
    whole = grep(pool, "pg_stat_statements", limit=100)
    assert len(whole.matches) == 60 and whole.next_cursor is None
    pages, cursor = [], None
    while True:
        page = grep(pool, "pg_stat_statements", limit=7, cursor=cursor)
        pages.extend((m.path, m.line) for m in page.matches)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == [(m.path, m.line) for m in whole.matches]
    with pytest.raises(InvalidRequestError, match="another pattern") as bound:
        grep(pool, "pg_stat", cursor=grep(pool, "pg_stat_statements", limit=1).next_cursor)
    assert bound.value.argument == "cursor"
    only_code = grep(pool, "url", filters={"path": {"any_of": ["src/*.py"]}})
    assert only_code.matches and {m.path for m in only_code.matches} == {"src/client.py"}
    everywhere = {m.path for m in grep(pool, "index|Client", regex=True, limit=100).matches}
    prose = {m.path for m in grep(pool, "index|Client", regex=True, limit=100,
                                  filters={"content_type": {"any_of": ["markdown"]}}).matches}
    assert prose and prose == {path for path in everywhere if path.endswith(".md")} != everywhere


def test_bad_patterns_are_refused_and_costly_ones_bounded(corpus: tuple[ConnectionPool, Path]) -> None:
    pool, _ = corpus
    with pytest.raises(InvalidRequestError, match="not a valid regular expression") as malformed:
        grep(pool, "(unclosed", regex=True)
    assert malformed.value.argument == "pattern"
    with pytest.raises(InvalidRequestError, match="1-1000 characters"):
        grep(pool, "a" * 10_000)
    started = time.monotonic()
    try:
        page = grep(pool, r"(x+x+)+y\1", regex=True, time_budget_s=0.5)
        assert page.truncated or page.next_cursor is None
    except LimitError:
        pass
    assert time.monotonic() - started < 10

    # a spent budget ends the page at once, with a cursor that goes on from where it stopped
    stopped = grep(pool, "pg_stat_statements", time_budget_s=0)
    assert stopped.truncated and stopped.matches == [] and stopped.next_cursor is not None
    resumed = grep(pool, "pg_stat_statements", limit=100, cursor=stopped.next_cursor)
    assert len(resumed.matches) == 60 and not resumed.truncated


def test_quarry_grep_prints_source_path_line_and_pages(corpus: tuple[ConnectionPool, Path], database_url: str,
                                                       model_cache: Path) -> None:
    _, root = corpus
    env = {**os.environ, "DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache)}

    def quarry(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "engine.cli", "grep", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)

    printed = quarry("parse_user_id", "--path", "src/**")
    assert printed.returncode == 0, printed.stderr
    lines = _lines_holding(root, "src/users.py", "parse_user_id")
    assert printed.stdout.splitlines() == [
        f"repo:src/users.py:{n}: {(root / 'src/users.py').read_text().splitlines()[n - 1]}" for n in lines]
    paged = json.loads(quarry("pg_stat_statements", "--limit", "5", "--json").stdout)
    assert len(paged["matches"]) == 5 and paged["next_cursor"]
    following = json.loads(
        quarry("pg_stat_statements", "--limit", "5", "--json", "--cursor", paged["next_cursor"]).stdout)
    assert following["matches"][0]["line"] > paged["matches"][-1]["line"]
    malformed = quarry("(", "--regex")
    assert malformed.returncode == 2 and "not a valid regular expression" in malformed.stderr
