"""Package fetchers against real loopback registries serving real archives built here.

A PEP 503/691 simple index and an npm-style registry run on loopback (``http.server`` in a
thread) and serve sdists, wheels and tarballs this file builds with ``tarfile``/``zipfile``,
with their real hashes. Two more tests fetch a small real package from pypi.org and
registry.npmjs.org, skipped (never failed) when those do not answer.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import socket
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pytest

from engine.errors import InvalidRequestError, NotFoundError, UnavailableError
from engine.fetch.archives import ArchiveError, extract_archive
from engine.fetch.packages import (
    DEFAULT_NPM_REGISTRY,
    DEFAULT_PYPI_INDEX_URL,
    fetch_npm,
    fetch_pypi,
)

# ---------------------------------------------------------------- a loopback registry


@dataclass
class Route:
    body: bytes
    content_type: str = "application/octet-stream"
    #: Served instead when the client accepts PEP 691 JSON and the server speaks it.
    json_body: bytes | None = None


@dataclass
class Registry:
    """A running loopback HTTP server: routes by decoded path, and what it was asked."""

    routes: dict[str, Route] = field(default_factory=dict)
    speaks_json: bool = True
    credentials: str | None = None  # "user:password" the server requires
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


def _handler(registry: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            registry.requests.append((self.path, dict(self.headers.items())))
            if registry.credentials is not None:
                expected = "Basic " + base64.b64encode(registry.credentials.encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self._answer(401, "text/plain", b"authentication required")
                    return
            route = registry.routes.get(unquote(urlsplit(self.path).path))
            if route is None:
                self._answer(404, "text/plain", b"not found")
                return
            accepts_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
            if route.json_body is not None and registry.speaks_json and accepts_json:
                self._answer(200, "application/vnd.pypi.simple.v1+json", route.json_body)
            else:
                self._answer(200, route.content_type, route.body)

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture()
def serve() -> Iterator[Callable[[], Registry]]:
    """Start loopback registries on demand; all are stopped after the test."""
    servers: list[ThreadingHTTPServer] = []

    def start() -> Registry:
        registry = Registry()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(registry))
        registry.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return registry

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- real archives, built here

PACKAGE_FILES = {
    "README.md": b"# demo-pkg\n\nA demonstration package.\n",
    "docs/guide.md": b"# Guide\n\nCall `demo_pkg.greet()`.\n",
    "src/demo_pkg/__init__.py": b"def greet() -> str:\n    return 'hello'\n",
    "tests/test_greet.py": b"from demo_pkg import greet\n\ndef test_greet():\n    assert greet() == 'hello'\n",
    "pyproject.toml": b"[project]\nname = 'demo-pkg'\n",
}


def _tar_gz(members: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _file_member(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def make_sdist(name: str, version: str, files: dict[str, bytes] = PACKAGE_FILES) -> tuple[str, bytes]:
    """A real sdist: ``{name}-{version}.tar.gz`` with one top folder and a PKG-INFO."""
    top = f"{name}-{version}"
    pkg_info = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members = [_file_member(f"{top}/PKG-INFO", pkg_info)]
    members += [_file_member(f"{top}/{path}", data) for path, data in files.items()]
    return f"{top}.tar.gz", _tar_gz(members)


def make_wheel(name: str, version: str, tag: str = "py3-none-any") -> tuple[str, bytes]:
    """A real wheel: the package and its ``.dist-info`` at the top (no single top folder)."""
    dist_info = f"{name}-{version}.dist-info"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}/__init__.py", PACKAGE_FILES["src/demo_pkg/__init__.py"])
        archive.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n")
        archive.writestr(f"{dist_info}/RECORD", "")
    return f"{name}-{version}-{tag}.whl", buffer.getvalue()


def make_npm_tarball(files: dict[str, bytes], prefix: str = "package") -> bytes:
    return _tar_gz([_file_member(f"{prefix}/{path}", data) for path, data in files.items()])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class IndexFile:
    filename: str
    data: bytes
    yanked: str | None = None
    hash_override: str | None = None  # a wrong hash; "" for none at all

    @property
    def sha256(self) -> str:
        return sha256(self.data) if self.hash_override is None else self.hash_override


def publish_project(registry: Registry, project: str, files: list[IndexFile], *, file_base: str | None = None) -> None:
    """Serve ``files`` at ``/files/…`` and the project's page at ``/simple/{project}/`` (JSON and HTML)."""
    base = file_base or registry.url
    anchors, entries = [], []
    for file in files:
        registry.routes[f"/files/{file.filename}"] = Route(file.data)
        fragment = f"#sha256={file.sha256}" if file.sha256 else ""
        yanked = "" if file.yanked is None else f' data-yanked="{file.yanked}"'
        href = f"../../files/{file.filename}" if file_base is None else f"{base}/files/{file.filename}"
        anchors.append(f'<a href="{href}{fragment}"{yanked}>{file.filename}</a><br/>')
        entries.append({"filename": file.filename, "url": f"{base}/files/{file.filename}",
                        "hashes": {"sha256": file.sha256} if file.sha256 else {},
                        "yanked": file.yanked if file.yanked else file.yanked == ""})
    html = f"<!DOCTYPE html><html><body><h1>Links for {project}</h1>{''.join(anchors)}</body></html>"
    page = json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": entries})
    registry.routes[f"/simple/{project}/"] = Route(html.encode(), "text/html", page.encode())


def demo_releases() -> list[IndexFile]:
    files = [IndexFile(*make_wheel("demo_pkg", "0.9.0", "cp311-cp311-manylinux_2_17_x86_64")),
             IndexFile(*make_wheel("demo_pkg", "0.9.0"))]
    for version in ("1.0.0", "1.1.0"):
        files += [IndexFile(*make_sdist("demo_pkg", version)), IndexFile(*make_wheel("demo_pkg", version))]
    files.append(IndexFile(*make_sdist("demo_pkg", "1.2.0"), yanked="broken build"))
    files.append(IndexFile(*make_sdist("demo_pkg", "2.0.0rc1")))
    return files


@pytest.fixture(params=["json", "html"])
def index(request: pytest.FixtureRequest, serve: Callable[[], Registry]) -> Registry:
    """A simple index speaking PEP 691 JSON, or only PEP 503 HTML."""
    registry = serve()
    registry.speaks_json = request.param == "json"
    publish_project(registry, "demo-pkg", demo_releases())
    return registry


def _tree_files(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}


# ---------------------------------------------------------------- PyPI


def test_latest_is_the_highest_final_release_not_yanked(index: Registry, tmp_path: Path) -> None:
    tree = fetch_pypi("demo-pkg", None, tmp_path, index_url=index.url + "/simple/")
    assert tree.version == "1.1.0"  # 1.2.0 is yanked, 2.0.0rc1 a prerelease
    assert tree.listing is None and tree.location == "pypi:demo-pkg"
    assert tree.root == tmp_path / "pypi" / "demo-pkg" / "1.1.0" / "tree"
    assert _tree_files(tree.root) == {"PKG-INFO", *PACKAGE_FILES}  # the sdist, its top folder stripped
    assert tree.report == (f"demo-pkg 1.1.0 from {index.url}/simple/: sdist demo_pkg-1.1.0.tar.gz "
                           "(sha256 verified), 6 files")
    assert "application/vnd.pypi.simple.v1+json" in index.requests[0][1]["Accept"]


@pytest.mark.parametrize(("wanted", "version", "note"), [
    ("1.2.0", "1.2.0", "; yanked (broken build)"),  # an exact pin still gets a yanked release (PEP 592)
    ("2.0.0rc1", "2.0.0rc1", ""),
    (">=1,<1.1", "1.0.0", ""),
    ("1.0.*", "1.0.0", ""),
])
def test_exact_versions_and_specifiers(index: Registry, tmp_path: Path, wanted: str, version: str, note: str) -> None:
    tree = fetch_pypi("demo-pkg", wanted, tmp_path, index_url=index.url + "/simple")
    assert tree.version == version
    assert tree.location == f"pypi:demo-pkg=={wanted}"
    assert tree.report.endswith("6 files" + note)


def test_a_release_without_sdist_falls_back_to_the_pure_wheel(index: Registry, tmp_path: Path) -> None:
    tree = fetch_pypi("demo-pkg", "0.9.0", tmp_path, index_url=index.url + "/simple/")
    assert "wheel (no sdist published) demo_pkg-0.9.0-py3-none-any.whl (sha256 verified)" in tree.report
    # Two top folders (the package and its .dist-info): nothing is stripped.
    assert _tree_files(tree.root) == {"demo_pkg/__init__.py", "demo_pkg-0.9.0.dist-info/METADATA",
                                      "demo_pkg-0.9.0.dist-info/WHEEL", "demo_pkg-0.9.0.dist-info/RECORD"}


def test_names_are_normalised_as_pep_503_says(index: Registry, tmp_path: Path) -> None:
    tree = fetch_pypi("Demo_Pkg", "1.0.0", tmp_path, index_url=index.url + "/simple/")
    assert tree.version == "1.0.0" and index.paths()[0] == "/simple/demo-pkg/"
    assert tree.location == "pypi:Demo_Pkg==1.0.0"


def test_unknown_versions_and_packages_are_not_found(index: Registry, tmp_path: Path) -> None:
    nearest = re.escape("nearest: 1.0.0, 1.1.0, 1.2.0, 2.0.0rc1 (latest: 1.1.0)")  # 1.2.0 is yanked
    with pytest.raises(NotFoundError, match=r"no release 1\.3\.0 .*" + nearest):
        fetch_pypi("demo-pkg", "1.3.0", tmp_path, index_url=index.url + "/simple/")
    with pytest.raises(NotFoundError, match=r"no package 'nope' on http://127\.0\.0\.1"):
        fetch_pypi("nope", None, tmp_path, index_url=index.url + "/simple/")
    with pytest.raises(NotFoundError, match="satisfies >=3"):
        fetch_pypi("demo-pkg", ">=3", tmp_path, index_url=index.url + "/simple/")
    with pytest.raises(InvalidRequestError, match="neither a PEP 440 version"):
        fetch_pypi("demo-pkg", "latest!!", tmp_path, index_url=index.url + "/simple/")
    with pytest.raises(InvalidRequestError, match="not a Python package name"):
        fetch_pypi("../etc", None, tmp_path, index_url=index.url + "/simple/")


def test_a_hash_mismatch_is_refused_and_leaves_nothing_behind(serve: Callable[[], Registry], tmp_path: Path) -> None:
    registry = serve()
    filename, data = make_sdist("tampered", "1.0.0")
    publish_project(registry, "tampered", [IndexFile(filename, data, hash_override=sha256(b"something else"))])
    with pytest.raises(UnavailableError, match=r"tampered-1\.0\.0\.tar\.gz .* does not match its sha256"):
        fetch_pypi("tampered", "1.0.0", tmp_path, index_url=registry.url + "/simple/")
    assert list((tmp_path / "pypi" / "tampered").iterdir()) == []


def test_a_file_without_a_hash_is_accepted_and_said_so(serve: Callable[[], Registry], tmp_path: Path) -> None:
    registry = serve()
    publish_project(registry, "unhashed", [IndexFile(*make_sdist("unhashed", "1.0.0"), hash_override="")])
    tree = fetch_pypi("unhashed", None, tmp_path, index_url=registry.url + "/simple/")
    assert "(no hash published: not verified)" in tree.report


def test_malformed_index_pages_are_reported(serve: Callable[[], Registry], tmp_path: Path) -> None:
    registry = serve()
    registry.routes["/simple/broken/"] = Route(b"{not json", "application/vnd.pypi.simple.v1+json")
    registry.routes["/simple/empty/"] = Route(b"<html><body>Please log in</body></html>", "text/html")
    with pytest.raises(UnavailableError, match="malformed PEP 691 JSON"):
        fetch_pypi("broken", None, tmp_path, index_url=registry.url + "/simple/")
    with pytest.raises(NotFoundError, match="lists no release files"):
        fetch_pypi("empty", None, tmp_path, index_url=registry.url + "/simple/")


def test_a_second_fetch_reuses_the_verified_extract(index: Registry, tmp_path: Path) -> None:
    url = index.url + "/simple/"
    first = fetch_pypi("demo-pkg", "1.0.0", tmp_path, index_url=url)
    asked = len(index.requests)
    assert asked == 2  # the project page and the file
    again = fetch_pypi("demo-pkg", "1.0.0", tmp_path, index_url=url)
    assert len(index.requests) == asked  # an exact version in the cache: no request at all
    assert again.root == first.root and again.report.endswith("reused the verified extract of an earlier fetch")
    fetch_pypi("demo-pkg", None, tmp_path, index_url=url)
    asked = len(index.requests)
    fetch_pypi("demo-pkg", None, tmp_path, index_url=url)
    assert index.paths()[asked:] == ["/simple/demo-pkg/"]  # the latest: one index request, no download


def test_an_extract_from_another_index_is_not_reused(index: Registry, serve: Callable[[], Registry],
                                                     tmp_path: Path) -> None:
    mirror = serve()
    publish_project(mirror, "demo-pkg", demo_releases())
    fetch_pypi("demo-pkg", "1.0.0", tmp_path, index_url=index.url + "/simple/")
    tree = fetch_pypi("demo-pkg", "1.0.0", tmp_path, index_url=mirror.url + "/simple/")
    assert tree.report.startswith(f"demo-pkg 1.0.0 from {mirror.url}/simple/") and "reused" not in tree.report
    assert len(mirror.requests) == 2


def test_credentials_in_the_index_url_are_used_and_never_shown(serve: Callable[[], Registry],
                                                              tmp_path: Path) -> None:
    private, files_elsewhere = serve(), serve()
    private.credentials = "deploy:s3cret-token"
    publish_project(private, "internal-lib", [IndexFile(*make_sdist("internal_lib", "1.0.0"))])
    publish_project(private, "cdn-lib", [IndexFile(*make_sdist("cdn_lib", "1.0.0"))], file_base=files_elsewhere.url)
    files_elsewhere.routes.update(private.routes)
    url = f"http://deploy:s3cret-token@127.0.0.1:{private.port}/simple/"

    tree = fetch_pypi("internal-lib", None, tmp_path, index_url=url)
    assert tree.version == "1.0.0" and "s3cret" not in tree.report + tree.location
    assert all("Authorization" in headers for _, headers in private.requests)
    fetch_pypi("cdn-lib", None, tmp_path, index_url=url)
    assert files_elsewhere.requests and all("Authorization" not in headers for _, headers in files_elsewhere.requests)

    with pytest.raises(NotFoundError) as missing:
        fetch_pypi("nope", None, tmp_path, index_url=url)
    wrong = f"http://deploy:wrong-token@127.0.0.1:{private.port}/simple/"
    with pytest.raises(InvalidRequestError, match="QUARRY_PYPI_INDEX_URL") as refused:
        fetch_pypi("internal-lib", "0.1", tmp_path, index_url=wrong)
    assert "s3cret" not in str(missing.value) and "wrong-token" not in str(refused.value)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_index_is_unavailable_and_named(tmp_path: Path) -> None:
    port = _closed_port()
    with pytest.raises(UnavailableError, match=f"cannot reach 127.0.0.1:{port}.*QUARRY_PYPI_INDEX_URL") as error:
        fetch_pypi("demo-pkg", None, tmp_path, index_url=f"http://u:hidden@127.0.0.1:{port}/simple/")
    assert "hidden" not in str(error.value)
    with pytest.raises(UnavailableError, match=f"cannot reach 127.0.0.1:{port}.*QUARRY_NPM_REGISTRY"):
        fetch_npm("demo-lib", None, tmp_path, registry=f"http://127.0.0.1:{port}/")


def test_a_fetch_killed_midway_leaves_a_folder_the_next_one_removes(index: Registry, tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = tmp_path / "pypi" / "demo-pkg" / f".pending-{ended.stdout.strip()}-x1y2"
    (abandoned / "tree").mkdir(parents=True)
    (abandoned / "download").write_bytes(b"half a download")
    tree = fetch_pypi("demo-pkg", "1.0.0", tmp_path, index_url=index.url + "/simple/")
    assert not abandoned.exists()
    assert sorted(path.name for path in tree.root.parent.parent.iterdir()) == ["1.0.0"]


# ---------------------------------------------------------------- npm

NPM_FILES = {"package.json": b'{"name": "demo-lib"}', "README.md": b"# demo-lib\n",
             "lib/index.js": b"module.exports = 1;\n"}


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def publish_npm(registry: Registry, name: str, versions: dict[str, bytes], tags: dict[str, str],
                *, shasum_only: frozenset[str] = frozenset(), deprecated: dict[str, str] | None = None,
                bad_integrity: frozenset[str] = frozenset()) -> None:
    entries = {}
    for version, data in versions.items():
        tarball = f"/tarballs/{name}/-/{name.split('/')[-1]}-{version}.tgz"
        registry.routes[tarball] = Route(data)
        dist = {"tarball": registry.url + tarball, "shasum": hashlib.sha1(data).hexdigest()}
        if version in bad_integrity:
            dist["integrity"] = _integrity(b"another file")
        elif version not in shasum_only:
            dist["integrity"] = _integrity(data)
        entries[version] = {"name": name, "version": version, "dist": dist}
        if deprecated and version in deprecated:
            entries[version]["deprecated"] = deprecated[version]
    registry.routes[f"/{name}"] = Route(json.dumps({"name": name, "dist-tags": tags, "versions": entries}).encode(),
                                        "application/json")


@pytest.fixture()
def npm_registry(serve: Callable[[], Registry]) -> Registry:
    registry = serve()
    versions = {version: make_npm_tarball({**NPM_FILES, "VERSION": version.encode()})
                for version in ("1.0.0", "1.4.0", "1.5.0", "1.6.0", "2.0.0-beta.1")}
    publish_npm(registry, "demo-lib", versions, {"latest": "1.5.0", "next": "2.0.0-beta.1"},
                shasum_only=frozenset({"1.0.0"}), deprecated={"1.6.0": "use 1.5.0"},
                bad_integrity=frozenset({"1.4.0"}))
    publish_npm(registry, "@demo/scoped", {"3.1.0": make_npm_tarball(NPM_FILES)}, {"latest": "3.1.0"})
    return registry


@pytest.mark.parametrize(("wanted", "version"), [
    (None, "1.5.0"),  # dist-tags.latest
    ("next", "2.0.0-beta.1"),  # a tag
    ("^1", "1.5.0"),  # a range latest satisfies: latest
    (">1.5.0 <2", "1.6.0"),  # only a deprecated version satisfies
    ("2.0.0-beta.1", "2.0.0-beta.1"),
])
def test_npm_versions_ranges_and_tags(npm_registry: Registry, tmp_path: Path, wanted: str | None,
                                      version: str) -> None:
    tree = fetch_npm("demo-lib", wanted, tmp_path, registry=npm_registry.url)
    assert tree.version == version
    assert tree.location == "npm:demo-lib" + (f"@{wanted}" if wanted else "")
    assert _tree_files(tree.root) == {*NPM_FILES, "VERSION"}  # "package/" stripped
    assert (tree.root / "VERSION").read_text() == version
    assert f"tarball demo-lib-{version}.tgz (sha512 verified), 4 files" in tree.report


def test_npm_verifies_shasum_when_there_is_no_integrity_and_refuses_a_mismatch(npm_registry: Registry,
                                                                               tmp_path: Path) -> None:
    old = fetch_npm("demo-lib", "1.0.0", tmp_path, registry=npm_registry.url)
    assert "(sha1 verified)" in old.report
    with pytest.raises(UnavailableError, match="does not match its sha512"):
        fetch_npm("demo-lib", "1.4.0", tmp_path, registry=npm_registry.url)
    deprecated = fetch_npm("demo-lib", "1.6.0", tmp_path, registry=npm_registry.url)
    assert deprecated.report.endswith("; deprecated (use 1.5.0)")


def test_npm_scoped_packages(npm_registry: Registry, tmp_path: Path) -> None:
    tree = fetch_npm("@demo/scoped", None, tmp_path, registry=npm_registry.url + "/")
    assert tree.version == "3.1.0" and tree.root == tmp_path / "npm" / "@demo" / "scoped" / "3.1.0" / "tree"
    assert npm_registry.paths()[0] == "/@demo%2fscoped"  # the escaping npm itself sends


def test_npm_unknown_packages_versions_and_tags(npm_registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match=r"no package 'left-pad' on http://127\.0\.0\.1"):
        fetch_npm("left-pad", None, tmp_path, registry=npm_registry.url)
    with pytest.raises(NotFoundError, match=r"no version 1\.5\.1 .*nearest: 1\.4\.0, 1\.5\.0, 1\.6\.0, 2\.0\.0-beta"):
        fetch_npm("demo-lib", "1.5.1", tmp_path, registry=npm_registry.url)
    with pytest.raises(NotFoundError, match=r"dist-tag 'canary'.*latest=1\.5\.0, next=2\.0\.0-beta\.1"):
        fetch_npm("demo-lib", "canary", tmp_path, registry=npm_registry.url)
    with pytest.raises(NotFoundError, match=r"satisfies \^9"):
        fetch_npm("demo-lib", "^9", tmp_path, registry=npm_registry.url)


def test_npm_second_fetch_reuses_the_extract(npm_registry: Registry, tmp_path: Path) -> None:
    fetch_npm("demo-lib", "1.5.0", tmp_path, registry=npm_registry.url)
    asked = len(npm_registry.requests)
    assert fetch_npm("demo-lib", "1.5.0", tmp_path, registry=npm_registry.url).report.endswith("earlier fetch")
    assert len(npm_registry.requests) == asked
    assert fetch_npm("demo-lib", "latest", tmp_path, registry=npm_registry.url).version == "1.5.0"
    assert npm_registry.paths()[asked:] == ["/demo-lib"]


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def hostile_tarball() -> bytes:
    device = tarfile.TarInfo("package/dev-null")
    device.type, device.devmajor, device.devminor = tarfile.CHRTYPE, 1, 3
    return _tar_gz([
        _file_member("package/package.json", b'{"name": "evil"}'),
        _file_member("package/index.js", b"module.exports = 2;\n"),
        _file_member("package/../../evil.txt", b"escaped"),
        _file_member("/tmp/absolute-evil.txt", b"escaped"),
        _link("package/link-out", "../../../etc/passwd", tarfile.SYMTYPE),
        _link("package/link-in", "index.js", tarfile.SYMTYPE),
        _link("package/hard-out", "/etc/passwd", tarfile.LNKTYPE),
        _link("package/hard-in", "package/index.js", tarfile.LNKTYPE),
        (device, None),
    ])


def test_hostile_archive_members_are_refused_one_by_one(serve: Callable[[], Registry], tmp_path: Path) -> None:
    registry = serve()
    publish_npm(registry, "evil", {"1.0.0": hostile_tarball()}, {"latest": "1.0.0"})
    tree = fetch_npm("evil", None, tmp_path / "cache", registry=registry.url)
    assert _tree_files(tree.root) == {"package.json", "index.js", "hard-in"}
    assert (tree.root / "hard-in").read_bytes() == b"module.exports = 2;\n"  # a copy, not a link
    assert dict(tree.skipped) == {
        "package/../../evil.txt": "path with a '..' component (refused)",
        "/tmp/absolute-evil.txt": "absolute path (refused)",
        "link-out": "symlink pointing outside the package (refused)",
        "link-in": "symlink (not followed)",
        "hard-out": "hard link to a file outside the package (refused)",
        "dev-null": "device file or FIFO (refused)",
    }
    assert ", 3 files, 6 archive members skipped" in tree.report
    assert not any(path.is_symlink() for path in tmp_path.rglob("*"))
    assert [path.name for path in tmp_path.rglob("*evil.txt")] == []


# ---------------------------------------------------------------- archives on their own


def test_extraction_stops_at_the_byte_cap(tmp_path: Path) -> None:
    big = b"\0" * (2 * 1024 * 1024)  # compresses to almost nothing: a small bomb
    archive = tmp_path / "bomb.tgz"
    archive.write_bytes(make_npm_tarball({"small.txt": b"ok", "big.bin": big, "after.txt": b"still ok"}))
    result = extract_archive(archive, tmp_path / "out", max_bytes=1024 * 1024)
    assert _tree_files(tmp_path / "out") == {"small.txt", "after.txt"}
    assert result.skipped == [("big.bin", "over the extraction limit of 1048576 bytes")]
    assert result.stripped == "package" and result.files == 2


def test_zip_members_are_checked_like_tar_members(tmp_path: Path) -> None:
    archive = tmp_path / "hostile.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        opened.writestr("demo-1.0/README.md", "# demo")
        opened.writestr("demo-1.0/../evil.txt", "escaped")
        opened.writestr("/abs.txt", "escaped")
        link = zipfile.ZipInfo("demo-1.0/link")
        link.external_attr = (0o120777 << 16)
        opened.writestr(link, "/etc/passwd")
        opened.writestr("demo-1.0/big.bin", b"\0" * 5000)
    result = extract_archive(archive, tmp_path / "out", max_bytes=4096)
    assert _tree_files(tmp_path / "out") == {"README.md"}
    assert dict(result.skipped) == {
        "demo-1.0/../evil.txt": "path with a '..' component (refused)",
        "/abs.txt": "absolute path (refused)",
        "link": "symlink pointing outside the package (refused)",
        "big.bin": "over the extraction limit of 4096 bytes",
    }


def test_member_count_cap_and_unreadable_archives(tmp_path: Path) -> None:
    archive = tmp_path / "many.tgz"
    archive.write_bytes(make_npm_tarball({f"f{number}.txt": b"x" for number in range(5)}))
    result = extract_archive(archive, tmp_path / "out", max_members=3)
    assert result.files == 3 and result.skipped == [("*", "more than 3 members: the rest were not extracted")]
    not_archive = tmp_path / "page.html"
    not_archive.write_bytes(b"<html>not a package</html>")
    with pytest.raises(ArchiveError):
        extract_archive(not_archive, tmp_path / "out2")


# ---------------------------------------------------------------- the real registries


def _skip_unless_reachable(url: str) -> None:
    try:
        httpx.head(url, timeout=5.0)
    except httpx.HTTPError as error:
        pytest.skip(f"{httpx.URL(url).host} is unreachable from here ({type(error).__name__}); "
                    "this test needs the real registry")


def test_real_pypi_package(tmp_path: Path) -> None:
    _skip_unless_reachable(DEFAULT_PYPI_INDEX_URL + "six/")
    tree = fetch_pypi("six", "1.16.0", tmp_path)
    assert tree.version == "1.16.0" and (tree.root / "six.py").is_file()
    assert "sdist six-1.16.0.tar.gz (sha256 verified)" in tree.report


def test_real_npm_package(tmp_path: Path) -> None:
    _skip_unless_reachable(DEFAULT_NPM_REGISTRY + "is-number")
    tree = fetch_npm("is-number", "7.0.0", tmp_path)
    assert tree.version == "7.0.0" and {"index.js", "README.md", "package.json"} <= _tree_files(tree.root)
    assert "(sha512 verified)" in tree.report
