"""The benchmark's helpers: BEIR loading, chunk-to-document ranking, identifier splitting (no datasets)."""

from __future__ import annotations

from pathlib import Path

from bench import metrics as bench_metrics
from bench.beir import load_beir
from bench.peers import split_identifiers
from bench.runs import top_documents
from engine import evaluation


def test_bench_scores_with_the_engine_metrics() -> None:
    # the published figures and the CI gate (quarry eval) are computed by the same code;
    # the metric cases themselves are in tests/test_evaluation.py
    assert bench_metrics.evaluate is evaluation.evaluate
    assert bench_metrics.METRICS is evaluation.METRICS


def test_top_documents_keeps_each_document_at_its_best_rank() -> None:
    assert top_documents(["d1", "d2", "d1", "d3", "d2", "d4"], 3) == ["d1", "d2", "d3"]
    assert top_documents(iter(["d1"]), 5) == ["d1"]


def test_load_beir_keeps_judged_queries_of_the_split(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "T", "text": "one"}\n{"_id": "d2", "title": "", "text": "two"}\n'
    )
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "first"}\n{"_id": "q2", "text": "second"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td1\t2\n")
    dataset = load_beir(tmp_path, "test")
    assert [q.id for q in dataset.queries] == ["q2"]
    assert dataset.qrels == {"q2": {"d1": 2}}
    assert [d.full_text for d in dataset.documents] == ["T one", "two"]


def test_split_identifiers_yields_the_words_inside_code_names() -> None:
    assert split_identifiers("parseHTTPResponse_code(x)") == "parse HTTP Response code(x)"
    assert split_identifiers("read file in python") == "read file in python"
