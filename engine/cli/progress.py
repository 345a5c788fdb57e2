"""What the CLI shows while it works: an ingest's progress, and a word before a slow first step.

``IngestDisplay`` takes the ``IngestProgress`` the pipeline reports (files read and files done,
chunks written and embedded, the file being read). On a terminal it redraws one line in place a
few times a second; elsewhere (a CI log) it prints a plain line every ~10 seconds, so a long
ingest is never silent there.

Totals come from the pipeline once it has listed the tree (names and sizes, no file read yet;
for a fetched location, once the fetch is done), which is cheap beside reading and parsing every
file. While a location is fetched, the line says what the fetcher last reported. Progress and ETA count the
files whose outcome is settled (written, unchanged, skipped or failed), weighted by their bytes:
the parser runs ahead of the writers, so the files it has read say little about the time left.
The ETA leaves out the last step, building deferred indexes and statistics, which shows as
"finishing" with its own clock. The chunk total is not known until every file is parsed, so
chunks show as done, with a rate.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from engine.ingest.summary import IngestProgress

__all__ = ["IngestDisplay", "TreeTotals", "announce_if_slow", "format_duration"]

#: How often the terminal line is redrawn: smooth, without printing for every file.
LIVE_REDRAW_S = 0.25
#: How often a plain progress line is printed where stderr is not a terminal (CI logs).
PLAIN_EVERY_S = 10.0
#: Below this, a step's notice would only flicker past: a step that ends sooner says nothing.
SLOW_STEP_S = 1.0
#: Seconds of reading before an ETA is shown (the first files say little about the rest).
_ETA_AFTER_S = 2.0


def format_duration(seconds: float) -> str:
    """``45s``, ``3m12s``, ``1h04m``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02}m"


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


@dataclass(frozen=True, slots=True)
class TreeTotals:
    """What an ingest will read, in its order: ``bytes_through[n]`` is the size of items 0..n together."""

    bytes_through: tuple[int, ...]

    @property
    def files(self) -> int:
        return len(self.bytes_through)

    @property
    def bytes(self) -> int:
        return self.bytes_through[-1] if self.bytes_through else 0

    def fraction_done(self, items: int) -> float:
        """How much of the tree is done once its first ``items`` are, by bytes (by items if it holds none)."""
        if not self.files:
            return 1.0
        items = min(max(items, 0), self.files)
        if not self.bytes:
            return items / self.files
        return (self.bytes_through[items - 1] if items else 0) / self.bytes


@dataclass(slots=True)
class _Seen:
    """The last progress reported, copied: the pipeline's threads keep changing theirs."""

    files_read: int = 0
    files_done: int = 0
    path: str = ""
    chunks_written: int = 0
    vectors_embedded: int = 0
    fetching: str = ""


class IngestDisplay:
    """Shows an ingest's progress on ``stream`` while used as a context manager; ``update`` is the callback.

    ``live``: redraw one line in place (a terminal); otherwise print a line every ``PLAIN_EVERY_S``.
    """

    def __init__(self, stream: TextIO, totals: TreeTotals | None, *, live: bool, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._totals = totals
        self._live = live
        self._every_s = every_s if every_s is not None else LIVE_REDRAW_S if live else PLAIN_EVERY_S
        self._clock = clock
        self._lock = threading.Lock()
        self._seen = _Seen()
        self._started = clock()
        self._working_since: float | None = None  # the first report: the parser reached the first file
        self._all_done_at: float | None = None  # every file settled: indexes and statistics are left
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="quarry-ingest-progress", daemon=True)

    def update(self, state: IngestProgress) -> None:
        now = self._clock()
        with self._lock:
            news = (self._totals is None and state.bytes_through is not None) or (
                bool(state.fetching) and not self._seen.fetching)
            self._seen = _Seen(state.files_seen, state.files_done, state.current_path, state.chunks_written,
                               state.vectors_embedded, state.fetching)
            if self._totals is None and state.bytes_through is not None:  # the pipeline has listed the tree
                self._totals = TreeTotals(state.bytes_through)
            if self._working_since is None and state.files_seen > 0:
                self._working_since = now
            if self._totals is not None and state.files_done >= self._totals.files and self._all_done_at is None \
                    and self._working_since is not None:
                self._all_done_at = now
        if news:  # what there is to do, or that a fetch began: worth a line at once
            self._show()

    def line(self) -> str:
        """The progress as one line, without the file being read (``current_path``)."""
        now = self._clock()
        with self._lock:
            seen, working_since, all_done_at = self._seen, self._working_since, self._all_done_at
        totals = self._totals
        if working_since is None:
            waited = now - self._started
            said = seen.fetching or "starting"
            if totals is not None:
                said += f": {_files(totals.files)} to read, {_megabytes(totals.bytes)}"
            return said if waited < 1 else f"{said} ({format_duration(waited)})"
        # Most telling first: a narrow terminal cuts the line's end.
        elapsed = now - working_since
        if totals is None:
            parts = [f"{_files(seen.files_done)} done"]
        elif all_done_at is None:
            parts = [f"files {min(seen.files_done, totals.files)}/{totals.files} "
                     f"({totals.fraction_done(seen.files_done):.0%} of {_megabytes(totals.bytes)})"]
        else:
            parts = [f"all {_files(totals.files)} done", f"finishing indexes {format_duration(now - all_done_at)}"]
        if all_done_at is None:
            done = 0.0 if totals is None else totals.fraction_done(seen.files_done)
            if done > 0 and elapsed >= _ETA_AFTER_S:
                parts.append(f"ETA {format_duration(elapsed * (1 - done) / done)}")
            else:  # no estimate yet: the clock at least shows it is moving
                parts.append(f"{format_duration(elapsed)} so far")
        parts.append(f"chunks {seen.chunks_written} ({seen.vectors_embedded} embedded)")
        if seen.chunks_written and elapsed >= 1:
            parts.append(f"{seen.chunks_written / elapsed:.0f} chunks/s")
        return ", ".join(parts)

    def current_path(self) -> str:
        """The file the parser is reading; empty before the first and once it has read the last."""
        with self._lock:
            seen = self._seen
        if self._totals is not None and seen.files_read >= self._totals.files:
            return ""
        return seen.path

    def __enter__(self) -> IngestDisplay:
        if self._totals is not None:
            self._show()  # at once: how much there is to read
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._live:
            self._stream.write("\r\033[K")
            self._stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self._every_s):
            self._show()

    def _show(self) -> None:
        if self._live:
            self._redraw()
        else:
            path = self.current_path()
            print(f"quarry: ingest: {self.line()}" + (f", reading {path}" if path else ""), file=self._stream,
                  flush=True)

    def _redraw(self) -> None:
        head = f"  {self.line()}"
        path = self.current_path()
        width = _columns(self._stream) - 1  # the last column would wrap on some terminals
        room = width - len(head) - 2
        if path and room >= 12:
            head += "  " + (path if len(path) <= room else "…" + path[-(room - 1):])
        self._stream.write(f"\r\033[K{head[:width]}")
        self._stream.flush()


def _columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` writes to (stdout may be piped while stderr is a terminal)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no descriptor, or not a terminal
        columns = 0
    return columns if columns > 0 else shutil.get_terminal_size().columns


@contextmanager
def announce_if_slow(message: str, stream: TextIO, after_s: float = SLOW_STEP_S) -> Iterator[None]:
    """Print ``message`` on ``stream`` if the block is still running after ``after_s`` seconds."""
    timer = threading.Timer(after_s, lambda: print(message, file=stream, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
