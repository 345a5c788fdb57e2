from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.errors import BusyError
from engine.ingest.pipeline import INGEST_LOCK_CLASS, Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import write_corpus

SOURCE = SourceSpec(slug="sample", kind="mixed", attribution="official",
                    url_template="https://example.test/{path_no_ext}")


@pytest.fixture()
def ingestor(pool: ConnectionPool, local_embedder: Embedder) -> Ingestor:
    return Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000)


def _counts(pool: ConnectionPool) -> tuple[int, int, int]:
    with pool.connection() as conn:
        row = conn.execute(
            "select (select count(*) from quarry.documents), (select count(*) from quarry.chunks),"
            " (select count(*) from quarry.embeddings)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def test_first_ingest_stores_documents_chunks_and_one_vector_per_chunk(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    summary = ingestor.ingest(write_corpus(tmp_path), SOURCE)

    documents, chunks, embeddings = _counts(pool)
    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (4, 0, 0, 0)
    assert documents == 4 and chunks == summary.chunks_written == embeddings
    with pool.connection() as conn:
        raw, url = conn.execute(
            "select raw, url from quarry.documents where path = 'docs/indexes.md'"
        ).fetchone() or (None, None)
        spans = conn.execute(
            "select c.content, d.raw, c.start_byte, c.end_byte from quarry.chunks c"
            " join quarry.documents d on d.id = c.document_id where d.path = 'src/users.py'"
        ).fetchall()
    assert bytes(raw) == (tmp_path / "docs/indexes.md").read_bytes()
    assert url == "https://example.test/docs/indexes"
    for content, document_raw, start, end in spans:
        assert bytes(document_raw)[start:end].decode() == content


def test_reingest_is_incremental(ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path) -> None:
    root = write_corpus(tmp_path)
    ingestor.ingest(root, SOURCE)

    again = ingestor.ingest(root, SOURCE)
    assert (again.added, again.updated, again.unchanged, again.deleted) == (0, 0, 4, 0)
    assert again.chunks_written == 0 and again.vectors_embedded == 0

    (root / "docs/backup.md").write_text("# Backup\n\nUse pg_basebackup for physical copies.\n")
    (root / "README.txt").unlink()
    (root / "guide").mkdir()
    shutil.move(root / "docs/indexes.md", root / "guide/indexes.md")  # rename: same bytes, new path
    changed = ingestor.ingest(root, SOURCE)

    assert (changed.added, changed.updated, changed.unchanged, changed.deleted) == (1, 1, 1, 2)
    # the moved page's chunks were embedded before; only changed text pays the model
    assert changed.vectors_reused >= 3
    documents, chunks, embeddings = _counts(pool)
    assert documents == 3 and chunks == embeddings
    with pool.connection() as conn:
        paths = [row[0] for row in conn.execute("select path from quarry.documents order by path")]
        backup = conn.execute(
            "select string_agg(c.content, ' ') from quarry.chunks c join quarry.documents d"
            " on d.id = c.document_id where d.path = 'docs/backup.md'"
        ).fetchone()
    assert paths == ["docs/backup.md", "guide/indexes.md", "src/users.py"]
    assert backup is not None and "pg_basebackup" in backup[0] and "pg_dump" not in backup[0]


def test_invalid_utf8_is_reported_and_keeps_the_previous_version(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path)
    ingestor.ingest(root, SOURCE)
    (root / "docs/indexes.md").write_bytes(b"# Indexes\n\nbroken \xff\xfe bytes\n")

    summary = ingestor.ingest(root, SOURCE)

    assert [path for path, _ in summary.failed] == ["docs/indexes.md"]
    assert summary.deleted == 0
    with pool.connection() as conn:
        kept = conn.execute("select count(*) from quarry.documents where path = 'docs/indexes.md'").fetchone()
    assert kept == (1,)


def test_a_second_concurrent_ingest_of_a_source_is_refused(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path)
    ingestor.ingest(root, SOURCE)
    with pool.connection() as conn:
        source_id = conn.execute("select id from quarry.sources where slug = 'sample'").fetchone()
        assert source_id is not None
        conn.execute("select pg_advisory_lock(%s, %s)", (INGEST_LOCK_CLASS, source_id[0]))
        try:
            with pytest.raises(BusyError):
                ingestor.ingest(root, SOURCE)
        finally:
            conn.execute("select pg_advisory_unlock(%s, %s)", (INGEST_LOCK_CLASS, source_id[0]))


def test_embedding_input_gives_docs_their_headings_and_code_its_own_text() -> None:
    from engine.ingest.batch import embedding_input
    from engine.ingest.parsers import parse_document
    from tests.corpus import FILES

    doc = parse_document("docs/indexes.md", FILES["docs/indexes.md"].encode())
    partial = next(i for i, c in enumerate(doc.chunks) if c.heading_path[-1:] == ("Partial indexes",))
    assert embedding_input(doc, partial).startswith("Indexes > Partial indexes\n## Partial indexes")

    code = parse_document("src/users.py", FILES["src/users.py"].encode())
    function = next(i for i, c in enumerate(code.chunks) if c.symbol_path == "src.users.parse_user_id")
    assert embedding_input(code, function) == code.chunks[function].content  # no module path words
