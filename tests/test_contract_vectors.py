"""The ``vectors`` profile against the vector-store contract (contracts/001_…), through the SDK's real client.

Written from the contract's text: its four tools, every argument with its default, every output
field, the two error messages word for word (as strings), the no-error cases (deleting a missing id,
counting a missing store), the ordering rule and the seed's own example calls. Served over stdio
(``quarry mcp --tools vectors``) and over HTTP without keys (``QUARRY_TOOLS=vectors``); with keys, a
search key is not shown the two tools that write.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.store import api_keys
from engine.store.vector_stores import drop_store
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.test_profiles import call_result, profile_stdio

CONTRACT_TOOLS = {"vector_add", "vector_search", "vector_delete", "vector_count"}


@pytest.fixture(scope="module", params=["stdio", "http"])
def mcp(request: pytest.FixtureRequest, migrated_url: str, reader_pool: ConnectionPool, model_cache: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    if request.param == "stdio":
        parameters = profile_stdio(migrated_url, model_cache, tmp_path_factory.mktemp("home"), "vectors")
        with mcp_session(parameters) as session:
            yield session
        return
    backend = StaticBackend(Settings(database_url=migrated_url, tools="vectors"), reader_pool)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


@pytest.fixture(autouse=True)
def no_stores(session_pool: ConnectionPool) -> None:
    with session_pool.connection() as conn:
        names = [name for (name,) in conn.execute("select name from quarry.vector_stores").fetchall()]
    for name in names:
        drop_store(session_pool, name)


def _error(mcp: McpSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = mcp.call(tool, arguments)
    assert reply.is_error, reply.text
    body = reply.body
    assert isinstance(body["error"], str)  # the contract's errors are strings, not objects
    return body


def test_exactly_the_four_tools_with_the_contract_arguments(mcp: McpSession) -> None:
    tools = {tool.name: tool for tool in mcp.list_tools()}
    assert set(tools) == CONTRACT_TOOLS
    properties = {name: set(tool.input_schema["properties"]) for name, tool in tools.items()}
    assert properties == {
        "vector_add": {"id", "embedding", "metadata", "store_name", "namespace"},
        "vector_search": {"query", "k", "store_name", "namespace", "metadata_filter"},
        "vector_delete": {"id", "store_name", "namespace"},
        "vector_count": {"store_name", "namespace"},
    }
    assert tools["vector_add"].input_schema["required"] == ["id", "embedding"]
    assert tools["vector_search"].input_schema["required"] == ["query"]
    assert tools["vector_search"].input_schema["properties"]["k"]["default"] == 10
    for tool in tools.values():
        assert tool.input_schema["properties"]["store_name"]["default"] == "default"
        assert tool.output_schema is not None
    added = tools["vector_add"].output_schema
    assert added is not None and {"status", "id", "dimension"} <= set(added["properties"])


def test_vector_add_answers_added_then_updated(mcp: McpSession) -> None:
    example = {"id": "doc-abc-123", "embedding": [0.1, 0.2, 0.3, 0.4],
               "metadata": {"source": "arxiv", "title": "Attention Is All You Need"}}  # the contract's example
    assert mcp.ok("vector_add", example) == {"status": "added", "id": "doc-abc-123", "dimension": 4}
    # the same id, embedding and metadata: identical state, and a status the contract's client knows
    assert mcp.ok("vector_add", example) == {"status": "updated", "id": "doc-abc-123", "dimension": 4}
    changed = {**example, "embedding": [0.4, 0.3, 0.2, 0.1]}
    assert mcp.ok("vector_add", changed)["status"] == "updated"
    assert mcp.ok("vector_count", {}) == {"count": 1, "store_name": "default"}


def test_invalid_embeddings_get_the_contract_messages(mcp: McpSession) -> None:
    assert _error(mcp, "vector_add", {"id": "a", "embedding": []}) == {
        "error": "Embedding must be a non-empty array of numbers", "code": "INVALID"}
    assert _error(mcp, "vector_add", {"id": "a", "embedding": ["x"]})["error"] == \
        "Embedding must be a non-empty array of numbers"
    assert _error(mcp, "vector_search", {"query": []}) == {
        "error": "Query embedding must be a non-empty array", "code": "INVALID"}
    mcp.ok("vector_add", {"id": "a", "embedding": [1.0, 0.0]})
    wrong = _error(mcp, "vector_add", {"id": "b", "embedding": [1.0, 0.0, 0.0]})
    assert wrong["code"] == "INVALID" and "dimension" in wrong["error"]
    assert _error(mcp, "vector_count", {"colour": "red"})["code"] == "INVALID"


def test_vector_search_orders_by_score_and_filters_metadata(mcp: McpSession) -> None:
    assert mcp.ok("vector_search", {"query": [0.1, 0.2, 0.3, 0.4]}) == {
        "results": [], "total_searched": 0, "ordered_by": "score is cosine similarity, highest first"}
    for index, (vector, source) in enumerate([([1.0, 0.0, 0.0, 0.0], "arxiv"), ([0.9, 0.1, 0.0, 0.0], "arxiv"),
                                              ([0.0, 1.0, 0.0, 0.0], "paper"), ([0.7, 0.7, 0.0, 0.0], "arxiv")]):
        mcp.ok("vector_add", {"id": f"v{index}", "embedding": vector, "metadata": {"source": source}})
    example = {"query": [0.1, 0.2, 0.3, 0.4], "k": 3, "metadata_filter": {"source": "arxiv"}}  # the contract's
    assert len(mcp.ok("vector_search", example)["results"]) == 3
    found = mcp.ok("vector_search", {"query": [1.0, 0.0, 0.0, 0.0], "k": 2})
    assert [row["id"] for row in found["results"]] == ["v0", "v1"] and found["total_searched"] == 4
    assert set(found["results"][0]) == {"id", "score", "metadata"}
    scores = [row["score"] for row in mcp.ok("vector_search", {"query": [1.0, 0.0, 0.0, 0.0]})["results"]]
    assert len(scores) == 4 and scores == sorted(scores, reverse=True)  # k defaults to 10
    filtered = mcp.ok("vector_search", {"query": [0.0, 1.0, 0.0, 0.0], "metadata_filter": {"source": "arxiv"}})
    assert {row["id"] for row in filtered["results"]} == {"v0", "v1", "v3"} and filtered["total_searched"] == 3


def test_vector_delete_and_count_never_fail_for_missing_things(mcp: McpSession) -> None:
    assert mcp.ok("vector_delete", {"id": "doc-abc-123"}) == {"deleted": False, "id": "doc-abc-123"}
    assert mcp.ok("vector_count", {"store_name": "project_embeddings", "namespace": "chapter-1"}) == {
        "count": 0, "store_name": "project_embeddings"}
    place = {"store_name": "project_embeddings", "namespace": "chapter-1"}
    mcp.ok("vector_add", {"id": "doc-abc-123", "embedding": [0.1, 0.2], **place})
    assert mcp.ok("vector_count", place) == {"count": 1, "store_name": "project_embeddings"}
    assert mcp.ok("vector_count", {"store_name": "project_embeddings"})["count"] == 0  # another namespace
    assert mcp.ok("vector_delete", {"id": "doc-abc-123", **place}) == {"deleted": True, "id": "doc-abc-123"}
    assert mcp.ok("vector_delete", {"id": "doc-abc-123", **place}) == {"deleted": False, "id": "doc-abc-123"}


def test_results_are_structured_as_well_as_text(mcp: McpSession) -> None:
    mcp.ok("vector_add", {"id": "s", "embedding": [0.5, 0.5]})
    result = call_result(mcp, "vector_count", {})
    assert result.structured_content == {"count": 1, "store_name": "default"}


def test_a_search_key_sees_and_may_use_only_the_reading_tools(migrated_url: str, reader_pool: ConnectionPool,
                                                              session_pool: ConnectionPool) -> None:
    search_key = api_keys.create_key(session_pool, "vectors-search", ["search"]).secret
    backend = StaticBackend(Settings(database_url=migrated_url, tools="vectors"), reader_pool)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False))
    with serving(app) as url, \
            mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {search_key}"})) as session:
        assert {tool.name for tool in session.list_tools()} == {"vector_search", "vector_count"}
        refused = _error(session, "vector_add", {"id": "x", "embedding": [1.0]})
        assert refused["code"] == "UNAUTHORIZED" and "admin" in refused["error"]
        assert session.ok("vector_count", {}) == {"count": 0, "store_name": "default"}
