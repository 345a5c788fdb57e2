"""Re-embedding a space: resumable, searches keep the old vectors until one atomic switch."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from psycopg_pool import ConnectionPool

from engine.admin.reembed import reembed_space
from engine.embed.base import CODE_SPACE, SPACES, Embedder, Vectors
from engine.errors import ProviderError
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import FILES, write_corpus
from tests.searching import search_outcome as search

QUERY = "parse a user id"


class HashedWords:
    """A second "model": hashed bag of words, 64 dimensions, optionally failing after some calls."""

    model_name = "hashed-words-64"
    dimension = 64

    def __init__(self, fail_after_calls: int | None = None) -> None:
        self.calls = 0
        self.fail_after_calls = fail_after_calls

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        if self.fail_after_calls is not None and self.calls > self.fail_after_calls:
            raise ProviderError("HTTP 503")
        return self.embed_queries(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                vectors[row, hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % self.dimension] += 1
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)


def _spaces(pool: ConnectionPool) -> dict[str, tuple[str | None, str, int]]:
    with pool.connection() as conn:
        rows = conn.execute("select name, serves, model, (select count(*) from quarry.embeddings e "
                            "where e.space = s.name) from quarry.embedding_spaces s").fetchall()
    return {name: (serves, model, count) for name, serves, model, count in rows}


def test_reembed_resumes_keeps_serving_the_old_vectors_then_switches(
    pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path
) -> None:
    ingestor = Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    root = write_corpus(tmp_path / "sample", FILES)
    ingestor.ingest(root, SourceSpec(slug="sample"))
    code_chunks = _spaces(pool)["code"][2]
    assert code_chunks >= 2
    before = search(pool, None, QUERY, code_embedder=local_embedder, code_mode="exclusive", mode="vector").hits

    # interrupted after one batch of one chunk: searches still read the old generation
    with pytest.raises(ProviderError):
        reembed_space(pool, CODE_SPACE, HashedWords(fail_after_calls=1), batch_chunks=1)
    spaces = _spaces(pool)
    assert spaces["code"][:2] == ("code", local_embedder.model_name)
    assert spaces["code_g2"] == (None, "hashed-words-64", 1)
    during = search(pool, None, QUERY, code_embedder=local_embedder, code_mode="exclusive", mode="vector").hits
    assert [ranked.hit.chunk_id for ranked in during] == [ranked.hit.chunk_id for ranked in before]

    # an ingest meanwhile adds a code chunk: the resumed run embeds it before switching
    (root / "src" / "extra.py").write_text("def parse_order_id(text: str) -> int:\n    return int(text)\n")
    ingestor.ingest(root, SourceSpec(slug="sample"))
    summary = reembed_space(pool, CODE_SPACE, HashedWords(), batch_chunks=1)
    assert summary.generation == "code_g2" and summary.replaced == "code"
    assert summary.embedded == code_chunks + 1 - 1  # the interrupted run's chunk is not embedded again
    spaces = _spaces(pool)
    assert "code" not in spaces  # the old generation and its vectors are gone
    assert spaces["code_g2"] == ("code", "hashed-words-64", code_chunks + 1)

    new_model = HashedWords()
    after = search(pool, None, QUERY, code_embedder=new_model, code_mode="exclusive", mode="vector")
    assert after.hits and not after.degradation.degraded
    assert all(ranked.hit.code_rank is not None for ranked in after.hits)
    # a server still embedding queries with the old model gets no code leg, and is told why
    stale = search(pool, local_embedder, QUERY, code_embedder=local_embedder, code_mode="on")
    assert "hashed-words-64" in stale.degradation.failed_legs["code"] and stale.hits

    # ingest now needs the new model for the code space, and writes to the serving generation
    with pytest.raises(Exception, match="reembed --space code"):
        ingestor.ingest(root, SourceSpec(slug="sample"))
    (root / "src" / "more.py").write_text("def parse_item_id(text: str) -> int:\n    return int(text)\n")
    Ingestor(pool, {"text": local_embedder, "code": new_model}, max_file_bytes=1_000_000).ingest(
        root, SourceSpec(slug="sample"))
    assert _spaces(pool)["code_g2"][2] == code_chunks + 2
    assert reembed_space(pool, CODE_SPACE, HashedWords()).already_current
