"""Every MCP tool and every input rule, through the SDK's real client over stdio and streamable HTTP.

One fixture corpus is ingested per module; each transport's server is started once
(``quarry mcp`` as a subprocess; the HTTP app on loopback with ``--no-auth``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.retrieval.pipeline import SHARED_MODEL_NOTE
from mcp_server.auth import AccessPolicy
from mcp_server.bounds import DEFAULT_RESPONSE_BYTES
from mcp_server.http_app import build_http_app
from mcp_server.limits import MAX_QUERY_CHARS, MAX_RESPONSE_BYTES
from tests.corpus import FILES, write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving, stdio_parameters

UNICODE_DOC = "# Unicode\n\nCafé menus print ☕ in UTF-8.\n"
OTHER_FILES = {
    "lib/pool.py": '''\
"""Connection pooling."""


def open_pool(size: int) -> list[int]:
    """Open a pool of connections for the partial index builder."""
    return list(range(size))
''',
    "notes.md": "# Notes\n\nPartial index notes.\n",
}
# Five chunks of ~74 KB each (one word per line, padded): any search that returns
# several of them overflows the response bound, and get_document needs one page each.
PADDED = "".join(f"alpha{i % 10} " + " " * 300 + "\n" for i in range(1200))
SECRET_VALUE = "zz-do-not-echo-4f1c"


@dataclass(frozen=True)
class Corpus:
    root: Path
    documents: dict[tuple[str, str], str]

    def document_id(self, slug: str, path: str) -> str:
        return self.documents[(slug, path)]


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("mcp-corpus")
    ingestor = Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=2_000_000)
    ingestor.ingest(write_corpus(root / "sample", {**FILES, "docs/unicode.md": UNICODE_DOC}),
                    SourceSpec(slug="sample", display_name="Sample docs", kind="docs_site", attribution="official"))
    ingestor.ingest(write_corpus(root / "other", OTHER_FILES),
                    SourceSpec(slug="other", kind="code_repo", attribution="community"))
    ingestor.ingest(write_corpus(root / "bulk", {"padded.txt": PADDED}), SourceSpec(slug="bulk", kind="standalone"))
    with psycopg.connect(migrated_url) as conn:
        rows = conn.execute(
            "select s.slug, d.path, d.id::text from quarry.documents d join quarry.sources s on s.id = d.source_id"
        ).fetchall()
    return Corpus(root, {(slug, path): document_id for slug, path, document_id in rows})


@pytest.fixture(scope="module", params=["stdio", "http"])
def mcp(request: pytest.FixtureRequest, corpus: Corpus, migrated_url: str, session_pool: ConnectionPool,
        local_embedder: Embedder, model_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    if request.param == "stdio":
        home = tmp_path_factory.mktemp("quarry-home")
        with mcp_session(stdio_parameters(migrated_url, model_cache, home)) as session:
            yield session
        return
    backend = StaticBackend(Settings(database_url=migrated_url), session_pool, dict.fromkeys(SPACES, local_embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def _is_uuid(text: Any) -> bool:
    try:
        return str(uuid.UUID(text)) == str(text)
    except (TypeError, ValueError):
        return False


# --- catalogue -------------------------------------------------------------------------------------------------


def test_lists_every_tool_with_a_closed_schema_and_llm_guidance(mcp: McpSession) -> None:
    tools = {tool.name: tool for tool in mcp.list_tools()}
    assert set(tools) == {"search", "advanced_search", "grep", "facets", "get_document", "get_chunk",
                          "read_document_bytes", "list_sources", "status", "count", "query_documents",
                          "generate_urls", "route_sources", "suggest_query_params", "guided_query", "jobs",
                          "neighbors", "vector_add", "vector_search", "vector_delete", "vector_count",
                          "add_source", "refresh_source", "remove_source"}
    for tool in tools.values():
        assert tool.input_schema["additionalProperties"] is False
        # short: the full reference is docs/TOOLS.md, and every session pays each byte of the catalogue
        assert tool.description and 40 < len(tool.description) <= 200, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.annotations is not None
        # jobs can cancel and queue retries; vector_add and vector_delete write vector stores; the
        # source tools queue ingests and removals
        assert tool.annotations.read_only_hint is (tool.name not in {
            "jobs", "vector_add", "vector_delete", "add_source", "refresh_source", "remove_source"})
    assert tools["search"].input_schema["properties"]["limit"]["maximum"] == 50
    filters = tools["advanced_search"].input_schema["$defs"]["Filters"]
    assert set(filters["properties"]) == {"source_slug", "language", "package", "language_target", "sdk_dependency",
                                          "kind", "attribution", "content_type", "verified", "deprecated",
                                          "chunk_kind", "path", "symbol"}
    instructions = mcp.client.instructions or ""
    assert "facets" in instructions and "degraded" in instructions and "RATE_LIMITED" in instructions
    # every client pays the catalogue in context: no titles, no null alternative of an argument left out by default
    for tool in tools.values():
        assert not list(_wasted_schema_parts(tool.input_schema)), tool.name


def test_grep_finds_exact_text_with_its_line_and_span(mcp: McpSession) -> None:
    body = mcp.ok("grep", {"pattern": "parse_user_id", "filters": {"path": {"any_of": ["src/**"]}}})
    assert body["matches"] and body["truncated"] is False
    for match in body["matches"]:
        assert match["path"].startswith("src/") and isinstance(match["line"], int)
        assert match["text"][match["match"]["start"]:match["match"]["end"]] == "parse_user_id"
    first = mcp.ok("grep", {"pattern": "index", "case_sensitive": False, "limit": 1})
    second = mcp.ok("grep", {"pattern": "index", "case_sensitive": False, "limit": 1, "cursor": first["next_cursor"]})
    assert (second["matches"][0]["path"], second["matches"][0]["line"]) > (first["matches"][0]["path"],
                                                                          first["matches"][0]["line"])
    malformed = mcp.call("grep", {"pattern": "(", "regex": True})
    assert malformed.error["code"] == "INVALID" and "regular expression" in malformed.error["message"]
    assert mcp.call("grep", {"pattern": "x" * 1001}).error["code"] == "LIMIT"


def _wasted_schema_parts(node: Any, where: str = "") -> Iterator[str]:
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _wasted_schema_parts(item, f"{where}[{index}]")
    elif isinstance(node, dict):
        if isinstance(node.get("title"), str):
            yield f"{where}.title"
        if "default" in node and node["default"] is None and {"type": "null"} in node.get("anyOf", []):
            yield f"{where}: null alternative"
        for key, value in node.items():
            children = value.items() if key in ("properties", "$defs") else [(key, value)]
            for name, child in children:
                yield from _wasted_schema_parts(child, f"{where}.{name}")


def test_an_unknown_tool_is_not_found(mcp: McpSession) -> None:
    reply = mcp.call("delete_everything", {})
    assert reply.error["code"] == "NOT_FOUND"
    assert "search" in reply.error["message"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_handshake_era_clients_are_served_too(
    transport: str, corpus: Corpus, migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
    model_cache: Path, tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        if transport == "stdio":
            server: Any = stdio_parameters(migrated_url, model_cache, tmp_path)
        else:
            backend = StaticBackend(Settings(database_url=migrated_url), session_pool,
                                    dict.fromkeys(SPACES, local_embedder))
            url = stack.enter_context(serving(build_http_app(backend, AccessPolicy.for_bind("127.0.0.1",
                                                                                            no_auth=True))))
            server = http_transport(url + "/mcp")
        session = stack.enter_context(mcp_session(server, mode="legacy"))
        assert session.client.protocol_version < "2026"
        assert session.ok("search", {"query": "parseUserId", "mode": "fts"})["results"]
        assert session.call("search", {"query": "x", "limit": "5"}).error["code"] == "INVALID"


# --- search ----------------------------------------------------------------------------------------------------


def test_search_returns_explained_results(mcp: McpSession) -> None:
    body = mcp.ok("search", {"query": "how do I create a partial index", "limit": 5})
    assert 1 <= body["result_count"] == len(body["results"]) <= 5
    first = body["results"][0]
    assert first["path"] == "docs/indexes.md" and first["heading_path"] == ["Indexes", "Partial indexes"]
    for result in body["results"]:
        assert _is_uuid(result["chunk_id"]) and _is_uuid(result["document_id"])
        assert 0 < result["confidence"] <= 1 and 0 <= result["trust_score"] <= 1
        assert set(result["confidence_factors"]) == {"attribution", "verified", "freshness", "deprecation",
                                                     "version_match"}
        assert result["confidence_factors"]["version_match"]["raw"] == "unknown"
        assert set(result["source"]) == {"slug", "display_name", "kind"}
        assert {"symbol_path", "title", "url", "start_line", "end_line", "fts_rank", "vector_rank"} <= set(result)
        assert result["reranked"] is False and result["content"]
    assert first["source"] == {"slug": "sample", "display_name": "Sample docs", "kind": "docs_site"}
    assert first["fts_rank"] is not None and first["vector_rank"] is not None
    assert [result["rank"] for result in body["results"]] == list(range(1, len(body["results"]) + 1))
    assert body["reranked"] is False and "no reranker" in body["rerank_skipped_reason"]
    assert body["degraded"] is False and body["degradation_reason"] is None and body["hybrid_leg_failed"] is None
    # one model embeds both spaces here: the text leg ranks code chunks too, and a note says so
    assert body["vector_spaces"] == ["text"] and body["code_mode_used"] == "on"
    assert body["notes"][0] == SHARED_MODEL_NOTE
    assert all("per document" in note for note in body["notes"][1:])  # a page fills at most two places


def test_official_sources_are_trusted_more_than_community_ones(mcp: McpSession) -> None:
    body = mcp.ok("search", {"query": "partial index", "mode": "fts", "limit": 20})
    trust = {result["source"]["slug"]: result["trust_score"] for result in body["results"]}
    assert trust["sample"] > trust["other"]


def test_search_modes_use_the_legs_they_name(mcp: McpSession) -> None:
    fts = mcp.ok("search", {"query": "parseUserId", "mode": "fts"})
    assert fts["results"][0]["symbol_path"] == "src.users.parse_user_id"
    assert all(result["vector_rank"] is None for result in fts["results"])
    assert fts["vector_spaces"] == [] and all("per document" in note for note in fts["notes"])
    vector = mcp.ok("search", {"query": "restore a database from an archive", "mode": "vector", "limit": 3})
    assert all(result["fts_rank"] is None for result in vector["results"])
    assert vector["results"][0]["path"] == "docs/backup.md"


def test_code_mode_chooses_the_vector_spaces(mcp: McpSession) -> None:
    spaces = {"on": ["text"], "off": ["text"], "exclusive": ["code"]}  # on: one model, so no repeated leg
    for code_mode, expected in spaces.items():
        body = mcp.ok("search", {"query": "parse a user id", "code_mode": code_mode, "limit": 3})
        assert body["code_mode"] == body["code_mode_used"] == code_mode
        assert body["vector_spaces"] == expected
    exclusive = mcp.ok("search", {"query": "parse a user id", "code_mode": "exclusive", "mode": "vector", "limit": 5})
    assert exclusive["results"] and all(r["code_rank"] is not None and r["vector_rank"] is None
                                        for r in exclusive["results"])
    assert not mcp.call("search", {"query": "parse", "mode": "fts", "code_mode": "on"}).is_error


def test_advanced_search_fuses_queries_and_filters_inside_the_legs(mcp: McpSession) -> None:
    body = mcp.ok("advanced_search", {
        "queries": ["partial index", "pg_dump archive", "partial index"],
        "filters": {"source_slug": {"any_of": ["sample"]}, "content_type": {"none_of": ["code", "text"]}},
        "limit": 10,
    })
    assert body["query_count"] == 2  # the repeated query counts once
    paths = {result["path"] for result in body["results"]}
    assert {"docs/indexes.md", "docs/backup.md"} <= paths
    assert all(result["source"]["slug"] == "sample" and result["content_type"] == "markdown"
               for result in body["results"])
    assert body["version_match"] == "permissive"
    assert body["filters"]["source_slug"] == {"any_of": ["sample"]}

    code = mcp.ok("advanced_search", {"queries": ["open a pool"], "mode": "fts",
                                      "filters": {"kind": {"any_of": ["code_repo"]}, "verified": {"none_of": [True]}}})
    assert code["results"] and {result["source"]["slug"] for result in code["results"]} == {"other"}
    none = mcp.ok("advanced_search", {"queries": ["partial index"], "filters": {"verified": {"any_of": [True]}}})
    assert none["results"] == []
    typo = mcp.ok("advanced_search", {"queries": ["partial index"], "filters": {"source_slug": {"any_of": ["smaple"]}}})
    assert typo["results"] == [] and any("no source named 'smaple'; the sources are:" in note for note in typo["notes"])

    located = mcp.ok("advanced_search", {"queries": ["user id"], "mode": "fts",
                                         "filters": {"path": {"any_of": ["src/**"]},
                                                     "symbol": {"any_of": ["parse_user_id"]}}})
    assert located["results"] and all(result["path"].startswith("src/") and
                                      result["symbol_path"].endswith("parse_user_id")
                                      for result in located["results"])


def test_advanced_search_says_why_it_did_not_rerank(mcp: McpSession) -> None:
    skipped = mcp.ok("advanced_search", {"queries": ["backup"], "rerank": False, "mode": "fts"})
    assert skipped["reranked"] is False and skipped["rerank_skipped_reason"] == "rerank=false was requested"
    unused = mcp.ok("advanced_search", {"queries": ["backup"], "mode": "fts",
                                        "rerank_instructions": "prefer reference pages"})
    assert "no reranker" in unused["rerank_skipped_reason"]
    assert any(note.startswith("rerank_instructions were not used") for note in unused["notes"])


# --- facets ----------------------------------------------------------------------------------------------------


def test_facets_report_values_with_document_counts(mcp: McpSession) -> None:
    body = mcp.ok("facets")
    facets = body["facets"]
    slugs = {item["value"]: item["documents"] for item in facets["source_slug"]["values"]}
    assert slugs == {"sample": 5, "other": 2, "bulk": 1}
    kinds = {item["value"]: item["documents"] for item in facets["kind"]["values"]}
    assert kinds == {"docs_site": 5, "code_repo": 2, "standalone": 1, "mixed": 0}  # fixed set: zeros included
    assert {item["value"] for item in facets["verified"]["values"]} == {True, False}
    assert {item["value"] for item in facets["language"]["values"]} == {"python"}
    assert facets["kind"]["set"] == "fixed" and facets["source_slug"]["set"] == "open"
    assert facets["sdk_dependency"]["values"] == [] and facets["language_target"]["set"] == "open"


def test_facets_narrow_by_facet_prefix_filters_and_limit(mcp: McpSession) -> None:
    one = mcp.ok("facets", {"facet": "source_slug", "prefix": "OT"})
    assert list(one["facets"]) == ["source_slug"]
    assert one["facets"]["source_slug"]["values"] == [{"value": "other", "documents": 2}]
    filtered = mcp.ok("facets", {"facet": "content_type", "filters": {"source_slug": {"any_of": ["other"]}}})
    counts = {item["value"]: item["documents"] for item in filtered["facets"]["content_type"]["values"]}
    assert counts["code"] == 1 and counts["markdown"] == 1 and counts["html"] == 0
    assert filtered["filters_applied"] is True
    limited = mcp.ok("facets", {"facet": "source_slug", "limit": 1})
    assert limited["facets"]["source_slug"]["values"] == [{"value": "sample", "documents": 5}]
    assert limited["facets"]["source_slug"]["more_values"] == 2


# --- documents -------------------------------------------------------------------------------------------------


def test_get_document_returns_metadata_and_chunks_in_order(mcp: McpSession, corpus: Corpus) -> None:
    document_id = corpus.document_id("sample", "docs/indexes.md")
    body = mcp.ok("get_document", {"document_id": document_id})
    document = body["document"]
    assert document["document_id"] == document_id and document["title"] == "Indexes"
    assert document["source"]["slug"] == "sample" and document["content_type"] == "markdown"
    assert document["size_bytes"] == len(FILES["docs/indexes.md"].encode())
    assert [chunk["ordinal"] for chunk in body["chunks"]] == list(range(document["chunk_count"]))
    assert body["next_cursor"] is None and body["remaining_chunks"] == 0
    raw = FILES["docs/indexes.md"].encode()
    for chunk in body["chunks"]:
        assert raw[chunk["start_byte"]:chunk["end_byte"]].decode() == chunk["content"]


def test_get_document_pages_a_large_document_with_opaque_cursors(mcp: McpSession, corpus: Corpus) -> None:
    document_id = corpus.document_id("bulk", "padded.txt")
    cursor: str | None = None
    seen: list[int] = []
    pages = 0
    while True:
        reply = mcp.call("get_document", {"document_id": document_id, **({"cursor": cursor} if cursor else {})})
        assert not reply.is_error and reply.wire_bytes <= MAX_RESPONSE_BYTES
        body = reply.body
        pages += 1
        seen += [chunk["ordinal"] for chunk in body["chunks"]]
        cursor = body["next_cursor"]
        if cursor is None:
            assert body["remaining_chunks"] == 0
            break
        # a chunk the page ended inside is still to read
        assert body["remaining_chunks"] == body["document"]["chunk_count"] - len(set(seen)) + (
            1 if body["chunks"][-1].get("truncated") else 0)
    # a page ends at a line within its budget; the next resumes inside that chunk (resumed_from_char)
    assert list(dict.fromkeys(seen)) == list(range(5)) and pages > 5


def test_get_document_rejects_foreign_and_forged_cursors(mcp: McpSession, corpus: Corpus) -> None:
    bulk = mcp.ok("get_document", {"document_id": corpus.document_id("bulk", "padded.txt")})
    foreign = mcp.call("get_document", {"document_id": corpus.document_id("sample", "docs/indexes.md"),
                                        "cursor": bulk["next_cursor"]})
    assert foreign.error["code"] == "INVALID" and "another document" in foreign.error["message"]
    forged = mcp.call("get_document", {"document_id": corpus.document_id("bulk", "padded.txt"),
                                       "cursor": SECRET_VALUE})
    assert forged.error["code"] == "INVALID" and SECRET_VALUE not in forged.text


def test_get_chunk_returns_neighbours_in_document_order(mcp: McpSession) -> None:
    hit = mcp.ok("search", {"query": "Expression indexes", "mode": "fts", "limit": 1})["results"][0]
    body = mcp.ok("get_chunk", {"chunk_id": hit["chunk_id"], "before": 20, "after": 20})
    assert body["chunk"]["chunk_id"] == hit["chunk_id"]
    assert body["chunk"]["content"] == hit["content"]
    ordinals = [chunk["ordinal"] for chunk in [*body["before"], body["chunk"], *body["after"]]]
    assert ordinals == list(range(body["document"]["chunk_count"]))
    assert body["document"]["document_id"] == hit["document_id"]
    alone = mcp.ok("get_chunk", {"chunk_id": hit["chunk_id"]})
    assert alone["before"] == [] and alone["after"] == []


def test_read_document_bytes_returns_exact_ranges(mcp: McpSession, corpus: Corpus) -> None:
    document_id = corpus.document_id("sample", "docs/unicode.md")
    raw = UNICODE_DOC.encode()
    whole = mcp.ok("read_document_bytes", {"document_id": document_id, "offset": 0, "length": 65536})
    assert whole["encoding"] == "utf-8" and whole["data"] == UNICODE_DOC
    assert whole["total_bytes"] == len(raw) and whole["end_of_document"] is True
    cut = raw.index("☕".encode()) + 1  # inside the three-byte character
    part = mcp.ok("read_document_bytes", {"document_id": document_id, "offset": cut, "length": 4})
    assert part["encoding"] == "base64" and base64.b64decode(part["data"]) == raw[cut:cut + 4]
    assert part["length"] == 4 and part["end_of_document"] is False
    assert part["sha256"] == hashlib.sha256(raw[cut:cut + 4]).hexdigest()
    assert part["document_sha256"] == whole["document_sha256"] == hashlib.sha256(raw).hexdigest()
    at_end = mcp.ok("read_document_bytes", {"document_id": document_id, "offset": len(raw), "length": 10})
    assert at_end["length"] == 0 and at_end["end_of_document"] is True
    past = mcp.call("read_document_bytes", {"document_id": document_id, "offset": len(raw) + 1, "length": 10})
    assert past.error["code"] == "INVALID" and "past the end" in past.error["message"]
    # the largest offset the schema admits: one past it overflows a 32-bit position (the fuzzer found INTERNAL)
    farthest = mcp.call("read_document_bytes", {"document_id": document_id, "offset": 2**31 - 1, "length": 1})
    assert farthest.error["code"] == "INVALID" and "past the end" in farthest.error["message"]
    too_long = mcp.call("read_document_bytes", {"document_id": document_id, "offset": 0, "length": 65537})
    assert too_long.error["code"] == "LIMIT"
    assert too_long.error["problems"] == [{"path": "length", "rule": "must be at most 65536"}]


@pytest.mark.parametrize(("tool", "arguments"), [
    ("get_document", {}),
    ("get_chunk", {}),
    ("read_document_bytes", {"offset": 0, "length": 10}),
])
def test_unknown_ids_are_not_found(mcp: McpSession, tool: str, arguments: dict[str, Any]) -> None:
    key = "chunk_id" if tool == "get_chunk" else "document_id"
    reply = mcp.call(tool, {key: str(uuid.uuid4()), **arguments})
    assert reply.error["code"] == "NOT_FOUND"
    assert reply.error["message"].startswith(key)


# --- sources and status ----------------------------------------------------------------------------------------


def test_list_sources_counts_documents_chunks_and_vectors(mcp: McpSession) -> None:
    body = mcp.ok("list_sources")
    sources = {source["slug"]: source for source in body["sources"]}
    assert set(sources) == {"sample", "other", "bulk"} and body["source_count"] == 3
    sample = sources["sample"]
    assert sample["display_name"] == "Sample docs" and sample["kind"] == "docs_site"
    assert sample["attribution"] == "official" and sample["documents"] == 5
    assert sample["embeddings"]["text"] == sample["chunks"] and 0 < sample["embeddings"]["code"] < sample["chunks"]
    assert sample["last_ingested_at"] is not None


def test_status_reports_health_spaces_and_limits(mcp: McpSession, migrated_url: str) -> None:
    body = mcp.ok("status")
    assert body["healthy"] is True and body["database"]["reachable"] is True
    assert body["fts_index_valid"] is True and body["fts_postings_deferred"] is False
    with psycopg.connect(migrated_url, autocommit=True) as conn:  # as a killed first ingest leaves it
        conn.execute("update quarry.text_stats set postings_deferred = true")
        try:
            deferred = mcp.ok("status")
        finally:
            conn.execute("update quarry.text_stats set postings_deferred = false")
    assert deferred["fts_postings_deferred"] is True and deferred["healthy"] is False
    assert body["database"]["pgvector"]
    assert body["corpus"]["sources"] == 3
    code, text = body["embedding_spaces"]
    assert text["space"] == "text" and text["dimension"] == 384 and "MiniLM" in text["model"]
    assert text["embeddings"] == body["corpus"]["chunks"] and text["pending_chunks"] == 0
    assert code["space"] == "code" and code["model"] == text["model"]  # the local model serves both spaces
    assert 0 < code["embeddings"] < text["embeddings"] and code["pending_chunks"] == 0  # code chunks only
    assert all(space["index"]["valid"] is True and space["index"]["bytes"] > 0 for space in (code, text))
    assert body["pending_embedding_work"] == 0
    assert set(body["query_models"]) == {"text", "code"}
    assert body["limits"]["max_response_bytes"] == MAX_RESPONSE_BYTES
    assert body["limits"]["max_queries"] == 10 and body["limits"]["max_results"] == 50
    assert body["reranker"]["configured"] is False
    assert "not metered" in body["rate_limit"]


# --- the response bound ----------------------------------------------------------------------------------------


def test_search_results_are_truncated_to_the_response_bound(mcp: McpSession) -> None:
    # every large chunk of one document: no per-document cap
    arguments = {"queries": ["alpha3"], "mode": "fts", "limit": 10, "per_document": None}
    bounded = mcp.call("advanced_search", arguments)  # by default, about 32 KB
    assert not bounded.is_error and bounded.wire_bytes <= DEFAULT_RESPONSE_BYTES
    assert bounded.body["truncated"] is True and bounded.body["result_count"] == 5
    reply = mcp.call("advanced_search", {**arguments, "max_tokens": 100_000})  # asking for more: up to the cap
    assert not reply.is_error
    assert DEFAULT_RESPONSE_BYTES < reply.wire_bytes <= MAX_RESPONSE_BYTES
    body = reply.body
    assert body["truncated"] is True and body["result_count"] == 5
    cut = [result for result in body["results"] if result.get("truncated")]
    assert cut and all(result["omitted_chars"] > 0 for result in cut)
    assert all(len(result["content"]) > 10_000 for result in body["results"])  # shared fairly, not emptied


def test_a_token_budget_packs_results_best_first(mcp: McpSession) -> None:
    whole = mcp.ok("search", {"query": "partial index", "limit": 10})
    budget = 600
    packed = mcp.ok("search", {"query": "partial index", "limit": 10, "max_tokens": budget})
    assert len(json.dumps(packed, separators=(",", ":"))) / 4 <= budget
    used = packed["token_budget"]
    assert used["max_tokens"] == budget and used["used_tokens"] <= budget and "4 characters" in used["tokenizer"]
    assert used["omitted_results"] == len(whole["results"]) - len(packed["results"]) > 0
    kept = len(packed["results"])
    assert [r["chunk_id"] for r in packed["results"]] == [r["chunk_id"] for r in whole["results"]][:kept]

    # the best result is never dropped: a long one is cut at a line boundary and says so
    tight = mcp.ok("advanced_search", {"queries": ["alpha3"], "mode": "fts", "max_tokens": 1500,
                                       "per_document": None})
    first = tight["results"][0]
    assert len(tight["results"]) == 1 and first["truncated"] is True and first["cut_at"] == "line boundary"
    assert first["content"] and first["omitted_chars"] > 0
    assert tight["token_budget"]["used_tokens"] <= 1500
    assert mcp.call("search", {"query": "x", "max_tokens": 10}).error["code"] == "INVALID"


def test_chunk_neighbourhoods_are_truncated_to_the_response_bound(mcp: McpSession, corpus: Corpus) -> None:
    first = mcp.ok("get_document", {"document_id": corpus.document_id("bulk", "padded.txt")})["chunks"][0]
    reply = mcp.call("get_chunk", {"chunk_id": first["chunk_id"], "after": 4})
    assert not reply.is_error and reply.wire_bytes <= MAX_RESPONSE_BYTES
    body = reply.body
    assert body["truncated"] is True and len(body["after"]) == 4
    assert body["chunk"]["truncated"] is True
    whole = len(PADDED.splitlines(keepends=True)[0]) * 240
    assert body["chunk"]["omitted_chars"] + len(body["chunk"]["content"]) >= whole - 400


# --- input rules -----------------------------------------------------------------------------------------------


INVALID_CASES: list[tuple[str, str, dict[str, Any], str, str, str]] = [
    # (case, tool, arguments, code, problem path, words of the rule)
    ("unknown field", "search", {"query": "x", "verbose": True}, "INVALID", "verbose", "not an argument"),
    ("string for an int", "search", {"query": "x", "limit": "5"}, "INVALID", "limit", "must be an integer"),
    ("float for an int", "search", {"query": "x", "limit": 5.0}, "INVALID", "limit", "must be an integer"),
    ("bool for an int", "search", {"query": "x", "limit": True}, "INVALID", "limit", "must be an integer"),
    ("string for a bool", "advanced_search", {"queries": ["x"], "rerank": "false"}, "INVALID", "rerank",
     "must be a boolean"),
    ("limit above the maximum", "search", {"query": "x", "limit": 51}, "LIMIT", "limit", "at most 50"),
    ("limit below the minimum", "search", {"query": "x", "limit": 0}, "INVALID", "limit", "at least 1"),
    ("unknown mode", "search", {"query": "x", "mode": "semantic"}, "INVALID", "mode", "'hybrid', 'fts' or 'vector'"),
    ("code_mode with fts", "search", {"query": "x", "mode": "fts", "code_mode": "exclusive"}, "INVALID",
     "code_mode", "when mode is 'fts'"),
    ("code_mode off with fts", "advanced_search", {"queries": ["x"], "mode": "fts", "code_mode": "off"},
     "INVALID", "code_mode", "when mode is 'fts'"),
    ("blank query", "search", {"query": "   "}, "INVALID", "query", "non-space"),
    ("missing query", "search", {}, "INVALID", "query", "is required"),
    ("more than 10 queries", "advanced_search", {"queries": [f"q{i}" for i in range(11)]}, "LIMIT", "queries",
     "at most 10 items"),
    ("no queries", "advanced_search", {"queries": []}, "INVALID", "queries", "at least 1 items"),
    ("too-long rerank_instructions", "advanced_search", {"queries": ["x"], "rerank_instructions": "y" * 401},
     "LIMIT", "rerank_instructions", "at most 400 characters"),
    ("unknown facet key", "advanced_search", {"queries": ["x"], "filters": {"colour": {"any_of": ["red"]}}},
     "INVALID", "filters.colour", "valid keys are source_slug, language, package, language_target"),
    ("version rule without a rule", "advanced_search",
     {"queries": ["x"], "filters": {"sdk_dependency": {}}}, "INVALID",
     "filters.sdk_dependency", "needs any_of, none_of, version_satisfies"),
    ("version range that is not a string", "advanced_search",
     {"queries": ["x"], "filters": {"language_target": {"version_satisfies": 17}}}, "INVALID",
     "filters.language_target.version_satisfies", "must be a string"),
    ("unknown version rule", "advanced_search",
     {"queries": ["x"], "filters": {"language_target": {"range": "^1"}}}, "INVALID",
     "filters.language_target.range", "any_of and/or none_of and/or version_satisfies"),
    ("malformed version range", "advanced_search",
     {"queries": ["x"], "filters": {"language_target": {"version_satisfies": ">=banana"}}}, "INVALID",
     "filters.language_target.version_satisfies", "must be a node-semver range"),
    ("malformed version range in facets", "facets",
     {"filters": {"sdk_dependency": {"any_of": ["react"], "version_satisfies": "1.2.3.4.5"}}}, "INVALID",
     "filters.sdk_dependency.version_satisfies", "must be a node-semver range"),
    ("fixed facet value outside its set", "advanced_search",
     {"queries": ["x"], "filters": {"kind": {"any_of": ["wiki"]}}}, "INVALID", "filters.kind.any_of[0]",
     "'docs_site', 'code_repo', 'standalone' or 'mixed'"),
    ("wrong facet value type", "advanced_search", {"queries": ["x"], "filters": {"verified": {"any_of": ["yes"]}}},
     "INVALID", "filters.verified.any_of[0]", "must be a boolean"),
    ("unknown facet rule", "advanced_search", {"queries": ["x"], "filters": {"kind": {"all_of": ["mixed"]}}},
     "INVALID", "filters.kind.all_of", "any_of and/or none_of"),
    ("empty facet rule", "advanced_search", {"queries": ["x"], "filters": {"language": {}}}, "INVALID",
     "filters.language", "needs any_of"),
    ("unknown facet to list", "facets", {"facet": "colour"}, "INVALID", "facet", "must be one of"),
    ("symbol with an empty segment", "advanced_search",
     {"queries": ["x"], "filters": {"symbol": {"any_of": ["Client..connect"]}}}, "INVALID",
     "filters.symbol.any_of[0]", "dotted name"),
    ("blank path glob", "count", {"query_text": "x", "filters": {"path": {"any_of": [" "]}}}, "INVALID",
     "filters.path.any_of[0]", "non-space"),
    ("malformed id", "get_chunk", {"chunk_id": "chunk-7"}, "INVALID", "chunk_id", "must be a UUID"),
    ("too many neighbours", "get_chunk", {"chunk_id": str(uuid.uuid4()), "before": 21}, "LIMIT", "before",
     "at most 20"),
    ("negative offset", "read_document_bytes", {"document_id": str(uuid.uuid4()), "offset": -1, "length": 1},
     "INVALID", "offset", "at least 0"),
    ("arguments on a tool without any", "status", {"verbose": True}, "INVALID", "verbose", "not an argument"),
]


@pytest.mark.parametrize(("tool", "arguments", "code", "path", "rule"),
                         [case[1:] for case in INVALID_CASES], ids=[case[0] for case in INVALID_CASES])
def test_invalid_input_is_rejected_naming_the_path_and_rule(
    mcp: McpSession, tool: str, arguments: dict[str, Any], code: str, path: str, rule: str
) -> None:
    reply = mcp.call(tool, arguments)
    assert reply.is_error
    assert reply.error["code"] == code
    problem = next(problem for problem in reply.error["problems"] if problem["path"] == path)
    assert rule in problem["rule"]
    assert "Traceback" not in reply.text


def test_errors_never_echo_the_rejected_value(mcp: McpSession) -> None:
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("search", {"query": SECRET_VALUE, "limit": SECRET_VALUE}),
        ("search", {"query": SECRET_VALUE * (MAX_QUERY_CHARS // len(SECRET_VALUE) + 1)}),  # over the length limit
        ("advanced_search", {"queries": [SECRET_VALUE], "mode": SECRET_VALUE}),
        ("advanced_search", {"queries": ["x"], "filters": {"kind": {"any_of": [SECRET_VALUE]}}}),
        ("advanced_search", {"queries": ["x"], "filters": {"source_slug": {"any_of": [SECRET_VALUE * 20]}}}),
        ("get_document", {"document_id": SECRET_VALUE}),
        ("search", {"query": "x", SECRET_VALUE: 1}),
    ]
    for tool, arguments in attempts:
        reply = mcp.call(tool, arguments)
        assert reply.is_error, (tool, arguments)
        assert SECRET_VALUE not in reply.text, reply.text


def test_several_problems_are_reported_together(mcp: McpSession) -> None:
    reply = mcp.call("advanced_search", {"queries": ["x"] * 11, "limit": 0, "mode": "keyword"})
    assert reply.error["code"] == "INVALID"  # LIMIT only when every problem is an upper bound
    assert {problem["path"] for problem in reply.error["problems"]} == {"queries", "limit", "mode"}
