"""The README's "Administer the corpus with psql" session, replayed in psql against the test
corpus: every command's output must match the README, character for character."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from psycopg_pool import ConnectionPool

from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import write_corpus

REPO = Path(__file__).resolve().parents[1]
PROMPT = "quarry=# "


def readme_session() -> list[tuple[str, str]]:
    """(command, expected output) pairs of the README's psql session."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Administer the corpus with psql", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```psql\n(.+?)\n```", section, flags=re.S)
    pairs: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith(PROMPT):
            pairs.append((line.removeprefix(PROMPT), []))
        else:
            pairs[-1][1].append(line)
    return [(command, "\n".join(output).strip("\n")) for command, output in pairs]


def psql(database_url: str, command: str) -> str:
    env = {**os.environ, "DATABASE_URL": database_url, "PGTZ": "UTC"}
    result = subprocess.run([sys.executable, "-m", "engine.cli", "psql", "-X", "-v", "ON_ERROR_STOP=1",
                             "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n")


def test_the_readme_psql_session_is_real(pool: ConnectionPool, database_url: str, local_embedder: Embedder,
                                         tmp_path: Path) -> None:
    Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path / "docs"), SourceSpec(slug="sample", kind="docs_site"))
    session = readme_session()
    assert len(session) >= 6
    for command, expected in session:
        got = psql(database_url, command)
        assert got == "\n".join(line.rstrip() for line in expected.splitlines()), f"{command}\n{got}"
