"""Which files of a tree changed since a git revision (``quarry ingest --since REV``).

Asks the ``git`` command line, so the answer is git's own: the working tree against
REV (committed, staged and uncommitted edits alike), renames detected, plus the
untracked files git does not ignore. Paths come back relative to the ingested root,
which may be any directory inside the repository; changes outside it are dropped.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from engine.errors import InvalidRequestError
from engine.ingest.walk import IGNORE_FILES

__all__ = ["ChangeSet", "changed_since"]

@dataclass(frozen=True, slots=True)
class ChangeSet:
    """Paths (relative to the root, POSIX separators) that differ from revision ``rev``.

    ``modified`` holds added, modified, copied and type-changed files and rename
    targets; ``deleted`` holds deletions and rename sources. A path is in at most one
    of them: a file deleted and then recreated untracked counts as modified.
    """

    rev: str
    commit: str  # the full sha ``rev`` resolved to
    modified: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)

    @property
    def paths(self) -> set[str]:
        return self.modified | self.deleted

    @property
    def touches_ignore_rules(self) -> bool:
        """True when ignore rules changed: files git did not report may now be ignored or admitted."""
        return any(PurePosixPath(path).name in IGNORE_FILES for path in self.paths)


def changed_since(root: Path, rev: str) -> ChangeSet:
    """The files under ``root`` that differ from ``rev`` in the repository holding ``root``.

    Raises ``InvalidRequestError`` (naming the problem) when ``root`` is not inside a
    git work tree, ``rev`` names no commit, or a shallow clone lacks it.
    """
    root = root.resolve()
    if not root.is_dir():
        raise InvalidRequestError(f"not a directory: {root}")
    if not rev or rev.startswith("-"):  # never let a revision be read as a git option
        raise InvalidRequestError(f"invalid git revision {rev!r}")
    inside = _git(root, "rev-parse", "--is-inside-work-tree", check=False)
    if inside.returncode != 0 or inside.stdout.strip() != b"true":
        raise InvalidRequestError(f"--since needs a git work tree, and {root} is not in one{_git_said(inside)}")
    prefix = os.fsdecode(_git(root, "rev-parse", "--show-prefix").stdout.strip())  # "" or "docs/"
    commit = _resolve(root, rev)

    changes = ChangeSet(rev=rev, commit=commit)
    # `git diff <commit>` compares the commit with the working tree; `-- .` keeps to the root.
    diff = _git(root, "diff", "--name-status", "-z", "-M", "--no-relative", "--no-color", commit, "--", ".").stdout
    fields = diff.split(b"\0")
    position = 0
    while position < len(fields) and fields[position]:
        status = fields[position].decode("ascii")[:1]
        if status in ("R", "C"):
            source, target = fields[position + 1], fields[position + 2]
            position += 3
            if status == "R":
                _add(changes.deleted, source, prefix)
            _add(changes.modified, target, prefix)
            continue
        path = fields[position + 1]
        position += 2
        _add(changes.deleted if status == "D" else changes.modified, path, prefix)

    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--full-name", "-z", "--", ".").stdout
    for path in untracked.split(b"\0"):
        if path:
            _add(changes.modified, path, prefix)
    changes.deleted.difference_update(changes.modified)
    return changes


def _add(paths: set[str], repo_path: bytes, prefix: str) -> None:
    """Add a repository-relative path to ``paths`` as a root-relative one, if it is under the root."""
    path = os.fsdecode(repo_path)  # surrogateescape, like the names os.walk reports
    if path.startswith(prefix):
        paths.add(path[len(prefix):])


def _resolve(root: Path, rev: str) -> str:
    resolved = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if resolved.returncode == 0:
        return resolved.stdout.decode("ascii").strip()
    shallow = _git(root, "rev-parse", "--is-shallow-repository", check=False)
    if shallow.stdout.strip() == b"true":
        raise InvalidRequestError(
            f"git revision {rev!r} is not in this shallow clone: fetch the full history "
            "(actions/checkout with fetch-depth: 0, GIT_DEPTH: 0 on GitLab, or git fetch --unshallow)"
        )
    raise InvalidRequestError(f"unknown git revision {rev!r} (no such commit in the repository holding {root})")


def _git(root: Path, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    try:
        completed = subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, check=False)
    except FileNotFoundError:
        raise InvalidRequestError("--since needs the git command line, and git is not on PATH") from None
    if check and completed.returncode != 0:
        raise InvalidRequestError(f"git {arguments[0]} failed{_git_said(completed)}")
    return completed


def _git_said(completed: subprocess.CompletedProcess[bytes]) -> str:
    lines = completed.stderr.decode("utf-8", errors="replace").strip().splitlines()
    return f" (git: {lines[-1]})" if lines else ""
