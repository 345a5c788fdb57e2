"""Git remotes fetched from a real bare repository (file://, and dumb HTTP on loopback)."""

from __future__ import annotations

import fcntl
import functools
import http.server
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.errors import BusyError, InvalidRequestError, UnavailableError
from engine.fetch.credentials import without_credentials
from engine.fetch.git import fetch_git, split_git_location

_IDENTITY = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
             "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com"}


def _git(cwd: Path, *arguments: str) -> str:
    completed = subprocess.run(["git", "-C", str(cwd), *arguments], capture_output=True, check=True,
                               env={**os.environ, **_IDENTITY})
    return completed.stdout.decode().strip()


@dataclass
class Remote:
    """A bare repository with history: v1 (lightweight tag), v2 (annotated), main ahead of v2, a dev branch."""

    bare: Path
    url: str
    v1: str
    v2: str
    main: str
    dev: str


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Remote:
    base = tmp_path_factory.mktemp("remote")
    work = base / "work"
    work.mkdir()
    _git(work, "init", "--quiet", "--initial-branch=main")
    (work / "README.md").write_text("# Project\n\nFirst version.\n")
    (work / "docs").mkdir()
    (work / "docs" / "guide.md").write_text("# Guide\n\nOld guide.\n")
    (work / "obsolete.txt").write_text("to be removed\n")
    _git(work, "add", "--all")
    _git(work, "commit", "--quiet", "-m", "first")
    _git(work, "tag", "v1")
    v1 = _git(work, "rev-parse", "HEAD")

    (work / "docs" / "guide.md").write_text("# Guide\n\nNew guide.\n")
    (work / "obsolete.txt").unlink()
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("def main() -> None:\n    pass\n")
    _git(work, "add", "--all")
    _git(work, "commit", "--quiet", "-m", "second")
    _git(work, "tag", "-a", "v2", "-m", "release 2")
    v2 = _git(work, "rev-parse", "HEAD")

    (work / "CHANGELOG.md").write_text("# Changes\n")
    _git(work, "add", "--all")
    _git(work, "commit", "--quiet", "-m", "third")
    main = _git(work, "rev-parse", "HEAD")

    _git(work, "checkout", "--quiet", "-b", "dev", v1)
    (work / "dev.txt").write_text("dev only\n")
    _git(work, "add", "--all")
    _git(work, "commit", "--quiet", "-m", "dev")
    dev = _git(work, "rev-parse", "HEAD")
    _git(work, "checkout", "--quiet", "main")

    bare = base / "repo.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(work), str(bare)], check=True, capture_output=True)
    return Remote(bare, bare.as_uri(), v1, v2, main, dev)


def _files(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*")
            if path.is_file() and ".git" not in path.relative_to(root).parts}


@pytest.mark.parametrize(("text", "expected"), [
    ("git+file:///p/repo@v1.2", ("file:///p/repo", "v1.2")),
    ("https://host/org/repo.git@main", ("https://host/org/repo.git", "main")),
    ("https://host/org/repo.git", ("https://host/org/repo.git", None)),
    ("https://host/org/repo.git@feature/x", ("https://host/org/repo.git", "feature/x")),
    ("https://token@host/org/repo.git", ("https://token@host/org/repo.git", None)),
    ("ssh://git@host/org/repo.git", ("ssh://git@host/org/repo.git", None)),
    ("ssh://git@host/org/repo.git@v2", ("ssh://git@host/org/repo.git", "v2")),
    ("git@host:org/repo.git", ("git@host:org/repo.git", None)),
    ("git@host:org/repo.git@0123abcd", ("git@host:org/repo.git", "0123abcd")),
    ("git+https://host/@scope/repo.git@v3", ("https://host/@scope/repo.git", "v3")),
])
def test_split_git_location(text: str, expected: tuple[str, str | None]) -> None:
    assert split_git_location(text) == expected


def test_split_git_location_refuses_an_empty_ref() -> None:
    with pytest.raises(InvalidRequestError, match="without a ref"):
        split_git_location("https://u:pw@host/repo.git@")


@pytest.mark.parametrize(("text", "expected"), [
    ("https://user:s3cret@host/org/repo.git", "https://host/org/repo.git"),
    ("https://ghp_token@host/org/repo.git", "https://host/org/repo.git"),
    ("ssh://git:pw@host/repo.git", "ssh://git@host/repo.git"),
    ("ssh://git@host/repo.git", "ssh://git@host/repo.git"),
    ("fatal: unable to access 'https://u:p@h/r.git/': refused", "fatal: unable to access 'https://h/r.git/': refused"),
])
def test_strip_credentials(text: str, expected: str) -> None:
    assert without_credentials(text) == expected


@pytest.mark.parametrize("ref", ["v1", "v2", "main", "dev", None, "sha", "short sha"])
def test_fetch_checks_out_the_tree_at_the_ref(remote: Remote, tmp_path: Path, ref: str | None) -> None:
    expected = {"v1": remote.v1, "v2": remote.v2, "main": remote.main, "dev": remote.dev, None: remote.main,
                "sha": remote.v2, "short sha": remote.v1}[ref]
    asked = {"sha": remote.v2, "short sha": remote.v1[:10]}.get(ref or "", ref)
    tree = fetch_git(remote.url, asked, tmp_path)
    assert tree.revision == expected
    assert tree.listing is None and tree.changed is None
    assert tree.root.parent == tmp_path
    wanted = set(_git(remote.bare, "ls-tree", "-r", "--name-only", expected).splitlines())
    assert _files(tree.root) == wanted
    assert tree.report.startswith(f"{remote.url} at {asked or 'HEAD'} ({expected[:12]})")


def test_a_git_plus_location_fetches_the_same_tree(remote: Remote, tmp_path: Path) -> None:
    url, ref = split_git_location(f"git+{remote.url}@v2")
    assert (url, ref) == (remote.url, "v2")
    tree = fetch_git(url, ref, tmp_path)
    assert tree.revision == remote.v2
    assert (tree.root / "docs" / "guide.md").read_text() == "# Guide\n\nNew guide.\n"
    assert tree.location == f"{remote.url}@v2"


def test_incremental_fetch_lists_what_changed_since_the_last_commit(remote: Remote, tmp_path: Path) -> None:
    first = fetch_git(remote.url, "v1", tmp_path)
    assert first.revision == remote.v1 and (first.root / "obsolete.txt").is_file()

    second = fetch_git(remote.url, "v2", tmp_path, last_commit=first.revision)
    assert second.root == first.root  # one work tree per URL, moved to the new commit
    assert second.revision == remote.v2
    assert second.changed is not None
    assert second.changed.modified == {"docs/guide.md", "src/app.py"}
    assert second.changed.deleted == {"obsolete.txt"}
    assert not (second.root / "obsolete.txt").exists()
    assert "3 files changed since " + remote.v1[:12] in second.report

    again = fetch_git(remote.url, "v2", tmp_path, last_commit=remote.v2)
    assert again.changed is not None and not again.changed.paths
    assert "unchanged since" in again.report


def test_last_commit_fetched_when_the_cache_lacks_it(remote: Remote, tmp_path: Path) -> None:
    """A fresh cache (another machine, a wiped QUARRY_HOME) still gets git's change list."""
    tree = fetch_git(remote.url, "main", tmp_path, last_commit=remote.v1)
    assert tree.changed is not None
    assert tree.changed.modified == {"docs/guide.md", "src/app.py", "CHANGELOG.md"}
    assert tree.changed.deleted == {"obsolete.txt"}


def test_a_last_commit_gone_from_the_remote_means_a_full_comparison(remote: Remote, tmp_path: Path) -> None:
    gone = "0123456789abcdef0123456789abcdef01234567"
    tree = fetch_git(remote.url, "v2", tmp_path, last_commit=gone)
    assert tree.revision == remote.v2 and tree.changed is None
    assert "no longer on the remote" in tree.report and "compared by content" in tree.report


def test_unknown_ref_is_named_with_the_refs_the_remote_has(remote: Remote, tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match=r"unknown git ref 'nope'.*main.*v1"):
        fetch_git(remote.url, "nope", tmp_path)
    with pytest.raises(InvalidRequestError, match="unknown git ref 'abcdef12'"):
        fetch_git(remote.url, "abcdef12", tmp_path)


@pytest.mark.parametrize(("url", "ref", "message"), [
    ("--upload-pack=touch /tmp/x", None, "invalid git URL"),
    ("file:///repo.git", "--output=/tmp/x", "invalid git ref"),
    ("file:///repo.git", "main two", "invalid git ref"),
    ("ext::sh", None, "unsupported git transport"),
])
def test_option_like_or_malformed_arguments_are_refused(tmp_path: Path, url: str, ref: str | None,
                                                        message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        fetch_git(url, ref, tmp_path)


def test_an_unreachable_remote_fails_with_gits_reason_and_no_secret(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError, match="does not appear to be a git repository"):
        fetch_git((tmp_path / "missing.git").as_uri(), None, tmp_path / "cache")
    with pytest.raises(UnavailableError) as refused:
        fetch_git("https://user:s3cret@127.0.0.1:1/org/repo.git", "main", tmp_path / "cache", timeout=30)
    assert "s3cret" not in str(refused.value) and "127.0.0.1" in str(refused.value)


def test_stale_locks_and_leftovers_of_a_killed_run_do_not_wedge_the_next(remote: Remote, tmp_path: Path) -> None:
    tree = fetch_git(remote.url, "v1", tmp_path)
    git_dir = tree.root / ".git"
    for lock in ("index.lock", "HEAD.lock", "shallow.lock", "config.lock"):
        (git_dir / lock).write_text("")
    (tree.root / "half-written.md").write_text("left by a killed checkout\n")
    (tmp_path / f".{tree.root.name}.tmp-99999").mkdir()  # a repository being created when killed

    again = fetch_git(remote.url, "v2", tmp_path, last_commit=remote.v1)
    assert again.revision == remote.v2
    assert not (again.root / "half-written.md").exists()
    assert again.changed is not None and "half-written.md" not in again.changed.paths
    assert not list(tmp_path.glob(".*.tmp-*"))


@pytest.fixture()
def dumb_http(remote: Remote) -> Iterator[str]:
    """The bare repository served as static files on loopback (git's dumb HTTP: no shallow fetch)."""
    subprocess.run(["git", "-C", str(remote.bare), "update-server-info"], check=True)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(remote.bare.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://reader:s3cret@127.0.0.1:{server.server_port}/{remote.bare.name}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_credentials_never_reach_location_report_or_disk(remote: Remote, dumb_http: str, tmp_path: Path) -> None:
    tree = fetch_git(dumb_http, "v2", tmp_path, location=f"git+{dumb_http}@v2")
    assert tree.revision == remote.v2  # fetched in full: dumb HTTP refuses --depth
    assert "s3cret" not in tree.location and "reader" not in tree.location
    assert tree.location.startswith("git+http://127.0.0.1:")
    assert "s3cret" not in tree.report
    for path in (tree.root / ".git").rglob("*"):
        if path.is_file() and "objects" not in path.parts:
            assert b"s3cret" not in path.read_bytes(), path


def test_a_fetch_waits_for_another_of_the_same_url_then_gives_up(remote: Remote, tmp_path: Path) -> None:
    tree = fetch_git(remote.url, "v1", tmp_path)
    with (tmp_path / f"{tree.root.name}.lock").open("a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(BusyError, match="another fetch of"):
            fetch_git(remote.url, "v2", tmp_path, timeout=0.3)
    assert fetch_git(remote.url, "v2", tmp_path, timeout=30).revision == remote.v2


def test_the_cached_repository_is_reused_not_recreated(remote: Remote, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")  # QUARRY_HOME behind a symlink
    first = fetch_git(remote.url, "v1", tmp_path / "linked")
    marker = first.root / ".git" / "kept-between-runs"
    marker.write_text("")
    second = fetch_git(remote.url, "v2", tmp_path / "linked")
    assert second.root == first.root and marker.exists()
