"""LocalMiniLM: agreement with sentence-transformers, batching, and the prepared-model cache.

The reference vectors come from the real sentence-transformers all-MiniLM-L6-v2 (see the
"generated_by" field of tests/data/minilm_reference.json). Preparing the int8 model takes a few
seconds, so one prepared embedder serves the whole session.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import engine.embed.local as local
import engine.embed.minilm_preparation as minilm_preparation
from engine.embed.base import Embedder
from engine.embed.local import LocalMiniLM
from engine.embed.minilm_runtime import DIMENSION

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="session")
def minilm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("minilm-cache")


@dataclass(frozen=True)
class Preparation:
    models: list[LocalMiniLM]
    paths: list[Path]
    errors: list[BaseException]
    files: list[str]


@pytest.fixture(scope="session")
def concurrent_preparation(minilm_cache: Path) -> Preparation:
    """Two embedders preparing into the one empty cache at once: the session's only preparation (it takes a while)."""
    models = [LocalMiniLM(minilm_cache, threads=1) for _ in range(2)]
    paths: list[Path] = []
    errors: list[BaseException] = []

    def run(model: LocalMiniLM) -> None:
        try:
            paths.append(model.prepare())
        except BaseException as error:  # surfaced by test_concurrent_preparation_is_safe
            errors.append(error)

    threads = [threading.Thread(target=run, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Preparation(models, paths, errors, sorted(p.name for p in minilm_cache.iterdir()))


@pytest.fixture(scope="session")
def embedder(concurrent_preparation: Preparation, minilm_cache: Path) -> LocalMiniLM:
    """The model those two prepared, checked against sentence-transformers below."""
    model = LocalMiniLM(minilm_cache)
    model.prepare()
    return model


@pytest.fixture(scope="session")
def reference() -> tuple[list[str], npt.NDArray[np.float32]]:
    data = json.loads(REFERENCE.read_text(encoding="utf-8"))
    assert data["dimension"] == DIMENSION and data["generated_by"]
    texts = [item["text"] for item in data["items"]]
    return texts, np.array([item["vector"] for item in data["items"]], dtype=np.float32)


def test_satisfies_the_protocol(embedder: LocalMiniLM) -> None:
    model: Embedder = embedder
    assert model.dimension == DIMENSION == 384
    assert "all-MiniLM-L6-v2" in model.model_name


def test_matches_sentence_transformers_in_one_call(
    embedder: LocalMiniLM, reference: tuple[list[str], npt.NDArray[np.float32]]
) -> None:
    texts, expected = reference
    cosines = (embedder.embed_documents(texts) * expected).sum(axis=1)
    worst = int(cosines.argmin())
    assert cosines.min() >= 0.99, f"cosine {cosines[worst]:.4f} for {texts[worst]!r}"


def test_matches_sentence_transformers_one_at_a_time(
    embedder: LocalMiniLM, reference: tuple[list[str], npt.NDArray[np.float32]]
) -> None:
    texts, expected = reference
    for text, vector in zip(texts, expected, strict=True):
        cosine = float(embedder.embed_queries([text])[0] @ vector)
        assert cosine >= 0.99, f"cosine {cosine:.4f} for {text!r}"


def test_shape_dtype_and_unit_norm(embedder: LocalMiniLM, reference: tuple[list[str], npt.NDArray[np.float32]]) -> None:
    texts, _ = reference
    for vectors in (embedder.embed_documents(texts), embedder.embed_queries(texts[:3])):
        assert vectors.dtype == np.float32
        assert vectors.shape[1] == DIMENSION
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.embed_documents(texts).shape == (len(texts), DIMENSION)


def test_empty_input_gives_no_rows(tmp_path: Path) -> None:
    # Needs no model: a fresh, unprepared embedder answers without preparing anything.
    model = LocalMiniLM(tmp_path)
    for vectors in (model.embed_documents([]), model.embed_queries([])):
        assert vectors.shape == (0, DIMENSION) and vectors.dtype == np.float32
    assert list(tmp_path.iterdir()) == []


def test_empty_and_blank_strings(embedder: LocalMiniLM) -> None:
    vectors = embedder.embed_documents(["", "   ", "\n", "text"])
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Blank strings tokenize to [CLS] [SEP] exactly like the empty string.
    assert vectors[0] @ vectors[1] > 0.999 and vectors[0] @ vectors[2] > 0.999


def test_order_preserved_across_sorted_batches(embedder: LocalMiniLM) -> None:
    # Lengths from 1 word to past the 256-token limit, shuffled, and enough texts for several
    # batches: each output row must be its own text's vector, whatever the batching did.
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "omicron"]
    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(words, size=int(n))) + f" item {i}" for i, n in enumerate(rng.integers(1, 300, 40))]
    batched = embedder.embed_documents(texts)
    alone = np.vstack([embedder.embed_documents([t]) for t in texts])
    similarity = batched @ alone.T
    assert (similarity.argmax(axis=1) == np.arange(len(texts))).all()
    # Dynamic int8 quantization scales each batch by its own range, so batch-mates nudge a
    # vector slightly; they never move it far.
    assert np.diag(similarity).min() > 0.99


def test_truncates_at_256_tokens(embedder: LocalMiniLM, reference: tuple[list[str], npt.NDArray[np.float32]]) -> None:
    texts, _ = reference
    long = max(texts, key=len)
    assert len(long.split()) > 256  # the reference paragraph is ~350 tokens
    base = embedder.embed_queries([long])
    longer = embedder.embed_queries([long + " These extra words lie beyond the limit and change nothing."])
    np.testing.assert_array_equal(base, longer)


def test_deterministic_and_queries_equal_documents(embedder: LocalMiniLM) -> None:
    texts = ["vacuum full locks the table", "SELECT 1;", "Résumé of the café"]
    first = embedder.embed_documents(texts)
    np.testing.assert_array_equal(first, embedder.embed_documents(texts))
    np.testing.assert_array_equal(first, embedder.embed_queries(texts))


def test_second_construction_reuses_the_prepared_file(
    embedder: LocalMiniLM, minilm_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = embedder.prepare()
    assert path.parent == minilm_cache and path.is_file()
    stamp = path.stat().st_mtime_ns

    def no_preparing(*_: object) -> None:
        raise AssertionError("prepared again although the cache holds the model")

    monkeypatch.setattr(minilm_preparation, "prepare_model", no_preparing)  # local imports it when it prepares
    again = LocalMiniLM(minilm_cache, threads=1)
    assert again.prepare() == path
    assert path.stat().st_mtime_ns == stamp
    # the model and the source's digest memo (local._source_digest), no temp files left behind
    assert sorted(p.name for p in minilm_cache.iterdir()) == sorted([path.name, "all-MiniLM-L6-v2.source-digest"])
    np.testing.assert_allclose(again.embed_queries(["hello"]), embedder.embed_queries(["hello"]), atol=1e-6)


@pytest.mark.slow  # the session's preparation (concurrent_preparation) takes a while
def test_concurrent_preparation_is_safe(concurrent_preparation: Preparation) -> None:
    # Two embedders preparing into one empty directory at once: both succeed, one model file remains
    # (beside the source's digest memo).
    prepared = concurrent_preparation
    assert not prepared.errors and len(prepared.paths) == 2 and len(set(prepared.paths)) == 1
    assert prepared.files == sorted([prepared.paths[0].name, "all-MiniLM-L6-v2.source-digest"])
    np.testing.assert_allclose(prepared.models[0].embed_queries(["x"]), prepared.models[1].embed_queries(["x"]),
                               atol=1e-6)


def test_the_source_digest_is_remembered_until_the_file_changes(tmp_path: Path) -> None:
    import hashlib
    import os

    source = tmp_path / "model.onnx"
    source.write_bytes(b"first weights")
    cache = tmp_path / "cache"
    first = local._source_digest(source, cache)
    assert first == hashlib.sha256(b"first weights").hexdigest()[:16]
    memo = cache / "all-MiniLM-L6-v2.source-digest"
    memo.write_text(memo.read_text(encoding="utf-8").rsplit("\n", 1)[0] + "\nremembered000000", encoding="utf-8")
    assert local._source_digest(source, cache) == "remembered000000"  # the memo, not the bytes, while unchanged

    source.write_bytes(b"other weights")  # a reinstall: new bytes, a new mtime
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 1))
    assert local._source_digest(source, cache) == hashlib.sha256(b"other weights").hexdigest()[:16]
    memo.write_text("garbage", encoding="utf-8")
    assert local._source_digest(source, cache) == hashlib.sha256(b"other weights").hexdigest()[:16]
