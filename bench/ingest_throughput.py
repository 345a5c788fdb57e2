"""Ingest throughput: without model time (rounds), and a first ingest against the embedder alone.

    python bench/ingest_throughput.py [--corpus DIR] [--rounds 3] [--home bench/.out/ingest]
    python bench/ingest_throughput.py --first-ingest [--corpus DIR] [--rounds 3] [--home bench/.out/first-ingest]

Either works on a fresh ``--home``: the bench opens the database the way every ``quarry`` command
does (``engine.runtime.Runtime``: the embedded server booted, the schema migrated) before it
reads anything.

The two modes answer different questions, so they are separate runs.

**Rounds (default): parse + chunk + write chunks/s of ``quarry ingest``, no model time.**

Embedding is excluded the honest way, by the scenario rather than by a stub: the corpus is
ingested once as source ``bench-a`` with the configured model (a one-off, kept in the bench
home and reused by later runs), then every round ingests the same tree as a new source
``bench-b`` with the real CLI. Every embedding input was embedded before, so each vector is
reused by content hash and the model never runs, while documents, chunks, BM25 postings,
relations, version constraints, facet counts and HNSW inserts are all written as in any
ingest. Between rounds ``bench-b`` is deleted and the tables vacuumed (not timed).

Per round: wall time of the command, the summary's total / parse / write seconds, CPU seconds
of the ingest process and of the database server (the embedded server's process tree), and
the load average. The machine may be shared: the CPU seconds say what two idle cores would
need (the wall time of a pipelined run on idle cores is about max(cpu_ingest, cpu_db, sum / 2)).
The median of the rounds is printed last.

``--search-during`` runs one client searching (hybrid, SQL only, a stored vector as the query
embedding) back to back while each round ingests, and reports its latencies and errors: a
load may defer the space's HNSW index (``engine.ingest.vector_indexes``), and searches must
keep working meanwhile. Its own database time then counts in the round's database CPU.

**``--first-ingest``: a first ingest's time over the embedder's own time on the same texts.**
The target (issue 29) is 1.1x at most. The corpus defaults to this repository's ``docs/``
(a folder a user has); the home to ``bench/.out/first-ingest``, apart from the rounds' home,
whose ``bench-a`` would lend the corpus its vectors. Each round pairs, in alternating order:

- a first ingest: ``quarry ingest CORPUS --source bench-first --json`` with the configured
  model, the source deleted and the tables vacuumed before (not timed), so no vector of it is
  stored and the model embeds every input. The bench checks that it did: the ingest embedded
  as many inputs as the embedder alone, and the source's stored input hashes are theirs.
- the embedder alone: ``python -m bench.embedder_alone CORPUS``, a fresh process like the
  CLI, running the configured embedder(s) over exactly the inputs the ingest embeds, in the
  calls it makes (one per segment of about 256 chunks; each input once, even where the text
  and code spaces both hold it; see that module).

Printed per round: the command's wall time, the ingest's own total and its embed / parse /
write seconds (and total / embed: the same minutes, so the least noisy figure of what the
ingest adds to its model calls), the embedder's seconds (its model load apart: the ingest loads the model before
its clock starts too), and two ratios: command wall / embedder, which is what a user waits for
(process start, model load and the summary included), and ingest total / embedder. On a shared
machine wall times swing with the neighbours, so the CPU seconds of each side are printed and
compared too: the ingest process and the database server against the embedder's process (which
counts its parsing and model load). The load average before and after each; medians last. A
model preparation on the first use of the model cache happens in the embedder's load, which
runs first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
DEFAULT_CORPUS = Path("/usr/share/doc/postgresql-doc-15/html")
FIRST_INGEST_CORPUS = REPO / "docs"
FIRST, SECOND = "bench-a", "bench-b"
FRESH = "bench-first"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Round:
    chunks: int
    reused: int
    embedded: int
    wall: float
    total: float
    parse: float
    write: float
    cpu_ingest: float
    cpu_db: float
    load_before: str
    load_after: str

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.total

    @property
    def chunks_per_wall_second(self) -> float:
        return self.chunks / self.wall

    def line(self) -> str:
        return (f"{self.chunks} chunks ({self.reused} reused, {self.embedded} embedded): "
                f"{self.chunks_per_second:,.0f} chunks/s (ingest {self.total:.2f} s: parse {self.parse:.2f}, "
                f"write {self.write:.2f}); command wall {self.wall:.2f} s = {self.chunks_per_wall_second:,.0f}"
                f" chunks/s; CPU s ingest {self.cpu_ingest:.2f}, database {self.cpu_db:.2f}; "
                f"load {self.load_before} -> {self.load_after}")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _process_seconds(pid: int, children_reaped: bool) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # after the ")" of the command name: state is fields[0]; utime, stime, cutime, cstime are 11-14
    ticks = int(fields[11]) + int(fields[12])
    if children_reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def server_cpu_seconds(home: Path) -> float | None:
    """CPU seconds the embedded server has used: postmaster, live children, and exited ones."""
    pid_file = home / "pgdata" / "postmaster.pid"
    if "DATABASE_URL" in os.environ or not pid_file.exists():
        return None
    postmaster = int(pid_file.read_text().split()[0])
    total = _process_seconds(postmaster, children_reaped=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:  # its parent
                total += _process_seconds(int(entry.name), children_reaped=False)
        except (OSError, ValueError):
            continue  # exited while we looked
    return total


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def quarry(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine.cli", *arguments], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)


def ingest(env: dict[str, str], corpus: Path, slug: str) -> dict[str, Any]:
    done = quarry(env, "ingest", str(corpus), "--source", slug, "--json")
    if done.returncode != 0:
        raise SystemExit(f"quarry ingest --source {slug} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def database_url(env: dict[str, str]) -> str:
    """The database's URL, the database started and migrated as for any ``quarry`` command (a fresh home too)."""
    code = "from engine.runtime import Runtime\nwith Runtime() as runtime: print(runtime.database_url)"
    found = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                           check=True)
    return found.stdout.strip().splitlines()[-1]


def source_chunks(url: str, slug: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select count(*) from quarry.chunks c join quarry.sources s on s.id = c.source_id"
                           " where s.slug = %s and s.last_ingested_at is not null", (slug,)).fetchone()
    return 0 if row is None else int(row[0])


def drop_source(url: str, slug: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("select quarry.delete_documents(array(select d.id from quarry.documents d"
                         " join quarry.sources s on s.id = d.source_id where s.slug = %s))", (slug,))
            conn.execute("delete from quarry.sources where slug = %s", (slug,))
        for table in ("documents", "chunks", "embeddings", "chunk_terms", "text_postings", "text_posting_blocks",
                      "text_terms", "relations", "version_constraints", "facet_counts"):
            conn.execute(sql.SQL("vacuum analyze {}").format(sql.Identifier("quarry", table)))


class SearchProbe:
    """One client running hybrid searches back to back on its own thread until stopped."""

    QUERIES = ("create a partial index", "vacuum freeze", "logical replication slot", "window functions",
               "pg_dump custom format", "foreign key on delete cascade")

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.latencies_ms: list[float] = []
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SearchProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            row = conn.execute("select embedding::text from quarry.embeddings where space = 'text' limit 1").fetchone()
            vector = row[0] if row else None
            number = 0
            while not self._stop.is_set():
                query = self.QUERIES[number % len(self.QUERIES)]
                number += 1
                started = time.perf_counter()
                try:
                    conn.execute("select count(*) from quarry.hybrid_search(array[%s], array[%s::vector])",
                                 (query, vector)).fetchone()
                    self.latencies_ms.append((time.perf_counter() - started) * 1000)
                except psycopg.Error as error:
                    self.errors.append(str(error).strip().splitlines()[0])

    def line(self) -> str:
        if not self.latencies_ms:
            return f"searches: none completed, {len(self.errors)} errors {self.errors[:1]}"
        ordered = sorted(self.latencies_ms)
        p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
        return (f"searches during the round: {len(ordered)}, p50 {statistics.median(ordered):.1f} ms, "
                f"p95 {p95:.1f} ms, max {ordered[-1]:.1f} ms, errors {len(self.errors)}"
                + (f" (first: {self.errors[0]})" if self.errors else ""))


@dataclass(frozen=True)
class FirstIngest:
    """A first ingest of the corpus through the CLI, every input embedded by the model."""

    chunks: int
    embedded: int
    wall: float
    total: float
    embed: float
    parse: float
    write: float
    cpu_ingest: float
    cpu_db: float
    load_before: str
    load_after: str

    def line(self) -> str:
        return (f"first ingest: {self.chunks} chunks, {self.embedded} embedded; command wall {self.wall:.2f} s, "
                f"ingest {self.total:.2f} s (embed {self.embed:.2f}, parse {self.parse:.2f}, write {self.write:.2f}"
                f" = {self.total / self.embed:.3f}x its model calls); "
                f"CPU s ingest {self.cpu_ingest:.2f}, database {self.cpu_db:.2f}; "
                f"load {self.load_before} -> {self.load_after}")


@dataclass(frozen=True)
class EmbedderAlone:
    """``bench.embedder_alone``: the configured embedder(s) over the inputs a first ingest embeds."""

    models: list[dict[str, Any]]
    input_hashes: frozenset[str]
    cpu: float
    load_before: str
    load_after: str

    @property
    def texts(self) -> int:
        return sum(int(model["texts"]) for model in self.models)

    @property
    def seconds(self) -> float:
        return sum(float(model["seconds"]) for model in self.models)

    def line(self) -> str:
        models = "; ".join(f"{model['model']} ({'+'.join(model['spaces'])}): {model['texts']} texts in "
                           f"{model['calls']} calls, {model['seconds']:.2f} s (model load {model['load_seconds']:.2f})"
                           for model in self.models)
        return f"embedder alone: {models}; CPU s {self.cpu:.2f}; load {self.load_before} -> {self.load_after}"


def embedder_alone(env: dict[str, str], corpus: Path) -> EmbedderAlone:
    load_before, cpu = load_average(), children_cpu_seconds()
    done = subprocess.run([sys.executable, "-m", "bench.embedder_alone", str(corpus)], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    cpu = children_cpu_seconds() - cpu
    if done.returncode != 0:
        raise SystemExit(f"bench.embedder_alone failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return EmbedderAlone(found["models"], frozenset(found["input_hashes"]), cpu, load_before, load_average())


def first_ingest(env: dict[str, str], url: str, home: Path, corpus: Path) -> FirstIngest:
    """Ingest the corpus as a source holding nothing yet, in a database holding none of its vectors."""
    drop_source(url, FRESH)
    load_before = load_average()
    cpu_db, cpu_ingest = server_cpu_seconds(home), children_cpu_seconds()
    started = time.perf_counter()
    summary = ingest(env, corpus, FRESH)
    wall = time.perf_counter() - started
    cpu_ingest = children_cpu_seconds() - cpu_ingest
    cpu_db_after = server_cpu_seconds(home)
    seconds = summary["seconds"]
    return FirstIngest(summary["chunks_written"], summary["vectors_embedded"], wall, seconds["total"],
                       seconds["embed"], seconds["parse"], seconds["write"], cpu_ingest,
                       float("nan") if cpu_db is None or cpu_db_after is None else cpu_db_after - cpu_db,
                       load_before, load_average())


def stored_input_hashes(url: str, slug: str) -> frozenset[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("select distinct encode(e.input_hash, 'hex') from quarry.embeddings e"
                            " join quarry.chunks c on c.id = e.chunk_id join quarry.sources s on s.id = c.source_id"
                            " where s.slug = %s", (slug,)).fetchall()
    return frozenset(str(row[0]) for row in rows)


def check_same_inputs(url: str, ingested: FirstIngest, alone: EmbedderAlone) -> None:
    """Refuse a ratio whose two sides embedded different texts (vectors reused from another source, say)."""
    if ingested.embedded != alone.texts:
        raise SystemExit(f"the ingest embedded {ingested.embedded} inputs, the embedder alone {alone.texts}: another "
                         f"source in this home may hold some of the corpus's vectors (use a fresh --home)")
    stored = stored_input_hashes(url, FRESH)
    if stored != alone.input_hashes:
        raise SystemExit(f"the source's stored input hashes ({len(stored)}) are not the embedder's "
                         f"({len(alone.input_hashes)}): {len(stored ^ alone.input_hashes)} differ")


def first_ingest_rounds(env: dict[str, str], url: str, home: Path, corpus: Path, rounds: int) -> None:
    wall_ratios: list[float] = []
    total_ratios: list[float] = []
    cpu_ratios: list[float] = []
    for number in range(1, rounds + 1):
        # Alternating order, so drift on a shared machine does not favour one side; the embedder
        # first in round 1, so a first use of the model cache prepares the model outside the ingest.
        if number % 2:
            alone = embedder_alone(env, corpus)
            ingested = first_ingest(env, url, home, corpus)
        else:
            ingested = first_ingest(env, url, home, corpus)
            alone = embedder_alone(env, corpus)
        check_same_inputs(url, ingested, alone)
        wall_ratios.append(ingested.wall / alone.seconds)
        total_ratios.append(ingested.total / alone.seconds)
        cpu_ratios.append((ingested.cpu_ingest + ingested.cpu_db) / alone.cpu)
        print(f"round {number}:\n  {ingested.line()}\n  {alone.line()}\n"
              f"  ratio: command wall / embedder {wall_ratios[-1]:.3f}, ingest / embedder {total_ratios[-1]:.3f};"
              f" CPU s (ingest + database) / embedder process {cpu_ratios[-1]:.3f}", flush=True)
    print(f"median of {rounds}: command wall / embedder {statistics.median(wall_ratios):.3f}, "
          f"ingest / embedder {statistics.median(total_ratios):.3f} (target: 1.1 at most);"
          f" CPU s {statistics.median(cpu_ratios):.3f}")


def throughput_rounds(env: dict[str, str], url: str, home: Path, corpus: Path, rounds_wanted: int,
                      search_during: bool) -> None:
    if source_chunks(url, FIRST) == 0:
        started = time.perf_counter()
        first = ingest(env, corpus, FIRST)
        print(f"setup: {FIRST} ingested with the model once ({first['chunks_written']} chunks, "
              f"{first['vectors_embedded']} embedded) in {time.perf_counter() - started:.0f} s", flush=True)
    drop_source(url, SECOND)

    rounds: list[Round] = []
    for number in range(1, rounds_wanted + 1):
        load_before = load_average()
        cpu_db, cpu_ingest = server_cpu_seconds(home), children_cpu_seconds()
        probe = SearchProbe(url) if search_during else None
        started = time.perf_counter()
        if probe is None:
            summary = ingest(env, corpus, SECOND)
        else:
            with probe:
                summary = ingest(env, corpus, SECOND)
        wall = time.perf_counter() - started
        cpu_ingest = children_cpu_seconds() - cpu_ingest
        cpu_db_after = server_cpu_seconds(home)
        seconds = summary["seconds"]
        result = Round(summary["chunks_written"], summary["vectors_reused"], summary["vectors_embedded"], wall,
                       seconds["total"], seconds["parse"], seconds["write"], cpu_ingest,
                       float("nan") if cpu_db is None or cpu_db_after is None else cpu_db_after - cpu_db,
                       load_before, load_average())
        print(f"round {number}: {result.line()}", flush=True)
        if probe is not None:
            print(f"  {probe.line()}", flush=True)
        rounds.append(result)
        drop_source(url, SECOND)

    median = statistics.median(r.chunks_per_second for r in rounds)
    median_wall = statistics.median(r.chunks_per_wall_second for r in rounds)
    print(f"median of {len(rounds)}: {median:,.0f} chunks/s (ingest), {median_wall:,.0f} chunks/s (command wall);"
          f" CPU s ingest {statistics.median(r.cpu_ingest for r in rounds):.2f},"
          f" database {statistics.median(r.cpu_db for r in rounds):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--first-ingest", action="store_true",
                        help="time first ingests against the embedder alone instead of rounds without the model")
    parser.add_argument("--corpus", type=Path, default=None,
                        help=f"folder to ingest (default: {DEFAULT_CORPUS}; with --first-ingest, the repository's"
                             " docs/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--home", type=Path, default=None,
                        help="QUARRY_HOME (default: bench/.out/ingest; with --first-ingest, bench/.out/first-ingest)")
    parser.add_argument("--search-during", action="store_true", help="search back to back while ingesting")
    args = parser.parse_args()
    corpus: Path = args.corpus or (FIRST_INGEST_CORPUS if args.first_ingest else DEFAULT_CORPUS)
    if not corpus.is_dir():
        raise SystemExit(f"no corpus at {corpus} (apt-get install postgresql-doc-15, or pass --corpus)")
    if args.first_ingest and args.search_during:
        raise SystemExit("--search-during goes with the rounds, not with --first-ingest")
    home: Path = (args.home or BENCH_DIR / ".out" / ("first-ingest" if args.first_ingest else "ingest")).resolve()
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env |= {"QUARRY_HOME": str(home), "QUARRY_MODEL_CACHE": str(BENCH_DIR / ".out" / "models")}
    url = database_url(env)
    if args.first_ingest:
        first_ingest_rounds(env, url, home, corpus.resolve(), args.rounds)
    else:
        throughput_rounds(env, url, home, corpus, args.rounds, args.search_during)


if __name__ == "__main__":
    main()
