"""CrossEncoderReranker against a tiny BERT cross-encoder built in the test (tests/tiny_cross_encoder.py).

The scores are checked against an independent numpy forward pass fed hand-built
``[CLS] query [SEP] document [SEP]`` ids, so a reranker that mis-orders the pair, drops the
token types or the attention mask, or keeps the tokenizer file's own padding fails here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InvalidRequestError, ProviderError
from engine.rerank.base import Reranker
from engine.rerank.cross_encoder import CrossEncoderReranker
from tests.tiny_cross_encoder import (
    VOCAB,
    TinyBertConfig,
    Weights,
    build_foreign_graph,
    build_model_dir,
    pair_ids,
    reference_logits,
)

CONFIG = TinyBertConfig()
QUERY = "postgres vector index"
DOCUMENTS = [
    "create index with table",
    "python function return error",
    "the vector search is fast",
    "postgres",
    "how to install the server and config the client for fast search of code",
    "",
]
LONG_DOCUMENT = " ".join(["select column from table where row is in the cache"] * 30)  # ~330 words


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def expected_score(weights: Weights, query: str, document: str, config: TinyBertConfig = CONFIG) -> float:
    ids, types = pair_ids(query, document, config.max_positions)
    if not config.token_type_input:
        types = [0] * len(ids)
    logits = reference_logits(weights, config, ids, types)
    if config.num_labels == 1:
        return sigmoid(float(logits[0]))
    probs = np.exp(logits - logits.max())
    return float(probs[1] / probs.sum())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Weights]:
    return build_model_dir(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture(scope="module")
def reranker(tiny: tuple[Path, Weights]) -> CrossEncoderReranker:
    return CrossEncoderReranker(tiny[0], threads=1)


def test_satisfies_the_protocol(reranker: CrossEncoderReranker) -> None:
    model: Reranker = reranker
    assert model.model_name == "tiny/bert-cross-encoder"
    assert reranker.max_length == CONFIG.max_positions  # 512 requested, capped by the config
    assert reranker.follows_instructions is False


def test_scores_match_an_independent_forward_pass(reranker: CrossEncoderReranker, tiny: tuple[Path, Weights]) -> None:
    scores = reranker.scores(QUERY, DOCUMENTS)
    expected = [expected_score(tiny[1], QUERY, doc) for doc in DOCUMENTS]
    np.testing.assert_allclose(scores, expected, atol=1e-5, rtol=0)


def test_the_reference_would_catch_wrong_inputs(tiny: tuple[Path, Weights]) -> None:
    # Guards the test above: the model is sensitive to exactly the mistakes it should catch.
    weights = tiny[1]
    for doc in DOCUMENTS[:4]:
        right = expected_score(weights, QUERY, doc)
        swapped = expected_score(weights, doc, QUERY)
        ids, _ = pair_ids(QUERY, doc, CONFIG.max_positions)
        no_types = sigmoid(float(reference_logits(weights, CONFIG, ids)[0]))
        assert abs(right - swapped) > 1e-3 and abs(right - no_types) > 1e-3


def test_results_are_best_first_and_index_the_input(reranker: CrossEncoderReranker) -> None:
    results = reranker.rerank(QUERY, DOCUMENTS)
    scores = reranker.scores(QUERY, DOCUMENTS)
    assert sorted(r.index for r in results) == list(range(len(DOCUMENTS)))
    assert [r.relevance_score for r in results] == sorted(scores.tolist(), reverse=True)
    for r in results:
        assert r.relevance_score == pytest.approx(scores[r.index], abs=1e-12)
        assert 0.0 <= r.relevance_score <= 1.0
    assert len({round(r.relevance_score, 6) for r in results}) == len(DOCUMENTS)  # a real ordering


def test_top_k(reranker: CrossEncoderReranker) -> None:
    everything = reranker.rerank(QUERY, DOCUMENTS)
    assert reranker.rerank(QUERY, DOCUMENTS, top_k=2) == everything[:2]
    assert reranker.rerank(QUERY, DOCUMENTS, top_k=100) == everything
    assert reranker.rerank(QUERY, DOCUMENTS, top_k=0) == []
    with pytest.raises(InvalidRequestError):
        reranker.rerank(QUERY, DOCUMENTS, top_k=-1)


def test_no_documents(reranker: CrossEncoderReranker) -> None:
    assert reranker.rerank(QUERY, []) == []
    assert reranker.scores(QUERY, []).shape == (0,)
    with pytest.raises(TypeError):
        reranker.rerank(QUERY, "a single string")


def test_long_documents_are_truncated(reranker: CrossEncoderReranker, tiny: tuple[Path, Weights]) -> None:
    [score] = reranker.scores(QUERY, [LONG_DOCUMENT])
    assert score == pytest.approx(expected_score(tiny[1], QUERY, LONG_DOCUMENT), abs=1e-5)


def test_a_long_query_keeps_room_for_the_document(reranker: CrossEncoderReranker, tiny: tuple[Path, Weights]) -> None:
    # The query keeps half the window (64 positions - 3 special tokens) // 2 = 30 words.
    query = " ".join(["vector", "index"] * 40)
    [score] = reranker.scores(query, ["postgres table"])
    assert score == pytest.approx(expected_score(tiny[1], " ".join(query.split()[:30]), "postgres table"), abs=1e-5)


def test_max_length_below_the_models_positions(tiny: tuple[Path, Weights]) -> None:
    short = CrossEncoderReranker(tiny[0], max_length=16, threads=1)
    [score] = short.scores(QUERY, [LONG_DOCUMENT])
    ids, types = pair_ids(QUERY, LONG_DOCUMENT, 16)
    assert len(ids) == 16
    assert score == pytest.approx(sigmoid(float(reference_logits(tiny[1], CONFIG, ids, types)[0])), abs=1e-5)


@pytest.mark.parametrize("batch_tokens", [1, 40, 4096])
def test_padding_in_a_batch_does_not_change_scores(tiny: tuple[Path, Weights], batch_tokens: int) -> None:
    reranker = CrossEncoderReranker(tiny[0], batch_tokens=batch_tokens, threads=1)
    documents = [*DOCUMENTS, LONG_DOCUMENT, *DOCUMENTS[::-1]]
    batched = reranker.scores(QUERY, documents)
    alone = [reranker.scores(QUERY, [doc])[0] for doc in documents]
    np.testing.assert_allclose(batched, alone, atol=1e-5, rtol=0)


def test_two_label_models_use_the_positive_softmax_probability(tmp_path: Path) -> None:
    config = TinyBertConfig(num_labels=2, seed=1)
    directory, weights = build_model_dir(tmp_path / "two", config)
    scores = CrossEncoderReranker(directory, threads=1).scores(QUERY, DOCUMENTS)
    np.testing.assert_allclose(scores, [expected_score(weights, QUERY, d, config) for d in DOCUMENTS], atol=1e-5)


def test_two_label_positive_index_comes_from_id2label(tmp_path: Path) -> None:
    config = TinyBertConfig(num_labels=2, seed=1, extra_config={"id2label": {"0": "relevant", "1": "irrelevant"}})
    directory, weights = build_model_dir(tmp_path / "flipped", config)
    scores = CrossEncoderReranker(directory, threads=1).scores(QUERY, DOCUMENTS)
    np.testing.assert_allclose(scores, [1 - expected_score(weights, QUERY, d, config) for d in DOCUMENTS], atol=1e-5)


def test_graphs_without_token_types_and_onnx_subfolder(tmp_path: Path) -> None:
    # DistilBERT/RoBERTa-style exports take no token_type_ids; sentence-transformers writes onnx/.
    config = TinyBertConfig(token_type_input=False, seed=2)
    directory, weights = build_model_dir(tmp_path / "no-types", config, onnx_subdir=True)
    assert not (directory / "model.onnx").exists()
    scores = CrossEncoderReranker(directory, threads=1).scores(QUERY, DOCUMENTS)
    np.testing.assert_allclose(scores, [expected_score(weights, QUERY, d, config) for d in DOCUMENTS], atol=1e-5)


def test_instructions_are_ignored_by_plain_cross_encoders(reranker: CrossEncoderReranker) -> None:
    steered = reranker.rerank(QUERY, DOCUMENTS, instructions="prefer python code")
    assert steered == reranker.rerank(QUERY, DOCUMENTS)


def test_instruction_template_from_config(tmp_path: Path) -> None:
    template = "{instructions} {query}"
    directory, weights = build_model_dir(
        tmp_path / "instr", TinyBertConfig(extra_config={"quarry_instruction_template": template})
    )
    reranker = CrossEncoderReranker(directory, threads=1)
    assert reranker.follows_instructions
    results = reranker.rerank(QUERY, DOCUMENTS, instructions="python code")
    for r in results:
        expected = expected_score(weights, "python code " + QUERY, DOCUMENTS[r.index])
        assert r.relevance_score == pytest.approx(expected, abs=1e-5)
    assert reranker.rerank(QUERY, DOCUMENTS) == CrossEncoderReranker(directory).rerank(
        QUERY, DOCUMENTS, instructions=""
    )


def test_model_failures_at_call_time_are_provider_errors(tmp_path: Path) -> None:
    # An embedding table shorter than the tokenizer's vocabulary: the Gather fails inside onnxruntime.
    directory, _ = build_model_dir(tmp_path / "broken", TinyBertConfig(embedding_rows=VOCAB["memory"]))
    reranker = CrossEncoderReranker(directory, threads=1)
    assert reranker.rerank("postgres", ["index"])  # in-range ids still work
    with pytest.raises(ProviderError, match="cross-encoder model run failed") as caught:
        reranker.rerank("postgres", ["memory"])
    assert caught.value.code == "UNAVAILABLE"


# --- configuration errors ---------------------------------------------------------------------


def _copy(source: Path, target: Path, *names: str) -> Path:
    target.mkdir()
    for name in names:
        (target / name).write_bytes((source / name).read_bytes())
    return target


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match="does not exist"):
        CrossEncoderReranker(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidRequestError, match="does not exist"):
        CrossEncoderReranker(tmp_path / "file")


def test_missing_model_or_tokenizer(tmp_path: Path, tiny: tuple[Path, Weights]) -> None:
    no_model = _copy(tiny[0], tmp_path / "no-model", "tokenizer.json", "config.json")
    with pytest.raises(InvalidRequestError, match=r"no model\.onnx .*optimum-cli"):
        CrossEncoderReranker(no_model)
    no_tokenizer = _copy(tiny[0], tmp_path / "no-tokenizer", "model.onnx", "config.json")
    with pytest.raises(InvalidRequestError, match=r"no tokenizer\.json"):
        CrossEncoderReranker(no_tokenizer)


def test_config_json_is_optional(tmp_path: Path, tiny: tuple[Path, Weights]) -> None:
    bare = _copy(tiny[0], tmp_path / "bare", "model.onnx", "tokenizer.json")
    reranker = CrossEncoderReranker(bare, max_length=CONFIG.max_positions, threads=1)
    assert reranker.model_name == "bare"
    np.testing.assert_allclose(
        reranker.scores(QUERY, DOCUMENTS[:3]), [expected_score(tiny[1], QUERY, d) for d in DOCUMENTS[:3]], atol=1e-5
    )


def test_unreadable_files(tmp_path: Path, tiny: tuple[Path, Weights]) -> None:
    corrupt = _copy(tiny[0], tmp_path / "corrupt", "tokenizer.json", "config.json")
    (corrupt / "model.onnx").write_bytes(b"not a protobuf")
    with pytest.raises(InvalidRequestError, match="as an ONNX model"):
        CrossEncoderReranker(corrupt)
    bad_config = _copy(tiny[0], tmp_path / "bad-config", "model.onnx", "tokenizer.json")
    (bad_config / "config.json").write_text("{", encoding="utf-8")
    with pytest.raises(InvalidRequestError, match="cannot read"):
        CrossEncoderReranker(bad_config)
    bad_tokenizer = _copy(tiny[0], tmp_path / "bad-tokenizer", "model.onnx", "config.json")
    (bad_tokenizer / "tokenizer.json").write_text("{}", encoding="utf-8")
    with pytest.raises(InvalidRequestError, match="tokenizers tokenizer"):
        CrossEncoderReranker(bad_tokenizer)


def test_graph_with_the_wrong_inputs(tmp_path: Path, tiny: tuple[Path, Weights]) -> None:
    foreign = build_foreign_graph(_copy(tiny[0], tmp_path / "foreign", "tokenizer.json", "config.json"))
    with pytest.raises(InvalidRequestError, match=r"lacks inputs \['input_ids', 'attention_mask'\]"):
        CrossEncoderReranker(foreign)


def test_graph_with_the_wrong_output(tmp_path: Path) -> None:
    # A three-way classifier (e.g. NLI) is not a relevance model.
    directory, _ = build_model_dir(tmp_path / "nli", TinyBertConfig(num_labels=3))
    with pytest.raises(InvalidRequestError, match=r"shape \['batch_size', 3\]"):
        CrossEncoderReranker(directory)


def test_bad_instruction_template(tmp_path: Path) -> None:
    directory, _ = build_model_dir(
        tmp_path / "bad", TinyBertConfig(extra_config={"quarry_instruction_template": "{query}"})
    )
    with pytest.raises(InvalidRequestError, match="quarry_instruction_template"):
        CrossEncoderReranker(directory)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config["quarry_instruction_template"] = "{instructions} {query} {other}"
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(InvalidRequestError, match="not a valid format string"):
        CrossEncoderReranker(directory)
