"""Which files of a directory tree get ingested, and why the others don't.

Honours ``.gitignore`` and ``.quarryignore`` files at every level (git's own matching
rules, via pathspec; ``.quarryignore`` leaves out what git tracks but a corpus should
not hold), skips well-known build and dependency folders and generated files, and
reports every file it passes over with a reason instead of dropping it silently. A
folder left out whole is reported once, as ``folder/``, not file by file: a
``node_modules`` would otherwise bury the skip list.

The root may also be a single file: it is walked as a tree holding only that file, under
its own name, and no ignore rule applies to it (it was named on purpose).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pathspec

from engine.ingest.parsers.config_files import CONFIG_EXTENSIONS
from engine.ingest.parsers.docx import DOCX_EXTENSIONS
from engine.ingest.parsers.pdf import PDF_EXTENSIONS

DEFAULT_EXCLUDED_DIRS = frozenset({
    ".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".idea", ".vscode", "dist", "build",
    "target", ".next", ".nuxt", ".cache", "coverage", ".gradle", "site-packages", ".eggs",
})
#: A JSON, YAML or TOML file this large is data (a tokenizer vocabulary, a fixture, an export), not
#: configuration anyone searches: hundreds of chunks no question is about, at embedding cost.
MAX_CONFIG_FILE_BYTES = 128 * 1024
DEFAULT_EXCLUDED_SUFFIXES = (".min.js", ".min.css", ".map", ".lock", "-lock.json", "-lock.yaml", ".pyc")
#: Files holding ignore rules, in the order they are read in each folder.
IGNORE_FILES = (".gitignore", ".quarryignore")
_BINARY_SNIFF_BYTES = 8192
#: Binary formats a parser reads: exempt from the NUL-byte test.
BINARY_DOCUMENT_EXTENSIONS = (*PDF_EXTENSIONS, *DOCX_EXTENSIONS)
#: A PDF or DOCX file this large is still a document (a manual with figures): the text parsers'
#: ``max_file_bytes`` would skip most real PDFs.
MAX_BINARY_DOCUMENT_BYTES = 50_000_000

# Skip reasons shared by several places (the rest are written where they arise).
EXCLUDED_DIR_REASON = "excluded folder (build output, dependencies or tool cache)"
GENERATED_FILE_REASON = "generated file (lock file, minified bundle or compiled output)"
SYMLINK_REASON = "symlink (not followed)"


@dataclass(frozen=True, slots=True)
class FoundFile:
    """A file to ingest: its path relative to the root (POSIX separators) and bytes."""

    relative_path: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file (or, ending in ``/``, a whole folder) passed over, and why (shown in the ingest summary)."""

    relative_path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file the walk will read: its path relative to the root, where it is, and its size."""

    relative_path: str
    path: Path
    size: int


def looks_binary(raw: bytes) -> bool:
    """Git's heuristic: a NUL byte near the start means binary."""
    return b"\x00" in raw[:_BINARY_SNIFF_BYTES]


@dataclass(frozen=True, slots=True)
class _IgnoreRule:
    base: str  # directory holding the ignore file, relative to root ("" for the root)
    file_name: str  # .gitignore or .quarryignore
    spec: pathspec.GitIgnoreSpec

    def ignores(self, relative_path: str, is_dir: bool) -> bool:
        if self.base:
            if not relative_path.startswith(self.base + "/"):
                return False
            relative_path = relative_path[len(self.base) + 1 :]
        return self.spec.match_file(relative_path + "/" if is_dir else relative_path)

    @property
    def reason(self) -> str:
        location = f"{self.base}/{self.file_name}" if self.base else self.file_name
        return f"ignored by {location}"


def walk_tree(
    root: Path,
    *,
    is_supported: Callable[[str], bool],
    max_file_bytes: int,
    only: set[str] | None = None,
) -> Iterator[FoundFile | SkippedFile]:
    """Yield every file under ``root`` (a folder, or one file) in a stable order: found or skipped.

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
        if looks_binary(raw) and not item.relative_path.lower().endswith(BINARY_DOCUMENT_EXTENSIONS):
            yield SkippedFile(item.relative_path, "binary content")
            continue
        yield FoundFile(item.relative_path, raw)


def _examine_file(
    path: Path, relative: str, is_supported: Callable[[str], bool], max_file_bytes: int
) -> Candidate | SkippedFile:
    """The candidate ``path`` is, or why it is passed over (everything but ignore rules)."""
    if path.is_symlink():
        return SkippedFile(relative, SYMLINK_REASON)
    if path.name.endswith(DEFAULT_EXCLUDED_SUFFIXES):
        return SkippedFile(relative, GENERATED_FILE_REASON)
    if not is_supported(relative):
        extension = PurePosixPath(relative).suffix.lower() or "no extension"
        return SkippedFile(relative, f"unsupported file type ({extension})")
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):  # a FIFO or a device: reading it could block or never end
        return SkippedFile(relative, "not a regular file")
    # A PDF or DOCX holds fonts and images beside its text: its own, larger bound.
    limit = max(max_file_bytes, MAX_BINARY_DOCUMENT_BYTES) if relative.lower().endswith(
        BINARY_DOCUMENT_EXTENSIONS) else max_file_bytes
    if info.st_size > limit:
        return SkippedFile(relative, f"oversized ({info.st_size} bytes > {limit})")
    if info.st_size > MAX_CONFIG_FILE_BYTES and relative.lower().endswith(CONFIG_EXTENSIONS):
        return SkippedFile(relative, f"data file ({info.st_size} bytes > {MAX_CONFIG_FILE_BYTES} for a "
                                     "configuration format)")
    return Candidate(relative, path, info.st_size)


def _read_ignore_rules(directory: Path, base: str) -> Iterator[_IgnoreRule]:
    for file_name in IGNORE_FILES:
        rules_file = directory / file_name
        if rules_file.is_file() and not rules_file.is_symlink():
            lines = rules_file.read_text(encoding="utf-8", errors="replace").splitlines()
            yield _IgnoreRule(base, file_name, pathspec.GitIgnoreSpec.from_lines(lines))


def _candidates(
    root: Path, is_supported: Callable[[str], bool], max_file_bytes: int, only: set[str] | None
) -> Iterator[Candidate | SkippedFile]:
    root = root.resolve()
    if not root.is_dir():
        if only is None or root.name in only:
            yield _examine_file(root, root.name, is_supported, max_file_bytes)
        return
    rules: list[_IgnoreRule] = []

    def pruned(relative_dir: str, reason: str) -> Iterator[SkippedFile]:
        """A folder left out whole: reported once, or (incremental runs) as the named files inside it."""
        if only is None:
            yield SkippedFile(relative_dir + "/", reason)
        else:
            yield from (SkippedFile(path, reason) for path in sorted(only) if path.startswith(relative_dir + "/"))

    for directory, dir_names, file_names in os.walk(root, followlinks=False):
        current = Path(directory)
        base = current.relative_to(root).as_posix()
        base = "" if base == "." else base
        rules.extend(_read_ignore_rules(current, base))

        def join(name: str, prefix: str = base) -> str:
            return f"{prefix}/{name}" if prefix else name

        kept_dirs = []
        for name in sorted(dir_names):
            relative = join(name)
            if name in DEFAULT_EXCLUDED_DIRS or name.endswith(".egg-info"):
                yield from pruned(relative, EXCLUDED_DIR_REASON)
                continue
            ignoring = next((rule for rule in rules if rule.ignores(relative, is_dir=True)), None)
            if ignoring is not None:
                yield from pruned(relative, ignoring.reason)
                continue
            if (current / name).is_symlink():
                if only is None:  # `only` names files: a link is never one of them
                    yield SkippedFile(relative, SYMLINK_REASON)
                continue
            kept_dirs.append(name)
        dir_names[:] = kept_dirs

        for name in sorted(file_names):
            relative = join(name)
            if only is not None and relative not in only:
                continue
            ignoring = next((rule for rule in rules if rule.ignores(relative, is_dir=False)), None)
            if ignoring is not None:
                yield SkippedFile(relative, ignoring.reason)
                continue
            yield _examine_file(current / name, relative, is_supported, max_file_bytes)
