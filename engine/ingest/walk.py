"""Which files of a directory tree get ingested, and why the others don't.

Honours ``.gitignore`` files at every level (git's own matching rules, via
pathspec), skips well-known build and dependency folders, and reports every file
it passes over with a reason instead of dropping it silently.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

DEFAULT_EXCLUDED_DIRS = frozenset({
    ".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".idea", ".vscode", "dist", "build",
    "target", ".next", ".nuxt", ".cache", "coverage", ".gradle", "site-packages", ".eggs",
})
DEFAULT_EXCLUDED_SUFFIXES = (".min.js", ".min.css", ".map", ".lock", "-lock.json", ".pyc")
_BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True, slots=True)
class FoundFile:
    """A file to ingest: its path relative to the root (POSIX separators) and bytes."""

    relative_path: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file passed over, and why (shown in the ingest summary)."""

    relative_path: str
    reason: str


def looks_binary(raw: bytes) -> bool:
    """Git's heuristic: a NUL byte near the start means binary."""
    return b"\x00" in raw[:_BINARY_SNIFF_BYTES]


@dataclass(frozen=True, slots=True)
class _IgnoreRule:
    base: str  # directory holding the .gitignore, relative to root ("" for the root)
    spec: pathspec.GitIgnoreSpec

    def ignores(self, relative_path: str, is_dir: bool) -> bool:
        if self.base:
            if not relative_path.startswith(self.base + "/"):
                return False
            relative_path = relative_path[len(self.base) + 1 :]
        return self.spec.match_file(relative_path + "/" if is_dir else relative_path)


def walk_tree(
    root: Path,
    *,
    is_supported: Callable[[str], bool],
    max_file_bytes: int,
    only: set[str] | None = None,
) -> Iterator[FoundFile | SkippedFile]:
    """Yield every candidate file under ``root`` in a stable order.

    ``only`` restricts the walk to these relative paths (incremental runs).
    Symlinks are never followed: a link could lead outside the ingested root.
    """
    return read_tree(_candidates(root, is_supported, max_file_bytes, only))


def list_tree(
    root: Path,
    *,
    is_supported: Callable[[str], bool],
    max_file_bytes: int,
    only: set[str] | None = None,
) -> list[Candidate | SkippedFile]:
    """What ``walk_tree`` would yield, with sizes instead of contents: no file is read yet."""
    return list(_candidates(root, is_supported, max_file_bytes, only))


def read_tree(listing: Iterable[Candidate | SkippedFile]) -> Iterator[FoundFile | SkippedFile]:
    """Read the files of a listing (``list_tree``), in its order; binary files are skipped."""
    for item in listing:
        if isinstance(item, SkippedFile):
            yield item
            continue
        try:
            raw = item.path.read_bytes()
        except FileNotFoundError:  # deleted since it was listed: gone from the tree
            yield SkippedFile(item.relative_path, "deleted while the tree was read")
            continue
        if looks_binary(raw):
            yield SkippedFile(item.relative_path, "binary content")
            continue
        yield FoundFile(item.relative_path, raw)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file the walk will read: its path relative to the root, where it is, and its size."""

    relative_path: str
    path: Path
    size: int


def _candidates(
    root: Path, is_supported: Callable[[str], bool], max_file_bytes: int, only: set[str] | None
) -> Iterator[Candidate | SkippedFile]:
    root = root.resolve()
    rules: list[_IgnoreRule] = []
    for directory, dir_names, file_names in os.walk(root, followlinks=False):
        current = Path(directory)
        base = current.relative_to(root).as_posix()
        base = "" if base == "." else base
        gitignore = current / ".gitignore"
        if gitignore.is_file() and not gitignore.is_symlink():
            lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
            rules.append(_IgnoreRule(base, pathspec.GitIgnoreSpec.from_lines(lines)))

        def join(name: str, prefix: str = base) -> str:
            return f"{prefix}/{name}" if prefix else name

        kept_dirs = []
        for name in sorted(dir_names):
            relative = join(name)
            if name in DEFAULT_EXCLUDED_DIRS or any(rule.ignores(relative, is_dir=True) for rule in rules):
                continue
            if (current / name).is_symlink():
                if only is None:  # `only` names files: a link is never one of them
                    yield SkippedFile(relative, "symlink (not followed)")
                continue
            kept_dirs.append(name)
        dir_names[:] = kept_dirs

        for name in sorted(file_names):
            relative = join(name)
            if only is not None and relative not in only:
                continue
            if any(rule.ignores(relative, is_dir=False) for rule in rules):
                continue
            path = current / name
            if path.is_symlink():
                yield SkippedFile(relative, "symlink (not followed)")
                continue
            if name.endswith(DEFAULT_EXCLUDED_SUFFIXES) or not is_supported(relative):
                continue
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):  # a FIFO or a device: reading it could block or never end
                yield SkippedFile(relative, "not a regular file")
                continue
            size = info.st_size
            if size > max_file_bytes:
                yield SkippedFile(relative, f"oversized ({size} bytes > {max_file_bytes})")
                continue
            yield Candidate(relative, path, size)
