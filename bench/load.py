"""Load on the streamable-HTTP MCP endpoint: N concurrent MCP clients calling ``search``.

    python bench/load.py [--clients 1,16,64] [--seconds 10] [--mode hybrid] [--no-ingest]

Starts ``quarry serve --no-auth`` as a subprocess on loopback with ``QUARRY_HOME=bench/.out/load``
(ingesting Quarry's own docs and ``engine/`` there first unless ``--no-ingest``), then for each
concurrency level runs that many asyncio workers for a fixed time, each with its own MCP client
session (SDK ``Client`` over streamable HTTP, its own HTTP connection pool), calling ``search``
with a rotating set of queries. Reports throughput, p50/p95/p99 latency, errors by code (the
tool's ``{"error": {"code": ...}}`` envelope, or ``TRANSPORT:<exception>``) and the server
process's RSS (``/proc/<pid>/status``: VmRSS at the end of the level, VmHWM peak so far).

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
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / ".out"

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

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
    parser.add_argument("--no-ingest", action="store_true", help="reuse what bench/.out/load already holds")
    parser.add_argument("--keep-postgres", action="store_true", help="leave the embedded Postgres running")
    args = parser.parse_args()

    home = OUT / "load"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "QUARRY_HOME": str(home), "QUARRY_MODEL_CACHE": str(OUT / "models")}
    env.pop("DATABASE_URL", None)
    if args.pool_max_size:
        env["QUARRY_POOL_MAX_SIZE"] = str(args.pool_max_size)
    if args.pool_timeout_ms:
        env["QUARRY_POOL_TIMEOUT_MS"] = str(args.pool_timeout_ms)
    if not args.no_ingest:
        quarry(env, "ingest", "docs", "--source", "quarry-docs", "--kind", "docs_site")
        quarry(env, "ingest", "engine", "--source", "quarry-engine")

    port = free_port()
    server = start_server(env, port, home / "serve.log")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        asyncio.run(run_level(url, 2, argparse.Namespace(**{**vars(args), "seconds": 2.0})))  # warm-up
        print(f"server pid {server.pid}; pool max {env.get('QUARRY_POOL_MAX_SIZE', '8 (default)')}, "
              f"pool timeout {env.get('QUARRY_POOL_TIMEOUT_MS', '5000 (default)')} ms; mode {args.mode}, "
              f"limit {args.limit}, {args.seconds:g} s per level", flush=True)
        print(f"| {'clients':>7} | {'calls':>6} | {'calls/s':>7} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} "
              f"| {'errors':<20} | {'RSS MiB':>7} | {'peak MiB':>8} |")
        print(f"|{'-' * 9}|{'-' * 8}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 22}|{'-' * 9}|{'-' * 10}|")
        for clients in (int(part) for part in args.clients.split(",")):
            level = asyncio.run(run_level(url, clients, args))
            rss, hwm = rss_kib(server.pid)
            ok = len(level.latencies_ms)
            errors = ", ".join(f"{code} {count}" for code, count in level.errors.most_common()) or "0"
            print(f"| {clients:>7} | {ok:>6} | {ok / level.wall_s:>7.1f} | {level.percentile(0.5):>7.1f} "
                  f"| {level.percentile(0.95):>7.1f} | {level.percentile(0.99):>7.1f} | {errors:<20} "
                  f"| {rss / 1024:>7.0f} | {hwm / 1024:>8.0f} |", flush=True)
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
