"""Voyage embeddings and reranking through the real ``voyageai`` client, against a loopback stand-in.

Nothing here reaches the network: ``tests/voyage_standin.py`` serves Voyage's API on 127.0.0.1, and
an autouse guard refuses any other destination.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engine.embed.base import Embedder
from engine.embed.voyage import DIMENSION, VoyageEmbedder, estimate_tokens
from engine.errors import ProviderError
from engine.providers.resilience import CircuitBreaker, RetryPolicy
from engine.rerank.base import Reranker
from engine.rerank.voyage import VoyageReranker
from tests.voyage_standin import EMBED_MODELS, RERANK_MODELS, VoyageStandIn, count_tokens, embedding_of

KEY = "test-key"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def state(breaker: CircuitBreaker) -> str:
    # Read through a call: mypy would keep an asserted property's value narrowed across calls.
    return breaker.state


class Sleeps(list[float]):
    """Records the waits asked for instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Refuse every destination but 127.0.0.1; returns the hosts that were refused."""
    refused: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost"):
            refused.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, "network access is disabled in tests")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return refused


@pytest.fixture(scope="module")
def server() -> Iterator[VoyageStandIn]:
    with VoyageStandIn(api_key=KEY) as standin:
        yield standin


@pytest.fixture
def standin(server: VoyageStandIn) -> VoyageStandIn:
    server.reset()
    return server


def fast_retries(**overrides: Any) -> RetryPolicy:
    options: dict[str, Any] = {"max_retries": 3, "initial_backoff_s": 0.01, "max_backoff_s": 0.05, "sleep": Sleeps()}
    options.update(overrides)
    return RetryPolicy(**options)


def embedder(standin: VoyageStandIn, model: str = "voyage-3.5", **options: Any) -> VoyageEmbedder:
    options.setdefault("retry", fast_retries())
    return VoyageEmbedder(model, api_key=KEY, base_url=standin.base_url, **options)


def reranker(standin: VoyageStandIn, model: str = "rerank-2.5", **options: Any) -> VoyageReranker:
    options.setdefault("retry", fast_retries())
    return VoyageReranker(model, api_key=KEY, base_url=standin.base_url, **options)


# --- success ----------------------------------------------------------------------------------


def test_text_embedder_embeds_documents_and_queries(standin: VoyageStandIn) -> None:
    voyage: Embedder = embedder(standin)
    docs = voyage.embed_documents(["Postgres index tuning guide", "banana bread recipe"])
    queries = voyage.embed_queries(["tuning a postgres index"])

    assert (voyage.model_name, voyage.dimension) == ("voyage-3.5", DIMENSION)
    assert docs.dtype == np.float32 and docs.shape == (2, DIMENSION)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert np.allclose(docs[1], embedding_of("banana bread recipe"), atol=1e-6)
    assert int(np.argmax(docs @ queries[0])) == 0
    sent = [r.body for r in standin.requests]
    assert [(b["model"], b["input_type"], b["truncation"], b["output_dimension"]) for b in sent] == [
        ("voyage-3.5", "document", True, DIMENSION),
        ("voyage-3.5", "query", True, DIMENSION),
    ]
    assert standin.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_code_embedder_uses_voyage_code_3(standin: VoyageStandIn) -> None:
    voyage = embedder(standin, "voyage-code-3")
    vectors = voyage.embed_documents(["def parse(path: str) -> dict: ..."])
    assert vectors.shape == (1, DIMENSION)
    assert standin.requests[0].body["model"] == "voyage-code-3"


def test_empty_input_sends_nothing_and_a_str_is_refused(standin: VoyageStandIn) -> None:
    voyage = embedder(standin)
    assert voyage.embed_queries([]).shape == (0, DIMENSION)
    assert voyage.embed_queries([""]).shape == (1, DIMENSION)  # Voyage refuses "": sent as " "
    with pytest.raises(TypeError):
        voyage.embed_queries("one text")
    assert [r.body["input"] for r in standin.requests] == [[" "]]


def test_reranker_orders_documents_by_relevance(standin: VoyageStandIn) -> None:
    rerank: Reranker = reranker(standin)
    documents = ["bananas are yellow", "configure the connection pool size", "pool of water", "connection pool"]
    results = rerank.rerank("connection pool size", documents, top_k=2)

    assert rerank.model_name == "rerank-2.5"
    assert [r.index for r in results] == [1, 3]
    assert results[0].relevance_score == pytest.approx(1.0)
    assert results[0].relevance_score >= results[1].relevance_score
    (sent,) = standin.requests
    assert sent.path == "/v1/rerank"
    assert (sent.body["model"], sent.body["top_k"], sent.body["truncation"]) == ("rerank-2.5", 2, True)
    assert rerank.rerank("anything", []) == []
    assert len(standin.requests) == 1


def test_reranker_prepends_instructions_to_the_query(standin: VoyageStandIn) -> None:
    reranker(standin).rerank("read a file", ["fs.readFile", "open()"], instructions="  Prefer TypeScript examples. ")
    reranker(standin, "rerank-2").rerank("read a file", ["fs.readFile"], instructions="Prefer TypeScript examples.")
    queries = [r.body["query"] for r in standin.requests]
    assert queries == ["Prefer TypeScript examples.\n\nQuery: read a file", "read a file"]
    # what callers read to say whether instructions were applied
    assert reranker(standin).follows_instructions is True
    assert reranker(standin, "rerank-2").follows_instructions is False


def test_overlong_instructions_are_clipped_not_the_query(standin: VoyageStandIn) -> None:
    reranker(standin).rerank("read a file", ["fs.readFile"], instructions="be terse " * 10_000)
    query = standin.requests[0].body["query"]
    assert query.endswith("\n\nQuery: read a file")
    assert estimate_tokens(query) <= RERANK_MODELS["rerank-2.5"][0]


# --- request limits ---------------------------------------------------------------------------


def test_embed_batches_split_at_1000_texts_and_reassemble_in_order(standin: VoyageStandIn) -> None:
    texts = [f"note number {i} word{i}" for i in range(2_500)]
    vectors = embedder(standin).embed_documents(texts)

    # Batches run concurrently, so they may arrive in any order.
    assert sorted(len(r.body["input"]) for r in standin.requests) == [500, 1_000, 1_000]
    for i in (0, 999, 1_000, 2_499):
        assert np.allclose(vectors[i], embedding_of(texts[i]), atol=1e-6)


def test_embed_batches_split_at_the_model_token_budget(standin: VoyageStandIn) -> None:
    # voyage-code-3 takes 120K tokens a request; these 50 texts hold ~150K, so one request would fail.
    texts = [f"chunk{i} " + "lorem ipsum dolor sit amet " * 450 for i in range(50)]
    assert sum(count_tokens(t) for t in texts) > EMBED_MODELS["voyage-code-3"]

    vectors = embedder(standin, "voyage-code-3").embed_documents(texts)

    sizes = [len(r.body["input"]) for r in standin.requests]
    assert len(sizes) > 1 and sum(sizes) == 50
    assert all(sum(count_tokens(t) for t in r.body["input"]) <= 120_000 for r in standin.requests)
    assert np.allclose(vectors[49], embedding_of(texts[49]), atol=1e-6)


def test_a_text_longer_than_the_context_is_clipped_to_fit_one_request(standin: VoyageStandIn) -> None:
    embedder(standin, "voyage-code-3").embed_documents(["x" * 1_000_000])
    (sent,) = standin.requests
    assert estimate_tokens(sent.body["input"][0]) <= 32_000


def test_rerank_splits_more_than_1000_documents_and_merges_scores(standin: VoyageStandIn) -> None:
    documents = [f"unrelated filler {i}" for i in range(1_500)]
    documents[1_200] = "vacuum freeze tuning"
    documents[7] = "vacuum tuning"

    results = reranker(standin).rerank("vacuum freeze tuning", documents, top_k=3)

    assert sorted(len(r.body["documents"]) for r in standin.requests) == [500, 1_000]
    assert [r.body["top_k"] for r in standin.requests] == [3, 3]
    assert [r.index for r in results[:2]] == [1_200, 7]
    assert len(results) == 3


def test_rerank_splits_at_the_total_token_budget(standin: VoyageStandIn) -> None:
    documents = [f"doc{i} " + "long passage text " * 500 for i in range(300)]  # ~675K tokens in one request

    results = reranker(standin).rerank("passage", documents)

    assert len(standin.requests) > 1
    for request in standin.requests:
        query_tokens = count_tokens(request.body["query"])
        sent = request.body["documents"]
        assert query_tokens * len(sent) + sum(count_tokens(d) for d in sent) <= 600_000
    assert sorted(r.index for r in results) == list(range(300))


# --- retries, timeouts ------------------------------------------------------------------------


@pytest.mark.parametrize(("retry_after", "expected_wait"), [("2", 2.0), ("120", 5.0)])
def test_429_is_retried_after_the_retry_after_delay_capped(
    standin: VoyageStandIn, retry_after: str, expected_wait: float
) -> None:
    sleeps = Sleeps()
    standin.fail_next(1, status=429, retry_after=retry_after)
    voyage = embedder(standin, retry=fast_retries(sleep=sleeps, max_retry_after_s=5.0), timeout_s=30.0)

    assert voyage.embed_queries(["hello"]).shape == (1, DIMENSION)
    assert sleeps == [expected_wait]
    assert len(standin.requests) == 2


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retried_with_backoff_then_reported(standin: VoyageStandIn, status: int) -> None:
    sleeps = Sleeps()
    standin.fail_next(10, status=status)
    voyage = embedder(standin, retry=fast_retries(max_retries=2, initial_backoff_s=0.2, max_backoff_s=10, sleep=sleeps))

    with pytest.raises(ProviderError) as raised:
        voyage.embed_documents(["hello"])

    assert raised.value.reason == f"HTTP {status}"
    assert len(standin.requests) == 3  # the first try and two retries
    assert 0.1 <= sleeps[0] <= 0.2 and 0.2 <= sleeps[1] <= 0.4  # exponential, jittered


def test_reranker_retries_too(standin: VoyageStandIn) -> None:
    standin.fail_next(2, status=503)
    assert reranker(standin).rerank("pool", ["pool", "other"], top_k=1)[0].index == 0
    assert len(standin.requests) == 3


def test_other_4xx_are_not_retried(standin: VoyageStandIn) -> None:
    standin.fail_next(1, status=400)
    with pytest.raises(ProviderError) as raised:
        embedder(standin).embed_queries(["hello"])
    assert raised.value.reason == "HTTP 400: scripted failure (HTTP 400)"

    wrong_key = VoyageEmbedder("voyage-3.5", api_key="wrong", base_url=standin.base_url)
    with pytest.raises(ProviderError) as raised:
        wrong_key.embed_queries(["hello"])
    assert raised.value.reason == "HTTP 401: Provided API key is invalid."
    assert len(standin.requests) == 2


def test_a_slow_answer_times_out_with_the_configured_budget(standin: VoyageStandIn) -> None:
    standin.delay_next(1, seconds=3.0)
    started = time.monotonic()
    with pytest.raises(ProviderError) as raised:
        embedder(standin, timeout_s=0.3).embed_queries(["hello"])
    assert raised.value.reason == "timeout after 300ms"
    assert time.monotonic() - started < 1.5

    standin.delay_next(1, seconds=3.0)
    with pytest.raises(ProviderError) as raised:
        reranker(standin, timeout_s=0.25).rerank("q", ["d"])
    assert raised.value.reason == "timeout after 250ms"


def test_a_multi_batch_call_times_out_as_a_whole(standin: VoyageStandIn) -> None:
    standin.delay_next(1, seconds=3.0)  # one of the three batches hangs
    with pytest.raises(ProviderError) as raised:
        embedder(standin, timeout_s=0.4).embed_documents([f"t{i}" for i in range(2_500)])
    assert raised.value.reason == "timeout after 400ms"


def test_a_retry_that_cannot_finish_in_time_fails_at_once(standin: VoyageStandIn) -> None:
    standin.fail_next(1, status=503)
    started = time.monotonic()
    with pytest.raises(ProviderError) as raised:
        embedder(standin, timeout_s=1.0, retry=RetryPolicy(initial_backoff_s=5.0)).embed_queries(["x"])
    assert raised.value.reason == "HTTP 503"
    assert time.monotonic() - started < 0.5


def test_batches_run_with_bounded_concurrency(standin: VoyageStandIn) -> None:
    # Each text is clipped to 32K estimated tokens; three fit voyage-code-3's 120K: 15 texts, 5 requests.
    texts = [f"t{i} " + "a" * 100_000 for i in range(15)]
    standin.delay_next(5, seconds=0.15)
    embedder(standin, "voyage-code-3", max_concurrency=2, timeout_s=10.0).embed_documents(texts)
    assert len(standin.requests) == 5
    assert standin.max_in_flight == 2


# --- circuit breaker --------------------------------------------------------------------------


def test_breaker_opens_fails_fast_then_half_opens_and_recovers(standin: VoyageStandIn) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=2, cool_down_s=30, clock=clock)
    voyage = embedder(standin, breaker=breaker, retry=fast_retries(max_retries=0))
    standin.fail_next(2, status=503)

    for _ in range(2):
        with pytest.raises(ProviderError, match="HTTP 503"):
            voyage.embed_queries(["q"])
    with pytest.raises(ProviderError) as raised:
        voyage.embed_queries(["q"])
    assert raised.value.reason == "circuit open for 30s"
    clock.advance(12)
    with pytest.raises(ProviderError) as raised:
        voyage.embed_queries(["q"])
    assert raised.value.reason == "circuit open for 18s"
    assert len(standin.requests) == 2  # failing fast never reached the server

    clock.advance(18)
    assert state(breaker) == "half-open"
    assert voyage.embed_queries(["q"]).shape == (1, DIMENSION)  # the trial call
    assert state(breaker) == "closed"
    voyage.embed_queries(["q"])
    assert len(standin.requests) == 4


def test_a_failed_trial_reopens_the_breaker(standin: VoyageStandIn) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, cool_down_s=10, clock=clock)
    rerank = reranker(standin, breaker=breaker, retry=fast_retries(max_retries=0))
    standin.fail_next(2, status=502)
    with pytest.raises(ProviderError, match="HTTP 502"):
        rerank.rerank("q", ["d"])
    clock.advance(10)
    with pytest.raises(ProviderError, match="HTTP 502"):
        rerank.rerank("q", ["d"])  # the trial
    with pytest.raises(ProviderError, match="circuit open for 10s"):
        rerank.rerank("q", ["d"])
    assert len(standin.requests) == 2


def test_rejected_requests_do_not_trip_the_breaker(standin: VoyageStandIn) -> None:
    breaker = CircuitBreaker(failure_threshold=1)
    standin.fail_next(3, status=422)
    voyage = embedder(standin, breaker=breaker)
    for _ in range(3):
        with pytest.raises(ProviderError, match="HTTP 422"):
            voyage.embed_queries(["q"])
    assert state(breaker) == "closed"


def test_half_open_admits_a_single_trial() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, cool_down_s=5, clock=clock)
    with pytest.raises(ProviderError), breaker.guard():
        raise ProviderError("HTTP 503")
    clock.advance(5)
    # While the trial (outer guard) is in flight, another call fails fast.
    with breaker.guard(), pytest.raises(ProviderError, match="circuit open for 1s"), breaker.guard():
        pass
    assert state(breaker) == "closed"


# --- configuration ----------------------------------------------------------------------------


def test_unknown_models_and_missing_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="voyage-9"):
        VoyageEmbedder("voyage-9", api_key=KEY)
    with pytest.raises(ValueError, match="API key"):
        VoyageReranker(api_key="")


def test_without_base_url_the_client_targets_voyage_which_tests_cannot_reach(loopback_only: list[str]) -> None:
    voyage = VoyageEmbedder("voyage-3.5", api_key=KEY, retry=RetryPolicy(max_retries=0))
    with pytest.raises(ProviderError, match="connection error"):
        voyage.embed_queries(["q"])
    # urllib3 itself retries a failed connect twice for https (the client mounts HTTPAdapter(max_retries=2)).
    assert set(loopback_only) == {"api.voyageai.com"}
