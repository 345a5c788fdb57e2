"""Wall and CPU time of whole ``quarry`` commands, the way a user or a CI job feels them.

    python bench/cli_latency.py [--home DIR] [--rounds 7] [--against TREE] [--reingest FOLDER --source SLUG]

Each round runs, in a fresh process each: ``quarry --help``, ``quarry search --help``, ``quarry
search QUERY --mode fts`` and ``quarry search QUERY`` (hybrid) against ``--home``'s embedded
database (ingest something there first), and with ``--reingest`` a re-ingest of FOLDER after one
file's edit (a new line at the end of its first ``.html``/``.md`` file each round; the file is
restored at the end) and one with nothing changed. ``--against TREE`` runs every command from
another checkout too (``git archive HEAD | tar -x -C TREE``), by ``PYTHONPATH``, interleaved command
by command with this one so both share the machine's load; both use one database, so give TREE this
checkout's ``sql/`` and ``alembic/`` (each tree migrates to its own schema), and only their Python
differs. Re-ingests run from this checkout only (a tree's ingest may write columns the schema no
longer has). Prints medians of wall seconds and of the command's own CPU seconds (user + system,
without the database server's); the CPU figure moves less with load.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUERY = "how do I create a partial index"


@dataclass
class Timings:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def _run(tree: Path, arguments: list[str], home: Path) -> tuple[float, float]:
    environment = {**os.environ, "QUARRY_HOME": str(home), "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "engine.cli", *arguments], env=environment, cwd=tree, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _edited_file(folder: Path) -> Path:
    for pattern in ("*.html", "*.md"):
        found = sorted(folder.rglob(pattern))
        if found:
            return found[0]
    raise SystemExit(f"{folder}: no .html or .md file to edit")


def _trees_for(command: str, trees: list[Path], round_number: int) -> list[Path]:
    """The trees a command runs from this round, in turns: re-ingests from this checkout only."""
    chosen = trees[:1] if command.startswith("re-ingest") else trees
    return chosen if round_number % 2 == 0 else chosen[::-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path,
                        default=Path(os.environ.get("QUARRY_HOME", REPO / "bench" / ".out" / "cli")))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another checkout, run interleaved with this one")
    parser.add_argument("--reingest", type=Path, help="a folder ingested already as --source")
    parser.add_argument("--source", help="the source slug of --reingest")
    args = parser.parse_args()
    # absolute: each tree's commands run in that tree, where a relative home would be another (empty) one
    args.home = args.home.resolve()
    if args.reingest is not None:
        args.reingest = args.reingest.resolve()
    if (args.reingest is None) != (args.source is None):
        parser.error("--reingest and --source go together")

    commands: dict[str, list[str]] = {
        "quarry --help": ["--help"],
        "quarry search --help": ["search", "--help"],
        "quarry search (fts)": ["search", QUERY, "--mode", "fts", "--limit", "5"],
        "quarry search (hybrid)": ["search", QUERY, "--limit", "5"],
    }
    if args.reingest is not None:
        commands["re-ingest, one file edited"] = ["ingest", str(args.reingest), "--source", args.source]
        commands["re-ingest, nothing changed"] = ["ingest", str(args.reingest), "--source", args.source]
    edited = _edited_file(args.reingest) if args.reingest is not None else None
    original = edited.read_bytes() if edited is not None else b""
    trees = [REPO] + ([args.against.resolve()] if args.against else [])
    results = {(tree, name): Timings() for tree in trees for name in commands}
    try:
        for tree in trees:  # warm: the database, the prepared model, the page cache
            for name, arguments in commands.items():
                if tree in _trees_for(name, trees, 0):
                    _run(tree, arguments, args.home)
        for round_number in range(args.rounds):
            for name, arguments in commands.items():
                for tree in _trees_for(name, trees, round_number):
                    if edited is not None and name.startswith("re-ingest, one"):
                        edited.write_bytes(original + f"\n<p>edit {time.time_ns()}</p>\n".encode())
                    wall, cpu = _run(tree, arguments, args.home)
                    results[(tree, name)].wall.append(wall)
                    results[(tree, name)].cpu.append(cpu)
    finally:
        if edited is not None:
            edited.write_bytes(original)
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}, {args.rounds} rounds (medians)")
    print(f"| command | {' | '.join(f'{tree.name}: wall s / CPU s' for tree in trees)} |")
    print(f"|---|{'---|' * len(trees)}")
    for name in commands:
        cells = [f"{statistics.median(timings.wall):.2f} / {statistics.median(timings.cpu):.2f}" if timings.wall
                 else "-" for timings in (results[(tree, name)] for tree in trees)]
        print(f"| {name} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
