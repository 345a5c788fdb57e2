"""A small corpus written into a temp dir, shared by ingestion and search tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from engine.embed.base import SPACES
from engine.ingest.pipeline import Ingestor

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from engine.embed.base import Embedder
    from engine.ingest.sources import SourceSpec

FILES: dict[str, str] = {
    "docs/indexes.md": """\
# Indexes

Indexes speed up queries on large tables.

## Partial indexes

A partial index is built over a subset of a table; the subset is defined by a
conditional expression called the predicate of the partial index. Create one with
CREATE INDEX ... WHERE predicate.

## Expression indexes

An index column can be a function or scalar expression computed from columns.
""",
    "docs/backup.md": """\
# Backup and restore

## pg_dump

pg_dump writes a consistent snapshot of one database to a script or archive file.

## Point-in-time recovery

Continuous archiving of the write-ahead log allows restoring to any moment.
""",
    "src/users.py": '''\
"""User helpers."""

import re


def parse_user_id(raw: str) -> int:
    """Parse a user id such as 'u-42' into 42."""
    return int(re.sub(r"\\D", "", raw))


class UserStore:
    def load(self, user_id: int) -> dict[str, int]:
        return {"id": user_id}
''',
    "README.txt": "Sample corpus for Quarry tests.\n\nIt has docs and code.\n",
}


def write_corpus(root: Path, files: dict[str, str] | None = None) -> Path:
    for relative, text in (files or FILES).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def ingest_alone(migrated_url: str, pool: ConnectionPool, embedder: Embedder, root: Path, source: SourceSpec) -> None:
    """Empty the test database of every source, then ingest ``root`` as ``source`` with ``embedder`` in every space.

    For a module's corpus: its tests then see these documents and nothing another test left.
    """
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    Ingestor(pool, dict.fromkeys(SPACES, embedder), max_file_bytes=1_000_000).ingest(root, source)
