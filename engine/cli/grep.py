"""``quarry grep``: exact text or a regular expression over the stored corpus, printed as grep prints it."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from engine.retrieval.request import DEFAULT_GREP_LIMIT, MAX_GREP_LIMIT
from engine.vocabulary import CHUNK_KINDS

if TYPE_CHECKING:
    from engine.runtime import Runtime


def add_grep_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "grep", help="find exact text or a regular expression in the stored corpus (source:path:line: text)",
        epilog='example: quarry grep "CREATE INDEX CONCURRENTLY" -i --path "sql/**"')
    command.add_argument("pattern", help="a substring, or with --regex a Postgres regular expression")
    command.add_argument("--regex", action="store_true", help="treat the pattern as a regular expression")
    command.add_argument("-i", "--ignore-case", action="store_true", help="match regardless of case")
    command.add_argument("--path", action="append", metavar="GLOB",
                         help="only documents whose path matches (repeatable; ** crosses directories)")
    command.add_argument("--source", action="append", help="only this source slug (repeatable)")
    command.add_argument("--chunk-kind", action="append", choices=CHUNK_KINDS, metavar="KIND",
                         help=f"only lines in chunks of this kind (repeatable): {', '.join(CHUNK_KINDS)}")
    command.add_argument("--limit", type=int, default=DEFAULT_GREP_LIMIT,
                         help=f"matching lines to print (1-{MAX_GREP_LIMIT}, default: {DEFAULT_GREP_LIMIT})")
    command.add_argument("--cursor", help="go on from a previous page's next cursor")
    command.add_argument("--json", action="store_true", help="print the page as MCP's grep returns it")


def run_grep(runtime: Runtime, args: argparse.Namespace) -> int:
    from engine.retrieval.grep import grep

    filters: dict[str, dict[str, list[str | bool] | str]] = {}
    if args.path:
        filters["path"] = {"any_of": list(args.path)}
    if args.source:
        filters["source_slug"] = {"any_of": list(args.source)}
    if args.chunk_kind:
        filters["chunk_kind"] = {"any_of": list(args.chunk_kind)}
    page = grep(runtime.pool, args.pattern, regex=args.regex, case_sensitive=not args.ignore_case,
                filters=filters or None, cursor=args.cursor, limit=args.limit)
    if args.json:
        print(json.dumps(page.as_payload(), indent=2))
        return 0
    for match in page.matches:
        print(f"{match.source_slug}:{match.path}:{match.line}: {match.text}")
    if not page.matches:
        print("no matches")
    if page.next_cursor is not None:
        why = "the scan's time budget ended the page" if page.truncated else "more matches"
        print(f"… {why}: --cursor {page.next_cursor}")
    return 0
