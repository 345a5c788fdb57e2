"""``quarry eval`` on BEIR SciFact: the CI quality gate's own code path, on a known dataset.

    python bench/eval_scifact.py [--data DIR] [--home DIR] [--split test] [--mode hybrid|fts|vector]
                                 [--min-ndcg X ...] [--json OUT]

Example: ``python bench/eval_scifact.py --min-ndcg 0.70``

Runs ``engine.cli.evaluate.run_eval`` (what ``quarry eval`` runs) against the corpus
bench/quality.py ingested into database ``bench_scifact`` of its embedded Postgres
(``<home>/pgdata``), with the queries and qrels files read straight from ../shared/data
(never copied into the repository), as if a CI job had run::

    DATABASE_URL=<bench_scifact> quarry eval --queries scifact/queries.jsonl \\
        --qrels scifact/qrels/test.tsv --doc-id stem

The bench ingests one file per document (``<_id>.md``), hence ``--doc-id stem``; the
database holds one source, so no ``--source`` filter (a filtered search is much slower and,
its vector leg being approximate under a filter, can rank slightly differently). Models
are pinned to the local MiniLM the corpus was embedded with.

Cross-check: the same queries also go through bench/quality.py's own loop
(``bench.quarry_system.quarry_run``, same mode, 200 chunks, 100 documents) on the same
database, now; both must give the same figures. The Quarry row of ``<home>/quality.json``
is shown too, with its date and commit: it was measured by an earlier engine, so it may
differ. When ``bench_scifact`` does not exist yet, build it first (the first ingest embeds
5,183 abstracts: several minutes)::

    python bench/quality.py --dataset scifact --systems quarry-hybrid
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shlex
import sys
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.quarry_system import quarry_run
from bench.tasks import load_task
from engine.cli.evaluate import add_eval_arguments, run_eval
from engine.config import Settings
from engine.embed.local import LocalMiniLM
from engine.evaluation.metrics import METRICS, evaluate
from engine.retrieval.request import SearchMode
from engine.runtime import Runtime
from engine.store.db import embedded_database_url, open_pool

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_HOME = REPO / "bench" / ".out" / "quality"
DATASET = "scifact"
#: The system of bench/quality.py whose figures these must match.
QUALITY_SYSTEM: dict[SearchMode, str] = {"hybrid": "quarry-hybrid", "fts": "quarry-fts", "vector": "quarry-vector"}


def bench_database_url(home: Path) -> str | None:
    """DSN of ``bench_scifact`` on the bench's embedded server, or None when bench/quality.py never built it."""
    server_url = embedded_database_url(home)
    with psycopg.connect(server_url, autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = %s", (f"bench_{DATASET}",)).fetchone() is None:
            return None
    return psycopg.conninfo.make_conninfo(server_url, dbname=f"bench_{DATASET}")


def quality_figures(home: Path, mode: SearchMode) -> dict[str, Any] | None:
    """bench/quality.py's last figures for the same Quarry mode on SciFact, with when they were measured."""
    path = home / "quality.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    system = report.get("datasets", {}).get(DATASET, {}).get("systems", {}).get(QUALITY_SYSTEM[mode])
    if system is None:
        return None
    return {"date": report.get("date"), "git_head": (report.get("git_head") or "")[:7] or None,
            "metrics": system["metrics"]}


def quality_loop_figures(url: str, home: Path, data: Path, split: str, mode: SearchMode) -> dict[str, float]:
    """bench/quality.py's Quarry loop on the same database now (it embeds queries with the same local model)."""
    task = load_task(DATASET, data, home / "trees", split)
    embedder = LocalMiniLM(home / "models")
    vectors = embedder.embed_queries([query.text for query in task.queries])
    with open_pool(url, min_size=1, max_size=2, name="quarry-bench") as pool:
        run = quarry_run(pool, embedder.model_name, vectors, task, mode, depth=100, chunk_depth=200)
    return {name: round(value, 4) for name, value in evaluate(run.run, task.qrels).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder holding the BEIR datasets")
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME, help="bench/quality.py's state folder")
    parser.add_argument("--split", default="test", help="qrels split (default: test)")
    parser.add_argument("--mode", choices=sorted(QUALITY_SYSTEM), default="hybrid")
    parser.add_argument("--min-ndcg", default=None, help="passed on to quarry eval")
    parser.add_argument("--min-recall-100", default=None, help="passed on to quarry eval")
    parser.add_argument("--json", type=Path, default=None, help="report file (default: <home>/eval_scifact.json)")
    args = parser.parse_args()

    home: Path = args.home.resolve()
    url = bench_database_url(home)
    if url is None:
        print(f"bench_{DATASET} does not exist under {home}: run "
              "`python bench/quality.py --dataset scifact --systems quarry-hybrid` first", file=sys.stderr)
        return 2
    folder = args.data / DATASET
    queries = folder / f"queries.{args.split}.jsonl"
    eval_argv = [
        "--queries", str(queries if queries.exists() else folder / "queries.jsonl"),
        "--qrels", str(folder / "qrels" / f"{args.split}.tsv"),
        "--doc-id", "stem", "--mode", args.mode, "--json",
    ]
    for option in ("min_ndcg", "min_recall_100"):
        if getattr(args, option) is not None:
            eval_argv += ["--" + option.replace("_", "-"), getattr(args, option)]
    eval_parser = argparse.ArgumentParser(prog="quarry eval")
    add_eval_arguments(eval_parser)
    eval_args = eval_parser.parse_args(eval_argv)

    settings = Settings(database_url=url, home=home, text_model="local", code_model="local", reranker="none")
    output = io.StringIO()
    with Runtime(settings) as runtime, redirect_stdout(output):
        exit_code = run_eval(runtime, eval_args)
    report = json.loads(output.getvalue())
    live = quality_loop_figures(url, home, args.data, args.split, args.mode)
    stored = quality_figures(home, args.mode)

    print(f"quarry eval {shlex.join(eval_argv)}\n  exit code {exit_code}, {report['queries']} queries, "
          f"{report['seconds']:.1f}s")
    stored_label = f"quality.json ({stored['date']}, {stored['git_head'] or '?'})" if stored else "quality.json"
    print(f"\n| metric | quarry eval | bench/quality.py loop, now | {stored_label} |\n|---|---|---|---|")
    for name, _, _ in METRICS:
        old = f"{stored['metrics'][name]:.4f}" if stored else "-"
        print(f"| {name} | {report['metrics'][name]['value']:.4f} | {live[name]:.4f} | {old} |")
    for note in report["notes"]:
        print(f"note: {note}")
    agree = all(abs(report["metrics"][name]["value"] - live[name]) < 5e-5 for name, _, _ in METRICS)
    print("cross-check: " + ("quarry eval and bench/quality.py agree" if agree else "MISMATCH"))

    out: Path = args.json or home / "eval_scifact.json"
    out.write_text(json.dumps({
        "command": shlex.join(["python", *sys.argv]),
        "quarry_eval_args": eval_argv,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                    "python": platform.python_version()},
        "exit_code": exit_code,
        "report": report,
        "bench_quality_loop": live,
        "bench_quality_json": stored,
    }, indent=2) + "\n", encoding="utf-8")
    print(f"report: {out}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
