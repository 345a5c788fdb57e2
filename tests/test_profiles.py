"""Tool profiles: what each lists to whom, how many bytes that costs, and structured results.

Through the SDK's real client over streamable HTTP with API keys (a search key and an admin key see
different catalogues) and over stdio (``quarry mcp --tools PROFILE``). The ``tools/list`` size of
every profile is asserted: a search key's ``default`` catalogue stays within 15 KB (it was 55 KB).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import psycopg
import pytest
from mcp.client.stdio import StdioServerParameters
from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.store import api_keys
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from mcp_server.profiles import PROFILE_NAMES, build_profile
from mcp_server.tools import all_tools
from tests.corpus import FILES, write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving, stdio_parameters

#: What a search key's default catalogue may cost, compact JSON (the issue's target; it was 55 KB).
DEFAULT_CATALOGUE_BYTES = 15_000
ADMIN_ONLY = {"vector_add", "vector_search", "vector_delete", "vector_count", "add_source", "refresh_source",
              "remove_source"}
DOCS_SERVER_TOOLS = {"list_namespaces", "namespace_router", "suggest_query_params", "count", "query",
                     "keyword_search", "query_documents", "guided_query", "generate_urls"}
VECTOR_TOOLS = {"vector_add", "vector_search", "vector_delete", "vector_count"}
KB_TOOLS = {"kb_status", "kb_types", "kb_write", "kb_get", "kb_search", "kb_neighbors", "kb_delete",
            "kb_ingest_evidence", "kb_read_evidence", "kb_jobs", "kb_reindex"}
KB_WRITES = {"kb_write", "kb_delete", "kb_ingest_evidence", "kb_reindex"}


def profile_stdio(database_url: str, model_cache: Path, home: Path, profile: str) -> StdioServerParameters:
    """``quarry mcp --tools PROFILE`` on the test database."""
    base = stdio_parameters(database_url, model_cache, home)
    return StdioServerParameters(command=sys.executable, args=[*base.args, "--tools", profile], env=base.env,
                                 cwd=base.cwd)


def call_result(session: McpSession, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """The whole tool result (the harness's ``call`` keeps only the text)."""
    result = session._portal.call(session.client.call_tool, name, dict(arguments))
    assert isinstance(result, types.CallToolResult)
    return result


def catalogue_bytes(tools: list[types.Tool]) -> int:
    """``tools/list``'s result as compact JSON, as the server sends it."""
    return len(types.ListToolsResult(tools=tools).model_dump_json(by_alias=True, exclude_none=True).encode())


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> ConnectionPool:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("profiles")
    Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=2_000_000).ingest(
        write_corpus(root / "sample", FILES), SourceSpec(slug="sample", kind="docs_site", attribution="official"))
    return session_pool


@pytest.fixture(scope="module")
def keys(corpus: ConnectionPool) -> dict[str, str]:
    return {scope: api_keys.create_key(corpus, f"profiles-{scope}", [scope]).secret for scope in ("search", "admin")}


def _listed(migrated_url: str, pool: ConnectionPool, embedder: Embedder, profile: str, key: str) -> list[types.Tool]:
    settings = Settings(database_url=migrated_url, tools=cast(Any, profile))
    backend = StaticBackend(settings, pool, dict.fromkeys(SPACES, embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False))
    with serving(app) as url, \
            mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {key}"})) as session:
        return session.list_tools()


def test_every_profile_lists_its_tools_within_its_byte_budget(migrated_url: str, corpus: ConnectionPool,
                                                              local_embedder: Embedder, keys: dict[str, str]) -> None:
    sizes: dict[str, int] = {}
    names: dict[str, set[str]] = {}
    for profile in PROFILE_NAMES:
        for scope, key in keys.items():
            tools = _listed(migrated_url, corpus, local_embedder, profile, key)
            sizes[f"{profile}/{scope}"] = catalogue_bytes(tools)
            names[f"{profile}/{scope}"] = {tool.name for tool in tools}
            for tool in tools:
                assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
                assert tool.input_schema["type"] == "object" and tool.description, tool.name
    print("tools/list bytes:", json.dumps(sizes))
    quarry = {spec.name for spec in all_tools()}
    assert names["default/admin"] == quarry and names["default/search"] == quarry - ADMIN_ONLY
    assert sizes["default/search"] <= DEFAULT_CATALOGUE_BYTES
    assert sizes["default/admin"] <= 24_000
    assert names["docs-server/search"] == names["docs-server/admin"] == DOCS_SERVER_TOOLS
    assert sizes["docs-server/search"] <= 12_000
    assert names["vectors/admin"] == VECTOR_TOOLS and names["vectors/search"] == {"vector_search", "vector_count"}
    assert sizes["vectors/admin"] <= 4_000
    assert names["kb/admin"] == KB_TOOLS and names["kb/search"] == KB_TOOLS - KB_WRITES
    assert sizes["kb/admin"] <= 12_000
    assert names["all/admin"] == quarry | DOCS_SERVER_TOOLS | VECTOR_TOOLS | KB_TOOLS
    assert sizes["all/admin"] <= 40_000


def test_a_name_two_profiles_share_is_quarrys_in_all() -> None:
    settings = Settings()
    served = {spec.name: spec for spec in build_profile("all", settings).tools}
    default = {spec.name: spec for spec in build_profile("default", settings).tools}
    for name in ("count", "query_documents", "suggest_query_params", "guided_query", "generate_urls",
                 *VECTOR_TOOLS):
        assert served[name].arguments is default[name].arguments, name
    assert "namespace" in served["query"].arguments.model_fields  # the docs-server's own, beside them
    assert {"query", "keyword_search", "list_namespaces", "namespace_router"} <= set(served)


def test_all_serves_the_docs_server_query_without_its_gate(corpus: ConnectionPool, migrated_url: str,
                                                           local_embedder: Embedder) -> None:
    backend = StaticBackend(Settings(database_url=migrated_url, tools="all"), corpus,
                            dict.fromkeys(SPACES, local_embedder))
    with serving(build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))) as url, \
            mcp_session(http_transport(url + "/mcp")) as session:
        body = session.ok("query", {"query_text": "partial index", "namespace": "sample", "top_k": 2})
        assert body["status"] == "success" and body["results"]
        assert "filters" in session.ok("count", {"query_text": "document", "filters": {
            "source_slug": {"any_of": ["sample"]}}})  # Quarry's count: its own filters echoed


def test_the_setting_names_a_profile() -> None:
    assert Settings().tools == "default"
    assert Settings.model_validate({"tools": "docs-server"}).tools == "docs-server"
    with pytest.raises(ValidationError, match="tools"):
        Settings.model_validate({"tools": "everything"})
    with pytest.raises(ValueError, match="no tool profile"):
        build_profile("everything", Settings())


@pytest.fixture(scope="module")
def stdio(corpus: ConnectionPool, migrated_url: str, model_cache: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    with mcp_session(stdio_parameters(migrated_url, model_cache, tmp_path_factory.mktemp("home"))) as session:
        yield session


def test_stdio_serves_the_profile_its_flag_names(corpus: ConnectionPool, migrated_url: str, model_cache: Path,
                                                 tmp_path: Path) -> None:
    with mcp_session(profile_stdio(migrated_url, model_cache, tmp_path, "docs-server")) as session:
        assert {tool.name for tool in session.list_tools()} == DOCS_SERVER_TOOLS
        assert "list_namespaces" in (session.client.instructions or "")


#: A call of each default tool that needs no id from the corpus.
CALLS: dict[str, dict[str, Any]] = {
    "search": {"query": "partial index"},
    "advanced_search": {"queries": ["partial index", "pg_dump"]},
    "grep": {"pattern": "index"},
    "facets": {},
    "list_sources": {},
    "status": {},
    "count": {"query_text": "partial index"},
    "query_documents": {"query_text": "partial index"},
    "generate_urls": {"source": "sample", "records": [{"path": "docs/indexes.md"}]},
    "route_sources": {"user_query": "partial index"},
    "suggest_query_params": {"source": "sample", "user_query": "partial index"},
    "guided_query": {"user_query": "partial index"},
    "jobs": {"action": "list"},
    "vector_count": {},
}


@pytest.mark.parametrize("tool", sorted(CALLS))
def test_results_are_structured_content_and_the_same_json_text(stdio: McpSession, tool: str) -> None:
    result = call_result(stdio, tool, CALLS[tool])  # the client checks it against the tool's outputSchema
    assert not result.is_error and isinstance(result.content[0], types.TextContent)
    assert result.structured_content == json.loads(result.content[0].text)
    schema = next(listed for listed in stdio.list_tools() if listed.name == tool).output_schema
    assert schema is not None
    if tool != "jobs":  # jobs' fields depend on its action: the schema lists those of every action
        assert set(schema["properties"]) <= set(result.structured_content), tool


def test_search_says_what_it_is_ordered_by_and_whether_confidence_falls(stdio: McpSession) -> None:
    body = stdio.ok("search", {"query": "how do I create a partial index", "limit": 10})
    assert body["ordered_by"].startswith("fused_score")
    confidences = [row["confidence"] for row in body["results"]]
    monotone = confidences == sorted(confidences, reverse=True)
    assert body["confidence_monotone"] is monotone
    assert any("not monotone" in note for note in body["notes"]) is not monotone
    grouped = stdio.ok("advanced_search", {"queries": ["partial index"], "group_by": "document"})
    assert grouped["ordered_by"].startswith("score")
    scores = [row["score"] for row in grouped["results"]]
    assert scores == sorted(scores, reverse=True)


def test_errors_are_not_structured(stdio: McpSession) -> None:
    result = call_result(stdio, "search", {"query": "x", "limit": 0})
    assert result.is_error and result.structured_content is None
