"""Unpacking a downloaded package archive (tar, tar.gz, tgz, zip) without trusting it.

A release file is written by whoever published it, so nothing in it is taken on faith:
absolute paths and any ``..`` component are refused, links are never created (a symlink that
stays inside the package is listed the way the folder walk lists one, one that leads out is
refused; a hard link to an earlier member becomes a copy of it), device files and FIFOs are
refused, and the bytes written and the members read are capped (a zip bomb stops at the cap,
not at the disk's end). Members are written here rather than by ``tarfile.extract`` with
``filter="data"`` because each one needs its own decision and reason (and the top folder
stripped) while the rest still unpack; the checks are the data filter's, stricter, and the
same for zip files. Every member not written is returned with the reason, for the report.

The single top-level folder most archives wrap their files in (``requests-2.32.3/``, npm's
``package/``) is stripped, so paths read ``src/requests/api.py`` and ``README.md``.
"""

from __future__ import annotations

import posixpath
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from engine.ingest.walk import SYMLINK_REASON

__all__ = ["DEFAULT_MAX_EXTRACTED_BYTES", "DEFAULT_MAX_MEMBERS", "ArchiveError", "Extraction", "extract_archive"]

DEFAULT_MAX_EXTRACTED_BYTES = 1024 * 1024 * 1024
DEFAULT_MAX_MEMBERS = 100_000
_CHUNK = 1024 * 1024
#: A zip symlink's target is stored as the member's content; a longer one is not a path.
_MAX_LINK_TARGET = 4096

MemberKind = Literal["file", "dir", "symlink", "hardlink", "special"]


class ArchiveError(Exception):
    """The file is not a tar or zip archive this module can read (its caller names the file)."""


@dataclass(slots=True)
class Extraction:
    """What an extraction wrote: the number of files, the top folder stripped, the members refused."""

    files: int = 0
    stripped: str | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Member:
    name: str  # as stored in the archive
    kind: MemberKind
    size: int
    link: str  # a link's target as stored (symlinks: relative to the link's folder; hard links: to the root)
    open: Callable[[], IO[bytes]]


def extract_archive(
    archive: Path,
    destination: Path,
    *,
    max_bytes: int = DEFAULT_MAX_EXTRACTED_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> Extraction:
    """Unpack ``archive`` (tar in any compression tarfile reads, or zip) into ``destination``.

    ``destination`` is created and should be empty: callers extract into a fresh temporary
    folder and rename it into place, so a half-written tree is never taken for a finished one.
    Raises ``ArchiveError`` when the file is neither a readable tar nor a zip archive.
    """
    destination.mkdir(parents=True, exist_ok=True)
    result = Extraction()
    if zipfile.is_zipfile(archive):
        try:
            with zipfile.ZipFile(archive) as opened:
                _extract_members(_zip_members(opened, max_members, result), destination, max_bytes, result)
        except zipfile.BadZipFile as error:
            raise ArchiveError(f"unreadable zip archive ({error})") from error
        return result
    try:
        with tarfile.open(archive, mode="r:*") as opened:
            _extract_members(_tar_members(opened, max_members, result), destination, max_bytes, result)
    except (tarfile.ReadError, tarfile.CompressionError) as error:
        raise ArchiveError(f"neither a zip nor a readable tar archive ({error})") from error
    return result


def _tar_members(opened: tarfile.TarFile, max_members: int, result: Extraction) -> list[_Member]:
    infos: list[tarfile.TarInfo] = []
    try:
        for info in opened:
            if len(infos) == max_members:
                result.skipped.append(("*", f"more than {max_members} members: the rest were not extracted"))
                break
            infos.append(info)
    except (tarfile.ReadError, EOFError, OSError, zlib.error) as error:
        if not infos:
            raise tarfile.ReadError(str(error)) from error
        result.skipped.append(("*", f"archive truncated or corrupt after {len(infos)} members ({error})"))

    def reader(info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
        def open_member() -> IO[bytes]:
            handle = opened.extractfile(info)
            if handle is None:
                raise OSError("no data")
            return handle
        return open_member

    members = []
    for info in infos:
        kind: MemberKind
        if info.isreg():
            kind = "file"
        elif info.isdir():
            kind = "dir"
        elif info.issym():
            kind = "symlink"
        elif info.islnk():
            kind = "hardlink"
        else:
            kind = "special"
        members.append(_Member(info.name, kind, info.size, info.linkname, reader(info)))
    return members


def _zip_members(opened: zipfile.ZipFile, max_members: int, result: Extraction) -> list[_Member]:
    infos = opened.infolist()
    if len(infos) > max_members:
        result.skipped.append(("*", f"more than {max_members} members: the rest were not extracted"))
        infos = infos[:max_members]
    members = []
    for info in infos:
        mode = info.external_attr >> 16
        reader = _zip_reader(opened, info)
        if info.is_dir():
            members.append(_Member(info.filename, "dir", 0, "", reader))
        elif stat.S_ISLNK(mode):
            try:
                with reader() as handle:
                    target = handle.read(_MAX_LINK_TARGET + 1).decode("utf-8", "replace")
            except (OSError, RuntimeError, EOFError, zlib.error, zipfile.BadZipFile):
                target = ""  # unreadable (encrypted, damaged): refused like a link leading out
            members.append(_Member(info.filename, "symlink", 0, target, reader))
        elif mode and not stat.S_ISREG(mode) and stat.S_IFMT(mode):
            members.append(_Member(info.filename, "special", 0, "", reader))
        else:
            members.append(_Member(info.filename, "file", info.file_size, "", reader))
    return members


def _zip_reader(opened: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
    return lambda: opened.open(info)


def _clean_path(raw: str) -> tuple[str, ...] | str:
    """The path's components, or why it is refused."""
    if raw.startswith(("/", "\\")) or (len(raw) > 1 and raw[1] == ":" and raw[0].isalpha()):
        return "absolute path (refused)"
    parts = tuple(part for part in raw.split("/") if part not in ("", "."))
    if ".." in parts:
        return "path with a '..' component (refused)"
    return parts


def _top_folder(members: list[tuple[_Member, tuple[str, ...]]]) -> str | None:
    """The one folder every member sits in, when there is one (and it is a folder, not a file)."""
    tops = {parts[0] for _, parts in members}
    if len(tops) != 1:
        return None
    deeper = [parts for member, parts in members if len(parts) > 1]
    only_dir = all(len(parts) > 1 or member.kind == "dir" for member, parts in members)
    return next(iter(tops)) if deeper and only_dir else None


def _extract_members(members: list[_Member], destination: Path, max_bytes: int, result: Extraction) -> None:
    accepted: list[tuple[_Member, tuple[str, ...]]] = []
    for member in members:
        cleaned = _clean_path(member.name)
        if isinstance(cleaned, str):
            result.skipped.append((member.name, cleaned))
        elif cleaned:
            accepted.append((member, cleaned))
    top = _top_folder(accepted)
    result.stripped = top
    written = 0
    for member, parts in accepted:
        relative = parts[1:] if top is not None else parts
        if not relative:
            continue  # the top folder itself
        shown = "/".join(relative)
        target = destination.joinpath(*relative)
        try:
            if member.kind == "dir":
                target.mkdir(parents=True, exist_ok=True)
            elif member.kind == "special":
                result.skipped.append((shown, "device file or FIFO (refused)"))
            elif member.kind == "symlink":
                result.skipped.append((shown, _symlink_reason(parts, member.link, top)))
            elif member.kind == "hardlink":
                source = _hardlink_source(member.link, top, destination)
                if isinstance(source, str):
                    result.skipped.append((shown, source))
                    continue
                written += _write(target, _file_opener(source), max_bytes - written)
                result.files += 1
            elif written + member.size > max_bytes:
                result.skipped.append((shown, f"over the extraction limit of {max_bytes} bytes"))
            else:
                written += _write(target, member.open, max_bytes - written)
                result.files += 1
        except _OverLimit:
            result.skipped.append((shown, f"over the extraction limit of {max_bytes} bytes"))
        except (OSError, RuntimeError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as error:
            # RuntimeError: an encrypted zip member; the others: a damaged member or a path clash.
            result.skipped.append((shown, f"could not be extracted ({_describe(error)})"))


def _symlink_reason(parts: tuple[str, ...], link: str, top: str | None) -> str:
    if len(link) > _MAX_LINK_TARGET or link.startswith("/") or not link:
        return "symlink pointing outside the package (refused)"
    resolved = posixpath.normpath(posixpath.join("/", *parts[:-1], link))
    inside = "/" + top if top is not None else ""
    if resolved != inside and not resolved.startswith(inside + "/"):
        return "symlink pointing outside the package (refused)"
    return SYMLINK_REASON


def _hardlink_source(link: str, top: str | None, destination: Path) -> Path | str:
    cleaned = _clean_path(link)
    if isinstance(cleaned, str) or not cleaned or (top is not None and (cleaned[0] != top or len(cleaned) == 1)):
        return "hard link to a file outside the package (refused)"
    source = destination.joinpath(*(cleaned[1:] if top is not None else cleaned))
    if source.is_symlink() or not source.is_file():
        return "hard link to a member that was not extracted"
    return source


def _file_opener(path: Path) -> Callable[[], IO[bytes]]:
    return lambda: path.open("rb")


class _OverLimit(Exception):
    pass


def _write(target: Path, open_source: Callable[[], IO[bytes]], allowance: int) -> int:
    """Copy a member to ``target``, refusing to write more than ``allowance`` bytes (sizes can lie)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.is_file():
        target.unlink()  # a later copy of a member wins, as tar itself has it
    total = 0
    try:
        with open_source() as source, target.open("xb") as sink:
            for chunk in _chunks(source):
                total += len(chunk)
                if total > allowance:
                    raise _OverLimit
                sink.write(chunk)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return total


def _chunks(source: IO[bytes]) -> Iterator[bytes]:
    while chunk := source.read(_CHUNK):
        yield chunk


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__

