"""Models through the MCP client: reranking (Voyage stand-in, local cross-encoder) and every
degradation case's envelope: rerank timeout, open breaker, failed query embedding, a
retrieval leg erroring inside SQL, and no reranker configured."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder, Vectors
from engine.errors import ProviderError
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.providers.resilience import CircuitBreaker, RetryPolicy
from engine.providers.selection import build_reranker
from engine.rerank.base import Reranker
from engine.rerank.voyage import VoyageReranker
from engine.store.db import configure_connection
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import FILES, write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.tiny_cross_encoder import build_model_dir
from tests.voyage_standin import VoyageStandIn

QUERY = "how do I create a partial index"


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> ConnectionPool:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = write_corpus(tmp_path_factory.mktemp("models") / "sample", FILES)
    Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        root, SourceSpec(slug="sample", kind="docs_site", attribution="official"))
    return session_pool


@pytest.fixture(scope="module")
def standin() -> Iterator[VoyageStandIn]:
    with VoyageStandIn() as server:
        yield server


class _FailingEmbedder:
    """An embedder whose provider is down: every query embedding times out."""

    model_name = "voyage-code-3"
    dimension = 384

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        raise ProviderError("timeout after 5000ms")

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        raise ProviderError("timeout after 5000ms")


def _session(migrated_url: str, pool: ConnectionPool, embedders: dict[str, Any],
             reranker: Reranker | None = None) -> Any:
    backend = StaticBackend(Settings(database_url=migrated_url), pool, embedders, reranker)
    return _Served(build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True)))


class _Served:
    def __init__(self, app: Any) -> None:
        self._app = app

    def __enter__(self) -> McpSession:
        self._serving = serving(self._app)
        url = self._serving.__enter__()
        self._session = mcp_session(http_transport(url + "/mcp"))
        return self._session.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._session.__exit__(*exc)
        self._serving.__exit__(*exc)


def _voyage_reranker(standin: VoyageStandIn, *, timeout_s: float = 2.0,
                     breaker: CircuitBreaker | None = None) -> VoyageReranker:
    return VoyageReranker("rerank-2.5", api_key=standin.api_key, base_url=standin.base_url, timeout_s=timeout_s,
                          retry=RetryPolicy(max_retries=0, sleep=lambda _: None), breaker=breaker)


def test_voyage_rerank_reorders_and_reports_scores(corpus: ConnectionPool, migrated_url: str,
                                                   local_embedder: Embedder, standin: VoyageStandIn) -> None:
    standin.reset()
    with _session(migrated_url, corpus, dict.fromkeys(SPACES, local_embedder), _voyage_reranker(standin)) as mcp:
        body = mcp.ok("advanced_search", {"queries": [QUERY], "limit": 5,
                                          "rerank_instructions": "prefer reference pages"})
    assert body["reranked"] is True and body["degraded"] is False and body["rerank_skipped_reason"] is None
    scores = [result["rerank_score"] for result in body["results"]]
    assert scores == sorted(scores, reverse=True) and all(result["reranked"] for result in body["results"])
    assert all(result["confidence"] == result["rerank_score"] for result in body["results"])
    sent = [request for request in standin.requests if request.path.endswith("/rerank")]
    assert len(sent) == 1 and "prefer reference pages" in sent[0].body["query"]
    assert QUERY in sent[0].body["query"] and len(sent[0].body["documents"]) > 5


def test_a_rerank_timeout_keeps_the_fused_order_and_says_so(corpus: ConnectionPool, migrated_url: str,
                                                            local_embedder: Embedder,
                                                            standin: VoyageStandIn) -> None:
    standin.reset()
    standin.delay_next(1, 3.0)
    reranker = _voyage_reranker(standin, timeout_s=0.5)
    with _session(migrated_url, corpus, dict.fromkeys(SPACES, local_embedder), reranker) as mcp:
        body = mcp.ok("search", {"query": QUERY, "limit": 5})
        plain = mcp.ok("advanced_search", {"queries": [QUERY], "limit": 5, "rerank": False})
    assert body["degraded"] is True and body["reranked"] is False
    assert body["degradation_reason"].startswith("rerank_failed: timeout after 500ms")
    assert all(result["reranked"] is False for result in body["results"])
    assert [r["chunk_id"] for r in body["results"]] == [r["chunk_id"] for r in plain["results"]]
    assert body["hybrid_leg_failed"] is None


def test_an_open_breaker_degrades_without_calling_the_provider(corpus: ConnectionPool, migrated_url: str,
                                                               local_embedder: Embedder,
                                                               standin: VoyageStandIn) -> None:
    standin.reset()
    standin.fail_next(1, status=503)
    reranker = _voyage_reranker(standin, breaker=CircuitBreaker(failure_threshold=1, cool_down_s=60))
    with _session(migrated_url, corpus, dict.fromkeys(SPACES, local_embedder), reranker) as mcp:
        first = mcp.ok("search", {"query": QUERY})
        second = mcp.ok("search", {"query": QUERY})
    assert first["degradation_reason"].startswith("rerank_failed: HTTP 503")
    assert second["degraded"] is True and second["degradation_reason"].startswith("rerank_failed: circuit open for")
    assert len(standin.requests) == 1 and second["results"]


def test_a_failed_query_embedding_drops_the_vector_leg(corpus: ConnectionPool, migrated_url: str) -> None:
    failing = _FailingEmbedder()
    with _session(migrated_url, corpus, dict.fromkeys(SPACES, failing)) as mcp:
        body = mcp.ok("search", {"query": QUERY, "limit": 5})
        vector_only = mcp.call("search", {"query": QUERY, "mode": "vector"})
    assert body["degraded"] is True and body["hybrid_leg_failed"] == "vector"
    assert "query_embedding_failed (text space): timeout after 5000ms" in body["degradation_reason"]
    assert body["mode_used"] == "fts" and body["results"]
    assert all(result["vector_rank"] is None for result in body["results"])
    assert vector_only.error["code"] == "UNAVAILABLE"


def test_a_failed_code_embedding_keeps_the_general_vector_leg(corpus: ConnectionPool, migrated_url: str,
                                                              local_embedder: Embedder) -> None:
    with _session(migrated_url, corpus, {"text": local_embedder, "code": _FailingEmbedder()}) as mcp:
        body = mcp.ok("search", {"query": QUERY, "limit": 5})
    assert body["hybrid_leg_failed"] == "code" and body["mode_used"] == "hybrid"
    assert body["vector_spaces"] == ["text"] and body["code_mode_used"] == "off"
    assert any(result["vector_rank"] is not None for result in body["results"])


def test_a_leg_erroring_in_sql_leaves_the_other_legs_answering(corpus: ConnectionPool, migrated_url: str,
                                                               local_embedder: Embedder) -> None:
    # A REINDEX or a re-embed migration can hold an exclusive lock on the vector table; with a
    # lock timeout the vector legs error, and the keyword leg still answers.
    guarded = ConnectionPool(migrated_url, min_size=1, max_size=2, open=True,
                             configure=lambda conn: _with_lock_timeout(conn))
    holder = psycopg.connect(migrated_url)
    try:
        holder.execute("lock table quarry.embeddings in access exclusive mode")
        with _session(migrated_url, guarded, dict.fromkeys(SPACES, local_embedder)) as mcp:
            body = mcp.ok("search", {"query": QUERY, "limit": 5})
        assert body["degraded"] is True and body["hybrid_leg_failed"] == "vector"
        assert "failed in the database" in body["degradation_reason"]
        assert body["results"] and body["results"][0]["path"] == "docs/indexes.md"
        assert all(result["vector_rank"] is None for result in body["results"])
    finally:
        holder.rollback()
        holder.close()
        guarded.close()


def _with_lock_timeout(conn: psycopg.Connection[Any]) -> None:
    configure_connection(conn, 15_000)
    conn.execute("set lock_timeout = '200ms'")
    conn.commit()


def test_no_reranker_is_reported_as_skipped_not_failed(corpus: ConnectionPool, migrated_url: str,
                                                       local_embedder: Embedder) -> None:
    with _session(migrated_url, corpus, dict.fromkeys(SPACES, local_embedder)) as mcp:
        body = mcp.ok("search", {"query": QUERY})
        status = mcp.ok("status")
    assert body["degraded"] is False and body["reranked"] is False
    assert "no reranker is configured" in body["rerank_skipped_reason"]
    assert status["reranker"]["configured"] is False
    assert status["query_models"] == {"text": local_embedder.model_name, "code": local_embedder.model_name}


def test_a_local_cross_encoder_directory_reranks(corpus: ConnectionPool, migrated_url: str,
                                                 local_embedder: Embedder, tmp_path: Path) -> None:
    model_dir, _ = build_model_dir(tmp_path / "tiny-cross-encoder")
    reranker = build_reranker(Settings(database_url=migrated_url, reranker=f"cross-encoder:{model_dir}"))
    assert reranker is not None
    with _session(migrated_url, corpus, dict.fromkeys(SPACES, local_embedder), reranker) as mcp:
        body = mcp.ok("advanced_search", {"queries": [QUERY], "limit": 5, "rerank_instructions": "be brief"})
        status = mcp.ok("status")
    assert body["reranked"] is True and all(result["reranked"] for result in body["results"])
    scores = [result["rerank_score"] for result in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert any("cannot follow rerank_instructions" in note for note in body["notes"])
    assert status["reranker"] == {"configured": True, "available": True, "model": reranker.model_name,
                                  "follows_instructions": False}


def test_reranker_configuration_is_checked(tmp_path: Path) -> None:
    assert build_reranker(Settings(reranker="none")) is None
    assert build_reranker(Settings(reranker="auto", voyage_api_key=None)) is None
    with pytest.raises(Exception, match="not understood"):
        build_reranker(Settings(reranker="magic"))
    with pytest.raises(Exception, match=r"does not exist|not a directory|missing"):
        build_reranker(Settings(reranker=f"cross-encoder:{tmp_path / 'absent'}"))




class _CountingEmbedder:
    """The local model, counting how often queries are embedded."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.query_calls = 0
        self.model_name = inner.model_name
        self.dimension = inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._inner.embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.query_calls += 1
        return self._inner.embed_queries(texts)


def test_one_model_serving_both_spaces_embeds_the_query_once(corpus: ConnectionPool, migrated_url: str,
                                                             local_embedder: Embedder) -> None:
    counting = _CountingEmbedder(local_embedder)
    with _session(migrated_url, corpus, dict.fromkeys(SPACES, counting)) as mcp:
        body = mcp.ok("search", {"query": "parse a user id", "limit": 5})
    # the text leg stands in for the code leg: it would rank the same vectors again
    assert body["vector_spaces"] == ["text"] and body["code_mode_used"] == "on"
    assert all(result["code_rank"] is None for result in body["results"])
    assert counting.query_calls == 1
