"""``quarry eval``: metrics on hand-computed rankings, BEIR loaders, and the gate on a judged corpus."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.cli.evaluate import EXIT_GATE_FAILED, add_eval_arguments, run_eval
from engine.cli.main import build_parser
from engine.config import Settings
from engine.embed.base import Embedder
from engine.errors import InvalidRequestError
from engine.evaluation import (
    evaluate,
    load_qrels,
    load_queries,
    ndcg_at_k,
    per_query,
    recall_at_k,
    reciprocal_rank_at_k,
)
from engine.evaluation.runner import document_key, judged_id
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.runtime import Runtime
from tests.corpus import write_corpus

LOG2_3 = math.log2(3)  # discount at rank 2
REPO = Path(__file__).resolve().parents[1]


# --- metrics -------------------------------------------------------------------------------------------------------

def test_ndcg_binary_counts_ranks_with_log2_discount() -> None:
    judgments = {"a": 1, "b": 1}
    # DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3)
    expected = (1 / LOG2_3 + 1 / math.log2(5)) / (1 + 1 / LOG2_3)
    assert ndcg_at_k(["x", "a", "y", "b"], judgments, 10) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b", "x"], judgments, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "y"], judgments, 10) == 0.0


def test_ndcg_uses_linear_graded_gain() -> None:
    judgments = {"a": 2, "b": 1}
    expected = (1 + 2 / LOG2_3) / (2 + 1 / LOG2_3)
    assert ndcg_at_k(["b", "a"], judgments, 10) == pytest.approx(expected)


def test_ndcg_ideal_covers_relevant_documents_never_retrieved() -> None:
    judgments = {"a": 1, "b": 1, "c": 1}
    assert ndcg_at_k(["a"], judgments, 10) == pytest.approx(1 / (1 + 1 / LOG2_3 + 1 / 2))
    # ... but only the top k of the ideal ranking count.
    assert ndcg_at_k(["a"], judgments, 1) == pytest.approx(1.0)


def test_cutoff_excludes_rank_k_plus_one() -> None:
    ranking = [f"x{i}" for i in range(10)] + ["a"]
    judgments = {"a": 1}
    assert ndcg_at_k(ranking, judgments, 10) == 0.0
    assert reciprocal_rank_at_k(ranking, judgments, 10) == 0.0
    assert recall_at_k(ranking, judgments, 10) == 0.0
    assert recall_at_k(ranking, judgments, 100) == 1.0
    assert reciprocal_rank_at_k(ranking, judgments, 11) == pytest.approx(1 / 11)


def test_reciprocal_rank_ignores_zero_judgments() -> None:
    assert reciprocal_rank_at_k(["a", "b", "c"], {"a": 0, "c": 1}, 10) == pytest.approx(1 / 3)


def test_recall_is_share_of_relevant_found() -> None:
    judgments = {"a": 1, "b": 2, "c": 1, "d": 0}
    assert recall_at_k(["a", "d", "x", "b"], judgments, 10) == pytest.approx(2 / 3)
    assert recall_at_k(["a", "d", "x", "b"], judgments, 2) == pytest.approx(1 / 3)


def test_repeated_document_counts_once_at_its_first_rank() -> None:
    assert reciprocal_rank_at_k(["x", "x", "a"], {"a": 1}, 10) == pytest.approx(1 / 2)
    assert ndcg_at_k(["a", "a"], {"a": 1, "b": 1}, 10) == pytest.approx(1 / (1 + 1 / LOG2_3))


def test_evaluate_averages_judged_queries_and_skips_those_without_relevant_documents() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    run = {"q1": ["a"], "q3": ["c"]}  # q2 has no results: it scores 0, it is not skipped
    assert set(per_query(run, qrels)) == {"q1", "q2"}
    scores = evaluate(run, qrels)
    assert scores == {"nDCG@10": 0.5, "MRR@10": 0.5, "R@10": 0.5, "R@100": 0.5}


def test_evaluate_refuses_qrels_without_relevant_documents() -> None:
    with pytest.raises(ValueError, match="no judged query"):
        evaluate({}, {"q": {"a": 0}})


# --- corpus ids ----------------------------------------------------------------------------------------------------

def test_document_key_is_the_path_or_the_file_name_without_extension() -> None:
    assert document_key("docs/indexes.md", "path") == "docs/indexes.md"
    assert document_key("docs/indexes.md", "stem") == "indexes"
    assert document_key("4983.md", "stem") == "4983"


def test_a_hit_answers_to_the_form_the_qrels_use() -> None:
    assert judged_id("sample", "docs/a.md", {"docs/a.md"}) == "docs/a.md"
    assert judged_id("sample", "docs/a.md", {"sample:docs/a.md"}) == "sample:docs/a.md"
    # unjudged documents stay qualified, so two sources' files of one name are two documents
    assert judged_id("other", "docs/a.md", {"sample:docs/a.md"}) == "other:docs/a.md"
    assert judged_id("other", "docs/b.md", set()) == "other:docs/b.md"


# --- loaders -------------------------------------------------------------------------------------------------------

def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_queries_load_from_jsonl_and_tsv(tmp_path: Path) -> None:
    jsonl = _write(tmp_path, "q.jsonl", '{"_id": "q1", "text": "partial index", "metadata": {}}\n\n'
                                        '{"_id": 2, "text": " backups "}\n')
    assert load_queries(jsonl) == {"q1": "partial index", "2": "backups"}
    tsv = _write(tmp_path, "q.tsv", "query-id\ttext\nq1\tpartial index\nq2\ta\ttabbed query\n")
    assert load_queries(tsv) == {"q1": "partial index", "q2": "a\ttabbed query"}


def test_qrels_load_from_tsv_and_jsonl(tmp_path: Path) -> None:
    tsv = _write(tmp_path, "r.tsv", "query-id\tcorpus-id\tscore\nq1\tdocs/a.md\t1\nq1\tdocs/b.md\t0\nq2\t7\t2\n")
    assert load_qrels(tsv) == {"q1": {"docs/a.md": 1, "docs/b.md": 0}, "q2": {"7": 2}}
    jsonl = _write(tmp_path, "r.jsonl", '{"query-id": "q1", "corpus-id": "docs/a.md", "score": 1}\n'
                                        '{"query_id": 2, "corpus_id": "s:b.md", "score": "2"}\n')
    assert load_qrels(jsonl) == {"q1": {"docs/a.md": 1}, "2": {"s:b.md": 2}}


@pytest.mark.parametrize(("content", "where", "message"), [
    ('{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": \n', ":2:", "not valid JSON"),
    ('{"_id": "q1"}\n', ":1:", "has no text"),
    ('{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n', ":2:", "appears twice"),
    ('{"_id": "q1", "text": "a"}\n["q2", "b"]\n', ":2:", "expected a JSON object, got list"),
    ('{"_id": null, "text": "a"}\n', ":1:", "'_id' must be a string or an integer"),
    ("q1\tfirst\nq2 second\n", ":2:", "found no tab"),
    (b"q1\tfirst\nq2\t\xff\xfe\n", ":2:", "not valid UTF-8"),
    ("\n\n", "", "no queries"),
])
def test_malformed_queries_are_refused_naming_file_and_line(
    tmp_path: Path, content: str | bytes, where: str, message: str
) -> None:
    path = _write(tmp_path, "queries.txt", content)
    with pytest.raises(InvalidRequestError) as caught:
        load_queries(path)
    assert str(caught.value).startswith(f"{path}{where}") and message in str(caught.value)


@pytest.mark.parametrize(("content", "where", "message"), [
    ("q1\tdocs/a.md\t1\n", ":1:", "expected the header line"),
    ("query-id\tcorpus-id\tscore\nq1\tdocs/a.md\n", ":2:", "got 2 tab-separated fields"),
    ("query-id\tcorpus-id\tscore\nq1\tdocs/a.md\trelevant\n", ":2:", "score must be an integer"),
    ("query-id\tcorpus-id\tscore\nq1\ta\t1\n\nq1\ta\t0\n", ":4:", "judges 'a' twice"),
    ('{"query-id": "q1", "corpus-id": "a", "score": 1.5}\n', ":1:", "score must be an integer"),
    ('{"query-id": "q1", "score": 1}\n', ":1:", "'corpus-id' must be"),
    ("query-id\tcorpus-id\tscore\n", "", "no judgments"),
])
def test_malformed_qrels_are_refused_naming_file_and_line(
    tmp_path: Path, content: str, where: str, message: str
) -> None:
    path = _write(tmp_path, "qrels.tsv", content)
    with pytest.raises(InvalidRequestError) as caught:
        load_qrels(path)
    assert str(caught.value).startswith(f"{path}{where}") and message in str(caught.value)


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match="cannot read"):
        load_queries(tmp_path / "absent.jsonl")


# --- the gate on a judged corpus -----------------------------------------------------------------------------------

QUERIES = """\
{"_id": "partial", "text": "how do I create a partial index"}
{"_id": "pitr", "text": "restore the database to any moment with archived write-ahead log"}
{"_id": "userid", "text": "parse a user id string into an integer"}
{"_id": "unjudged", "text": "not scored"}
"""
# "pitr" also judges a page that no longer exists: its nDCG@10 is 1 / (1 + 1/log2(3)).
QRELS = """\
query-id\tcorpus-id\tscore
partial\tdocs/indexes.md\t1
partial\tdocs/backup.md\t0
pitr\tdocs/backup.md\t1
pitr\tdocs/recovery.md\t1
userid\tsrc/users.py\t1
"""


@pytest.fixture()
def judged(pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path) -> Path:
    """The sample corpus in source ``sample``, a decoy in ``other``, and judgment files; returns their folder."""
    ingestor = Ingestor(pool, {"text": local_embedder, "code": local_embedder}, max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(tmp_path / "sample"), SourceSpec(slug="sample"))
    ingestor.ingest(write_corpus(tmp_path / "other", {"docs/indexes.md": "# Partial indexes\n\nA partial index "
                                                      "covers the rows its predicate selects.\n"}),
                    SourceSpec(slug="other"))
    (tmp_path / "queries.jsonl").write_text(QUERIES, encoding="utf-8")
    (tmp_path / "qrels.tsv").write_text(QRELS, encoding="utf-8")
    return tmp_path


@pytest.fixture()
def runtime(database_url: str, model_cache: Path) -> Iterator[Runtime]:
    settings = Settings(database_url=database_url, model_cache=model_cache, text_model="local", code_model="local",
                        reranker="none")
    with Runtime(settings) as runtime:
        yield runtime


def _eval_args(folder: Path, *options: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="quarry eval")
    add_eval_arguments(parser)
    return parser.parse_args(["--queries", str(folder / "queries.jsonl"), "--qrels", str(folder / "qrels.tsv"),
                              *options])


def test_gate_passes_above_its_thresholds(judged: Path, runtime: Runtime, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_eval(runtime, _eval_args(judged, "--min-ndcg", "0.5", "--min-recall-100", "0.8"))
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "quarry eval: 3 queries, hybrid search (code_mode on)" in out
    assert [line.split()[0] for line in out.splitlines() if line.split()[-1:] in (["pass"], ["-"])] == [
        "nDCG@10", "MRR@10", "R@10", "R@100"]
    assert "quality gate: passed" in out
    assert "1 judged documents are not in the searched corpus (--doc-id path): docs/recovery.md" in out
    assert "1 queries of the queries file have no judgments" in out
    assert err == ""


def test_gate_fails_below_a_threshold_with_exit_3(
    judged: Path, runtime: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/recovery.md is judged but absent: R@100 is at most 5/6, whatever the ranking.
    code = run_eval(runtime, _eval_args(judged, "--min-recall-100", "0.9", "--min-ndcg", "0.1"))
    out, err = capsys.readouterr()
    assert code == EXIT_GATE_FAILED == 3
    assert "quality gate: FAILED" in out
    assert "quarry: quality gate failed: R@100 = 0.8333 is below --min-recall-100 0.9000" in err
    assert "nDCG@10" not in err  # only the metric that failed is named


def test_json_report_shape(judged: Path, runtime: Runtime, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_eval(runtime, _eval_args(judged, "--json", "--per-query", "--mode", "fts", "--min-mrr", "0.5"))
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 0, err
    assert set(report) == {"passed", "queries", "metrics", "settings", "missing_documents", "failed_legs", "notes",
                           "seconds", "per_query"}
    assert report["passed"] is True and report["queries"] == 3
    assert list(report["metrics"]) == ["nDCG@10", "MRR@10", "R@10", "R@100"]
    assert report["metrics"]["MRR@10"]["threshold"] == 0.5 and report["metrics"]["MRR@10"]["passed"] is True
    assert report["metrics"]["nDCG@10"]["threshold"] is None
    assert report["settings"] == {"mode": "fts", "code_mode": "off", "doc_id": "path", "sources": [],
                                  "chunk_depth": 200}
    assert report["missing_documents"] == ["docs/recovery.md"] and report["failed_legs"] == {}
    assert set(report["per_query"]) == {"partial", "pitr", "userid"}
    # each query's relevant document comes first: "pitr" scores the hand-computed value
    assert report["per_query"]["partial"]["nDCG@10"] == 1.0
    assert report["per_query"]["pitr"]["nDCG@10"] == pytest.approx(1 / (1 + 1 / LOG2_3), abs=1e-4)
    assert "quarry: note: 1 judged documents" in err  # notes go to stderr when stdout is JSON


def test_qualified_ids_stems_and_source_filter(
    judged: Path, runtime: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    # both sources hold docs/indexes.md; the judgment names the one of source "other", by stem
    (judged / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\npartial\tother:indexes\t1\n", encoding="utf-8")
    assert run_eval(runtime, _eval_args(judged, "--doc-id", "stem", "--json", "--min-recall", "1")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["missing_documents"] == []

    assert run_eval(runtime, _eval_args(judged, "--doc-id", "stem", "--source", "other", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["nDCG@10"]["value"] == 1.0

    # restricted to source "sample", the judged page of "other" cannot be found
    assert run_eval(runtime, _eval_args(judged, "--doc-id", "stem", "--source", "sample", "--json",
                                        "--min-ndcg", "0.1")) == EXIT_GATE_FAILED
    report = json.loads(capsys.readouterr().out)
    assert report["metrics"]["nDCG@10"]["value"] == 0.0 and report["missing_documents"] == ["other:indexes"]


def test_misconfiguration_is_a_usage_error_not_a_verdict(judged: Path, runtime: Runtime) -> None:
    with pytest.raises(InvalidRequestError, match="no source named 'nope'; sources: other, sample"):
        run_eval(runtime, _eval_args(judged, "--source", "nope"))
    (judged / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nghost\tdocs/a.md\t1\n", encoding="utf-8")
    with pytest.raises(InvalidRequestError, match=r"1 judged queries are not in the queries file, e\.g\. 'ghost'"):
        run_eval(runtime, _eval_args(judged))


def test_thresholds_must_be_fractions() -> None:
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--queries", "q", "--qrels", "r", "--min-ndcg", "1.5"])


def test_quarry_eval_command_exit_codes(judged: Path, database_url: str, model_cache: Path) -> None:
    # a failure, not a skip: an `eval` dropped from the CLI is a regression to see
    assert re.search(r"^\s+eval\s", build_parser().format_help(), re.MULTILINE), "`quarry eval` is not in the CLI"
    env = {**os.environ, "DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache),
           "QUARRY_TEXT_MODEL": "local", "QUARRY_CODE_MODEL": "local"}

    def quarry(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "engine.cli", "eval", "--queries", str(judged / "queries.jsonl"),
                               "--qrels", str(judged / "qrels.tsv"), *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)

    passed = quarry("--min-ndcg", "0.5")
    assert passed.returncode == 0, passed.stderr
    failed = quarry("--min-recall-100", "0.9")
    assert failed.returncode == 3 and "R@100 = 0.8333 is below --min-recall-100 0.9000" in failed.stderr
    (judged / "qrels.tsv").write_text("query-id\tcorpus-id\n", encoding="utf-8")
    broken = quarry()
    assert broken.returncode == 2 and "qrels.tsv:1: expected the header line" in broken.stderr
