"""``jobs``: list, show, cancel and retry the recorded ingest / re-embed / reindex jobs.

The server runs as the read-only role and cannot run an ingest (it has neither the
source checkout nor write access to the corpus): ``cancel`` and ``retry`` go through
definer functions (sql/080-jobs.sql) that check the caller's admin key themselves
(``mcp_server.auth.admin_database``). A retry is queued, and ``quarry jobs run`` (or
``quarry jobs retry ID``) on the CI machine runs it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from engine.admin.jobs import Job, enqueue_retry, list_jobs, request_cancel, show_job
from engine.ingest.sources import SLUG_PATTERN
from engine.vocabulary import JobKind, JobStatus
from mcp_server import limits
from mcp_server.auth import admin_database
from mcp_server.bounds import bounded_json
from mcp_server.envelope import to_json
from mcp_server.schemas import AnyUuid
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

#: Jobs on one ``list`` page, at most; failed files shown by ``show``, at most.
MAX_JOBS_PAGE = 50
MAX_SHOWN_FAILURES = 100
_MAX_LISTED_ERROR_CHARS = 300

JobAction = Literal["list", "show", "cancel", "retry"]
_ONE_JOB: tuple[JobAction, ...] = ("show", "cancel", "retry")
_LIST_ONLY = ("status", "kind", "source", "limit", "cursor")

RUN_QUEUED_HINT = ("This server cannot run jobs: run `quarry jobs run` (every queued job) or `quarry jobs retry "
                   "<job_id>` where the source is checked out and the database is writable, e.g. in the CI job "
                   "that ingests. Follow it with action='show'.")


class JobsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    action: JobAction
    job_id: AnyUuid | None = Field(default=None, validate_default=True, description="For show, cancel, retry.")
    status: JobStatus | None = Field(default=None)
    kind: JobKind | None = Field(default=None)
    source: str | None = Field(default=None, pattern=SLUG_PATTERN)
    limit: int = Field(default=20, ge=1, le=MAX_JOBS_PAGE)
    cursor: str | None = Field(default=None, min_length=1, max_length=limits.MAX_CURSOR_CHARS)

    @field_validator("job_id")
    @classmethod
    def _job_id_for_one_job(cls, job_id: object, info: ValidationInfo) -> object:
        # `action` is declared first, so it is validated (and in info.data) by now.
        action = info.data.get("action")
        if action in _ONE_JOB and job_id is None:
            raise PydanticCustomError("incompatible", "is required when action is show, cancel or retry")
        if action == "list" and job_id is not None:
            raise PydanticCustomError("incompatible", "must be omitted when action is list (use show)")
        return job_id

    @field_validator(*_LIST_ONLY)
    @classmethod
    def _list_arguments_for_list(cls, value: object, info: ValidationInfo) -> object:
        action = info.data.get("action")
        if action is not None and action != "list" and value is not None:
            raise PydanticCustomError("incompatible", "is only an argument of action 'list'")
        return value


def _listed(job: Job) -> dict[str, Any]:
    row = job.as_dict()
    error = row["error"]
    return {
        "job_id": row["id"], "number": row["number"], "kind": row["kind"], "source": row["source"],
        "status": row["status"], "retry_of": row["retry_of"], "progress": row["progress"],
        # skipped files are named in `show`, not in every listed row
        "counts": {key: value for key, value in row["counts"].items() if key != "skipped_files"},
        "failure_count": row["failure_count"],
        "error": error if error is None or len(error) <= _MAX_LISTED_ERROR_CHARS
        else error[:_MAX_LISTED_ERROR_CHARS] + "…",
        "cancel_requested": row["cancel_requested"], "created_at": row["created_at"],
        "started_at": row["started_at"], "finished_at": row["finished_at"], "seconds": row["seconds"],
    }


def _shown(job_id: Any, context: ToolContext) -> dict[str, Any]:
    detail = show_job(context.backend.pool, job_id)
    shown = {**_listed(detail.job), "error": detail.job.error, "arguments": detail.job.arguments,
             "heartbeat_at": detail.job.as_dict()["heartbeat_at"],
             "failures": detail.failures[:MAX_SHOWN_FAILURES],
             "retried_by": [str(retry) for retry in detail.retried_by],
             "skipped_files": detail.job.counts.get("skipped_files", [])}
    if len(detail.failures) > MAX_SHOWN_FAILURES:
        shown["failures_omitted"] = len(detail.failures) - MAX_SHOWN_FAILURES
    return shown


def run_jobs(context: ToolContext, args: JobsArgs) -> str:
    pool = context.backend.pool
    if args.action == "list":
        page = list_jobs(pool, cursor=args.cursor, limit=args.limit, status=args.status, kind=args.kind,
                         source=args.source)
        jobs = [_listed(job) for job in page.jobs]
        # No job is ever dropped to fit: the cursor already points past this page, and a page is small.
        return bounded_json({"jobs": jobs, "returned": len(jobs), "next_cursor": page.next_cursor,
                             "ordered_by": "created_at, newest first", "truncated": False}, [])
    if args.action == "show":
        return to_json({"job": _shown(args.job_id, context)})
    context.require_scope("admin", f"jobs action {args.action!r}")  # list and show returned above
    assert args.job_id is not None
    if args.action == "cancel":
        with admin_database(context) as (admin_pool, api_key):
            status = request_cancel(admin_pool, args.job_id, api_key=api_key)
        notes = {"cancelled": "It had not started and will not run.",
                 "cancelling": "It stops after its current batch; what it already wrote is kept and consistent. "
                               "Call show to see it become cancelled.",
                 "interrupted": "It was not running any more: its process had died."}
        return to_json({"job_id": str(args.job_id), "status": status,
                        "note": notes.get(status, "It had already finished; nothing changed.")})
    with admin_database(context) as (admin_pool, api_key):
        queued = enqueue_retry(admin_pool, args.job_id, api_key=api_key)
    return to_json({"job_id": str(queued), "retry_of": str(args.job_id), "status": "queued",
                    "note": "The retry is queued with the original job's arguments. " + RUN_QUEUED_HINT})


JOBS = ToolSpec(
    name="jobs",
    title="Ingestion jobs",
    description="Ingest and reindex jobs: list (newest first), show; cancel and retry need an admin key.",
    arguments=JobsArgs,
    run=run_jobs,
    cost=one_token,
    read_only=False,
    output_schema=shape({}, {"jobs": "array", "job": "object", "status": "string"}),
)
