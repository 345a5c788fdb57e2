"""Load on the streamable-HTTP MCP endpoint: N concurrent MCP clients calling ``search``.

    python bench/load.py [--clients 1,16,64] [--seconds 10] [--mode hybrid] [--no-ingest]
                         [--python-docs] [--port 8765] [--home DIR]

Starts ``quarry serve --no-auth`` as a subprocess on loopback (``--port``, default a free one) with
``QUARRY_HOME=bench/.out/load`` (``--home``), ingesting Quarry's own docs and ``engine/`` there
first unless ``--no-ingest`` (about 2,000 chunks; ``--python-docs`` adds six parts of the Python
manual from ``apt-get install python3.11-doc``, for about 6,000 chunks in all). Then for each
concurrency level it runs that many asyncio workers for a fixed time, each with its own MCP client
session (SDK ``Client`` over streamable HTTP, its own HTTP connection pool), calling ``search``
with a rotating set of queries. Reports throughput, p50/p95/p99 latency, errors by code (the
tool's ``{"error": {"code": ...}}`` envelope, or ``TRANSPORT:<exception>``), the server process's
RSS (``/proc/<pid>/status``: VmRSS at the end of the level, VmHWM peak so far) and the CPU time per
call of the server process, the embedded Postgres and the clients (``/proc/<pid>/stat``), which
says where the time went even when other work shares the machine.

The same queries also run in this process, one at a time, against the same database before the
levels (``--reference-seconds`` each, 0 skips), as the reference an MCP call is measured against:

- ``embed``: the query embedding alone (local model, in this process);
- ``embed + SQL``: the embedding, then ``quarry.search_hits`` as the pipeline calls it;
- ``tool``: the ``search`` tool's whole run without MCP (``retrieve`` plus the response, as JSON text);
- ``search_text``: ``select * from quarry.search_text(query, limit)``, the keyword search in SQL.

The one-client level's p50 is then given as a ratio over ``embed + SQL`` (and, for ``--mode fts``,
over ``search_text``), beside its floor: the clients' own CPU per call plus ``tool``, the p50 a server
with no protocol path at all would reach here (at one client the three processes take turns). Each
level above one client gets its ceiling: the cores over the CPU a call takes in all three processes,
and the mean latency that many clients then wait at least (Little's law). The load averages before
and after say how busy the machine was.

With ``--no-auth`` there is no rate limiting; the server's database pool is set by
``QUARRY_POOL_MAX_SIZE`` (default 8) and ``QUARRY_POOL_TIMEOUT_MS`` (default 5000), which
``--pool-max-size`` / ``--pool-timeout-ms`` pass through. The clients run in this process on the
same machine as the server, so on a small box they compete with it for CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from engine.embed.base import TEXT_SPACE
from engine.retrieval.hits import search_hits
from engine.retrieval.request import DEFAULT_CODE_MODE, DEFAULT_VERSION_MATCH
from engine.runtime import Runtime
from engine.store.db import autocommit
from mcp_server.schemas import SearchArgs
from mcp_server.tools import ToolContext
from mcp_server.tools.search import SEARCH

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / ".out"
#: The Python manual's folders ``--python-docs`` ingests (python3.11-doc): about 4,000 chunks.
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
PYTHON_DOC_PARTS = ("tutorial", "reference", "howto", "faq", "extending", "c-api")

QUERIES = [
    "hybrid search reciprocal rank fusion", "how is a document chunked", "embedding model cache",
    "statement timeout", "connection pool size", "BM25 postings table", "incremental ingest since revision",
    "rate limit per key", "API key scopes", "HNSW ef_search", "re-embed a space", "reindex text index",
    "markdown heading parser", "version range filter", "source attribution official", "cross encoder rerank",
    "embedded postgres server stop", "MCP tool error envelope", "streamable HTTP transport", "origin validation",
    "facet values filter", "query vector normalisation", "job queue worker", "url template path_no_ext",
    "semver comparison", "restructuredtext directives", "html parser boilerplate", "read only role",
    "confidence score of results", "symlinks refused during ingest",
]


@dataclass
class Level:
    clients: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    #: CPU seconds the level used: the server process, the embedded Postgres, and these clients.
    cpu_s: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def percentile(self, fraction: float) -> float:
        return percentile(self.latencies_ms, fraction)

    def cpu_ms_per_call(self) -> tuple[float, float, float]:
        """``cpu_s`` per successful call, ms: where the machine's time went (robust to other load)."""
        calls = max(1, len(self.latencies_ms))
        server, database, clients = (seconds / calls * 1000 for seconds in self.cpu_s)
        return server, database, clients


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used, from /proc (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(home: Path) -> float:
    """CPU time of the embedded Postgres under ``home``: its postmaster and every process it started."""
    try:
        postmaster = int((home / "pgdata" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended meanwhile
            continue
        if int(entry.name) == postmaster or int(fields[1]) == postmaster:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def quarry(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=REPO, env=env, check=True)


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        server = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--no-auth", "--port", str(port)],
                                  cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited ({server.returncode}); see {log}")
        try:
            if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    server.terminate()
    raise RuntimeError(f"the server did not become healthy; see {log}")


async def worker(url: str, index: int, level: Level, stop_at: float, args: argparse.Namespace) -> None:
    turn = index * 7  # workers start at different queries
    async with httpx2.AsyncClient(timeout=args.timeout) as http, \
            Client(streamable_http_client(url, http_client=http), read_timeout_seconds=args.timeout) as client:
        while time.monotonic() < stop_at:
            query = QUERIES[turn % len(QUERIES)]
            turn += 1
            started = time.perf_counter()
            try:
                result = await client.call_tool("search", {"query": query, "mode": args.mode, "limit": args.limit})
            except Exception as error:  # every transport failure is a counted outcome
                level.errors[f"TRANSPORT:{type(error).__name__}"] += 1
                await asyncio.sleep(0.05)
                continue
            elapsed = (time.perf_counter() - started) * 1000
            if result.is_error:
                text = result.content[0].text if result.content and isinstance(result.content[0],
                                                                               types.TextContent) else ""
                try:
                    code = json.loads(text)["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    code = "UNPARSED"
                level.errors[code] += 1
            else:
                level.latencies_ms.append(elapsed)


@dataclass
class Reference:
    """In-process timings of the same queries, ms per call: what an MCP call is measured against."""

    embed: list[float] = field(default_factory=list)
    embed_sql: list[float] = field(default_factory=list)
    tool: list[float] = field(default_factory=list)
    search_text: list[float] = field(default_factory=list)


def measure_reference(args: argparse.Namespace) -> Reference:
    """Run the bench queries in this process, one at a time, ``args.reference_seconds`` per kind."""
    reference = Reference()
    with Runtime(read_only=True) as runtime:
        embedder = runtime.embedders[TEXT_SPACE]
        context = ToolContext(runtime)
        pool = runtime.pool

        def embed_sql(query: str) -> None:
            vectors = embedder.embed_queries([query]) if args.mode != "fts" else None
            # as retrieve() calls it for search's defaults (code_mode "on", one model serving both spaces)
            model = embedder.model_name if vectors is not None else None
            search_hits(pool, [query], mode=args.mode, limit=args.limit, text_vectors=vectors, code_vectors=vectors,
                        code_mode=DEFAULT_CODE_MODE if vectors is not None else "off",
                        version_match=DEFAULT_VERSION_MATCH, query_model=model, code_query_model=model)

        def search_text(query: str) -> None:
            with pool.connection() as conn, autocommit(conn):
                conn.execute("select * from quarry.search_text(%s, %s)", (query, args.limit)).fetchall()

        steps: list[tuple[list[float], Callable[[str], object]]] = [
            (reference.embed, lambda query: embedder.embed_queries([query])),
            (reference.embed_sql, embed_sql),
            (reference.tool, lambda query: SEARCH.run(context, SearchArgs(query=query, mode=args.mode,
                                                                          limit=args.limit))),
            (reference.search_text, search_text),
        ]
        for timings, step in steps:
            for query in QUERIES[:5]:  # warm: the model, the pool's connections, their plans
                step(query)
            stop_at = time.monotonic() + args.reference_seconds
            turn = 0
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                step(QUERIES[turn % len(QUERIES)])
                timings.append((time.perf_counter() - started) * 1000)
                turn += 1
    return reference


def print_reference(reference: Reference) -> None:
    print(f"| {'in process':<12} | {'calls':>6} | {'p50 ms':>7} | {'p95 ms':>7} |")
    print(f"|{'-' * 14}|{'-' * 8}|{'-' * 9}|{'-' * 9}|")
    for name, timings in (("embed", reference.embed), ("embed + SQL", reference.embed_sql),
                          ("tool", reference.tool), ("search_text", reference.search_text)):
        print(f"| {name:<12} | {len(timings):>6} | {percentile(timings, 0.5):>7.2f} "
              f"| {percentile(timings, 0.95):>7.2f} |")


def print_ratios(reference: Reference, one_client: Level, mode: str) -> None:
    """The one-client MCP p50 over the in-process references (the goal: at most 2x), and its floor here."""
    mcp = one_client.percentile(0.5)
    ratios = [f"MCP p50 {mcp:.2f} ms = {mcp / percentile(reference.embed_sql, 0.5):.2f}x embed + SQL",
              f"{mcp / percentile(reference.tool, 0.5):.2f}x the tool in process"]
    if mode == "fts":
        ratios.append(f"{mcp / percentile(reference.search_text, 0.5):.2f}x quarry.search_text")
    print("1 client: " + ", ".join(ratios))
    # At one client the MCP client, the server and Postgres take turns, so a call takes about the sum of
    # their CPU per call. The clients' share and the tool's own run stay whatever the server's protocol
    # path costs: their sum is the p50 a server with no plumbing at all would reach on this machine.
    client_ms = one_client.cpu_ms_per_call()[2]
    tool_ms = percentile(reference.tool, 0.5)
    floor_ms = client_ms + tool_ms
    floor = [f"the clients' own CPU {client_ms:.2f} ms + the tool in process {tool_ms:.2f} = {floor_ms:.2f} ms"]
    if mode == "fts":
        floor.append(f"{floor_ms / percentile(reference.search_text, 0.5):.2f}x quarry.search_text")
    print("1 client, floor without any server plumbing: " + ", ".join(floor))


def print_capacity(level: Level) -> None:
    """The calls/s this machine's cores allow at the level's CPU per call, and the mean wait that implies."""
    cores = len(os.sched_getaffinity(0))
    cpu_ms = sum(level.cpu_ms_per_call())
    ceiling = cores * 1000 / cpu_ms
    # Little's law: N calls always in flight at X calls/s wait N / X on average
    print(f"{level.clients} clients: {cpu_ms:.1f} ms of CPU a call (server, Postgres, clients) on {cores} cores: "
          f"at most {ceiling:.0f} calls/s, so a mean latency of at least {level.clients / ceiling * 1000:.0f} ms")


def per_call(level: Level) -> str:
    """The level's CPU per successful call, ms: server, Postgres, clients."""
    return ", ".join(f"{ms:.1f}" for ms in level.cpu_ms_per_call())


def load_averages() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


async def run_level(url: str, clients: int, args: argparse.Namespace) -> Level:
    level = Level(clients, args.seconds)
    started = time.monotonic()
    stop_at = started + args.seconds
    await asyncio.gather(*(worker(url, index, level, stop_at, args) for index in range(clients)))
    level.wall_s = time.monotonic() - started
    return level


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,16,64", help="comma-separated concurrency levels")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each level")
    parser.add_argument("--mode", choices=["hybrid", "fts", "vector"], default="hybrid")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0, help="client HTTP/read timeout, seconds")
    parser.add_argument("--pool-max-size", type=int, help="QUARRY_POOL_MAX_SIZE for the server")
    parser.add_argument("--pool-timeout-ms", type=int, help="QUARRY_POOL_TIMEOUT_MS for the server")
    parser.add_argument("--no-ingest", action="store_true", help="reuse what the home already holds")
    parser.add_argument("--python-docs", action="store_true",
                        help=f"also ingest {', '.join(PYTHON_DOC_PARTS)} from {PYTHON_DOCS} (5-10k chunks in all)")
    parser.add_argument("--home", type=Path, default=OUT / "load", help="QUARRY_HOME (default bench/.out/load)")
    parser.add_argument("--port", type=int, help="serve on this loopback port (default: a free one)")
    parser.add_argument("--reference-seconds", type=float, default=5.0,
                        help="seconds per in-process reference (0: none)")
    parser.add_argument("--keep-postgres", action="store_true", help="leave the embedded Postgres running")
    args = parser.parse_args()

    home: Path = args.home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    # this process's own references read the same settings as the server
    os.environ.update({"QUARRY_HOME": str(home), "QUARRY_MODEL_CACHE": str(OUT / "models")})
    os.environ.pop("DATABASE_URL", None)
    if args.pool_max_size:
        os.environ["QUARRY_POOL_MAX_SIZE"] = str(args.pool_max_size)
    if args.pool_timeout_ms:
        os.environ["QUARRY_POOL_TIMEOUT_MS"] = str(args.pool_timeout_ms)
    env = dict(os.environ)
    if not args.no_ingest:
        quarry(env, "ingest", "docs", "--source", "quarry-docs", "--kind", "docs_site")
        quarry(env, "ingest", "engine", "--source", "quarry-engine")
        if args.python_docs:
            for part in PYTHON_DOC_PARTS:
                quarry(env, "ingest", str(PYTHON_DOCS / part), "--source", f"python-{part}", "--kind", "docs_site")

    port = args.port or free_port()
    server = start_server(env, port, home / "serve.log")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        asyncio.run(run_level(url, 2, argparse.Namespace(**{**vars(args), "seconds": 2.0})))  # warm-up
        print(f"server pid {server.pid} on port {port}; pool max {env.get('QUARRY_POOL_MAX_SIZE', '8 (default)')}, "
              f"pool timeout {env.get('QUARRY_POOL_TIMEOUT_MS', '5000 (default)')} ms; mode {args.mode}, "
              f"limit {args.limit}, {args.seconds:g} s per level; load averages {load_averages()}", flush=True)
        reference = measure_reference(args) if args.reference_seconds > 0 else None
        if reference is not None:
            print_reference(reference)
        print(f"| {'clients':>7} | {'calls':>6} | {'calls/s':>7} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} "
              f"| {'errors':<20} | {'RSS MiB':>7} | {'peak MiB':>8} | {'CPU ms/call: server, Postgres, clients':<38} |")
        print(f"|{'-' * 9}|{'-' * 8}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 22}|{'-' * 9}|{'-' * 10}"
              f"|{'-' * 40}|")
        one_client: Level | None = None
        levels: list[Level] = []
        for clients in (int(part) for part in args.clients.split(",")):
            before = cpu_seconds(server.pid), postgres_cpu_seconds(home), time.process_time()
            level = asyncio.run(run_level(url, clients, args))
            after = cpu_seconds(server.pid), postgres_cpu_seconds(home), time.process_time()
            level.cpu_s = (after[0] - before[0], after[1] - before[1], after[2] - before[2])
            rss, hwm = rss_kib(server.pid)
            ok = len(level.latencies_ms)
            errors = ", ".join(f"{code} {count}" for code, count in level.errors.most_common()) or "0"
            print(f"| {clients:>7} | {ok:>6} | {ok / level.wall_s:>7.1f} | {level.percentile(0.5):>7.1f} "
                  f"| {level.percentile(0.95):>7.1f} | {level.percentile(0.99):>7.1f} | {errors:<20} "
                  f"| {rss / 1024:>7.0f} | {hwm / 1024:>8.0f} | {per_call(level):<38} |", flush=True)
            if clients == 1 and reference is not None:
                one_client = level
            levels.append(level)
        if one_client is not None and reference is not None:
            print_ratios(reference, one_client, args.mode)
        for level in levels:
            if level.clients > 1:
                print_capacity(level)
        print(f"load averages after: {load_averages()}")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        if not args.keep_postgres:
            quarry(env, "stop")


if __name__ == "__main__":
    main()
