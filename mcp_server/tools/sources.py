"""``add_source``, ``refresh_source``, ``remove_source``: manage sources over MCP, for admin keys.

Each queues a durable job (``quarry.enqueue_source_job``, the one way the read-only server can
queue work, which checks the caller's admin key itself) and answers at once with its id; ``jobs``
with action ``show`` follows it. The server never fetches or writes itself: a worker with the
owner role runs the queue (``quarry jobs run --follow``, or ``quarry jobs run`` from CI). Locations are remote only — a
key must not make the worker read its own disk — and the worker checks that again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.admin.jobs import enqueue_source_job
from engine.fetch.fetching import recorded_location, refuse_local_reach
from engine.fetch.locations import FetchOptions, parse_location
from engine.ingest.sources import SLUG_PATTERN, SourceSpec
from engine.vocabulary import Attribution, SourceKind
from mcp_server.auth import admin_database
from mcp_server.envelope import to_json
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

WORKER_HINT = ("A worker with write access runs it (`quarry jobs run --follow`, or `quarry jobs run` in CI); "
               "follow it with jobs action='show'.")
_MAX_GLOBS = 20


class AddSourceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    source: str = Field(pattern=SLUG_PATTERN, description="Slug of the new (or existing) source.")
    location: str = Field(min_length=1, max_length=2000,
                          description="https://… website (crawled from that page's folder), pypi:NAME[==VERSION], "
                                      "npm:NAME[@VERSION], or a git URL (…/repo.git@REF).")
    kind: SourceKind | None = Field(default=None, description="Default: docs_site for a website, else code_repo.")
    attribution: Attribution | None = None
    display_name: str | None = Field(default=None, min_length=1, max_length=200)
    url_template: str | None = Field(default=None, max_length=2000)
    version: str | None = Field(default=None, min_length=1, max_length=200,
                                description="Release the docs are for; a package's own version by default.")
    include: list[str] = Field(default_factory=list, max_length=_MAX_GLOBS,
                               description="Websites: URL path globs to crawl instead of the start page's folder.")
    exclude: list[str] = Field(default_factory=list, max_length=_MAX_GLOBS,
                               description="Websites: URL path globs never to crawl.")
    max_pages: int | None = Field(default=None, ge=1, le=100_000)
    max_depth: int | None = Field(default=None, ge=0, le=100)


class RefreshSourceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    source: str = Field(pattern=SLUG_PATTERN)
    retry_failed: bool = Field(default=False, description="Websites: fetch again only the pages that failed.")


class RemoveSourceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    source: str = Field(pattern=SLUG_PATTERN)


def _queued(job_id: Any, new: bool, what: str) -> str:
    note = f"{what} queued. " if new else "A job for this source was already waiting: this is it. "
    return to_json({"job_id": str(job_id), "status": "queued", "new": new, "note": note + WORKER_HINT})


def run_add_source(context: ToolContext, args: AddSourceArgs) -> str:
    context.require_scope("admin", "add_source")
    location = parse_location(args.location)
    refuse_local_reach(location, allow_private=context.backend.settings.fetch_private_hosts)
    source = SourceSpec(slug=args.source, display_name=args.display_name, kind=args.kind,
                        attribution=args.attribution, url_template=args.url_template, version=args.version)
    options = FetchOptions(tuple(args.include), tuple(args.exclude), args.max_pages, args.max_depth)
    # A queued job is read back by whoever lists jobs: a token in the URL is not kept (netrc is).
    arguments = {"location": location.shown, "fetch": options.as_arguments(),
                 "source": source.model_dump(exclude_none=True), "wait": True, "since": None}
    with admin_database(context) as (pool, api_key):
        job_id, new = enqueue_source_job(pool, "ingest", args.source, arguments, api_key=api_key)
    return _queued(job_id, new, f"The ingest of {location.shown} into {args.source!r} is")


def run_refresh_source(context: ToolContext, args: RefreshSourceArgs) -> str:
    context.require_scope("admin", "refresh_source")
    text, options = recorded_location(context.backend.pool, args.source)
    refuse_local_reach(parse_location(text), allow_private=context.backend.settings.fetch_private_hosts)
    arguments = {"location": text, "fetch": options.as_arguments() | {"retry_failed_only": args.retry_failed},
                 "source": {"slug": args.source}, "wait": True, "since": None}
    with admin_database(context) as (pool, api_key):
        job_id, new = enqueue_source_job(pool, "ingest", args.source, arguments, api_key=api_key)
    return _queued(job_id, new, f"The refresh of {args.source!r} from {text} is")


def run_remove_source(context: ToolContext, args: RemoveSourceArgs) -> str:
    context.require_scope("admin", "remove_source")
    recorded_location(context.backend.pool, args.source)  # NOT_FOUND now rather than a failed job later
    with admin_database(context) as (pool, api_key):
        job_id, new = enqueue_source_job(pool, "remove_source", args.source, {}, api_key=api_key)
    return _queued(job_id, new, f"The removal of {args.source!r} (all its documents, in one transaction) is")


ADD_SOURCE = ToolSpec(
    name="add_source", title="Add a source",
    description="Admin: queue an ingest of a website, a PyPI or npm release, or a git repository into a source "
                "(new or existing). Returns the job_id; follow it with jobs.",
    arguments=AddSourceArgs, run=run_add_source, cost=one_token, read_only=False,
    output_schema=shape({"job_id": "string", "status": "string", "new": "boolean"}), audience="admin")
REFRESH_SOURCE = ToolSpec(
    name="refresh_source", title="Refresh a source",
    description="Admin: queue a re-ingest of a source from its recorded location (unchanged pages cost a "
                "conditional request, unchanged files nothing). Returns the job_id.",
    arguments=RefreshSourceArgs, run=run_refresh_source, cost=one_token, read_only=False,
    output_schema=shape({"job_id": "string", "status": "string", "new": "boolean"}), audience="admin")
REMOVE_SOURCE = ToolSpec(
    name="remove_source", title="Remove a source",
    description="Admin: queue the removal of a source with all its documents, atomically. Returns the job_id.",
    arguments=RemoveSourceArgs, run=run_remove_source, cost=one_token, read_only=False,
    output_schema=shape({"job_id": "string", "status": "string", "new": "boolean"}), audience="admin")
