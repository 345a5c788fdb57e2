"""Package releases (``pypi:NAME==VERSION``, ``npm:NAME@VERSION``) fetched into a verified, extracted tree.

Each ecosystem's protocol is read in its own module (``engine.fetch.pypi``, ``engine.fetch.npm``);
this one does what both share: the HTTP exchange (timeouts, size caps, credentials from the
index URL sent only to the index's own host and never shown), the download hashed while it
streams and refused on a mismatch, the safe extraction (``engine.fetch.archives``) and the cache.

The cache holds ``{cache_dir}/{pypi|npm}/{name}/{version}/``: ``tree/`` (the extracted release,
what the ingest walks as a ``code_repo``) and ``fetched.json`` (what was fetched from where,
how it was verified, what was skipped). A version folder appears by one rename of a finished
temporary folder, so a fetch killed at any moment leaves at most a ``.pending-PID-…`` folder,
which the next fetch removes once that process is gone. Released files are immutable on both
registries, so a verified extract is reused: a second fetch of an exact version already in the
cache makes no request at all; one of the latest, a tag, a range or a specifier makes the one
index request that says which version that is now, and downloads nothing if it is cached. An
extract made from another index is not reused (a private mirror's package of the same name is
not the public one).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engine.errors import InvalidRequestError, LimitError, NotFoundError, UnavailableError
from engine.fetch import npm, pypi
from engine.fetch.archives import ArchiveError, extract_archive
from engine.fetch.credentials import without_credentials
from engine.fetch.tree import FetchedTree

__all__ = ["DEFAULT_NPM_REGISTRY", "DEFAULT_PYPI_INDEX_URL", "MAX_DOWNLOAD_BYTES", "fetch_npm", "fetch_pypi"]

DEFAULT_PYPI_INDEX_URL = "https://pypi.org/simple/"
DEFAULT_NPM_REGISTRY = "https://registry.npmjs.org/"
MAX_DOWNLOAD_BYTES = 200 * 1024 * 1024
#: An index page or package document: npm's full documents of big packages run to tens of MB.
MAX_DOCUMENT_BYTES = 100 * 1024 * 1024
_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
_USER_AGENT = "quarry-fetch (+https://github.com/quarry)"
_MANIFEST = "fetched.json"
_SAFE_FOLDER = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+!_~-]*$")
_CHUNK = 256 * 1024


def fetch_pypi(name: str, version: str | None, cache_dir: Path, *, index_url: str = DEFAULT_PYPI_INDEX_URL,
               transport: httpx.BaseTransport | None = None) -> FetchedTree:
    """Fetch a release of a Python package from a PEP 503/691 simple index into ``cache_dir``.

    ``version`` is an exact version (``2.32.3``), a specifier (``2.32.*``, ``>=2.31,<3``) or None
    for the latest release. Raises ``NotFoundError`` for an unknown package or version (naming
    the nearest), ``UnavailableError`` when the index cannot be reached or serves something
    unusable (a hash mismatch included), ``LimitError`` for a file over the download cap.
    """
    project = pypi.normalize_name(name)
    location = f"pypi:{name}" + (f"=={version}" if version else "")
    folder = cache_dir / "pypi" / project
    with _Registry(index_url, transport, setting="QUARRY_PYPI_INDEX_URL") as registry:
        pinned = pypi.exact_version(version)
        if pinned is not None and (cached := _cached(folder / pinned, location, registry.label)) is not None:
            return cached
        page_url = pypi.project_page_url(registry.base, name)
        page = registry.document(page_url, pypi.ACCEPT, missing=f"no package '{name}' on {registry.label}")
        files = pypi.read_project_page(page.body, page.content_type, page.url, project=name, label=registry.label)
        chosen = pypi.choose_file(files, version, project=name, label=registry.label)
        described = chosen.packaging + (" (no sdist published)" if chosen.packaging == "wheel" else "")
        notes = [] if chosen.yanked is None else ["yanked" + (f" ({chosen.yanked})" if chosen.yanked else "")]
        release = _Release(name, str(chosen.version), chosen.url, chosen.filename, described,
                           pypi.expected_digest(chosen), notes)
        return _fetch_release(registry, release, folder, location)


def fetch_npm(name: str, version: str | None, cache_dir: Path, *, registry: str = DEFAULT_NPM_REGISTRY,
              transport: httpx.BaseTransport | None = None) -> FetchedTree:
    """Fetch a version of an npm package (``name`` or ``@scope/name``) from an npm registry into ``cache_dir``.

    ``version`` is an exact version, a node-semver range (``^4``) or a dist-tag (``next``); None
    is the ``latest`` tag. Errors as ``fetch_pypi``.
    """
    npm.validate_name(name)
    location = f"npm:{name}" + (f"@{version}" if version else "")
    folder = cache_dir.joinpath("npm", *name.split("/"))
    with _Registry(registry, transport, setting="QUARRY_NPM_REGISTRY") as client:
        pinned = npm.exact_version(version)
        if pinned is not None and (cached := _cached(folder / pinned, location, client.label)) is not None:
            return cached
        document_url = npm.package_document_url(client.base, name)
        answer = client.document(document_url, npm.ACCEPT, missing=f"no package '{name}' on {client.label}")
        document = npm.read_package_document(answer.body, name=name, label=client.label)
        chosen = npm.choose_release(document, version, name=name, label=client.label, document_url=answer.url)
        filename = httpx.URL(chosen.tarball).path.rsplit("/", 1)[-1] or "package.tgz"
        release = _Release(name, chosen.version, chosen.tarball, filename, "tarball", npm.expected_digest(chosen),
                           [f"deprecated ({chosen.deprecated})"] if chosen.deprecated else [])
        return _fetch_release(client, release, folder, location)


@dataclass(frozen=True, slots=True)
class _Release:
    name: str
    version: str
    url: str
    filename: str
    described: str  # "sdist", "wheel (no sdist published)", "tarball"
    digest: tuple[str, bytes] | None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Answer:
    body: bytes
    content_type: str
    url: str  # after redirects


def strip_credentials(url: str) -> str:
    """``url`` without its user, password and query (signed download URLs carry tokens there), for messages."""
    return without_credentials(url).split("?", 1)[0]


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying context for every client: loading the CA bundle costs more than a loopback fetch."""
    return httpx.create_ssl_context()


class _Registry:
    """An HTTP client for one index: its credentials go to its own host only, and no message shows them."""

    def __init__(self, url: str, transport: httpx.BaseTransport | None, *, setting: str) -> None:
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as error:
            raise InvalidRequestError(f"{setting}: {strip_credentials(url)!r} is not a URL ({error})") from error
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise InvalidRequestError(f"{setting}: {strip_credentials(url)!r} is not an http(s) URL")
        self.setting = setting
        self.auth = httpx.BasicAuth(parsed.username, parsed.password) if parsed.userinfo else None
        public = parsed.copy_with(username=None, password=None, query=None, fragment=None)
        self.base = str(public).rstrip("/") + "/"
        self.label = self.base
        self.origin = (public.scheme, public.host, public.port)
        self.client = httpx.Client(transport=transport, timeout=_TIMEOUT, follow_redirects=True,
                                   headers={"User-Agent": _USER_AGENT}, verify=_tls_context())

    def __enter__(self) -> _Registry:
        return self

    def __exit__(self, *_: object) -> None:
        self.client.close()

    def _auth_for(self, url: httpx.URL) -> httpx.BasicAuth | None:
        return self.auth if (url.scheme, url.host, url.port) == self.origin else None

    @contextmanager
    def _get(self, url: str, headers: dict[str, str]) -> Iterator[httpx.Response]:
        target = httpx.URL(url)
        host = target.host + (f":{target.port}" if target.port else "")
        try:
            with self.client.stream("GET", target, headers=headers, auth=self._auth_for(target)) as response:
                yield response
        except httpx.TimeoutException as error:
            raise UnavailableError(f"{host} did not answer in time ({type(error).__name__}); retry later, or point "
                                   f"{self.setting} at a mirror") from error
        except httpx.TooManyRedirects as error:
            raise UnavailableError(f"{host} redirected too many times for {strip_credentials(url)}") from error
        except httpx.TransportError as error:
            reason = strip_credentials(str(error)) or type(error).__name__
            raise UnavailableError(f"cannot reach {host} ({reason}); check the network, or point "
                                   f"{self.setting} at a mirror") from error

    def _refuse_status(self, response: httpx.Response, url: str, missing: str) -> None:
        status = response.status_code
        if status < 300:
            return
        if status in (404, 410):
            raise NotFoundError(missing)
        if status in (401, 403):
            raise InvalidRequestError(f"{strip_credentials(url)} refused access (HTTP {status}); a private index "
                                      f"takes its credentials in {self.setting} (https://USER:TOKEN@host/…)")
        raise UnavailableError(f"{strip_credentials(url)} answered HTTP {status}; retry later")

    def document(self, url: str, accept: str, *, missing: str) -> _Answer:
        with self._get(url, {"Accept": accept}) as response:
            self._refuse_status(response, url, missing)
            body = bytearray()
            for chunk in response.iter_bytes(_CHUNK):
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise LimitError(f"{strip_credentials(url)} is over {MAX_DOCUMENT_BYTES} bytes; not read")
            return _Answer(bytes(body), response.headers.get("content-type", ""), str(response.url))

    def download(self, release: _Release, target: Path) -> str:
        """Stream the release file to ``target``, hashing as it goes; returns how it was verified."""
        shown = strip_credentials(release.url)
        with self._get(release.url, {"Accept-Encoding": "identity"}) as response:
            self._refuse_status(response, release.url, f"{shown}, listed by {self.label}, answered HTTP 404")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_DOWNLOAD_BYTES:
                raise LimitError(f"{release.filename} is {declared} bytes, over the {MAX_DOWNLOAD_BYTES}-byte cap")
            hasher = hashlib.new(release.digest[0]) if release.digest else None
            size = 0
            with target.open("wb") as sink:
                for chunk in response.iter_bytes(_CHUNK):
                    size += len(chunk)
                    if size > MAX_DOWNLOAD_BYTES:
                        raise LimitError(f"{release.filename} is over the {MAX_DOWNLOAD_BYTES}-byte cap")
                    if hasher is not None:
                        hasher.update(chunk)
                    sink.write(chunk)
        if release.digest is None or hasher is None:
            return "no hash published: not verified"
        algorithm, expected = release.digest
        if hasher.digest() != expected:
            raise UnavailableError(
                f"{release.filename} from {shown} does not match its {algorithm} on {self.label} (expected "
                f"{expected.hex()[:16]}…, got {hasher.hexdigest()[:16]}…): refused; a corrupted download or "
                "a tampered mirror")
        return f"{algorithm} verified"


def _fetch_release(registry: _Registry, release: _Release, folder: Path, location: str) -> FetchedTree:
    if not _SAFE_FOLDER.match(release.version):
        raise UnavailableError(f"{registry.label} names a version {release.version[:40]!r} that is not a version")
    final = folder / release.version
    cached = _cached(final, location, registry.label)
    if cached is not None:
        return cached
    folder.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(folder)
    pending = Path(tempfile.mkdtemp(prefix=f".pending-{os.getpid()}-", dir=folder))
    try:
        archive = pending / "download"
        verification = registry.download(release, archive)
        try:
            extraction = extract_archive(archive, pending / "tree")
        except ArchiveError as error:
            raise UnavailableError(f"{release.filename} from {registry.label} cannot be unpacked: {error}") from error
        archive.unlink()
        record = {"name": release.name, "version": release.version, "index": registry.label,
                  "file": release.filename, "described": release.described, "verification": verification,
                  "notes": release.notes, "files": extraction.files,
                  "skipped": [list(item) for item in extraction.skipped]}
        (pending / _MANIFEST).write_text(json.dumps(record, indent=1), encoding="utf-8")
        _publish(pending, final, registry.label)
    finally:
        shutil.rmtree(pending, ignore_errors=True)
    published = _cached(final, location, registry.label, reused=False)
    if published is None:  # another fetch replaced it with an extract from another index meanwhile
        raise UnavailableError(f"the cache folder {final} changed during the fetch; retry")
    return published


def _cached(final: Path, location: str, label: str, *, reused: bool = True) -> FetchedTree | None:
    """The extract in ``final`` when it is complete and came from this index; None otherwise."""
    try:
        record: dict[str, Any] = json.loads((final / _MANIFEST).read_text(encoding="utf-8"))
        if record["index"] != label or not (final / "tree").is_dir():
            return None
        skipped = [(str(path), str(reason)) for path, reason in record["skipped"]]
        report = (f"{record['name']} {record['version']} from {record['index']}: {record['described']} "
                  f"{record['file']} ({record['verification']}), {record['files']} files")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if skipped:
        report += f", {len(skipped)} archive members skipped"
    for note in record.get("notes") or ():
        report += f"; {note}"
    if reused:
        report += "; reused the verified extract of an earlier fetch"
    return FetchedTree(root=final / "tree", location=location, version=str(record["version"]),
                       skipped=skipped, report=report)


def _publish(pending: Path, final: Path, label: str) -> None:
    """Move a finished extract into place with renames only, replacing one from another index.

    An extract of the same release a concurrent fetch published first is kept (someone may be
    reading it), and this one dropped.
    """
    if _cached(final, "", label) is not None:
        return
    if final.exists():
        replaced = Path(tempfile.mkdtemp(prefix=f".pending-{os.getpid()}-", dir=final.parent))
        os.replace(final, replaced / "old")
        shutil.rmtree(replaced, ignore_errors=True)
    try:
        os.rename(pending, final)
    except OSError:
        if _cached(final, "", label) is None:  # not "a concurrent fetch published first": a real failure
            raise


def _remove_abandoned(folder: Path) -> None:
    """Remove temporary folders of fetches whose process has ended (killed mid-fetch)."""
    for leftover in folder.glob(".pending-*"):
        pid_text = leftover.name.split("-")[1]
        if pid_text.isdigit() and not _process_alive(int(pid_text)):
            shutil.rmtree(leftover, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
