"""The ``quarry`` command line.

Exit codes: 0 success; 1 some files failed (ingest) or the command failed;
2 usage or configuration error; 4 busy (another ingest of the source is running).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from engine.errors import BusyError, QuarryError
from engine.ingest.sources import Attribution, SourceKind

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 4

EXAMPLES = """\
examples:
  quarry ingest docs --source quarry-docs --kind docs_site --attribution official
  quarry search "create a partial index" --limit 5
  quarry serve                      # MCP over stdio
  quarry serve --http --port 8765   # MCP over streamable HTTP
  quarry psql -c 'select * from quarry.source_stats'
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quarry",
        description="Postgres-native hybrid retrieval for documentation and code.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("migrate", help="create or upgrade the database schema (idempotent)",
                        epilog="example: quarry migrate")

    psql = commands.add_parser("psql", help="open psql on Quarry's database",
                               epilog="example: quarry psql -c 'select * from quarry.source_stats'")
    psql.add_argument("psql_args", nargs=argparse.REMAINDER, help="arguments passed to psql")

    ingest = commands.add_parser(
        "ingest", help="ingest a directory into a source (incremental)",
        epilog="example: quarry ingest ./docs --source my-docs --kind docs_site --url-template "
               "'https://example.com/{path_no_ext}'",
    )
    ingest.add_argument("path", type=Path, help="directory to ingest")
    ingest.add_argument("--source", required=True, help="source slug, e.g. postgres-docs")
    ingest.add_argument("--display-name", help="human-readable source name")
    ingest.add_argument("--kind", choices=get_args(SourceKind))
    ingest.add_argument("--attribution", choices=get_args(Attribution))
    ingest.add_argument("--base-url", help="base URL; document URL = base + path")
    ingest.add_argument("--url-template", help="document URL template with {path}, {path_no_ext}, {stem}")
    ingest.add_argument("--wait", action="store_true", help="wait for a running ingest of the source instead of failing")
    ingest.add_argument("--json", action="store_true", help="print the summary as JSON")

    search = commands.add_parser("search", help="search the corpus",
                                 epilog='example: quarry search "parse user id" --mode fts --json')
    search.add_argument("query")
    search.add_argument("--mode", choices=["hybrid", "fts", "vector"], default="hybrid")
    search.add_argument("--limit", type=int, default=10, help="results to return (1-50)")
    search.add_argument("--source", action="append", help="restrict to a source slug (repeatable)")
    search.add_argument("--json", action="store_true", help="print results as JSON")

    serve = commands.add_parser("serve", help="serve MCP tools (stdio by default)",
                                epilog="example: quarry serve --http --host 127.0.0.1 --port 8765")
    serve.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)

    commands.add_parser("status", help="show the database, models and sources",
                        epilog="example: quarry status")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except BusyError as error:
        print(f"quarry: busy: {error}", file=sys.stderr)
        return EXIT_BUSY
    except (QuarryError, NotADirectoryError, ValueError) as error:
        print(f"quarry: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("quarry: interrupted; rerun to finish (completed documents are kept)", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    from engine.runtime import Runtime

    if args.command == "psql":
        from engine.db import database_url, psql_executable

        url = database_url()
        executable = psql_executable()
        os.execv(executable, [executable, url, *args.psql_args])
    if args.command == "serve":
        from mcp_server.server import serve

        serve(http=args.http, host=args.host, port=args.port)
        return EXIT_OK

    with Runtime() as runtime:
        if args.command == "migrate":
            from engine.migrations import upgrade

            upgrade(runtime.database_url)
            print("quarry: database is up to date")
            return EXIT_OK
        if args.command == "ingest":
            return _ingest(runtime, args)
        if args.command == "search":
            return _search(runtime, args)
        if args.command == "status":
            return _status(runtime)
    raise AssertionError(args.command)


def _ingest(runtime: object, args: argparse.Namespace) -> int:
    from engine.ingest.pipeline import Ingestor, IngestProgress
    from engine.ingest.sources import SourceSpec
    from engine.runtime import Runtime

    assert isinstance(runtime, Runtime)
    source = SourceSpec(
        slug=args.source, display_name=args.display_name, kind=args.kind, attribution=args.attribution,
        base_url=args.base_url, url_template=args.url_template,
    )
    show_progress = sys.stderr.isatty() and not args.json
    last_shown = 0.0

    def progress(state: IngestProgress) -> None:
        nonlocal last_shown
        now = time.monotonic()
        if show_progress and now - last_shown > 0.1:
            last_shown = now
            path = state.current_path[-60:]
            print(f"\r\033[K  {state.files_seen} files  {path}", end="", file=sys.stderr, flush=True)

    ingestor = Ingestor(runtime.pool, runtime.embedders, max_file_bytes=runtime.settings.max_file_bytes)
    summary = ingestor.ingest(args.path, source, wait_for_lock=args.wait, progress=progress)
    if show_progress:
        print("\r\033[K", end="", file=sys.stderr)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        for path, reason in summary.failed:
            print(f"failed: {path}: {reason}", file=sys.stderr)
        print(summary.one_line())
    return EXIT_FAILED if summary.failed else EXIT_OK


def _search(runtime: object, args: argparse.Namespace) -> int:
    from engine.runtime import Runtime
    from engine.search import search

    assert isinstance(runtime, Runtime)
    if not 1 <= args.limit <= 50:
        raise ValueError("--limit must be between 1 and 50")
    embedder = None if args.mode == "fts" else runtime.embedders["text"]
    hits = search(runtime.pool, embedder, args.query, mode=args.mode, limit=args.limit,
                  sources=args.source, rrf_k=runtime.settings.rrf_k)
    if args.json:
        from dataclasses import asdict

        print(json.dumps([asdict(hit) for hit in hits], indent=2))
        return EXIT_OK
    if not hits:
        print("no results")
    for position, hit in enumerate(hits, 1):
        where = hit.symbol_path or " > ".join(hit.heading_path) or hit.title
        ranks = f"fts #{hit.fts_rank or '-'} vector #{hit.vector_rank or '-'}"
        print(f"{position:2}. [{hit.source_slug}] {hit.path}:{hit.start_line}-{hit.end_line}  {where}")
        print(f"    score {hit.fused_score:.4f} ({ranks})")
        snippet = " ".join(hit.content.split())[:160]
        print(f"    {snippet}")
    return EXIT_OK


def _status(runtime: object) -> int:
    from engine.runtime import Runtime

    assert isinstance(runtime, Runtime)
    with runtime.pool.connection() as conn:
        rows = conn.execute(
            "select slug, documents, chunks, embeddings, last_ingested_at from quarry.source_stats order by slug"
        ).fetchall()
        spaces = conn.execute("select name, model, dimension from quarry.embedding_spaces order by name").fetchall()
    external = runtime.settings.database_url is not None
    print(f"database: {'DATABASE_URL' if external else 'embedded in ' + str(runtime.settings.home)}")
    for name, model, dimension in spaces:
        print(f"space {name}: {model} ({dimension} dims)")
    for slug, documents, chunks, embeddings, last in rows:
        print(f"source {slug}: {documents} documents, {chunks} chunks, {embeddings} embeddings, last ingest {last}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
