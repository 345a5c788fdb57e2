"""``quarry ingest --since REV``: incremental ingestion driven by a real git repository."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.errors import InvalidRequestError
from engine.ingest.changes import ChangeSet, changed_since
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import FILES, write_corpus

REPO = Path(__file__).resolve().parents[1]

SOURCE = SourceSpec(slug="sample", kind="mixed", attribution="official")

EXTRA = {
    "docs/unchanged.md": "# Unchanged\n\nNothing about this page changes between commits.\n",
    "notes/ünïcode notes.md": "# Ünïcode\n\nA page whose path has spaces and accents.\n",
}


@pytest.fixture(autouse=True)
def _no_repository_above(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Whatever holds tmp_path must not count as the repository of a test that has none.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))


@pytest.fixture()
def ingestor(pool: ConnectionPool, local_embedder: Embedder) -> Ingestor:
    return Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000)


def git(root: Path, *arguments: str) -> str:
    completed = subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, text=True, check=True)
    return completed.stdout.strip()


def new_repository(root: Path, files: dict[str, str]) -> str:
    """A repository at ``root`` with ``files`` committed; returns the commit's sha."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for key, value in {"user.name": "Quarry Test", "user.email": "test@example.test",
                       "commit.gpgsign": "false", "core.autocrlf": "false"}.items():
        git(root, "config", key, value)
    write_corpus(root, files)
    return commit(root, "initial")


def commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def stored(pool: ConnectionPool) -> dict[str, bytes]:
    with pool.connection() as conn:
        rows = conn.execute("select path, content_hash from quarry.documents").fetchall()
    return {path: bytes(digest) for path, digest in rows}


def on_disk(root: Path, paths: set[str]) -> dict[str, bytes]:
    return {path: hashlib.sha256((root / path).read_bytes()).digest() for path in paths}


def test_since_touches_only_changed_files_and_converges_to_a_full_scan(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    initial = new_repository(root, {**FILES, **EXTRA})
    first = ingestor.ingest(root, SOURCE)
    assert first.added == 6

    (root / "docs/new guide.md").write_text("# New guide\n\nVacuum reclaims storage held by dead tuples.\n")
    (root / "src/users.py").write_text(FILES["src/users.py"] + "\n\ndef drop_user(user_id: int) -> None:\n    pass\n")
    (root / "guide").mkdir()
    git(root, "mv", "docs/indexes.md", "guide/indexes.md")  # same bytes: vectors reused, document moves
    git(root, "rm", "-q", "README.txt")
    commit(root, "add, modify, rename, delete")
    (root / "docs/backup.md").write_text(FILES["docs/backup.md"] + "\nUncommitted: pg_basebackup too.\n")
    (root / "docs/draft.md").write_text("# Draft\n\nAn untracked page.\n")
    (root / ".gitignore").write_bytes(b"")  # untracked, not a rule change: stays incremental
    (root / "scratch.log").write_text("not a supported file type\n")

    changed = changed_since(root, initial)

    assert changed.commit == initial and changed.rev == initial
    assert changed.modified == {"docs/new guide.md", "src/users.py", "guide/indexes.md", "docs/backup.md",
                                "docs/draft.md", ".gitignore", "scratch.log"}
    assert changed.deleted == {"docs/indexes.md", "README.txt"}
    assert changed.touches_ignore_rules  # an empty .gitignore added still counts
    (root / ".gitignore").unlink()
    changed = changed_since(root, initial)
    assert not changed.touches_ignore_rules

    summary = ingestor.ingest(root, SOURCE, changed=changed)

    # unchanged files were never read: none of them was even compared
    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (3, 2, 0, 2)
    assert summary.vectors_reused >= 3  # the renamed page's chunks
    assert summary.since == initial and summary.changed_paths == 8
    assert f"since {initial} (8 paths changed)" in summary.one_line()
    assert summary.as_dict()["changed_paths"] == 8
    expected_paths = {"docs/new guide.md", "src/users.py", "guide/indexes.md", "docs/backup.md",
                      "docs/draft.md", "docs/unchanged.md", "notes/ünïcode notes.md"}
    assert stored(pool) == on_disk(root, expected_paths)

    full = ingestor.ingest(root, SOURCE)  # a full scan finds nothing left to do
    assert (full.added, full.updated, full.unchanged, full.deleted) == (0, 0, 7, 0)
    assert stored(pool) == on_disk(root, expected_paths)


def test_since_head_with_nothing_changed_reads_nothing(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    new_repository(root, FILES)
    ingestor.ingest(root, SOURCE)

    summary = ingestor.ingest(root, SOURCE, changed=changed_since(root, "HEAD"))

    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (0, 0, 0, 0)
    assert summary.changed_paths == 0 and len(stored(pool)) == 4


def test_a_changed_gitignore_falls_back_to_a_full_scan(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    new_repository(root, FILES)
    ingestor.ingest(root, SOURCE)
    (root / ".gitignore").write_text("README.txt\n")  # README.txt stays tracked, so git won't report it
    commit(root, "ignore the readme")

    summary = ingestor.ingest(root, SOURCE, changed=changed_since(root, "HEAD~1"))

    assert summary.changed_paths == 1 and summary.unchanged == 3 and summary.deleted == 1
    assert "README.txt" not in stored(pool)


def test_reported_paths_gone_ignored_or_unsupported_do_not_crash(
    ingestor: Ingestor, pool: ConnectionPool, tmp_path: Path
) -> None:
    root = write_corpus(tmp_path / "tree")
    ingestor.ingest(root, SOURCE)
    (root / "README.txt").unlink()  # deleted after git was asked: reported as modified
    (root / "node_modules").mkdir()
    (root / "node_modules/page.md").write_text("# Vendored\n")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    changed = ChangeSet(rev="HEAD~1", commit="0" * 40,
                        modified={"README.txt", "node_modules/page.md", "image.png", "no/such/file.md"})

    summary = ingestor.ingest(root, SOURCE, changed=changed)

    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (0, 0, 0, 1)
    assert set(stored(pool)) == set(FILES) - {"README.txt"}


def test_a_root_inside_the_repository_sees_only_its_own_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    initial = new_repository(repo, {"site/docs/a page.md": "# A\n\nalpha\n", "site/é.md": "# É\n\nbeta\n",
                                    "site/keep.md": "# Keep\n", "other/b.md": "# B\n\ngamma\n"})
    (repo / "site/docs/a page.md").write_text("# A\n\nalpha, edited\n")
    git(repo, "mv", "site/é.md", "site/renamed ü.md")
    git(repo, "mv", "site/keep.md", "other/moved out.md")  # leaves the root: a deletion there
    git(repo, "mv", "other/b.md", "site/moved in.md")  # enters the root: an addition there
    (repo / "other/c.md").write_text("# C\n")
    commit(repo, "edits inside and outside the root")
    (repo / "site/new untracked.md").write_text("# New\n")
    (repo / "other/untracked.md").write_text("# Elsewhere\n")

    changed = changed_since(repo / "site", initial)

    assert changed.modified == {"docs/a page.md", "renamed ü.md", "moved in.md", "new untracked.md"}
    assert changed.deleted == {"é.md", "keep.md"}


def test_ignored_untracked_files_are_not_reported(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    new_repository(root, {".gitignore": "*.tmp\nbuild/\n", "a.md": "# A\n"})
    (root / "scratch.tmp").write_text("x")
    (root / "build").mkdir()
    (root / "build/out.md").write_text("# Out\n")
    (root / "b.md").write_text("# B\n")

    assert changed_since(root, "HEAD") == ChangeSet(rev="HEAD", commit=git(root, "rev-parse", "HEAD"),
                                                    modified={"b.md"})


def test_an_unknown_revision_is_an_invalid_request_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    new_repository(root, FILES)
    for rev in ("no-such-branch", "HEAD~5", "0" * 40):
        with pytest.raises(InvalidRequestError, match=f"unknown git revision '{rev}'"):
            changed_since(root, rev)
    with pytest.raises(InvalidRequestError, match="invalid git revision '--output=x'"):
        changed_since(root, "--output=x")


def test_a_root_outside_any_repository_is_an_invalid_request(tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "plain")
    with pytest.raises(InvalidRequestError, match="not in one"):
        changed_since(root, "HEAD")
    with pytest.raises(InvalidRequestError, match="not a directory"):
        changed_since(tmp_path / "missing", "HEAD")


def test_a_shallow_clone_missing_the_revision_suggests_full_history(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    new_repository(origin, FILES)
    (origin / "README.txt").write_text("second\n")
    commit(origin, "second")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", origin.as_uri(), str(clone)], check=True)

    with pytest.raises(InvalidRequestError, match=r"shallow clone.*fetch-depth: 0"):
        changed_since(clone, "HEAD~1")
    assert changed_since(clone, "HEAD").paths == set()


def test_the_cli_reads_only_what_changed_and_exits_2_on_a_bad_revision(
    pool: ConnectionPool, database_url: str, model_cache: Path, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    new_repository(root, {"docs/a.md": "# A\n\nAlpha.\n", "docs/b.md": "# B\n\nBeta.\n"})
    env = {**os.environ, "DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache)}

    def quarry(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "engine.cli", "ingest", str(root), "--source", "repo",
                               "--json", *arguments], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    assert quarry().returncode == 0
    (root / "docs/b.md").write_text("# B\n\nBeta, edited.\n")
    changed = quarry("--since", "HEAD")
    assert changed.returncode == 0, changed.stderr
    summary = json.loads(changed.stdout)
    assert (summary["since"], summary["changed_paths"], summary["updated"], summary["unchanged"]) == ("HEAD", 1, 1, 0)
    bad = quarry("--since", "no-such-branch")
    assert bad.returncode == 2 and "no-such-branch" in bad.stderr
