"""The benchmark's ranking metrics on tiny rankings computed by hand (no datasets, no heavy deps)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.beir import load_beir
from bench.metrics import evaluate, ndcg_at_k, per_query, recall_at_k, reciprocal_rank_at_k
from bench.peers import split_identifiers
from bench.runs import top_documents

LOG2_3 = math.log2(3)  # discount at rank 2


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
