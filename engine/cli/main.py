"""The ``quarry`` command line.

Exit codes: 0 success; 1 some files failed (ingest) or the command failed;
2 usage or configuration error; 3 quality gate failed (eval); 4 busy (another
ingest of the source is running).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from engine.embed.base import SPACES, TEXT_SPACE
from engine.errors import BusyError, InvalidRequestError, QuarryError, UnavailableError
from engine.retrieval.empty_answers import INGEST_HINT, nothing_to_search
from engine.retrieval.request import (
    DEFAULT_CODE_MODE,
    DEFAULT_LIMIT,
    DEFAULT_MODE,
    DEFAULT_PER_DOCUMENT,
    CodeMode,
    SearchMode,
)
from engine.vocabulary import CHUNK_KINDS, Attribution, SourceKind

if TYPE_CHECKING:
    from engine.runtime import Runtime

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 4

#: What to run when there is nothing to search yet.
#: Skipped files ``quarry ingest`` names at most; the rest are in --json and the job.
SKIPPED_SHOWN = 20

EXAMPLES = """\
examples:
  quarry ingest docs --source quarry-docs --kind docs_site --attribution official
  quarry search "create a partial index" --limit 5
  quarry mcp                        # MCP over stdio, for an IDE assistant
  quarry serve --port 8765          # MCP over streamable HTTP (API keys required)
  quarry keys create laptop         # prints a new API key once
  quarry psql -c 'select * from quarry.source_stats'
"""


def build_parser(*, registered: bool = True) -> argparse.ArgumentParser:
    """The ``quarry`` parser; ``registered=False`` leaves out the commands other packages add (``COMMAND_GROUP``)."""
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
        "ingest", help="ingest a folder, a file, a website, a package or a git repository into a source",
        description="Bring a source in line with a location: new and changed files are parsed, embedded and\n"
                    "written, files gone from it are deleted, unchanged ones cost a hash comparison (a website:\n"
                    "a conditional request). Without a location, the source's recorded one is read again.",
        epilog="examples:\n"
               "  quarry ingest ./docs --source my-docs --kind docs_site --url-template "
               "'https://example.com/{path_no_ext}'\n"
               "  quarry ingest ./docs --source my-docs --since origin/main      # in CI\n"
               "  quarry ingest https://docs.example.com/guide/ --source guide --max-pages 500\n"
               "  quarry ingest pypi:requests==2.32.3 --source requests-2.32\n"
               "  quarry ingest npm:zod@3.23.8 --source zod-3\n"
               "  quarry ingest https://github.com/org/repo.git@v1.2 --source repo\n"
               "  quarry ingest --source guide                  # refresh from the recorded location\n"
               "  quarry ingest --retry-failed guide            # re-fetch only the pages that failed",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ingest.add_argument("location", nargs="?",
                        help="a folder or file, https://… (a website), pypi:NAME[==VERSION], npm:NAME[@VERSION], "
                             "or a git URL (…/repo.git@REF, git+file:///path@REF); default: the source's recorded "
                             "location")
    ingest.add_argument("--source", help="source slug, e.g. postgres-docs")
    ingest.add_argument("--retry-failed", metavar="SOURCE", nargs="?", const="", default=None,
                        help="website sources: fetch again only the pages that failed last time")
    ingest.add_argument("--include", action="append", default=[], metavar="GLOB",
                        help="websites: crawl URL paths matching this glob (repeatable; default: the start "
                             "page's folder)")
    ingest.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="websites: never crawl URL paths matching this glob (repeatable)")
    ingest.add_argument("--max-pages", type=int, metavar="N", help="websites: stop after N pages")
    ingest.add_argument("--max-depth", type=int, metavar="N", help="websites: follow links at most N hops")
    ingest.add_argument("--delay", type=float, metavar="SECONDS",
                        help="websites: wait between requests to one host (robots.txt Crawl-delay raises it)")
    ingest.add_argument("--display-name", help="human-readable source name")
    ingest.add_argument("--kind", choices=get_args(SourceKind),
                        help="what the source is: sets how fast its results lose trust with age and is a search "
                             "filter (default: mixed for a new source; an existing source keeps its own)")
    ingest.add_argument("--attribution", choices=get_args(Attribution),
                        help="who publishes it, a trust factor of every result: official ranks above maintainer, "
                             "community, unknown (default: unknown for a new source; an existing source keeps its "
                             "own)")
    ingest.add_argument("--base-url", help="base URL; document URL = base + path")
    ingest.add_argument("--url-template", help="document URL template with {path}, {path_no_ext}, {stem}")
    ingest.add_argument("--source-version", metavar="RANGE",
                        help="release the source documents, e.g. 0.17.x: the language_target of every "
                             "document that states none")
    ingest.add_argument("--wait", action="store_true",
                        help="wait for a running ingest of the source instead of failing")
    ingest.add_argument("--since", metavar="REV",
                        help="read only files changed since this git revision (renames, deletions, uncommitted "
                             "and untracked files included); CI needs full history, e.g. fetch-depth: 0")
    ingest.add_argument("--json", action="store_true", help="print the summary as JSON")

    remove = commands.add_parser("remove", help="remove a source with all its documents (one transaction)",
                                 epilog="example: quarry remove old-docs --yes")
    remove.add_argument("source", help="source slug")
    remove.add_argument("--yes", action="store_true", help="confirm: the source cannot be restored but by "
                                                           "ingesting it again")

    search = commands.add_parser("search", help="search the corpus",
                                 epilog='example: quarry search "parse user id" --mode fts --json')
    search.add_argument("query")
    search.add_argument("--mode", choices=get_args(SearchMode), default=DEFAULT_MODE,
                        help=f"hybrid: keyword + semantic; fts: keyword only; vector: semantic only "
                             f"(default: {DEFAULT_MODE})")
    search.add_argument("--code-mode", choices=get_args(CodeMode), default=DEFAULT_CODE_MODE,
                        help=f"on: also the code embedding space; off: the general space only; exclusive: code "
                             f"only (default: {DEFAULT_CODE_MODE}, as MCP's search)")
    search.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                        help=f"results to return (1-50, default: {DEFAULT_LIMIT})")
    search.add_argument("--per-document", type=int, default=DEFAULT_PER_DOCUMENT, metavar="N",
                        help=f"chunks of one document shown at most, 0 for no cap (default: {DEFAULT_PER_DOCUMENT})")
    search.add_argument("--source", action="append", help="restrict to a source slug (repeatable)")
    search.add_argument("--chunk-kind", action="append", choices=CHUNK_KINDS, metavar="KIND",
                        help=f"only chunks of this kind (repeatable): {', '.join(CHUNK_KINDS)}")
    search.add_argument("--group-by", choices=("chunk", "document"), default="chunk",
                        help="document: one row per file, ranked by its best chunk, with its best spans "
                             "(default: chunk)")
    search.add_argument("--json", action="store_true", help="print results as JSON")

    from engine.cli.grep import add_grep_arguments

    add_grep_arguments(commands)

    if registered:
        _add_registered_commands(commands)

    keys = commands.add_parser("keys", help="create, list and revoke API keys for `quarry serve`",
                               epilog="example: quarry keys create ci-bot --scope search")
    key_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    key_create = key_commands.add_parser("create", help="create a key and print it (shown only once)",
                                         epilog="example: quarry keys create laptop")
    key_create.add_argument("name", help="a label for the key, unique among active keys")
    key_create.add_argument("--scope", choices=["search", "admin"], default="search",
                            help="search: the retrieval tools; admin: everything (default: search)")
    key_commands.add_parser("list", help="list keys (never their secrets)", epilog="example: quarry keys list")
    key_revoke = key_commands.add_parser("revoke", help="revoke a key by name or prefix; takes effect at once",
                                         epilog="example: quarry keys revoke laptop")
    key_revoke.add_argument("key", help="the key's name or its 12-character prefix")

    stop = commands.add_parser("stop", help="stop the embedded Postgres server (it keeps running between commands)",
                               epilog="example: quarry stop")
    stop.add_argument("--force", action="store_true",
                      help="stop it even while `quarry serve` or `quarry mcp` uses it (the server starts it again)")

    commands.add_parser("status", help="show the database, models and sources",
                        epilog="example: quarry status")

    reembed = commands.add_parser(
        "reembed", help="re-embed a space with the configured model; searches use the old vectors until it is done",
        epilog="example: QUARRY_CODE_MODEL=voyage-code-3 quarry reembed --space code")
    reembed.add_argument("--space", choices=list(SPACES), required=True, help="the logical space to re-embed")
    reembed.add_argument("--json", action="store_true", help="print the summary as JSON")

    from engine.cli.evaluate import EVAL_HELP, add_eval_arguments

    add_eval_arguments(commands.add_parser("eval", help=EVAL_HELP))

    reindex = commands.add_parser(
        "reindex", help="rebuild derived data (BM25 postings, facet counts, version constraints, "
        "links and imports, vector indexes) from the stored documents, chunks and vectors",
        epilog="example: quarry reindex --only text --only facets")
    reindex.add_argument("--only", action="append", choices=["text", "facets", "versions", "relations", "vectors"],
                         help="rebuild only this part (repeatable; default: all)")
    reindex.add_argument("--json", action="store_true", help="print the summary as JSON")

    from engine.cli.jobs import add_jobs_arguments

    add_jobs_arguments(commands)

    from engine.cli.vectors import add_vectors_arguments

    add_vectors_arguments(commands)
    return parser


#: Entry points in this group add commands to ``quarry``: each names a function that takes the
#: subparsers and gives every parser it adds a ``run(args) -> exit code`` default. The MCP
#: server registers ``mcp`` and ``serve`` so (pyproject.toml), and this package never imports it.
#: Reading entry points (importlib.metadata) costs more than building the rest of the parser, so
#: a built-in command does not: only help, usage errors and the registered commands themselves.
COMMAND_GROUP = "quarry.commands"


def _add_registered_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from importlib import metadata

    for entry in sorted(metadata.entry_points(group=COMMAND_GROUP), key=lambda entry: entry.name):
        entry.load()(commands)


def _parser_for(arguments: list[str]) -> argparse.ArgumentParser:
    """The parser ``arguments`` need: without the registered commands when they name a built-in one."""
    parser = build_parser(registered=False)
    named = next((argument for argument in arguments if not argument.startswith("-")), None)
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    if named not in commands.choices:  # a registered command, a typo, or help: every command is wanted
        _add_registered_commands(commands)
    return parser


def _parse_arguments(parser: argparse.ArgumentParser, arguments: list[str]) -> argparse.Namespace:
    """``parser.parse_args``, but an argument no parser knows is shown with its subcommand's usage.

    argparse hands a subcommand's unknown arguments back to the top-level parser, whose error
    shows ``usage: quarry [-h] COMMAND ...``: no help for a typo in ``quarry ingest . --sorce x``.
    """
    args, unknown = parser.parse_known_args(arguments)
    if unknown:
        command = _innermost_parser(parser, args)
        options = [option for action in command._actions for option in action.option_strings]
        close = difflib.get_close_matches(unknown[0].split("=", 1)[0], options, n=1)
        hint = f" (did you mean {close[0]}?)" if unknown[0].startswith("-") and close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def _innermost_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)subcommand ``args`` were parsed for, e.g. ``quarry keys create``'s."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _innermost_parser(chosen, args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["psql"] and not {"-h", "--help"} & set(arguments[1:2]):
        # Everything after `psql` belongs to psql, options included (argparse would claim them).
        args = argparse.Namespace(command="psql", psql_args=arguments[1:])
    else:
        args = _parse_arguments(_parser_for(arguments), arguments)
    # numpy's OpenBLAS starts a thread per core at import, and they spin a while: ~70 ms of CPU a
    # command, for no use (what Quarry runs on numpy is elementwise; matrices go through onnxruntime)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # Imported once the arguments are known: --help and usage errors need no database driver.
    import psycopg
    import psycopg_pool

    from engine.admin.jobs import JobCancelledError

    try:
        return _dispatch(args)
    except BusyError as error:
        print(f"quarry: busy: {error}", file=sys.stderr)
        return EXIT_BUSY
    except JobCancelledError as error:
        print(f"quarry: cancelled: {error}; what it wrote is kept (quarry jobs retry ID finishes it)",
              file=sys.stderr)
        return EXIT_FAILED
    except UnavailableError as error:  # a database or model provider down: not the caller's mistake
        print(f"quarry: unavailable: {error}", file=sys.stderr)
        return EXIT_FAILED
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as error:  # the database went away or timed out
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        rerun = "; rerun to finish (completed documents are kept)" if args.command == "ingest" else ""
        print(f"quarry: unavailable: the database failed: {reason}{rerun}", file=sys.stderr)
        return EXIT_FAILED
    except (QuarryError, NotADirectoryError, ValueError) as error:
        print(f"quarry: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("quarry: interrupted; rerun to finish (completed documents are kept)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `quarry search ... | head`: the reader has what it wanted
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe stopped


def _dispatch(args: argparse.Namespace) -> int:
    from engine.runtime import Runtime

    if args.command == "stop":
        from engine.config import get_settings
        from engine.store.db import stop_embedded_server

        settings = get_settings()
        if settings.database_url:
            raise ValueError("DATABASE_URL is set: Quarry does not manage that server")
        stopped = stop_embedded_server(settings.home, force=args.force)
        print("quarry: embedded Postgres stopped" if stopped else "quarry: embedded Postgres was not running")
        return EXIT_OK
    _announce_first_boot()
    if args.command == "psql":
        from engine.store.db import database_url, psql_executable

        url = database_url()
        executable = psql_executable()
        os.execv(executable, [executable, url, *args.psql_args])
    if getattr(args, "run", None) is not None:  # a command another package registered
        code: int = args.run(args)
        return code

    with Runtime() as runtime:
        if args.command == "migrate":
            from engine.store.migrations import upgrade

            upgrade(runtime.database_url)
            print("quarry: database is up to date")
            return EXIT_OK
        if args.command == "ingest":
            return _ingest(runtime, args)
        if args.command == "search":
            return _search(runtime, args)
        if args.command == "grep":
            from engine.cli.grep import run_grep

            return run_grep(runtime, args)
        if args.command == "remove":
            from engine.admin.sources import remove_source

            if not args.yes:
                raise InvalidRequestError(f"removing {args.source!r} deletes all its documents: add --yes")
            print(remove_source(runtime.pool, args.source, runtime.settings.fetch_dir).one_line())
            return EXIT_OK
        if args.command == "status":
            return _status(runtime)
        if args.command == "reembed":
            return _reembed(runtime, args)
        if args.command == "reindex":
            return _reindex(runtime, args)
        if args.command == "eval":
            from engine.cli.evaluate import run_eval

            return run_eval(runtime, args)
        if args.command == "jobs":
            from engine.cli.jobs import run_jobs

            return run_jobs(runtime, args)
        if args.command == "vectors":
            from engine.cli.vectors import run_vectors

            return run_vectors(runtime, args)
        if args.command == "keys":
            return _keys(runtime, args)
    raise AssertionError(args.command)


def _announce_first_boot() -> None:
    """Say why the first command in a new QUARRY_HOME is silent for a while: it creates the embedded database."""
    from engine.config import get_settings

    settings = get_settings()
    # PG_VERSION is the first file initdb writes in the data directory (engine.store.db keeps it in <home>/pgdata).
    if settings.database_url is None and not (settings.home / "pgdata" / "PG_VERSION").exists():
        print(f"quarry: starting the embedded database in {settings.home} (first run only: creating it) …",
              file=sys.stderr, flush=True)


def _prepare_local_model(runtime: Runtime, *, for_queries: bool = False) -> None:
    """Load the local model before work that needs it, saying so when that is slow (its first preparation).

    ``for_queries``: the session that embeds queries, all a search needs (one session, not two, loaded).
    For documents, a model prepared already is left to load when a chunk needs it: a re-ingest that
    changed nothing, or only chunks whose vectors are stored, never pays for it.
    """
    from engine.providers.selection import LOCAL, model_choice

    if all(model_choice(runtime.settings, space) != LOCAL for space in SPACES):
        return  # no local model: nothing to prepare (and onnxruntime stays unimported)
    from engine.cli.progress import announce_if_slow
    from engine.embed.local import LocalMiniLM

    with announce_if_slow("quarry: preparing the local model (first run only) …", sys.stderr):
        for embedder in {id(embedder): embedder for embedder in runtime.embedders.values()}.values():
            if isinstance(embedder, LocalMiniLM) and (for_queries or not embedder.is_prepared()):
                embedder.prepare(for_queries=for_queries)


def _reembed(runtime: Runtime, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from engine.admin.reembed import reembed_space

    def show(embedded: int) -> None:
        if sys.stderr.isatty() and not args.json:
            print(f"\rquarry: {embedded} chunks embedded", end="", file=sys.stderr, flush=True)

    summary = reembed_space(runtime.pool, args.space, runtime.embedders[args.space], progress=show)
    if sys.stderr.isatty() and not args.json:
        print(file=sys.stderr)
    print(json.dumps(asdict(summary)) if args.json else summary.one_line())
    return EXIT_OK


def _reindex(runtime: Runtime, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from engine.admin.reindex import PARTS
    from engine.cli.jobs import reindex_as_job

    def show(part: str) -> None:
        if not args.json:
            print(f"quarry: rebuilding {part}", file=sys.stderr)

    summary = reindex_as_job(runtime.pool, args.only or PARTS, progress=show)
    print(json.dumps(asdict(summary)) if args.json else summary.one_line())
    return EXIT_OK


def _keys(runtime: Runtime, args: argparse.Namespace) -> int:
    from engine.store import api_keys
    if args.keys_command == "create":
        created = api_keys.create_key(runtime.pool, args.name, [args.scope])
        print(created.secret)
        print(f"quarry: created key {created.name!r} (prefix {created.prefix}, scopes {','.join(created.scopes)}); "
              "it is shown only this once", file=sys.stderr)
        return EXIT_OK
    if args.keys_command == "list":
        for key in api_keys.list_keys(runtime.pool):
            state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
            used = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
            print(f"{key.prefix}  {key.name}  scopes={','.join(key.scopes)}  created {key.created_at:%Y-%m-%d %H:%M}"
                  f"  last used {used}  {state}")
        return EXIT_OK
    api_keys.revoke_key(runtime.pool, args.key)
    print(f"quarry: revoked {args.key!r}")
    return EXIT_OK


def _ingest(runtime: Runtime, args: argparse.Namespace) -> int:
    from engine.cli.jobs import ingest_job_number
    from engine.cli.progress import IngestDisplay
    from engine.fetch.fetching import locate, recorded_location
    from engine.fetch.locations import FetchOptions
    from engine.ingest.changes import changed_since
    from engine.ingest.pipeline import Ingestor
    from engine.ingest.sources import SourceSpec
    from engine.ingest.summary import skipped_lines

    slug = args.source or args.retry_failed
    if not slug:
        raise InvalidRequestError("--source is required (or --retry-failed SOURCE)")
    source = SourceSpec(
        slug=slug, display_name=args.display_name, kind=args.kind, attribution=args.attribution,
        base_url=args.base_url, url_template=args.url_template, version=args.source_version,
    )
    options = FetchOptions(tuple(args.include), tuple(args.exclude), args.max_pages, args.max_depth, args.delay)
    location = args.location
    if location is None:  # a refresh: as recorded, unless this command says how to fetch
        location, recorded = recorded_location(runtime.pool, slug)
        options = options if options != FetchOptions() else recorded
    options = replace(options, retry_failed_only=args.retry_failed is not None)
    where = locate(location, runtime.settings, slug, options)
    changed = None
    if args.since is not None:
        if not isinstance(where, Path):
            raise InvalidRequestError("--since reads a local git work tree; a git location diffs against the "
                                      "last ingested commit by itself")
        changed = changed_since(where, args.since)
    if not isinstance(where, Path) or where.exists():  # else the ingest says what is wrong, before any model
        _prepare_local_model(runtime)
    ingestor = Ingestor(runtime.pool, runtime.embedders, max_file_bytes=runtime.settings.max_file_bytes)
    # Progress goes to stderr, so a terminal there gets the live line even when stdout is piped
    # (--json > summary.json), and a CI log gets a plain line every few seconds.
    with IngestDisplay(sys.stderr, None, live=sys.stderr.isatty()) as display:
        summary = ingestor.ingest(where, source, wait_for_lock=args.wait, progress=display.update,
                                  changed=changed)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        for path, reason in summary.failed:
            print(f"failed: {path}: {reason}", file=sys.stderr)
        if summary.skipped:
            number = ingest_job_number(runtime.pool, source.slug)
            where_listed = "--json" if number is None else f"--json or quarry jobs show {number}"
            for line in skipped_lines(summary.skipped, limit=SKIPPED_SHOWN, more=f"(see {where_listed})"):
                print(line, file=sys.stderr)
        print(summary.one_line())
    return EXIT_FAILED if summary.failed else EXIT_OK


def _search(runtime: Runtime, args: argparse.Namespace) -> int:
    from engine.retrieval.pipeline import retrieve
    from engine.retrieval.request import SearchRequest

    if not 1 <= args.limit <= 50:
        raise ValueError("--limit must be between 1 and 50")
    code_mode: CodeMode = DEFAULT_CODE_MODE if args.mode == "fts" else args.code_mode  # fts uses no embeddings
    if args.per_document < 0:
        raise ValueError("--per-document must be 0 (no cap) or more")
    sources = tuple(args.source or ())
    empty = nothing_to_search(runtime.pool, sources)
    if empty is not None and not args.json:  # JSON stays the response MCP's `search` gives
        print(f"no results: {empty}")
        return EXIT_OK
    if args.mode != "fts":
        _prepare_local_model(runtime, for_queries=True)
    filters = {"chunk_kind": {"any_of": list(args.chunk_kind)}} if args.chunk_kind else None
    retrieval = retrieve(runtime, SearchRequest((args.query,), args.mode, code_mode, args.limit, sources=sources,
                                                filters=filters, per_document=args.per_document or None,
                                                group_by=args.group_by))
    if args.json:
        if empty is not None:
            print(f"quarry: {empty}", file=sys.stderr)
        # the same response MCP's `search` gives for the same arguments, before its size bound
        print(json.dumps({**retrieval.summary(), "notes": retrieval.notes()}, indent=2))
        return EXIT_OK
    if retrieval.degradation.degraded:
        print(f"quarry: degraded: {'; '.join(retrieval.degradation.reasons)}", file=sys.stderr)
    if not retrieval.hits:
        print("no results")
    if retrieval.documents is not None:  # --group-by document: a file per row, with its best spans
        for document in retrieval.documents:
            best = document.best.hit
            print(f"{document.rank:2}. [{best.source_slug}] {best.path}  score {document.score:.4f}")
            for span in document.spans():
                hit = span.chunk.hit
                where = hit.symbol_path or " > ".join(hit.heading_path) or hit.title
                print(f"    {hit.start_line}-{hit.end_line}  {where}: {' '.join((span.snippet or '').split())[:120]}")
        return EXIT_OK
    for ranked in retrieval.hits:
        hit = ranked.hit
        where = hit.symbol_path or " > ".join(hit.heading_path) or hit.title
        ranks = f"fts #{hit.fts_rank or '-'} vector #{hit.vector_rank or '-'} code #{hit.code_rank or '-'}"
        how = f"rerank {ranked.rerank_score:.4f}" if ranked.reranked else ranks
        print(f"{ranked.rank:2}. [{hit.source_slug}] {hit.path}:{hit.start_line}-{hit.end_line}  {where}")
        print(f"    confidence {ranked.confidence:.4f} ({how})")
        snippet = " ".join(hit.content.split())[:160]
        print(f"    {snippet}")
    return EXIT_OK


def _status(runtime: Runtime) -> int:
    with runtime.pool.connection() as conn:
        rows = conn.execute(
            "select slug, documents, chunks, embeddings, last_ingested_at from quarry.source_stats order by slug"
        ).fetchall()
        spaces = conn.execute("select name, model, dimension from quarry.embedding_spaces order by name").fetchall()
        running = {source: (number, started) for source, number, started in conn.execute(
            "select source, number, started_at from quarry.job_overview"
            " where kind = 'ingest' and status = 'running' order by id").fetchall()}
    external = runtime.settings.database_url is not None
    print(f"database: {'DATABASE_URL' if external else 'embedded in ' + str(runtime.settings.home)}")
    if runtime.settings.read_database_urls:
        from engine.store.replicas import check_replicas

        for health in check_replicas(runtime.settings.read_database_urls, runtime.database_url, runtime.settings):
            print(f"read replica {health.dsn}: {health.summary()}")
    for name, model, dimension in spaces:
        print(f"space {name}: {model} ({dimension} dims)")
    if not rows:
        print(f"sources: none yet ({INGEST_HINT})")
    for slug, documents, chunks, embeddings, last in rows:
        print(f"source {slug}: {documents} documents, {chunks} chunks")
        per_space = ", ".join(f"{count} {space}" for space, count in sorted(embeddings.items(), key=_text_first))
        print(f"  embeddings: {per_space or 'none'}")
        finished = None if last is None else f"{last:%Y-%m-%d %H:%M:%S}"
        if slug in running:
            number, started = running[slug]
            since = "" if started is None else f" since {started:%Y-%m-%d %H:%M:%S}"
            before = "none finished before" if finished is None else f"the last finished {finished}"
            print(f"  last ingest: running{since} (job {number}); {before}")
        else:
            print(f"  last ingest: {finished or 'never'}")
    return EXIT_OK


def _text_first(space_count: tuple[str, int]) -> tuple[bool, str]:
    """Embedding spaces in reading order: the general one first, then by name."""
    return space_count[0] != TEXT_SPACE, space_count[0]


if __name__ == "__main__":
    sys.exit(main())
