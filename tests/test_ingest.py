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
    assert_chunks_carry_their_document_length(pool)


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
    assert_chunks_carry_their_document_length(pool)


def assert_chunks_carry_their_document_length(pool: ConnectionPool) -> None:
    """Each chunk's ``document_chunks`` (what fusion reads for the document's length) is its document's count."""
    with pool.connection() as conn:
        row = conn.execute(
            "select count(*) filter (where c.document_chunks <> d.chunks), max(d.chunks)"
            " from quarry.chunks c"
            " join (select document_id, count(*) as chunks from quarry.chunks group by document_id) d"
            " on d.document_id = c.document_id"
        ).fetchone()
    assert row is not None
    wrong, longest = row
    assert wrong == 0 and longest > 1  # a document of several chunks, so a constant would not pass


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


_MIXED_TEXT_FILES: dict[str, tuple[str, str, str | None]] = {  # path -> (content, content_type, language)
    "README.md": ("# Shop\n\nA small service.\n", "markdown", None),
    "sql/001-schema.sql": ("-- Orders.\ncreate table shop.orders (id bigint primary key);\n"
                           "create function shop.total() returns bigint language sql as $$ select 1; $$;\n",
                           "code", "sql"),
    "compose.yaml": ("services:\n  db:\n    image: postgres:17\n", "text", None),
    "pyproject.toml": ('[project]\nname = "shop"\n', "text", None),
    "web/tsconfig.json": ('{\n  "compilerOptions": {\n    "strict": true\n  }\n}\n', "text", None),
    "setup.cfg": ("[metadata]\nname = shop\n", "text", None),
    "scripts/deploy.sh": ("deploy() {\n  echo deploying\n}\n", "code", "shell"),
    "bin/run": ("#!/usr/bin/env bash\nexec python -m shop \"$@\"\n", "code", "shell"),
    "Dockerfile": ("FROM python:3.12-slim AS app\nRUN pip install shop\n", "code", "dockerfile"),
    "Makefile": ("test:\n\tpytest -q\n", "code", "makefile"),
    "data/prices.csv": ("sku,price\nA1,9.99\n", "text", None),
    "LICENSE": ("MIT License\n\nPermission is hereby granted.\n", "text", None),
}


def _write_mixed_repository(root: Path) -> None:
    for path, (content, _, _) in _MIXED_TEXT_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)
    (root / "blob.bin").write_bytes(b"\x00\x01\x02 header\x00")
    (root / "docs").mkdir()
    (root / "docs/logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "bin/compiled").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00")  # extensionless, binary
    (root / "notes.txt").write_bytes(b"caf\xe9 au lait\n")  # Latin-1: not UTF-8
    (root / "dump.sql").write_text("select 1;\n" * 2_000)  # over the size limit below
    (root / ".gitignore").write_text("*.log\n")
    (root / "debug.log").write_text("noise\n")
    (root / "node_modules/left-pad").mkdir(parents=True)
    (root / "node_modules/left-pad/index.js").write_text("module.exports = 1\n")


def test_every_file_of_a_repository_is_ingested_or_skipped_with_a_reason(
    pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path
) -> None:
    _write_mixed_repository(tmp_path)
    ingestor = Ingestor(pool, {"text": local_embedder}, max_file_bytes=10_000)

    summary = ingestor.ingest(tmp_path, SOURCE)

    with pool.connection() as conn:
        documents = {path: (content_type, language) for path, content_type, language in conn.execute(
            "select path, content_type, language from quarry.documents")}
        code_flags = dict(conn.execute(
            "select d.path, bool_and(c.is_code) from quarry.chunks c join quarry.documents d on d.id = c.document_id"
            " group by d.path").fetchall())
    skipped = dict(summary.skipped)
    failed = dict(summary.failed)
    assert all(reason for reason in [*skipped.values(), *failed.values()])
    for file in (path for path in tmp_path.rglob("*") if path.is_file()):
        relative = file.relative_to(tmp_path).as_posix()
        in_skipped_folder = any(entry.endswith("/") and relative.startswith(entry) for entry in skipped)
        assert relative in documents or relative in skipped or relative in failed or in_skipped_folder, relative
    for path, (_, content_type, language) in _MIXED_TEXT_FILES.items():
        assert documents[path] == (content_type, language), path
        assert code_flags[path] is (content_type == "code"), path
    assert skipped["blob.bin"] == "unsupported file type (.bin)"
    assert skipped["docs/logo.png"] == "unsupported file type (.png)"
    assert skipped["bin/compiled"] == "binary content"
    assert skipped["dump.sql"].startswith("oversized")
    assert skipped["debug.log"] == "ignored by .gitignore"
    assert skipped["node_modules/"].startswith("excluded folder")
    assert failed["notes.txt"].startswith("not valid UTF-8")
    assert summary.added == len(documents) == len(_MIXED_TEXT_FILES) + 1  # and the .gitignore, as text


def test_a_single_file_ingests_as_a_source_holding_only_that_file(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path)
    guide = root / "docs/indexes.md"

    summary = ingestor.ingest(guide, SOURCE)

    assert (summary.added, summary.skipped, summary.failed) == (1, [], [])
    with pool.connection() as conn:
        rows = conn.execute("select path, url, raw from quarry.documents").fetchall()
        source_root = conn.execute("select root_path from quarry.sources where slug = 'sample'").fetchone()
    assert [(path, url) for path, url, _ in rows] == [("indexes.md", "https://example.test/indexes")]
    assert bytes(rows[0][2]) == guide.read_bytes()
    assert source_root == (str(guide),)
    again = ingestor.ingest(guide, SOURCE)
    assert (again.added, again.unchanged, again.deleted) == (0, 1, 0)

    image = root / "logo.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    unsupported = ingestor.ingest(image, SOURCE)  # the same accounting: skipped, and the source now holds nothing
    assert unsupported.skipped == [("logo.png", "unsupported file type (.png)")] and unsupported.deleted == 1
    with pytest.raises(NotADirectoryError, match="not a directory"):
        ingestor.ingest(root / "missing.md", SOURCE)
