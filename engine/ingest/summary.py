"""What an ingest run reports: progress while it runs, a summary when it ends.

``report_progress`` hands the progress to the caller's display and ``job_counts`` says what
the run's job row shows; the parser and the writer threads both report through them.
``skipped_lines`` is how a person reads the skipped files, in ``quarry ingest`` and
``quarry jobs show`` alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SKIPPED_KEPT_CHARS",
    "IngestProgress",
    "IngestSummary",
    "ProgressCallback",
    "job_counts",
    "report_progress",
    "skipped_lines",
]

ProgressCallback = Callable[["IngestProgress"], None]


@dataclass
class IngestProgress:
    """What a progress display shows; reported per file and after every written batch.

    ``files_seen`` counts the files the parser has reached; ``files_done`` those whose outcome
    is settled (written, unchanged, skipped or failed), which lags behind while the writers
    embed what the parser queued. ``files_done`` may run a little ahead of the files themselves:
    a version constraint a document states but that cannot be read counts as skipped too.
    """

    files_seen: int = 0
    current_path: str = ""
    chunks_written: int = 0
    vectors_embedded: int = 0
    files_done: int = 0
    #: Once the tree is listed: ``bytes_through[n]`` is the size of its first n + 1 items together.
    bytes_through: tuple[int, ...] | None = None
    #: While a location is fetched (a crawl, a download, a clone): what the fetcher last said.
    fetching: str = ""


@dataclass
class IngestSummary:
    source: str
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks_written: int = 0
    vectors_embedded: int = 0
    vectors_reused: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    parse_seconds: float = 0.0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0
    total_seconds: float = 0.0
    since: str | None = None  # the git revision of an incremental (--since) run
    changed_paths: int | None = None  # how many paths git reported changed since it
    fetched: str | None = None  # what the fetcher did (a crawl, a download, a clone), in one line

    def one_line(self) -> str:
        scope = "" if self.since is None else f" since {self.since} ({self.changed_paths} paths changed)"
        fetched = "" if not self.fetched else f"{self.fetched}\n"
        return (
            f"{fetched}{self.source}{scope}: {self.added} added, {self.updated} updated, {self.unchanged} unchanged, "
            f"{self.deleted} deleted, {len(self.skipped)} skipped, {len(self.failed)} failed; "
            f"{self.chunks_written} chunks, {self.vectors_embedded} embedded, "
            f"{self.vectors_reused} reused; {self.total_seconds:.1f}s "
            f"(parse {self.parse_seconds:.1f}s, embed {self.embed_seconds:.1f}s, write {self.write_seconds:.1f}s)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "since": self.since, "changed_paths": self.changed_paths,
            "fetched": self.fetched,
            "added": self.added, "updated": self.updated,
            "unchanged": self.unchanged, "deleted": self.deleted,
            "chunks_written": self.chunks_written, "vectors_embedded": self.vectors_embedded,
            "vectors_reused": self.vectors_reused,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "failed": [{"path": p, "reason": r} for p, r in self.failed],
            "seconds": {"parse": round(self.parse_seconds, 3), "embed": round(self.embed_seconds, 3),
                        "write": round(self.write_seconds, 3), "total": round(self.total_seconds, 3)},
        }


_progress_lock = threading.Lock()  # the parser and the writer both report progress


def report_progress(progress: ProgressCallback | None, state: IngestProgress, summary: IngestSummary) -> None:
    if progress is not None:
        with _progress_lock:
            state.chunks_written = summary.chunks_written
            state.vectors_embedded = summary.vectors_embedded
            state.files_done = (summary.added + summary.updated + summary.unchanged + len(summary.skipped)
                                + len(summary.failed))
            progress(state)


#: Characters of skipped paths and reasons a job row keeps (the first skipped files, in walk
#: order): the MCP ``jobs`` listing returns up to 50 rows with their counts in one 256 KiB
#: response, and a tree's skips are unbounded (every image, every ignored file).
SKIPPED_KEPT_CHARS = 2_000
_KEPT_PATH_CHARS = 300


def job_counts(state: IngestProgress | None, summary: IngestSummary) -> dict[str, Any]:
    """What a job row shows: progress after a batch (with ``state``), final counts without.

    The final counts also keep the first skipped files with their reasons (``skipped_files``),
    so ``quarry jobs show`` can name them; ``skipped`` counts them all.
    """
    counts: dict[str, Any] = {
        "added": summary.added, "updated": summary.updated, "unchanged": summary.unchanged,
        "deleted": summary.deleted, "chunks_written": summary.chunks_written,
        "vectors_embedded": summary.vectors_embedded, "vectors_reused": summary.vectors_reused,
        "skipped": len(summary.skipped), "failed": len(summary.failed)}
    if state is not None:
        return {"files_seen": state.files_seen, **counts}
    return {**counts, "skipped_files": _kept_skipped(summary.skipped)}


def _kept_skipped(skipped: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    kept: list[dict[str, str]] = []
    room = SKIPPED_KEPT_CHARS
    for path, reason in skipped:
        path = path[:_KEPT_PATH_CHARS]
        room -= len(path) + len(reason)
        if room < 0:
            break
        kept.append({"path": path, "reason": reason})
    return kept


#: Reasons shown apart at most; the files of any further reason are shown as "other reasons".
_REASON_GROUPS = 6


def skipped_lines(skipped: Sequence[tuple[str, str]], *, limit: int, more: str, total: int | None = None) -> list[str]:
    """The skipped files as a person reads them: each with its reason, at most ``limit`` of them.

    A short list is one ``skipped: PATH: REASON`` line per file, as failures are shown. A longer
    one is grouped by reason (its text before any parenthesis, so ``oversized (5242884 bytes >
    2000000)`` and ``oversized (...)`` group together), largest group first, each group showing
    some of its files; a last line counts the files not shown and ends with ``more`` (where to
    find them). ``total`` counts every skipped file when ``skipped`` holds only the first ones.
    """
    total = len(skipped) if total is None else total
    if total <= limit and len(skipped) == total:
        return [f"skipped: {path}: {reason}" for path, reason in skipped]
    groups: dict[str, list[tuple[str, str]]] = {}
    for path, reason in skipped:
        groups.setdefault(reason.partition(" (")[0], []).append((path, reason))
    ordered = sorted(groups.items(), key=lambda group: -len(group[1]))
    if len(ordered) > _REASON_GROUPS:
        rest = [entry for _, entries in ordered[_REASON_GROUPS - 1:] for entry in entries]
        ordered = [*ordered[:_REASON_GROUPS - 1], ("other reasons", rest)]
    # Round-robin over the groups, so every reason shows an example before any shows many.
    shown = [0] * len(ordered)
    budget = min(limit, len(skipped))
    while budget:
        for index, (_, entries) in enumerate(ordered):
            if budget and shown[index] < len(entries):
                shown[index] += 1
                budget -= 1
    kept = "" if len(skipped) == total else f"; the first {len(skipped)}"
    lines = [f"skipped {total} files{kept}, by reason:"]
    for (kind, entries), count in zip(ordered, shown, strict=True):
        lines.append(f"  {kind}: {len(entries)}")
        lines.extend(f"    {path}: {reason}" for path, reason in entries[:count])
    hidden = total - sum(shown)
    if hidden:
        lines.append(f"  … and {hidden} more {more}".rstrip())
    return lines
