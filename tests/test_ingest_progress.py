"""What ``quarry ingest`` shows while it runs: files done of the total, chunks, rate, ETA; a live
line on a terminal, a plain line every few seconds in a CI log; a notice before a slow first step."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from engine.cli.progress import IngestDisplay, TreeTotals, announce_if_slow, format_duration
from engine.ingest.summary import IngestProgress
from tests.corpus import write_corpus

REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _env(database_url: str, model_cache: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("QUARRY_") and key not in ("VOYAGE_API_KEY", "DATABASE_URL")}
    return env | {"DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache),
                  "QUARRY_TEXT_MODEL": "local", "QUARRY_CODE_MODEL": "local"}


def test_durations_read_as_seconds_minutes_or_hours() -> None:
    assert [format_duration(s) for s in (0, 44.6, 192, 3840)] == ["0s", "45s", "3m12s", "1h04m"]


def test_the_totals_weigh_what_is_done_by_bytes() -> None:
    totals = TreeTotals((1 * MB, 2 * MB, 4 * MB, 10 * MB))  # files of 1, 1, 2 and 6 MB
    assert (totals.files, totals.bytes) == (4, 10 * MB)
    assert [totals.fraction_done(n) for n in (0, 1, 3, 4, 9)] == [0.0, 0.1, 0.4, 1.0, 1.0]
    assert TreeTotals((0, 0)).fraction_done(1) == 0.5  # nothing but skipped entries: by count
    assert TreeTotals(()).fraction_done(0) == 1.0


def test_the_line_shows_files_done_of_the_total_chunks_rate_and_eta_then_the_finishing_step() -> None:
    clock = FakeClock()
    display = IngestDisplay(io.StringIO(), TreeTotals((1 * MB, 2 * MB, 4 * MB, 10 * MB)), live=False, clock=clock)
    assert display.line() == "starting: 4 files to read, 10.0 MB"
    clock.now += 3
    assert display.line() == "starting: 4 files to read, 10.0 MB (3s)"

    display.update(IngestProgress(files_seen=1, current_path="a.md"))
    clock.now += 10
    display.update(IngestProgress(files_seen=4, current_path="d.md", files_done=3, chunks_written=500,
                                  vectors_embedded=400))
    # 40% of the bytes in 10 s: 15 s to go; 500 chunks in 10 s
    assert display.line() == "files 3/4 (40% of 10.0 MB), ETA 15s, chunks 500 (400 embedded), 50 chunks/s"
    assert display.current_path() == ""  # the parser has read the last file: the writers are behind

    display.update(IngestProgress(files_seen=4, current_path="d.md", files_done=4, chunks_written=800,
                                  vectors_embedded=700))
    clock.now += 6
    assert display.line() == "all 4 files done, finishing indexes 6s, chunks 800 (700 embedded), 50 chunks/s"


def test_before_anything_is_done_the_line_shows_the_time_so_far() -> None:
    clock = FakeClock()
    display = IngestDisplay(io.StringIO(), None, live=False, clock=clock)
    display.update(IngestProgress(files_seen=2, current_path="b.md"))
    clock.now += 42
    assert display.line() == "0 files done, 42s so far, chunks 0 (0 embedded)"
    assert display.current_path() == "b.md"


def test_without_a_terminal_a_plain_line_is_printed_at_the_start_and_then_every_interval() -> None:
    stream = io.StringIO()
    with IngestDisplay(stream, TreeTotals((MB, 2 * MB)), live=False, every_s=0.05) as display:
        display.update(IngestProgress(files_seen=1, current_path="docs/a.md", files_done=1, chunks_written=3))
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "quarry: ingest: starting: 2 files to read, 2.0 MB"
    assert len(lines) >= 3 and all(line.startswith("quarry: ingest: ") for line in lines)
    assert lines[-1].startswith("quarry: ingest: files 1/2 (50% of 2.0 MB), 0s so far, chunks 3 (0 embedded)")
    assert lines[-1].endswith(", reading docs/a.md")
    assert "\r" not in stream.getvalue() and "\033" not in stream.getvalue()  # a log gets no cursor moves


def test_on_a_terminal_one_line_is_redrawn_in_place_and_cleared_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # the width a StringIO's "terminal" has
    stream = io.StringIO()
    with IngestDisplay(stream, TreeTotals((MB, 2 * MB)), live=True, every_s=0.02) as display:
        display.update(IngestProgress(files_seen=1, current_path="docs/a.md"))
        time.sleep(0.1)
    frames = stream.getvalue().split("\r\033[K")
    assert frames[1] == "  starting: 2 files to read, 2.0 MB"
    assert any(frame.startswith("  files 0/2 (0% of 2.0 MB)") and frame.endswith("  docs/a.md") for frame in frames)
    assert frames[-1] == ""  # cleared, so the summary starts on a clean line
    assert "\n" not in stream.getvalue()


def test_a_slow_step_is_announced_and_a_quick_one_is_not() -> None:
    stream = io.StringIO()
    with announce_if_slow("quarry: preparing …", stream, after_s=0.05):
        pass
    time.sleep(0.1)
    assert stream.getvalue() == ""
    with announce_if_slow("quarry: preparing …", stream, after_s=0.05):
        time.sleep(0.2)
    assert stream.getvalue() == "quarry: preparing …\n"


def test_an_ingest_in_a_ci_log_prints_plain_progress_lines(database_url: str, model_cache: Path,
                                                           tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "corpus")
    done = subprocess.run([sys.executable, "-m", "engine.cli", "ingest", str(root), "--source", "progress-log"],
                          cwd=REPO, env=_env(database_url, model_cache), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    # the first progress line (a slow model load may be announced before it: "preparing the local model")
    progress = [line for line in done.stderr.splitlines() if line.startswith("quarry: ingest: ")]
    assert progress[0].startswith("quarry: ingest: starting: 4 files to read, ")
    assert "\r" not in done.stderr and "progress-log: 4 added" in done.stdout


def _run_on_a_terminal(arguments: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``quarry`` with stderr on a pseudo-terminal 100 columns wide; (exit code, stdout, what the terminal got)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "engine.cli", *arguments], cwd=REPO, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    received = bytearray()
    while True:
        try:
            data = os.read(controller, 4096)
        except OSError:  # EIO: the process closed its end
            break
        if not data:
            break
        received += data
    os.close(controller)
    assert process.stdout is not None
    stdout = process.stdout.read().decode()
    return process.wait(timeout=60), stdout, received.decode(errors="replace")


def test_an_ingest_on_a_terminal_redraws_one_progress_line(database_url: str, model_cache: Path,
                                                           tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "corpus")
    code, stdout, terminal = _run_on_a_terminal(["ingest", str(root), "--source", "progress-tty"],
                                                _env(database_url, model_cache))
    assert code == 0, terminal
    frames = terminal.split("\r\033[K")
    assert "  starting: 4 files to read, 0.0 MB" in frames
    assert all(len(frame) < 100 for frame in frames)  # never wider than the terminal
    assert "starting" not in frames[-1] and "files" not in frames[-1]  # cleared before the summary
    assert "progress-tty: 4 added" in stdout
