"""Git remotes: ``quarry ingest https://host/org/repo.git@REF`` (or ``git+file:///path/repo@REF``).

The remote is fetched into one repository per URL under the cache folder, shallow where the
server allows it (``git fetch --depth 1 URL REF``: a branch, a tag or a full sha), deeper only
when it must (an abbreviated sha, a dumb-HTTP server). The tree at REF is checked out in that
repository's own work tree, which is what the ingest walks, so a re-run moves the work tree by
the files that differ and nothing more. With the commit of the last ingest the changes come
from git (``engine.ingest.changes.changed_since``); when that commit cannot be fetched any more
(a force-push, a server refusing a sha) the ingest compares every file by content, which is
slower but as correct.

Robust to being killed: the repository is created under a temporary name and renamed into place,
every step holds an flock on ``<name>.lock`` beside it (the kernel drops it with the process), so
any git ``*.lock`` file found while holding it was left by a killed run and is removed. The URL
is passed to each ``git fetch`` and never written to the repository's config: a token in it
does not end up on disk, and no message, location or report shows it (``engine.fetch.credentials``).
Git never prompts (``GIT_TERMINAL_PROMPT=0``, ssh in batch mode): a private repository without
credentials fails with git's message instead of hanging.

One work tree per URL: the ingest of one fetch must end before the next fetch of the same URL
(the per-source ingest lock does this for one source; two sources of one URL share the tree).
Submodules and Git LFS contents are not fetched (LFS files stay pointer files).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.errors import BusyError, InvalidRequestError, UnavailableError
from engine.fetch.credentials import without_credentials
from engine.fetch.tree import FetchedTree
from engine.ingest.changes import ChangeSet, changed_since

__all__ = ["GIT_TIMEOUT_SECONDS", "fetch_git", "split_git_location"]

#: The longest one git command may run (a first fetch of a large repository is the slow one).
GIT_TIMEOUT_SECONDS = 600.0
_LOCAL_TIMEOUT_SECONDS = 120.0  # commands that never touch the network
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_ABBREVIATED_SHA = re.compile(r"[0-9a-f]{4,63}")
_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)")
_SCP_LIKE = re.compile(r"(?P<user>[^@/:\s]+@)?(?P<host>[^@/:\s]+):(?!//)")
_TRANSPORT_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::")  # git's ext::, fd:: helpers
#: Variables that would point git at another repository than the one it is told to use.
_REPOSITORY_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                         "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")
_SETTINGS = ("-c", "advice.detachedHead=false", "-c", "gc.autoDetach=false", "-c", "core.autocrlf=false",
             "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never")


def split_git_location(text: str) -> tuple[str, str | None]:
    """``git+file:///p/repo@v1.2`` → (``file:///p/repo``, ``v1.2``); no ``@REF`` → (url, None).

    The ref is what follows the last ``@`` in the path (refs may hold ``/``: ``repo.git@feature/x``);
    an ``@`` in the user part (``ssh://git@host/…``, ``git@host:org/repo.git``) is not one. When
    the path holds ``.git@`` the split is there, so a path with an ``@`` of its own still works.
    """
    url = text.strip()
    if url.startswith("git+"):
        url = url[len("git+"):]
    scheme = _SCHEME.match(url)
    if scheme is not None:
        path_start = scheme.end()
    elif (scp := _SCP_LIKE.match(url)) is not None:
        path_start = scp.end()
    else:
        path_start = 0
    path = url[path_start:]
    at = path.rfind(".git@")
    at = at + len(".git") if at >= 0 else path.rfind("@")
    if at < 0:
        return url, None
    ref = path[at + 1:]
    if not ref:
        raise InvalidRequestError(f"{without_credentials(text)!r} ends in '@' without a ref: write URL@REF "
                                  "(a branch, tag or commit) or leave the '@' out for the default branch")
    return url[:path_start + at], ref


def fetch_git(
    url: str,
    ref: str | None,
    cache_dir: Path,
    *,
    last_commit: str | None = None,
    location: str | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
) -> FetchedTree:
    """Fetch ``url`` at ``ref`` (None: the remote's HEAD) into ``cache_dir``; the tree to ingest.

    ``last_commit`` is the commit of the source's last ingest: the tree's ``changed`` then lists
    what differs from it (None when it can no longer be fetched; ``report`` says so).
    ``location`` is what the user wrote (default ``url@ref``), recorded without credentials.

    Raises ``InvalidRequestError`` for a malformed URL or ref and for a ref the remote does not
    have (naming some it has), ``UnavailableError`` when the remote cannot be reached or refuses
    access (git's message, credentials stripped) or git is not installed, ``BusyError`` when
    another fetch of the same URL holds the cache for longer than ``timeout``.
    """
    _check_argument("git URL", url)
    if _TRANSPORT_PREFIX.match(url):
        raise InvalidRequestError(f"unsupported git transport in {without_credentials(url)!r}: use https://, "
                                  "ssh://, git@host:path or file://")
    if ref is not None:
        _check_argument("git ref", ref)
    if last_commit is not None:
        _check_argument("last commit", last_commit)
    shown = without_credentials(url)
    cache_dir.mkdir(parents=True, exist_ok=True)
    name = _cache_name(shown)
    with _cache_lock(cache_dir / f"{name}.lock", shown, timeout):
        repository = _Repository(_open_repository(cache_dir, name), url, timeout)
        commit = repository.fetch_commit(ref)
        repository.check_out(commit)
        changed, since = _changes_since(repository, commit, last_commit)
    return FetchedTree(
        root=repository.path,
        location=without_credentials(location) if location else shown + (f"@{ref}" if ref else ""),
        revision=commit,
        changed=changed,
        report=f"{shown} at {ref or 'HEAD'} ({commit[:12]}): {since}",
    )


def _check_argument(what: str, value: str) -> None:
    """Refuse what git would read as an option, and characters no URL or ref holds."""
    if not value or value.startswith("-") or any(ord(character) < 0x21 or character == "\x7f"
                                                  for character in value):
        raise InvalidRequestError(f"invalid {what} {without_credentials(value)!r}: it must not be empty, "
                                  "start with '-' or hold spaces or control characters")


def _cache_name(shown_url: str) -> str:
    """A folder name per URL: readable, and unique by the URL's hash (credentials never count)."""
    digest = hashlib.sha256(shown_url.encode("utf-8")).hexdigest()[:16]
    tail = shown_url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-.")[:40] or "repository"
    return f"{slug}-{digest}"


@contextmanager
def _cache_lock(lock_path: Path, shown_url: str, timeout: float) -> Iterator[None]:
    with lock_path.open("a+b") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BusyError(f"another fetch of {shown_url} is still running; try again when "
                                    "it ends") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_repository(cache_dir: Path, name: str) -> Path:
    """The cached repository of this URL, created if missing; leftovers of killed runs cleared.

    Only called under the URL's lock: no git process of ours is using the repository, so a
    git lock file in it is stale.
    """
    path = cache_dir / name
    for leftover in cache_dir.glob(f".{name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    if path.is_dir() and not _is_repository(path):
        shutil.rmtree(path)  # not a repository any more (half deleted by hand?): start over
    if not path.is_dir():
        staging = cache_dir / f".{name}.tmp-{os.getpid()}"
        _git(["init", "--quiet", str(staging)], cwd=None)
        os.replace(staging, path)
    git_dir = path / ".git"
    for directory, dir_names, file_names in os.walk(git_dir):
        if Path(directory) == git_dir:
            dir_names[:] = [name for name in dir_names if name != "objects"]
        for file_name in file_names:
            if file_name.endswith(".lock"):
                Path(directory, file_name).unlink(missing_ok=True)
    return path


def _is_repository(path: Path) -> bool:
    """True when ``path`` holds its own repository (not merely a folder inside another one)."""
    found = _git(["rev-parse", "--absolute-git-dir"], cwd=path, check=False)
    return found.returncode == 0 and Path(os.fsdecode(found.stdout.strip())).resolve() == (path / ".git").resolve()


class _Repository:
    """The cached repository of one URL; every network command names the URL itself."""

    def __init__(self, path: Path, url: str, timeout: float) -> None:
        self.path = path
        self.url = url
        self.timeout = timeout

    def fetch_commit(self, ref: str | None) -> str:
        """Fetch ``ref`` (shallow when the server allows it) and return the commit it names."""
        target = ref or "HEAD"
        if _SHA.fullmatch(target) and self.has_commit(target):
            return target  # a commit never changes: no need to ask the remote
        shallow = self.fetch(target, options=("--depth", "1"))
        if shallow.returncode == 0 or self._fetch_deeper(target, shallow):
            return self._commit_of("FETCH_HEAD", ref)
        return self._commit_of(target, ref)  # an abbreviated sha, found in the full history

    def _fetch_deeper(self, target: str, shallow: subprocess.CompletedProcess[bytes]) -> bool:
        """After a failed shallow fetch: fetch deeper, or raise why not.

        True when ``FETCH_HEAD`` is ``target``; False when every branch and tag was fetched
        instead, for an abbreviated sha to be found among them.
        """
        listed = self.git("ls-remote", "--", self.url, network=True, check=False)
        if listed.returncode != 0:
            raise UnavailableError(f"cannot fetch {without_credentials(self.url)}{_git_said(listed)}; a private "
                                   "repository needs credentials git can find (a credential helper or an ssh "
                                   "key): Quarry never prompts for them")
        names = _advertised_names(listed.stdout)
        if target in names or _SHA.fullmatch(target):
            # The server refused a shallow fetch (dumb HTTP) or a sha: fetch the history.
            deep = self.fetch(target)
            if deep.returncode == 0:
                return True
            if not _SHA.fullmatch(target):
                raise UnavailableError(f"cannot fetch {target!r} from {without_credentials(self.url)}"
                                       f"{_git_said(deep) or _git_said(shallow)}")
        if _ABBREVIATED_SHA.fullmatch(target):
            self.fetch("+refs/heads/*:refs/quarry/heads/*", "+refs/tags/*:refs/quarry/tags/*",
                       options=("--unshallow",) if self.is_shallow() else (), check=True)
            if self.has_commit(target):
                return False
        known = ", ".join(sorted(name for name in names if name != "HEAD")[:10]) or "none"
        raise InvalidRequestError(f"unknown git ref {target!r}: {without_credentials(self.url)} has no branch, "
                                  f"tag or commit of that name (it has: {known})")

    def _commit_of(self, revision: str, ref: str | None) -> str:
        resolved = self.git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", check=False)
        if resolved.returncode != 0:
            raise InvalidRequestError(f"git ref {ref or 'HEAD'!r} of {without_credentials(self.url)} names no commit")
        return resolved.stdout.decode("ascii").strip()

    def check_out(self, commit: str) -> None:
        """Make the work tree exactly ``commit``: tracked files reset, anything else removed."""
        self.git("checkout", "--force", "--detach", "--quiet", commit, "--", check=True)
        self.git("clean", "-ffdxq", check=True)

    def has_commit(self, commit: str) -> bool:
        return self.git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0

    def is_shallow(self) -> bool:
        return self.git("rev-parse", "--is-shallow-repository", check=True).stdout.strip() == b"true"

    def fetch(self, *refspecs: str, options: tuple[str, ...] = (), check: bool = False,
              ) -> subprocess.CompletedProcess[bytes]:
        # Refs and the URL come after "--", so neither is ever read as an option.
        return self.git("fetch", "--no-tags", "--quiet", *options, "--", self.url, *refspecs,
                        network=True, check=check)

    def git(self, *arguments: str, network: bool = False, check: bool) -> subprocess.CompletedProcess[bytes]:
        timeout = self.timeout if network else min(self.timeout, _LOCAL_TIMEOUT_SECONDS)
        return _git(list(arguments), cwd=self.path, check=check, timeout=timeout)


def _changes_since(repository: _Repository, commit: str, last_commit: str | None) -> tuple[ChangeSet | None, str]:
    """What differs from the last ingested commit, and the report's words for it."""
    if last_commit is None:
        return None, "first ingest of this remote, every file compared by content"
    if not repository.has_commit(last_commit) and _SHA.fullmatch(last_commit):
        repository.fetch(last_commit, options=("--depth", "1"))  # diffing two trees needs no history between them
    if not repository.has_commit(last_commit):
        return None, (f"the last ingested commit {last_commit[:12]} is no longer on the remote (history "
                      "rewritten?), every file compared by content")
    changed = changed_since(repository.path, last_commit)
    if not changed.paths:
        return changed, f"unchanged since {last_commit[:12]}"
    count = len(changed.paths)
    return changed, f"{count} file{'s' if count != 1 else ''} changed since {last_commit[:12]}"


def _advertised_names(ls_remote: bytes) -> set[str]:
    """The names a ref may be given by: ``HEAD``, ``main`` and ``refs/heads/main``, ``v1`` and ``refs/tags/v1``."""
    names: set[str] = set()
    for line in ls_remote.decode("utf-8", errors="replace").splitlines():
        _, _, full = line.partition("\t")
        full = full.removesuffix("^{}")
        names.add(full)
        for prefix in ("refs/heads/", "refs/tags/"):
            if full.startswith(prefix):
                names.add(full[len(prefix):])
    return names


def _git(arguments: list[str], *, cwd: Path | None, check: bool = True,
         timeout: float = _LOCAL_TIMEOUT_SECONDS) -> subprocess.CompletedProcess[bytes]:
    """Run git without a shell, a terminal or a prompt; killed with its helpers after ``timeout``."""
    environment = {key: value for key, value in os.environ.items() if key not in _REPOSITORY_VARIABLES}
    environment.update(GIT_TERMINAL_PROMPT="0", GIT_LFS_SKIP_SMUDGE="1", LC_ALL="C")
    if "GIT_SSH_COMMAND" not in environment and "GIT_SSH" not in environment:
        environment["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"
    command = ["git", *(["-C", str(cwd)] if cwd is not None else []), *_SETTINGS, *arguments]
    try:
        # A session of its own, so a timeout ends git's helpers (git-remote-https, ssh) too.
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=environment, start_new_session=True)
    except FileNotFoundError:
        raise UnavailableError("git remotes need the git command line, and git is not on PATH: "
                               "install git") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise UnavailableError(f"git {arguments[0]} did not finish within {timeout:.0f}s") from None
    completed = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if check and completed.returncode != 0:
        raise UnavailableError(f"git {arguments[0]} failed{_git_said(completed)}")
    return completed


def _git_said(completed: subprocess.CompletedProcess[bytes]) -> str:
    """Git's own reason (its first ``fatal:``/``error:`` line, else its last), credentials stripped."""
    lines = [line.strip() for line in completed.stderr.decode("utf-8", errors="replace").splitlines() if line.strip()]
    if not lines:
        return ""
    reason = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1])
    return f" (git: {without_credentials(reason)})"
