"""``quarry jobs``: list, show, cancel, retry and run the recorded ingest / re-embed / reindex jobs.

A retry runs the job again with the arguments it was started with (path, source
spec, flags). ``quarry jobs retry ID`` runs it here and now; a retry queued from the
MCP ``jobs`` tool (the server cannot run ingests) waits for ``quarry jobs run`` on a
machine that can, typically the CI job that ingests.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import QuarryError
from engine.vocabulary import JOB_KINDS, JOB_STATUSES, MAX_JOBS_PAGE

# engine.admin.jobs (psycopg) is imported where a job is touched: building the parser must not load it.
if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from engine.admin.jobs import JobRun
    from engine.admin.reindex import Part, ReindexSummary
    from engine.runtime import Runtime

__all__ = ["add_jobs_arguments", "ingest_job_number", "reindex_as_job", "run_job", "run_jobs"]

_EXIT_OK, _EXIT_FAILED = 0, 1
#: How often ``quarry jobs run --follow`` looks for newly queued jobs: a claim is one indexed query.
FOLLOW_POLL_S = 1.0

#: Runs a claimed job from its stored arguments; returns (JSON summary, one line, exit code).
Runner = Callable[["Runtime", "JobRun"], tuple[dict[str, Any], str, int]]


def add_jobs_arguments(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``quarry jobs ...`` to the top-level command parser."""
    jobs = subparsers.add_parser(
        "jobs", help="list, show, cancel, retry and run ingest / re-embed / reindex jobs",
        epilog="examples:\n  quarry jobs list --status failed\n  quarry jobs show 42\n  quarry jobs cancel 42\n"
               "  quarry jobs retry 42          # runs it again now, with the same arguments\n"
               "  quarry jobs run               # runs the retries queued from MCP (on the CI machine)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="jobs, newest first (a running job whose process died shows "
                                 "as interrupted)", epilog="example: quarry jobs list --source my-docs --json")
    listing.add_argument("--status", choices=JOB_STATUSES)
    listing.add_argument("--kind", choices=JOB_KINDS)
    listing.add_argument("--source", help="only jobs of this source slug")
    listing.add_argument("--limit", type=int, default=20, help=f"jobs per page (1-{MAX_JOBS_PAGE}, default 20)")
    listing.add_argument("--cursor", help="next_cursor of the previous page")
    listing.add_argument("--json", action="store_true", help="print the page as JSON")

    show = actions.add_parser("show", help="one job: status, progress, counts, failed files, error, timings",
                              epilog="example: quarry jobs show 42")
    show.add_argument("job", help="job id (UUID) or number")
    show.add_argument("--json", action="store_true", help="print the job as JSON")

    cancel = actions.add_parser("cancel", help="cancel a job: a queued one at once, a running one after its "
                                "current batch (what it wrote stays)", epilog="example: quarry jobs cancel 42")
    cancel.add_argument("job", help="job id (UUID) or number")
    cancel.add_argument("--json", action="store_true", help="print the outcome as JSON")

    retry = actions.add_parser("retry", help="run a failed, interrupted or cancelled job again with the same "
                               "arguments", epilog="example: quarry jobs retry 42")
    retry.add_argument("job", help="job id (UUID) or number")
    retry.add_argument("--queue", action="store_true",
                       help="only queue the retry (for `quarry jobs run` elsewhere) instead of running it here")
    retry.add_argument("--json", action="store_true", help="print the outcome as JSON")

    run = actions.add_parser("run", help="run every queued job, oldest first (retries queued from MCP)",
                             epilog="example (in CI, after `quarry ingest`): quarry jobs run --json")
    run.add_argument("--json", action="store_true", help="print one JSON object per job")
    run.add_argument("--follow", action="store_true",
                     help="keep running: wait for jobs queued later (sources added over MCP) until interrupted")


def run_jobs(runtime: Runtime, args: argparse.Namespace) -> int:
    """Carry out ``quarry jobs ACTION``; returns the exit code."""
    from engine.admin.jobs import JobRun, enqueue_retry, request_cancel, resolve_job_id, show_job

    pool = runtime.pool
    if args.jobs_command == "list":
        return _list(pool, args)
    if args.jobs_command == "run":
        return _run_queue(runtime, args.json, follow=args.follow)
    job_id = resolve_job_id(pool, args.job)
    if args.jobs_command == "show":
        detail = show_job(pool, job_id)
        if args.json:
            print(json.dumps(detail.as_dict(), indent=2))
            return _EXIT_OK
        job = detail.job
        print(job.one_line())
        print(f"  arguments: {json.dumps(job.arguments)}")
        print(f"  created {job.created_at:%Y-%m-%d %H:%M:%S}"
              + (f", started {job.started_at:%H:%M:%S}" if job.started_at else "")
              + (f", finished {job.finished_at:%H:%M:%S}" if job.finished_at else ""))
        print(f"  progress: {json.dumps(job.progress)}")
        counts = {key: value for key, value in job.counts.items() if key != "skipped_files"}
        if counts:
            print(f"  counts: {json.dumps(counts)}")
        if job.error:
            print(f"  error: {job.error}")
        for failure in detail.failures:
            print(f"  failed: {failure['path']}: {failure['reason']}")
        for line in _skipped(job.counts):
            print(f"  {line}")
        if detail.retried_by:
            print(f"  retried by: {', '.join(str(i) for i in detail.retried_by)}")
        return _EXIT_OK
    if args.jobs_command == "cancel":
        status = request_cancel(pool, job_id)
        if args.json:
            print(json.dumps({"job_id": str(job_id), "status": status}))
        else:
            print(f"quarry: job {job_id} {_CANCEL_OUTCOMES.get(status, 'had already finished: ' + status)}")
        return _EXIT_OK
    if args.jobs_command == "retry":
        queued = enqueue_retry(pool, job_id)
        if args.queue:
            print(json.dumps({"retry_of": str(job_id), "job_id": str(queued), "status": "queued"}) if args.json
                  else f"quarry: queued job {queued} (a retry of {job_id}); `quarry jobs run` runs it")
            return _EXIT_OK
        claimed = JobRun.claim(pool, queued)
        if claimed is None:
            print(f"quarry: the retry of {job_id} (job {queued}) is already being run by another process",
                  file=sys.stderr)
            return _EXIT_OK
        return _report(*_execute(runtime, claimed), as_json=args.json)
    raise AssertionError(args.jobs_command)


#: Skipped files ``jobs show`` names at most (the job keeps the first ones, engine.ingest.summary).
_SKIPPED_SHOWN = 100


def _skipped(counts: dict[str, Any]) -> list[str]:
    """The skipped files an ingest job kept, with their reasons, as ``quarry ingest`` prints them."""
    from engine.ingest.summary import skipped_lines

    kept = [(str(entry["path"]), str(entry["reason"])) for entry in counts.get("skipped_files", [])]
    total = int(counts.get("skipped", len(kept)))
    if not kept:  # none, or a job recorded before jobs kept their skipped files
        return [f"skipped: {total} files (this job did not keep their names)"] if total else []
    return skipped_lines(kept, limit=_SKIPPED_SHOWN, total=total,
                         more="(the job keeps only the first; quarry ingest --json lists them all)")


def ingest_job_number(pool: ConnectionPool, source: str) -> int | None:
    """The number of the newest ingest job of ``source`` this process ran, to point the user at it."""
    with pool.connection() as conn:
        row = conn.execute(
            "select number from quarry.jobs where kind = 'ingest' and source = %s and host = %s and pid = %s"
            " order by id desc limit 1", (source, socket.gethostname(), os.getpid())).fetchone()
    return None if row is None else int(row[0])


_CANCEL_OUTCOMES = {
    "cancelled": "cancelled (it had not started)",
    "cancelling": "will stop after its current batch; what it wrote is kept",
    "interrupted": "was not running any more: its process had died (now recorded as interrupted)",
}


#: Column titles over ``Job.one_line`` rows (number, id, kind, status, what the job is about, its
#: duration and its counts); tests/test_cli_output.py checks they stay over their columns.
JOBS_HEADER = f"{'job':>5}  {'id':<36}  {'kind':<8} {'status':<11} {'source (or space, parts)':<24} time  counts"


def _list(pool: ConnectionPool, args: argparse.Namespace) -> int:
    from engine.admin.jobs import list_jobs, reap_interrupted

    reap_interrupted(pool)  # an admin listing records what it finds dead
    page = list_jobs(pool, cursor=args.cursor, limit=args.limit, status=args.status, kind=args.kind,
                     source=args.source)
    if args.json:
        print(json.dumps({"jobs": [job.as_dict() for job in page.jobs], "next_cursor": page.next_cursor},
                         indent=2))
        return _EXIT_OK
    if not page.jobs:
        print("no jobs")
    else:
        print(JOBS_HEADER)
    for job in page.jobs:
        print(job.one_line())
    if page.next_cursor is not None:
        print(f"more: quarry jobs list --cursor {page.next_cursor}")
    return _EXIT_OK


def _run_queue(runtime: Runtime, as_json: bool, *, follow: bool = False) -> int:
    from engine.admin.jobs import JobRun

    code = _EXIT_OK
    ran = 0
    while True:
        claimed = JobRun.claim(runtime.pool)
        if claimed is None:
            if not follow:
                break
            time.sleep(FOLLOW_POLL_S)
            continue
        ran += 1
        code = max(code, _report(*_execute(runtime, claimed), as_json=as_json))
    if not as_json:
        print(f"quarry: ran {ran} queued job{'s' if ran != 1 else ''}", file=sys.stderr)
    return code


def run_job(runtime: Runtime, claimed: JobRun) -> tuple[dict[str, Any], str, int]:
    """Run a claimed job with its stored arguments; its row records the outcome."""
    runner = _RUNNERS.get(claimed.kind)
    with claimed:  # whatever fails before the work starts still ends the job as failed
        if runner is None:
            raise QuarryError(f"no runner for jobs of kind {claimed.kind!r}")
        return runner(runtime, claimed)


def _execute(runtime: Runtime, claimed: JobRun) -> tuple[JobRun, dict[str, Any], str, int]:
    from engine.admin.jobs import JobCancelledError

    try:
        summary, line, code = run_job(runtime, claimed)
    except JobCancelledError as error:
        return claimed, {"error": str(error)}, f"quarry: {error}", _EXIT_FAILED
    except Exception as error:  # recorded in the job row; one failed job must not stop `jobs run`
        return claimed, {"error": f"{type(error).__name__}: {error}"}, \
            f"quarry: job {claimed.id} failed: {error}", _EXIT_FAILED
    return claimed, summary, line, code


def _report(claimed: JobRun, summary: dict[str, Any], line: str, code: int, *, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"job_id": str(claimed.id), "kind": claimed.kind, "source": claimed.source,
                          "exit_code": code, "summary": summary}))
    else:
        print(f"job {claimed.number} ({claimed.kind}): {line}", file=sys.stderr if code else sys.stdout)
    return code


# -- runners: one per job kind ----------------------------------------------


def _run_ingest(runtime: Runtime, claimed: JobRun) -> tuple[dict[str, Any], str, int]:
    from engine.fetch.fetching import locate
    from engine.fetch.locations import FetchOptions
    from engine.ingest.changes import changed_since
    from engine.ingest.pipeline import Ingestor
    from engine.ingest.sources import SourceSpec

    arguments = claimed.arguments
    source = SourceSpec.model_validate(arguments["source"])
    # Jobs recorded before locations existed hold a folder under "path".
    where = locate(str(arguments.get("location") or arguments["path"]), runtime.settings, source.slug,
                   FetchOptions.from_arguments(arguments.get("fetch")), remote_only=arguments.get("origin") == "mcp")
    changed = None
    if arguments.get("since") and isinstance(where, Path):
        changed = changed_since(where, str(arguments["since"]))
    ingestor = Ingestor(runtime.pool, runtime.embedders, max_file_bytes=runtime.settings.max_file_bytes)
    # A queued job waits for a running ingest of its source rather than failing BUSY.
    summary = ingestor.ingest(where, source, wait_for_lock=True, changed=changed, job=claimed)
    return summary.as_dict(), summary.one_line(), _EXIT_FAILED if summary.failed else _EXIT_OK


def _run_reembed(runtime: Runtime, claimed: JobRun) -> tuple[dict[str, Any], str, int]:
    from engine.admin.reembed import reembed_space

    space = str(claimed.arguments["space"])
    summary = reembed_space(runtime.pool, space, runtime.embedders[space], job=claimed)
    return asdict(summary), summary.one_line(), _EXIT_OK


def _run_reindex(runtime: Runtime, claimed: JobRun) -> tuple[dict[str, Any], str, int]:
    summary = reindex_as_job(runtime.pool, claimed.arguments.get("parts") or None, job=claimed)
    return asdict(summary), summary.one_line(), _EXIT_OK


def reindex_as_job(pool: ConnectionPool, parts: Sequence[Part] | None = None,
                   progress: Callable[[str], None] | None = None, *, job: JobRun | None = None) -> ReindexSummary:
    """``engine.admin.reindex.reindex`` recorded as a job (kind ``reindex``); a cancel stops it between parts."""
    from engine.admin.jobs import JobRun
    from engine.admin.reindex import PARTS, reindex

    chosen = list(parts or PARTS)
    with job or JobRun.create(pool, "reindex", None, {"parts": chosen}) as run:
        run.start()
        done: list[str] = []

        def part_started(part: str) -> None:
            if progress is not None:
                progress(part)
            run.progress({"parts_done": list(done), "current": part})
            done.append(part)

        summary = reindex(pool, chosen, progress=part_started)
        run.succeed({f"{part}_count": count for part, count in summary.counts.items()})
    return summary


def _run_remove_source(runtime: Runtime, claimed: JobRun) -> tuple[dict[str, Any], str, int]:
    from engine.admin.sources import remove_source

    assert claimed.source is not None
    removed = remove_source(runtime.pool, claimed.source, runtime.settings.fetch_dir, job=claimed)
    return asdict(removed), removed.one_line(), _EXIT_OK


def _run_kb_index(runtime: Runtime, claimed: JobRun) -> tuple[dict[str, Any], str, int]:
    from engine.kb.indexing import index_evidence

    summary = index_evidence(runtime.pool, runtime.embedders, runtime.settings, claimed)
    return summary.as_dict(), summary.one_line(), _EXIT_FAILED if summary.failed else _EXIT_OK


_RUNNERS: dict[str, Runner] = {"ingest": _run_ingest, "reembed": _run_reembed, "reindex": _run_reindex,
                               "remove_source": _run_remove_source, "kb_index": _run_kb_index}
