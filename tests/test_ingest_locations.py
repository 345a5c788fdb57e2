"""``quarry ingest LOCATION`` for fetched locations, end to end through the one ingest pipeline:
package releases from a loopback index (two versions coexisting as sources, the exact version
recorded), a git remote ingested incrementally between refs, and refreshes from the recorded
location."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.fetch.fetching import Fetcher, locate, recorded_location
from engine.fetch.locations import parse_location
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.test_fetch_git import (
    Remote,
    remote,  # noqa: F401 - the module-scoped repository fixture
)
from tests.test_fetch_packages import (
    IndexFile,
    Registry,
    make_npm_tarball,
    make_sdist,
    publish_npm,
    publish_project,
    serve,  # noqa: F401 - the loopback registry fixture
)

REPO = Path(__file__).resolve().parents[1]


def _versions(pool: ConnectionPool, *slugs: str) -> dict[str, tuple[str | None, str, int]]:
    with pool.connection() as conn:
        rows = conn.execute("select slug, version, kind, documents from quarry.source_stats where slug = any(%s)",
                            (list(slugs),)).fetchall()
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def _fetcher(text: str, slug: str, settings: Settings) -> Fetcher:
    where = locate(text, settings, slug)
    assert isinstance(where, Fetcher)
    return where


def test_two_releases_of_a_package_coexist_as_sources_with_their_exact_versions(
    pool: ConnectionPool, local_embedder: Embedder, serve: Callable[[], Registry], tmp_path: Path,  # noqa: F811
) -> None:
    index = serve()
    files = {"README.md": b"# demo\n\nGreets people.\n", "src/demo_pkg/__init__.py":
             b"def greet(name: str) -> str:\n    return 'hello ' + name\n"}
    changed = files | {"src/demo_pkg/__init__.py": b"def greet(name: str, loud: bool = False) -> str:\n"
                                                   b"    return ('HELLO ' if loud else 'hello ') + name\n"}
    publish_project(index, "demo-pkg", [IndexFile(*make_sdist("demo_pkg", "1.0.0", files)),
                                        IndexFile(*make_sdist("demo_pkg", "1.1.0", changed))])
    registry = serve()
    publish_npm(registry, "left-pad", {"1.3.0": make_npm_tarball({"README.md": b"# left-pad\n\nPads strings.\n",
                                                                  "index.js": b"module.exports = pad;\n"})},
                {"latest": "1.3.0"})
    settings = Settings(home=tmp_path / "home", pypi_index_url=f"{index.url}/simple/",
                        npm_registry=f"{registry.url}/")
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)

    old = ingestor.ingest(_fetcher("pypi:demo-pkg==1.0.0", "demo-1.0", settings), SourceSpec(slug="demo-1.0"))
    new = ingestor.ingest(_fetcher("pypi:demo-pkg", "demo-1.1", settings), SourceSpec(slug="demo-1.1"))
    npm = ingestor.ingest(_fetcher("npm:left-pad", "left-pad", settings), SourceSpec(slug="left-pad"))
    assert (old.added, new.added, npm.added) == (3, 3, 2)  # an sdist also holds its PKG-INFO
    assert not (old.failed or new.failed or npm.failed)
    assert "1.0.0" in (old.fetched or "") and "sha256 verified" in (old.fetched or "")
    # The exact version fetched is each source's version (the latest when none was asked); a package is code.
    assert _versions(pool, "demo-1.0", "demo-1.1", "left-pad") == {
        "demo-1.0": ("1.0.0", "code_repo", 3), "demo-1.1": ("1.1.0", "code_repo", 3),
        "left-pad": ("1.3.0", "code_repo", 2)}
    with pool.connection() as conn:
        paths = {row[0] for row in conn.execute(
            "select d.path from quarry.documents d join quarry.sources s on s.id = d.source_id"
            " where s.slug = 'demo-1.1'")}
    assert paths == {"PKG-INFO", "README.md", "src/demo_pkg/__init__.py"}  # the sdist's top folder is stripped

    # A refresh reads the recorded location again; a cached exact release costs no download.
    assert recorded_location(pool, "demo-1.0")[0] == "pypi:demo-pkg==1.0.0"
    asked = len(index.requests)
    again = ingestor.ingest(_fetcher(recorded_location(pool, "demo-1.0")[0], "demo-1.0", settings),
                            SourceSpec(slug="demo-1.0"))
    assert (again.added, again.updated, again.unchanged, again.vectors_embedded) == (0, 0, 3, 0)
    assert len(index.requests) == asked


def test_a_git_remote_is_ingested_at_a_ref_and_later_only_what_changed_is_read(
    pool: ConnectionPool, local_embedder: Embedder, remote: Remote, tmp_path: Path,  # noqa: F811
) -> None:
    settings = Settings(home=tmp_path / "home")
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    first = ingestor.ingest(_fetcher(f"git+{remote.url}@v1", "repo-git", settings), SourceSpec(slug="repo-git"))
    assert first.added == 3 and first.since is None  # README.md, docs/guide.md, obsolete.txt
    with pool.connection() as conn:
        metadata = conn.execute("select metadata from quarry.sources where slug = 'repo-git'").fetchone()
    assert metadata is not None and metadata[0]["revision"] == remote.v1

    # Another ref of the same repository: a diff against the commit ingested last, not a full read.
    second = ingestor.ingest(_fetcher(f"git+{remote.url}@v2", "repo-git", settings), SourceSpec(slug="repo-git"))
    assert second.since == remote.v1 and second.changed_paths == 3  # guide changed, obsolete gone, app added
    assert (second.added, second.updated, second.deleted, second.unchanged) == (1, 1, 1, 0)
    with pool.connection() as conn:
        paths = {row[0] for row in conn.execute(
            "select d.path from quarry.documents d join quarry.sources s on s.id = d.source_id"
            " where s.slug = 'repo-git'")}
    assert paths == {"README.md", "docs/guide.md", "src/app.py"}
    assert _versions(pool, "repo-git")["repo-git"][1] == "code_repo"


def test_the_cli_ingests_a_git_location_and_refreshes_it_by_source_name(
    database_url: str, model_cache: Path, remote: Remote, tmp_path: Path,  # noqa: F811
) -> None:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("QUARRY_") and key not in ("VOYAGE_API_KEY", "DATABASE_URL")}
    env |= {"DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache), "QUARRY_TEXT_MODEL": "local",
            "QUARRY_CODE_MODEL": "local", "QUARRY_HOME": str(tmp_path / "home")}

    def quarry(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "engine.cli", *arguments], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    done = quarry("ingest", f"{remote.url}@v2".replace("file://", "git+file://"), "--source", "cli-git", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["added"] == 3 and remote.v2[:12] in summary["fetched"]
    refreshed = quarry("ingest", "--source", "cli-git", "--json")  # the recorded location, read again
    assert refreshed.returncode == 0, refreshed.stderr
    again = json.loads(refreshed.stdout)
    assert again["since"] == remote.v2 and again["changed_paths"] == 0  # the same commit: nothing to read
    assert again["added"] == again["updated"] == again["deleted"] == again["vectors_embedded"] == 0
    unknown = quarry("ingest", "--source", "never-ingested")
    assert unknown.returncode == 2 and "no source named 'never-ingested'" in unknown.stderr
    bad = quarry("ingest", "pypi:", "--source", "x")
    assert bad.returncode == 2 and "pypi:NAME" in bad.stderr


@pytest.mark.parametrize(("text", "shown"), [
    ("https://user:s3cret@docs.example.com/guide/", "https://docs.example.com/guide/"),
    ("git+https://x-token:ghp_abc@github.com/org/repo.git@v1", "git+https://github.com/org/repo.git@v1"),
    ("https://docs.example.com/guide/", "https://docs.example.com/guide/"),
    ("ssh://git@github.com/org/repo.git@main", "ssh://git@github.com/org/repo.git@main"),  # an account, no secret
    ("pypi:requests==2.32.3", "pypi:requests==2.32.3"),
])
def test_a_recorded_location_never_holds_a_password(text: str, shown: str) -> None:
    assert parse_location(text).shown == shown
    where = locate(text, Settings(), "any")
    assert isinstance(where, Fetcher) and where.arguments["location"] == shown  # what a job records


def _write_site(root: Path, pages: int) -> None:
    """A small docs site: an index linking every page, each page a section about one topic."""
    (root / "guide").mkdir(parents=True)
    links = "".join(f'<li><a href="topic-{n}.html">Topic {n}</a></li>' for n in range(pages))
    (root / "guide" / "index.html").write_text(
        f"<html><head><title>Guide</title></head><body><nav><a href='/'>Home</a></nav><main><h1>Guide</h1>"
        f"<ul>{links}</ul></main></body></html>")
    for n in range(pages):
        (root / "guide" / f"topic-{n}.html").write_text(
            f"<html><head><title>Topic {n}</title></head><body><nav>Home | Guide</nav><main><h1>Topic {n}</h1>"
            f"<p>Configuring widget number {n} needs the frobnicate-{n} setting in quarry.toml.</p>"
            f"<a href='index.html'>back</a></main><footer>Copyright</footer></body></html>")
    (root / "outside.html").write_text("<html><body><p>Not part of the guide.</p></body></html>")


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[tuple[str, Path, Counter[int]]]:
    root = tmp_path / "site"
    _write_site(root, pages=12)
    statuses: Counter[int] = Counter()

    class Handler(http.server.SimpleHTTPRequestHandler):  # answers If-Modified-Since with 304
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            statuses[int(code) if str(code).isdigit() else 0] += 1

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root, statuses
    server.shutdown()
    server.server_close()


def test_a_website_is_crawled_cited_by_its_urls_and_recrawled_with_conditional_requests(
    pool: ConnectionPool, local_embedder: Embedder, site: tuple[str, Path, Counter[int]], tmp_path: Path,
) -> None:
    base, root, statuses = site
    settings = Settings(home=tmp_path / "home")
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    first = ingestor.ingest(_fetcher(f"{base}/guide/", "web-guide", settings), SourceSpec(slug="web-guide"))
    assert first.added == 13 and not first.failed  # the index and 12 topics; /outside.html is out of scope
    with pool.connection() as conn:
        cited = dict(conn.execute(
            "select d.path, d.url from quarry.documents d join quarry.sources s on s.id = d.source_id"
            " where s.slug = 'web-guide'").fetchall())
    assert cited["guide/topic-3.html"] == f"{base}/guide/topic-3.html"
    assert cited["guide/index.html"] == f"{base}/guide/"  # the page's own URL, not the mirror's file name
    assert _versions(pool, "web-guide")["web-guide"][1] == "docs_site"

    # Unchanged: every page answers 304 and nothing is embedded or rewritten.
    statuses.clear()
    again = ingestor.ingest(_fetcher(f"{base}/guide/", "web-guide", settings), SourceSpec(slug="web-guide"))
    assert (again.added, again.updated, again.deleted, again.vectors_embedded) == (0, 0, 0, 0)
    assert statuses[200] == 0 and statuses[304] >= 13

    # One page changed, one gone: the change is read; the page gone is kept until a second crawl says so.
    page = root / "guide" / "topic-5.html"
    page.write_text(page.read_text().replace("frobnicate-5", "frobnicate-five"))
    os.utime(page, (time.time() + 5, time.time() + 5))
    (root / "guide" / "topic-7.html").unlink()
    third = ingestor.ingest(_fetcher(f"{base}/guide/", "web-guide", settings), SourceSpec(slug="web-guide"))
    assert (third.updated, third.deleted) == (1, 0) and any("topic-7" in url for url, _ in third.failed)
    fourth = ingestor.ingest(_fetcher(f"{base}/guide/", "web-guide", settings), SourceSpec(slug="web-guide"))
    assert fourth.deleted == 1 and not fourth.failed
