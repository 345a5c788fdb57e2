"""``quarry eval``: its arguments, the report on stdout, the gate's exit code.

Imports nothing heavy at module level, so ``quarry --help`` stays fast; the search stack
loads when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.evaluation.runner import EvalReport
    from engine.runtime import Runtime

EXIT_OK, EXIT_GATE_FAILED = 0, 3

EVAL_HELP = "score retrieval on judged queries (nDCG@10, MRR@10, R@10, R@100); exit 3 below a threshold"
EVAL_EPILOG = """\
examples:
  quarry eval --queries eval/queries.jsonl --qrels eval/qrels.tsv --min-ndcg 0.6 --min-recall 0.8
  quarry eval --queries queries.tsv --qrels qrels.tsv --source my-docs --doc-id stem --json

queries: JSONL {"_id": "q1", "text": "..."} or TSV 'id<TAB>text'
qrels:   TSV 'query-id<TAB>corpus-id<TAB>score' after that header line, or JSONL
corpus-id: a document's path in its source (docs/indexes.md), optionally 'slug:path';
           with --doc-id stem its file name without extension (BEIR corpora, one file per doc)
exit codes: 0 every threshold met, 2 bad input or configuration, 3 a metric below its threshold
"""

#: Threshold option -> metric it gates.
THRESHOLDS = {"min_ndcg": "nDCG@10", "min_mrr": "MRR@10", "min_recall": "R@10", "min_recall_100": "R@100"}


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``quarry eval`` options, on the subcommand parser ``cli.py`` creates."""
    parser.add_argument("--queries", type=Path, required=True, metavar="FILE",
                        help="judged queries: BEIR JSONL (_id, text) or TSV (id<TAB>text)")
    parser.add_argument("--qrels", type=Path, required=True, metavar="FILE",
                        help="judgments: BEIR TSV (query-id, corpus-id, score; header line) or JSONL")
    gate = parser.add_argument_group("quality gate (exit 3 when a metric is below its minimum)")
    gate.add_argument("--min-ndcg", type=_fraction, metavar="X", help="minimum nDCG@10")
    gate.add_argument("--min-mrr", type=_fraction, metavar="X", help="minimum MRR@10")
    gate.add_argument("--min-recall", type=_fraction, metavar="X",
                      help="minimum Recall@10 (the share of relevant documents a top-10 answer holds)")
    gate.add_argument("--min-recall-100", type=_fraction, metavar="X", help="minimum Recall@100")
    parser.add_argument("--mode", choices=["hybrid", "fts", "vector"], default="hybrid",
                        help="retrieval legs, as in `quarry search` (default: hybrid)")
    parser.add_argument("--code-mode", choices=["on", "off", "exclusive"], default="on",
                        help="code-space vector leg, as the MCP search tool's code_mode (default: on)")
    parser.add_argument("--doc-id", choices=["path", "stem"], default="path",
                        help="what qrels corpus-ids name: the document's path in its source, or its file "
                             "name without extension (default: path); either may be prefixed 'slug:'")
    parser.add_argument("--source", action="append", default=[], metavar="SLUG",
                        help="search only this source (repeatable; default: every source)")
    parser.add_argument("--chunk-depth", type=int, default=200, metavar="N",
                        help="chunks ranked per query before documents are deduplicated (default: 200; "
                             "a query filling fewer than 100 documents is searched deeper, up to 1000)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--per-query", action="store_true", help="also report every query's metrics")
    parser.description = "Score the live corpus's retrieval against judged queries (a CI quality gate)."
    parser.epilog = EVAL_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run_eval(runtime: Runtime, args: argparse.Namespace) -> int:
    """Run ``quarry eval``; returns 0 or 3. Bad input raises ``InvalidRequestError`` (the CLI exits 2)."""
    from engine.errors import InvalidRequestError
    from engine.evaluation.judgments import load_qrels, load_queries
    from engine.evaluation.runner import EvalSettings, evaluate_corpus

    if not 10 <= args.chunk_depth <= 1000:
        raise InvalidRequestError("--chunk-depth must be between 10 and 1000")
    queries, qrels = load_queries(args.queries), load_qrels(args.qrels)
    settings = EvalSettings(mode=args.mode, code_mode=args.code_mode, doc_id=args.doc_id,
                            sources=tuple(dict.fromkeys(args.source)), chunk_depth=args.chunk_depth)
    thresholds = {metric: getattr(args, option) for option, metric in THRESHOLDS.items()}
    show_progress = sys.stderr.isatty() and not args.json

    def progress(done: int, total: int) -> None:
        if show_progress and (done == total or done % 10 == 0):
            print(f"\r\033[K  {done}/{total} queries", end="", file=sys.stderr, flush=True)

    report = evaluate_corpus(runtime, queries, qrels, settings, thresholds, progress)
    if show_progress:
        print("\r\033[K", end="", file=sys.stderr)
    if args.json:
        print(json.dumps(report.as_dict(with_per_query=args.per_query), indent=2))
    else:
        print(format_report(report, with_per_query=args.per_query))
    option_of = {metric: "--" + option.replace("_", "-") for option, metric in THRESHOLDS.items()}
    for failure in report.failures:
        print(f"quarry: quality gate failed: {failure.name} = {failure.value:.4f} is below "
              f"{option_of[failure.name]} {failure.threshold:.4f}", file=sys.stderr)
    for note in report.notes if args.json else ():
        print(f"quarry: note: {note}", file=sys.stderr)
    return EXIT_OK if report.passed else EXIT_GATE_FAILED


def format_report(report: EvalReport, *, with_per_query: bool = False) -> str:
    """The metrics table, notes, and optionally every query's figures, worst nDCG@10 first."""
    s = report.settings
    where = ", ".join(s.sources) if s.sources else "all sources"
    code_mode = s.code_mode if s.mode != "fts" else "off"
    lines = [f"quarry eval: {report.queries} queries, {s.mode} search (code_mode {code_mode}), {where}, "
             f"corpus ids by {s.doc_id}, {report.seconds:.1f}s", "",
             f"{'metric':<8} {'value':>7}  {'minimum':>7}  result"]
    for metric in report.metrics:
        minimum = f"{metric.threshold:.4f}" if metric.threshold is not None else "-"
        result = "-" if metric.threshold is None else "pass" if metric.passed else "FAIL"
        lines.append(f"{metric.name:<8} {metric.value:>7.4f}  {minimum:>7}  {result}")
    if with_per_query:
        names = [metric.name for metric in report.metrics]
        lines += ["", f"{'query':<16} " + " ".join(f"{name:>7}" for name in names)]
        for query_id, values in sorted(report.per_query.items(), key=lambda item: (item[1]["nDCG@10"], item[0])):
            lines.append(f"{query_id:<16} " + " ".join(f"{values[name]:>7.4f}" for name in names))
    if report.notes:
        lines += ["", *(f"note: {note}" for note in report.notes)]
    gated = any(metric.threshold is not None for metric in report.metrics)
    if gated:
        lines += ["", "quality gate: " + ("passed" if report.passed else "FAILED")]
    return "\n".join(lines)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text}")
    return value
