"""The ``docs-server`` profile against the Pinecone-docs contract (contracts/000_…), through the SDK's real client.

Written from the contract's text: its nine tools, each argument with its default and limit, each
success field, the flow gate (query, count and query_documents need suggest_query_params for the
exact same namespace string; keyword_search and guided_query do not), the ToolError envelope, and the
seed's own example calls (a ``mailing`` namespace). Over stdio (``quarry mcp --tools docs-server``) and
over HTTP without keys (``QUARRY_TOOLS=docs-server``); each server has its own gate memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.test_profiles import DOCS_SERVER_TOOLS, call_result, profile_stdio

MAILING = {
    "2024/coroutines.md": "# Coroutines\n\nDiscussion about coroutines: co_await, promise types and the "
    "allocator of the coroutine frame.\n",
    "2024/exceptions.md": "# Exception safety\n\nThe strong exception safety guarantee and the basic "
    "guarantee: which standard containers offer them.\n",
    "2024/modules.md": "# Modules TS\n\nMessages about the modules TS: module interface units and header units.\n",
}
DOCS = {
    "docs/allocator.md": "# Allocator\n\nThe allocator is documented here: arenas, free lists and alignment.\n",
    "docs/indexes.md": "# Indexes\n\nA partial index covers the rows a predicate selects.\n",
}
ROW_FIELDS = {"document_id", "paper_number", "title", "author", "url", "content", "score", "reranked", "metadata"}


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> ConnectionPool:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("docs-server")
    ingestor = Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=2_000_000)
    ingestor.ingest(write_corpus(root / "mailing", MAILING), SourceSpec(
        slug="mailing", kind="standalone", url_template="https://lists.example.org/{path_no_ext}"))
    ingestor.ingest(write_corpus(root / "docs", DOCS), SourceSpec(slug="docs", kind="docs_site"))
    ingestor.ingest(write_corpus(root / "gated", {"a.md": "# Gated\n\nA page behind the gate.\n"}),
                    SourceSpec(slug="gated", kind="standalone"))
    return session_pool


@pytest.fixture(scope="module", params=["stdio", "http"])
def mcp(request: pytest.FixtureRequest, corpus: ConnectionPool, migrated_url: str, local_embedder: Embedder,
        model_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    if request.param == "stdio":
        parameters = profile_stdio(migrated_url, model_cache, tmp_path_factory.mktemp("home"), "docs-server")
        with mcp_session(parameters) as session:
            yield session
        return
    backend = StaticBackend(Settings(database_url=migrated_url, tools="docs-server"), corpus,
                            dict.fromkeys(SPACES, local_embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def _error(mcp: McpSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = mcp.call(tool, arguments)
    assert reply.is_error, reply.text[:500]
    body = reply.body
    assert body["status"] == "error" and isinstance(body["code"], str) and body["message"]
    return body


def _suggest(mcp: McpSession, namespace: str) -> dict[str, Any]:
    return mcp.ok("suggest_query_params", {"namespace": namespace, "user_query": "anything"})


def test_the_flow_gate_comes_first_for_the_exact_namespace(mcp: McpSession) -> None:
    query = {"query_text": "gate", "namespace": "gated"}
    for tool, arguments in (("query", query), ("count", query), ("query_documents", query)):
        blocked = _error(mcp, tool, arguments)
        assert blocked["code"] == "FLOW_GATE" and "suggest_query_params" in blocked["suggestion"]
    assert mcp.ok("keyword_search", query)["status"] == "success"  # no gate
    _suggest(mcp, " gated")  # not found: no suggestion, and a different string anyway
    assert _error(mcp, "query", query)["code"] == "FLOW_GATE"
    assert _suggest(mcp, "gated")["namespace_found"] is True
    for tool in ("query", "count", "query_documents"):
        assert mcp.ok(tool, query)["status"] == "success"


def test_exactly_the_nine_tools_with_the_contract_arguments(mcp: McpSession) -> None:
    tools = {tool.name: tool for tool in mcp.list_tools()}
    assert set(tools) == DOCS_SERVER_TOOLS
    properties = {name: set(tool.input_schema["properties"]) for name, tool in tools.items()}
    assert properties == {
        "list_namespaces": set(),
        "namespace_router": {"user_query", "top_n"},
        "suggest_query_params": {"namespace", "user_query"},
        "count": {"namespace", "query_text", "metadata_filter"},
        "query": {"query_text", "namespace", "top_k", "preset", "use_reranking", "metadata_filter", "fields"},
        "keyword_search": {"query_text", "namespace", "top_k", "metadata_filter", "fields"},
        "query_documents": {"query_text", "namespace", "top_k", "metadata_filter", "max_chunks_per_document"},
        "guided_query": {"user_query", "namespace", "metadata_filter", "top_k", "preferred_tool", "enrich_urls"},
        "generate_urls": {"namespace", "records"},
    }
    query = tools["query"].input_schema["properties"]
    assert (query["top_k"]["default"], query["top_k"]["minimum"], query["top_k"]["maximum"]) == (10, 1, 100)
    assert query["preset"]["default"] == "full" and query["preset"]["enum"] == ["fast", "detailed", "full"]
    documents = tools["query_documents"].input_schema["properties"]
    assert (documents["top_k"]["default"], documents["top_k"]["maximum"]) == (5, 20)
    assert (documents["max_chunks_per_document"]["default"], documents["max_chunks_per_document"]["maximum"]) == \
        (200, 500)
    router = tools["namespace_router"].input_schema["properties"]["top_n"]
    assert (router["default"], router["minimum"], router["maximum"]) == (3, 1, 5)
    guided = tools["guided_query"].input_schema["properties"]
    assert guided["enrich_urls"]["default"] is True
    assert guided["preferred_tool"]["enum"] == ["auto", "count", "fast", "detailed", "full"]
    assert tools["generate_urls"].input_schema["properties"]["records"]["maxItems"] == 500


def test_list_namespaces_is_cached(mcp: McpSession) -> None:
    first = mcp.ok("list_namespaces", {})
    again = mcp.ok("list_namespaces", {})
    assert first["status"] == "success" and again["cache_hit"] is True and first["cache_ttl_seconds"] == 1800
    assert datetime.fromisoformat(first["expires_at_iso"]) > datetime.now(datetime.fromisoformat(
        first["expires_at_iso"]).tzinfo)
    namespaces = {namespace["name"]: namespace for namespace in first["namespaces"]}
    assert first["count"] == len(namespaces) == 3 and set(namespaces) == {"mailing", "docs", "gated"}
    assert namespaces["mailing"]["record_count"] >= 3 and "path" in namespaces["mailing"]["metadata_fields"]


def test_namespace_router_ranks_namespaces(mcp: McpSession) -> None:
    routed = mcp.ok("namespace_router", {"user_query": "Where is the allocator documented?", "top_n": 3})
    assert routed["status"] == "success" and routed["user_query"] == "Where is the allocator documented?"
    assert isinstance(routed["cache_hit"], bool) and routed["recommended_namespace"] == "docs"
    assert len(routed["suggestions"]) == 3 and routed["suggestions"][0]["namespace"] == "docs"
    assert len(mcp.ok("namespace_router", {"user_query": "allocator"})["suggestions"]) == 3  # top_n defaults to 3
    assert _error(mcp, "namespace_router", {"user_query": "x", "top_n": 6})["code"] == "LIMIT"
    assert _error(mcp, "namespace_router", {"user_query": "x", "top_n": 0})["code"] == "INVALID"


def test_suggest_query_params_finds_the_namespace_or_says_not(mcp: McpSession) -> None:
    suggested = mcp.ok("suggest_query_params", {
        "namespace": "mailing", "user_query": "Summarize discussions about coroutines from last month"})
    assert suggested["status"] == "success" and suggested["namespace_found"] is True
    assert isinstance(suggested["cache_hit"], bool) and isinstance(suggested["suggested_fields"], list)
    assert suggested["recommended_tool"] in {"query", "count", "query_documents"}
    assert isinstance(suggested["use_count_tool"], bool) and suggested["explanation"]
    counting = mcp.ok("suggest_query_params", {"namespace": "mailing", "user_query": "How many messages mention x"})
    assert counting["recommended_tool"] == "count" and counting["use_count_tool"] is True
    assert mcp.ok("suggest_query_params", {"namespace": "nope", "user_query": "x"})["namespace_found"] is False


def test_query_answers_the_contract_query_response(mcp: McpSession) -> None:
    _suggest(mcp, "mailing")
    example = {"query_text": "exception safety guarantees", "namespace": "mailing", "preset": "detailed", "top_k": 8}
    body = mcp.ok("query", example)
    assert body["status"] == "success" and body["mode"] == "query_detailed" and body["namespace"] == "mailing"
    assert body["query"] == "exception safety guarantees" and body["result_count"] == len(body["results"]) <= 8
    first = body["results"][0]
    assert set(first) >= ROW_FIELDS and first["paper_number"] == first["document_id"]
    assert first["title"] == "Exception safety" and first["reranked"] is False
    scores = [row["score"] for row in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["degraded"] is False and body["degradation_reason"] is None and body["hybrid_leg_failed"] is None
    full = mcp.ok("query", {"query_text": "coroutines", "namespace": "mailing"})
    assert full["mode"] == "query" and "confidence_factors" in full["results"][0]["metadata"]  # preset full
    fast = mcp.ok("query", {"query_text": "coroutines", "namespace": "mailing", "preset": "fast"})
    assert fast["mode"] == "query_fast" and "confidence_factors" not in fast["results"][0]["metadata"]
    narrow = mcp.ok("query", {"query_text": "coroutines", "namespace": "mailing", "fields": ["path"]})
    assert narrow["fields"] == ["path"] and all(set(row["metadata"]) == {"path"} for row in narrow["results"])
    filtered = mcp.ok("query", {"query_text": "coroutines", "namespace": "mailing",
                                "metadata_filter": {"content_type": {"$eq": "markdown"}}})
    assert filtered["metadata_filter"] == {"content_type": {"$eq": "markdown"}} and filtered["results"]
    none = mcp.ok("query", {"query_text": "coroutines", "namespace": "mailing",
                            "metadata_filter": {"content_type": {"$in": ["code"]}}})
    assert none["results"] == []
    assert mcp.ok("query", {**example, "top_k": 100})["status"] == "success"
    assert _error(mcp, "query", {**example, "top_k": 101})["code"] == "LIMIT"
    assert _error(mcp, "query", {**example, "preset": "turbo"})["code"] == "INVALID"
    assert _error(mcp, "query", {**example, "metadata_filter": {"year": {"$gt": 2020}}})["code"] == "INVALID"
    assert _error(mcp, "query", {"query_text": "x"})["code"] == "INVALID"  # namespace is required


def test_keyword_search_is_lexical_with_the_same_rows(mcp: McpSession) -> None:
    body = mcp.ok("keyword_search", {"query_text": "allocator", "namespace": "docs", "top_k": 5})
    assert body["status"] == "success" and body["results"] and set(body["results"][0]) >= ROW_FIELDS
    assert all(row["metadata"]["path"] == "docs/allocator.md" for row in body["results"])
    assert _error(mcp, "keyword_search", {"query_text": "x", "namespace": "docs", "top_k": 101})["code"] == "LIMIT"


def test_count_and_query_documents(mcp: McpSession) -> None:
    _suggest(mcp, "mailing")
    counted = mcp.ok("count", {"namespace": "mailing", "query_text": "document"})
    assert counted == counted | {"status": "success", "count": 3, "truncated": False, "namespace": "mailing"}
    filtered = mcp.ok("count", {"namespace": "mailing", "query_text": "coroutines",
                                "metadata_filter": {"content_type": "markdown"}})
    assert filtered["metadata_filter"] == {"content_type": "markdown"} and filtered["count"] >= 1
    documents = mcp.ok("query_documents", {"query_text": "coroutine frame allocator", "namespace": "mailing"})
    assert documents["status"] == "success" and documents["namespace"] == "mailing"
    first = documents["documents"][0]
    assert set(first) >= {"document_id", "merged_content", "metadata", "chunk_count", "best_score"}
    assert "co_await" in first["merged_content"] and documents["result_count"] == len(documents["documents"]) <= 5
    arguments = {"query_text": "x", "namespace": "mailing"}
    assert _error(mcp, "query_documents", {**arguments, "top_k": 21})["code"] == "LIMIT"
    assert _error(mcp, "query_documents", {**arguments, "max_chunks_per_document": 501})["code"] == "LIMIT"


def test_guided_query_routes_suggests_and_answers(mcp: McpSession) -> None:
    body = mcp.ok("guided_query", {"user_query": "How many messages mention modules TS?", "preferred_tool": "auto"})
    trace = body["decision_trace"]
    assert body["status"] == "success" and set(trace) >= {
        "cache_hit", "input_namespace", "routed_namespace", "selected_namespace", "ranked_namespaces",
        "suggested_fields", "suggested_tool", "selected_tool", "explanation", "enrich_urls", "rerank_status"}
    assert trace["input_namespace"] is None and trace["selected_namespace"] == trace["routed_namespace"] == "mailing"
    assert trace["selected_tool"] == "count" and body["result"]["status"] == "success" and "count" in body["result"]
    searched = mcp.ok("guided_query", {"user_query": "coroutine frame", "namespace": "mailing",
                                       "preferred_tool": "detailed", "top_k": 2})
    result = searched["result"]
    assert searched["decision_trace"]["rerank_status"] in {"success", "skipped", "failed"}
    assert result["mode"] == "query_detailed" and len(result["results"]) <= 2
    assert {"degraded", "degradation_reason", "hybrid_leg_failed"} <= set(result)
    assert result["results"][0]["url"].startswith("https://lists.example.org/")
    unenriched = mcp.ok("guided_query", {"user_query": "allocator", "namespace": "docs",
                                         "preferred_tool": "fast", "enrich_urls": False})
    assert unenriched["decision_trace"]["enrich_urls"] is False
    assert unenriched["result"]["mode"] == "query_fast" and unenriched["decision_trace"]["rerank_status"] == "skipped"
    assert _error(mcp, "guided_query", {"user_query": "x", "namespace": "nope"})["code"] == "NOT_FOUND"


def test_generate_urls_over_metadata_records(mcp: McpSession) -> None:
    records = [{"path": "2024/coroutines.md"}, {"metadata": {"path": "2024/modules.md"}},
               {"url": "https://elsewhere.example/x"}, {"title": "no location"}]
    body = mcp.ok("generate_urls", {"namespace": "mailing", "records": records})
    assert body["status"] == "success" and body["namespace"] == "mailing" and body["count"] == 4
    rows = body["results"]
    assert [row["index"] for row in rows] == [0, 1, 2, 3]
    assert rows[0]["url"] == "https://lists.example.org/2024/coroutines" and rows[0]["method"] == "url_template"
    assert rows[1]["metadata"] == {"path": "2024/modules.md"} and rows[1]["url"].endswith("/2024/modules")
    assert (rows[2]["url"], rows[2]["method"]) == ("https://elsewhere.example/x", "metadata")
    assert rows[3]["url"] is None and rows[3]["method"] == "none" and rows[3]["reason"]
    assert _error(mcp, "generate_urls", {"namespace": "mailing", "records": [{}] * 501})["code"] == "LIMIT"
    assert _error(mcp, "generate_urls", {"namespace": "nope", "records": [{"path": "a"}]})["code"] == "NOT_FOUND"


def test_results_are_structured(mcp: McpSession) -> None:
    result = call_result(mcp, "list_namespaces", {})
    assert result.structured_content is not None and result.structured_content["status"] == "success"
