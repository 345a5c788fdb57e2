"""What an ingest run reports: progress while it runs, a summary when it ends.

``report_progress`` hands the progress to the caller's display and ``job_counts`` says what
the run's job row shows; the parser and the writer threads both report through them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IngestProgress", "IngestSummary", "ProgressCallback", "job_counts", "report_progress"]

ProgressCallback = Callable[["IngestProgress"], None]


@dataclass
class IngestProgress:
    """What a progress display shows; reported per file and after every written batch."""

    files_seen: int = 0
    current_path: str = ""
    chunks_written: int = 0
    vectors_embedded: int = 0


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

    def one_line(self) -> str:
        scope = "" if self.since is None else f" since {self.since} ({self.changed_paths} paths changed)"
        return (
            f"{self.source}{scope}: {self.added} added, {self.updated} updated, {self.unchanged} unchanged, "
            f"{self.deleted} deleted, {len(self.skipped)} skipped, {len(self.failed)} failed; "
            f"{self.chunks_written} chunks, {self.vectors_embedded} embedded, "
            f"{self.vectors_reused} reused; {self.total_seconds:.1f}s "
            f"(parse {self.parse_seconds:.1f}s, embed {self.embed_seconds:.1f}s, write {self.write_seconds:.1f}s)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "since": self.since, "changed_paths": self.changed_paths,
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
            progress(state)


def job_counts(state: IngestProgress | None, summary: IngestSummary) -> dict[str, int]:
    """What a job row shows: progress after a batch (with ``state``), final counts without."""
    counts = {"added": summary.added, "updated": summary.updated, "unchanged": summary.unchanged,
              "deleted": summary.deleted, "chunks_written": summary.chunks_written,
              "vectors_embedded": summary.vectors_embedded, "vectors_reused": summary.vectors_reused,
              "skipped": len(summary.skipped), "failed": len(summary.failed)}
    return counts if state is None else {"files_seen": state.files_seen, **counts}
