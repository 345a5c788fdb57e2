"""A loopback stand-in for Voyage AI's REST API, so provider tests never leave 127.0.0.1.

It serves ``POST /v1/embeddings`` and ``POST /v1/rerank`` in the documented format
(https://docs.voyageai.com/reference/embeddings-api, https://docs.voyageai.com/reference/reranker-api)
and validates requests the way Voyage does, answering 400/401 with ``{"detail": ...}``: the bearer
key, the model, ``input_type``, ``output_dimension``, at most 1,000 inputs, and the per-request token
limits. It counts a text's tokens as ``ceil(UTF-8 bytes / 4)``, roughly what Voyage's BPE gives for
English, so a client that batches by a conservative estimate passes and one that does not fails.

Answers are deterministic: an embedding is a hashed bag of the text's words (texts sharing words
point the same way), a rerank score is the share of the query's words a document contains.

Tests script it per request: ``fail_next`` (status, ``Retry-After``), ``delay_next`` (for timeouts);
``requests`` records every request received, failed ones included.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

EMBED_MODELS = {  # model: tokens per request
    "voyage-3.5": 320_000,
    "voyage-3.5-lite": 1_000_000,
    "voyage-3-large": 120_000,
    "voyage-code-3": 120_000,
}
OUTPUT_DIMENSIONS = (256, 512, 1024, 2048)
DEFAULT_DIMENSION = 1024
RERANK_MODELS = {  # model: (query tokens, query + document tokens, tokens per request)
    "rerank-2.5": (8_000, 32_000, 600_000),
    "rerank-2.5-lite": (8_000, 32_000, 600_000),
    "rerank-2": (4_000, 16_000, 600_000),
    "rerank-2-lite": (2_000, 8_000, 600_000),
}
MAX_INPUTS = 1_000

_WORD = re.compile(r"\w+")


def count_tokens(text: str) -> int:
    return -(-len(text.encode("utf-8")) // 4)


def embedding_of(text: str, dimension: int = DEFAULT_DIMENSION) -> npt.NDArray[np.float32]:
    """The stand-in's unit vector for ``text``: signed word hashes, summed."""
    vector = np.zeros(dimension, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vector[h % dimension] += 1.0 if (h >> 40) & 1 else -1.0
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    result: npt.NDArray[np.float32] = vector / norm
    return result


def relevance(query: str, document: str) -> float:
    """The share of the query's distinct words that the document contains."""
    query_words = set(_WORD.findall(query.lower()))
    if not query_words:
        return 0.0
    return len(query_words & set(_WORD.findall(document.lower()))) / len(query_words)


@dataclass(frozen=True)
class Received:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


class _Rejected(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class _Failure:
    status: int
    retry_after: str | None


@dataclass(frozen=True)
class _Delay:
    seconds: float


class VoyageStandIn:
    """A real HTTP server on 127.0.0.1 speaking Voyage's API; use as a context manager."""

    def __init__(self, api_key: str = "test-key") -> None:
        self.api_key = api_key
        self._lock = threading.Lock()
        self._script: deque[_Failure | _Delay] = deque()
        self._received: list[Received] = []
        self._in_flight = 0
        self.max_in_flight = 0
        # Each reset starts a generation: it releases the last one's delayed requests, and stops
        # counting them as in flight, so one test's stragglers do not leak into the next.
        self._generation = 0
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def fail_next(self, count: int, status: int = 503, retry_after: str | None = None) -> None:
        """Answer the next ``count`` requests with ``status`` (and a ``Retry-After`` header, if given)."""
        with self._lock:
            self._script.extend(_Failure(status, retry_after) for _ in range(count))

    def delay_next(self, count: int, seconds: float) -> None:
        """Hold the next ``count`` requests for ``seconds`` before answering them normally."""
        with self._lock:
            self._script.extend(_Delay(seconds) for _ in range(count))

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._received.clear()
            self._in_flight = self.max_in_flight = 0
            self._generation += 1
            self._release.set()
            self._release = threading.Event()

    def __enter__(self) -> VoyageStandIn:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._release.set()  # delayed handlers answer now
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # --- request handling (runs on the server's threads) ------------------------------------

    def _handle(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        with self._lock:
            self._received.append(Received(path, body if isinstance(body, dict) else {}, headers))
            step = self._script.popleft() if self._script else None
            generation, release = self._generation, self._release
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if isinstance(step, _Delay):
                release.wait(step.seconds)
            if isinstance(step, _Failure):
                extra = {"Retry-After": step.retry_after} if step.retry_after is not None else {}
                return step.status, extra, {"detail": f"scripted failure (HTTP {step.status})"}
            if headers.get("authorization") != f"Bearer {self.api_key}":
                raise _Rejected(401, "Provided API key is invalid.")
            if not isinstance(body, dict):
                raise _Rejected(400, "Request body must be a JSON object.")
            if path == "/v1/embeddings":
                return 200, {}, _embeddings(body)
            if path == "/v1/rerank":
                return 200, {}, _rerank(body)
            raise _Rejected(404, f"Not found: {path}")
        except _Rejected as rejected:
            return rejected.status, {}, {"detail": rejected.detail}
        finally:
            with self._lock:
                if generation == self._generation:
                    self._in_flight -= 1


def _handler_for(standin: VoyageStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, extra, payload = standin._handle(self.path, headers, raw)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except ConnectionError:
                pass  # the client gave up (a timeout test): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _strings(value: object, field: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _Rejected(400, f"'{field}' must be a string or a non-empty list of strings.")
    if len(value) > MAX_INPUTS:
        raise _Rejected(400, f"The number of {field} is {len(value)}, more than the maximum of {MAX_INPUTS}.")
    if any(not v for v in value):
        raise _Rejected(400, f"Every item of '{field}' must be a non-empty string.")
    return value


def _embeddings(body: dict[str, Any]) -> dict[str, Any]:
    model = body.get("model")
    if model not in EMBED_MODELS:
        raise _Rejected(400, f"Model {model!r} is not supported.")
    texts = _strings(body.get("input"), "input")
    if body.get("input_type") not in (None, "query", "document"):
        raise _Rejected(400, "input_type must be null, 'query' or 'document'.")
    dimension = body.get("output_dimension") or DEFAULT_DIMENSION
    if dimension not in OUTPUT_DIMENSIONS:
        raise _Rejected(400, f"output_dimension must be one of {OUTPUT_DIMENSIONS}.")
    if body.get("output_dtype") not in (None, "float"):
        raise _Rejected(400, "The stand-in only serves float embeddings.")
    tokens = sum(count_tokens(t) for t in texts)
    if tokens > EMBED_MODELS[model]:
        raise _Rejected(
            400, f"The max allowed tokens per submitted batch is {EMBED_MODELS[model]}. Your batch has {tokens} tokens."
        )
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector = embedding_of(text, dimension)
        encoded: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode() if as_base64 else vector.tolist()
        data.append({"object": "embedding", "embedding": encoded, "index": index})
    return {"object": "list", "data": data, "model": model, "usage": {"total_tokens": tokens}}


def _rerank(body: dict[str, Any]) -> dict[str, Any]:
    model = body.get("model")
    if model not in RERANK_MODELS:
        raise _Rejected(400, f"Model {model!r} is not supported.")
    query_limit, context, request_limit = RERANK_MODELS[model]
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise _Rejected(400, "'query' must be a non-empty string.")
    documents = _strings(body.get("documents"), "documents")
    top_k = body.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise _Rejected(400, "top_k must be a positive integer.")
    truncation = body.get("truncation", True)
    query_tokens = count_tokens(query)
    if query_tokens > query_limit:
        if not truncation:
            raise _Rejected(400, f"The query has {query_tokens} tokens, more than {query_limit}.")
        query_tokens = query_limit
    document_tokens = []
    for document in documents:
        tokens = count_tokens(document)
        if query_tokens + tokens > context:
            if not truncation:
                raise _Rejected(400, f"A query and document together exceed {context} tokens.")
            tokens = context - query_tokens
        document_tokens.append(tokens)
    total = query_tokens * len(documents) + sum(document_tokens)
    if total > request_limit:
        raise _Rejected(400, f"The total number of tokens is {total}, more than {request_limit}.")
    ranked = sorted(range(len(documents)), key=lambda i: (-relevance(query, documents[i]), i))
    data: list[dict[str, Any]] = []
    for i in ranked[:top_k]:
        item: dict[str, Any] = {"index": i, "relevance_score": relevance(query, documents[i])}
        if body.get("return_documents"):
            item["document"] = documents[i]
        data.append(item)
    return {"object": "list", "data": data, "model": model, "usage": {"total_tokens": total}}
