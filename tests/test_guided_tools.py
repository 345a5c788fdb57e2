"""count, query_documents, generate_urls, route_sources, suggest_query_params, guided_query, the flow gate
and advanced_search presets, through the SDK's real MCP client over an ingested corpus of three sources."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from engine.config import Settings
from engine.embed.base import SPACES, Embedder, Vectors
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.providers.selection import build_reranker
from engine.rerank.base import Reranker
from engine.retrieval.counting import count_documents
from mcp_server.auth import AccessPolicy
from mcp_server.flow_gate import FlowGate
from mcp_server.http_app import build_http_app
from mcp_server.limits import MAX_QUERY_CHARS, MAX_RESPONSE_BYTES
from mcp_server.tools import ToolSpec, all_tools
from mcp_server.tools.count import COUNT
from mcp_server.tools.guided import GUIDED_QUERY
from mcp_server.tools.query_documents import QUERY_DOCUMENTS
from mcp_server.tools.routing import ROUTE_SOURCES
from mcp_server.tools.suggest import SUGGEST_QUERY_PARAMS
from mcp_server.tools.urls import GENERATE_URLS
from tests.corpus import write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.tiny_cross_encoder import build_model_dir

NEW_TOOLS: list[ToolSpec[Any]] = [COUNT, QUERY_DOCUMENTS, GENERATE_URLS, ROUTE_SOURCES, SUGGEST_QUERY_PARAMS,
                                  GUIDED_QUERY]

DOCS = {
    "docs/indexes.md": "# Indexes\n\nIndexes speed up queries on large tables.\n\n## Partial indexes\n\n"
    "Indexes of a database can be partial. A partial index is built over a subset of a table; the subset is "
    "defined by a conditional expression called the predicate of the partial index.\n\n"
    "## Expression indexes\n\nAn index column can be a "
    "function or scalar expression computed from columns.\n",
    "docs/backup.md": "# Backup and restore\n\n## pg_dump\n\npg_dump writes a consistent snapshot of one "
    "database to a script or archive file.\n\n## Point-in-time recovery\n\nContinuous archiving of the "
    "write-ahead log allows restoring to any moment.\n",
    "docs/vacuum.md": "# Routine vacuuming\n\nVACUUM reclaims storage occupied by dead tuples and updates "
    "planner statistics.\n",
}
CODE = {
    "src/users.py": '"""User helpers."""\n\nimport re\n\n\ndef parse_user_id(raw: str) -> int:\n'
    '    """Parse a user id such as \'u-42\' into 42."""\n    return int(re.sub(r"\\D", "", raw))\n',
    "src/orders.py": '"""Orders."""\n\n\ndef order_total(prices: list[int]) -> int:\n'
    '    """Sum the prices of an order."""\n    return sum(prices)\n',
}
#: One long page to push query_documents past the response bound: 33 paragraphs, each 10 times (identical
#: paragraphs embed once). Not one paragraph 330 times: pgvector keeps up to 10 rows of one vector in a graph
#: element, and 33 elements of one vector spend every link on each other, a cluster that an HNSW scan entering
#: it never leaves. Once the planner took the index (after autovacuum analysed the table, which happened in a
#: slow full run but not in a quick one), the vector leg lost docs/indexes.md in most index builds and
#: src/orders.py came first in query_documents.
PARAGRAPHS = [(f"Vacuum tuning notes, part {part}: autovacuum thresholds, cost limits and freeze ages decide when "
               "dead tuples are reclaimed. " * 8).strip() for part in range(1, 34)]
NOTES = {"notes/tuning.md": "# Vacuum tuning\n\n" + "\n\n".join(PARAGRAPHS * 10) + "\n"}


class _OnceEmbedder:
    """The local model, embedding each distinct text once per batch (the long page repeats one paragraph)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.model_name = inner.model_name
        self.dimension = inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        distinct = list(dict.fromkeys(texts))
        vectors = self._inner.embed_documents(distinct)
        position = {text: index for index, text in enumerate(distinct)}
        return vectors[[position[text] for text in texts]]

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._inner.embed_queries(texts)


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> ConnectionPool:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("guided")
    ingestor = Ingestor(session_pool, dict.fromkeys(SPACES, _OnceEmbedder(local_embedder)), max_file_bytes=2_000_000)
    ingestor.ingest(write_corpus(root / "pg", DOCS), SourceSpec(
        slug="pgdocs", display_name="PostgreSQL manual", kind="docs_site", attribution="official",
        url_template="https://example.com/docs/{path_no_ext}"))
    ingestor.ingest(write_corpus(root / "lib", CODE), SourceSpec(
        slug="userlib", display_name="User library", kind="code_repo", attribution="maintainer",
        base_url="https://git.example.com/userlib/blob/main"))
    ingestor.ingest(write_corpus(root / "notes", NOTES), SourceSpec(slug="notes", kind="standalone"))
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        # Plans from this corpus's statistics now, not from an earlier module's until autovacuum gets round
        # to it: the vector leg then takes the HNSW index from the first test on, as a served corpus does.
        conn.execute("analyze quarry.embeddings, quarry.chunks, quarry.documents")
    return session_pool


@contextmanager
def _served(migrated_url: str, pool: ConnectionPool, embedder: Embedder, tools: Sequence[ToolSpec[Any]],
            reranker: Reranker | None = None) -> Iterator[McpSession]:
    backend = StaticBackend(Settings(database_url=migrated_url), pool, dict.fromkeys(SPACES, embedder), reranker)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True), tools=tools)
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def _tools() -> list[ToolSpec[Any]]:
    return all_tools()


@pytest.fixture(scope="module")
def mcp(corpus: ConnectionPool, migrated_url: str, local_embedder: Embedder) -> Iterator[McpSession]:
    with _served(migrated_url, corpus, local_embedder, _tools()) as session:
        yield session


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _source_filter(*slugs: str) -> dict[str, Any]:
    return {"source_slug": {"any_of": list(slugs)}}


def test_the_catalogue_lists_the_new_tools_with_closed_schemas(mcp: McpSession) -> None:
    listed = {tool.name: tool for tool in mcp.list_tools()}
    for spec in NEW_TOOLS:
        tool = listed[spec.name]
        assert tool.input_schema.get("additionalProperties") is False and tool.description
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert listed["advanced_search"].input_schema["properties"]["preset"]["enum"] == ["fast", "detailed", "full"]


def test_count_dedupes_hybrid_candidates_by_document(mcp: McpSession) -> None:
    body = mcp.ok("count", {"query_text": "partial index predicate"})
    assert body["method"] == "hybrid" and body["truncated"] is False and body["bound"] == 1000
    assert body["count"] >= 1 and body["keyword_documents"] == 1
    assert {"pars", "partial", "predic"} & set(body["selective_terms"])
    assert body["sample"][0]["path"] == "docs/indexes.md" and body["degraded"] is False
    elsewhere = mcp.ok("count", {"query_text": "partial index predicate", "filters": _source_filter("userlib")})
    assert elsewhere["keyword_documents"] == 0 and elsewhere["filters"] == _source_filter("userlib")


def test_count_of_a_broad_query_counts_by_metadata(mcp: McpSession) -> None:
    body = mcp.ok("count", {"query_text": "document", "filters": _source_filter("pgdocs")})
    assert body == body | {"count": 3, "method": "metadata", "truncated": False, "bound": None,
                           "selective_terms": []}
    code = mcp.ok("count", {"query_text": "how many files", "filters": {"content_type": {"any_of": ["code"]}}})
    assert code["count"] == 2 and code["method"] == "metadata"


def test_count_reports_truncation_at_its_bound(corpus: ConnectionPool) -> None:
    counted = count_documents(corpus, "database", bound=1)
    assert counted.truncated is True and counted.method == "keyword" and counted.count == 2


def test_count_rejects_bad_arguments(mcp: McpSession) -> None:
    assert mcp.call("count", {"query_text": "   "}).error["code"] == "INVALID"
    assert mcp.call("count", {"query_text": "x", "filters": {"colour": {"any_of": ["red"]}}}).error["code"] == \
        "INVALID"
    assert mcp.call("count", {"query_text": "x" * (MAX_QUERY_CHARS + 1)}).error["code"] == "LIMIT"


def test_query_documents_returns_whole_documents_in_order(mcp: McpSession) -> None:
    body = mcp.ok("query_documents", {"query_text": "partial index predicate", "top_k": 2})
    first = body["documents"][0]
    assert first["path"] == "docs/indexes.md" and first["rank"] == 1 and body["document_count"] == 2
    page = mcp.ok("get_document", {"document_id": first["document_id"]})
    assert first["merged_content"] == "\n\n".join(chunk["content"] for chunk in page["chunks"])
    assert first["chunk_count"] == first["merged_chunks"] == len(page["chunks"]) > 1
    assert first["best_score"] > 0 and first["matched_chunks"] >= 1 and first["source"]["slug"] == "pgdocs"
    assert body["reranked"] is False and "no reranker" in body["rerank_skipped_reason"]
    one = mcp.ok("query_documents", {"query_text": "partial index predicate", "top_k": 1,
                                     "max_chunks_per_document": 1})
    assert one["documents"][0]["merged_chunks"] == 1 and one["documents"][0]["chunk_count"] == first["chunk_count"]
    assert one["documents"][0]["merged_content"] == page["chunks"][0]["content"]


def test_the_vector_leg_finds_the_page_through_the_hnsw_index(mcp: McpSession, corpus: ConnectionPool,
                                                              local_embedder: Embedder) -> None:
    # What the query_documents order rests on: the leg scans the index, and the index reaches the page.
    query = local_embedder.embed_queries(["partial index predicate"])[0].tolist()
    with corpus.connection() as conn:
        # a table this small is cheaper to sort: the HNSW scan must be the only way to the order
        conn.execute("set local enable_seqscan = off; set local enable_sort = off")
        plan = conn.execute("explain select chunk_id from quarry.embeddings where space = 'text'"
                            " order by embedding::halfvec(384) <=> %s::halfvec(384) limit 60", (str(query),)).fetchall()
        paths = conn.execute("select d.path from quarry.nearest_chunks('text', %s::vector, 2) n"
                             " join quarry.chunks c on c.id = n.chunk_id"
                             " join quarry.documents d on d.id = c.document_id", (str(query),)).fetchall()
        conn.rollback()
    assert "embeddings_hnsw_text" in "\n".join(str(line[0]) for line in plan)
    assert paths == [("docs/indexes.md",)] * 2
    body = mcp.ok("search", {"query": "partial index predicate", "mode": "vector", "limit": 2})
    assert [hit["path"] for hit in body["results"]] == ["docs/indexes.md"] * 2 and body["degraded"] is False


def test_query_documents_bounds(mcp: McpSession) -> None:
    big = mcp.call("query_documents", {"query_text": "vacuum tuning autovacuum thresholds", "top_k": 20,
                                       "max_chunks_per_document": 500,
                                       "filters": _source_filter("notes")})
    assert not big.is_error and big.wire_bytes <= MAX_RESPONSE_BYTES
    document = big.body["documents"][0]
    assert big.body["truncated"] is True and document["truncated"] is True and document["omitted_chars"] > 0
    assert document["merged_chunks"] == document["chunk_count"] > 200
    assert mcp.call("query_documents", {"query_text": "x", "top_k": 21}).error["code"] == "LIMIT"
    assert mcp.call("query_documents", {"query_text": "x", "max_chunks_per_document": 501}).error["code"] == "LIMIT"
    assert mcp.call("query_documents", {"query_text": "x", "top_k": 0}).error["code"] == "INVALID"
    assert mcp.call("query_documents", {"query_text": "x", "top_k": "5"}).error["code"] == "INVALID"


def test_query_documents_reranks_when_a_reranker_is_configured(corpus: ConnectionPool, migrated_url: str,
                                                               local_embedder: Embedder, tmp_path: Path) -> None:
    model_dir, _ = build_model_dir(tmp_path / "tiny-cross-encoder")
    reranker = build_reranker(Settings(database_url=migrated_url, reranker=f"cross-encoder:{model_dir}"))
    with _served(migrated_url, corpus, local_embedder, _tools(), reranker) as session:
        body = session.ok("query_documents", {"query_text": "create a partial index", "top_k": 3})
    assert body["reranked"] is True and body["rerank_skipped_reason"] is None
    # ranked by their best chunks' rerank scores (engine.retrieval.grouping): best chunk first, next ones a little
    scores = [document["score"] for document in body["documents"]]
    assert scores == sorted(scores, reverse=True) and all(document["reranked"] for document in body["documents"])
    assert all(document["score"] >= document["best_score"] for document in body["documents"])


def test_generate_urls_follows_the_fallback_chain(mcp: McpSession) -> None:
    hit = mcp.ok("search", {"query": "parse user id", "limit": 1})["results"][0]
    docs = mcp.ok("generate_urls", {"source": "pgdocs", "records": [
        {"path": "docs/indexes.md"}, {"path": "docs/not-indexed.md"}]})
    assert [(row["url"], row["method"], row["indexed"]) for row in docs["urls"]] == [
        ("https://example.com/docs/docs/indexes", "url_template", True),
        ("https://example.com/docs/docs/not-indexed", "url_template", False)]
    code = mcp.ok("generate_urls", {"source": "userlib", "records": [{"document_id": hit["document_id"]}]})
    assert code["urls"][0] | {"reason": None} == {
        "path": "src/users.py", "document_id": hit["document_id"], "reason": None, "indexed": True,
        "url": "https://git.example.com/userlib/blob/main/src/users.py", "method": "base_url"}
    notes = mcp.ok("generate_urls", {"source": "notes", "records": [
        {"path": "notes/tuning.md"}, {"document_id": hit["document_id"]}]})
    assert [(row["url"], row["method"]) for row in notes["urls"]] == [(None, "none"), (None, "none")]
    assert "notes:notes/tuning.md" in notes["urls"][0]["reason"]
    assert "no document of source 'notes'" in notes["urls"][1]["reason"]
    assert notes["methods"] == {"none": 2}


def test_generate_urls_rejects_bad_arguments(mcp: McpSession) -> None:
    assert mcp.call("generate_urls", {"source": "nope", "records": [{"path": "a"}]}).error["code"] == "NOT_FOUND"
    empty = mcp.call("generate_urls", {"source": "pgdocs", "records": [{}]}).error
    assert empty["code"] == "INVALID" and empty["problems"][0]["rule"] == "needs path, document_id or both"
    many = mcp.call("generate_urls", {"source": "pgdocs", "records": [{"path": "a"}] * 501})
    assert many.error["code"] == "LIMIT"
    assert mcp.call("generate_urls", {"source": "pgdocs", "records": []}).error["code"] == "INVALID"


def test_route_sources_ranks_by_name_keywords_and_centroids(mcp: McpSession) -> None:
    docs = mcp.ok("route_sources", {"user_query": "restore a pg_dump archive of the database"})
    assert docs["recommended_source"] == "pgdocs" and len(docs["sources"]) == 3
    first = docs["sources"][0]
    assert first["slug"] == "pgdocs" and set(first["signals"]) == {"description", "fts", "centroid"}
    assert first["evidence"]["fts_hits"] > 0 and first["evidence"]["centroid_similarity"] is not None
    code = mcp.ok("route_sources", {"user_query": "parse a user id", "top_n": 1})
    assert code["recommended_source"] == "userlib" and [row["slug"] for row in code["sources"]] == ["userlib"]
    named = mcp.ok("route_sources", {"user_query": "postgresql manual", "top_n": 2})
    assert named["sources"][0]["signals"]["description"] == 1.0
    assert mcp.call("route_sources", {"user_query": "x", "top_n": 6}).error["code"] == "LIMIT"
    assert mcp.call("route_sources", {"user_query": "x", "top_n": 0}).error["code"] == "INVALID"


def test_suggest_query_params_suggests_filters_and_a_tool(mcp: McpSession) -> None:
    counting = mcp.ok("suggest_query_params", {"source": "pgdocs", "user_query": "how many pages mention backups"})
    assert counting["recommended_tool"] == "count" and counting["use_count_tool"] is True
    assert counting["suggested_filters"] == _source_filter("pgdocs")
    assert counting["suggested_arguments"] == {"query_text": "how many pages mention backups",
                                               "filters": _source_filter("pgdocs")}
    code = mcp.ok("suggest_query_params", {"source": "userlib",
                                           "user_query": "the python implementation of parse_user_id"})
    assert code["suggested_filters"] == {**_source_filter("userlib"), "language": {"any_of": ["python"]},
                                         "content_type": {"any_of": ["code"]}}
    assert code["recommended_tool"] == "advanced_search" and code["use_count_tool"] is False
    assert code["available_values"]["language"] == [{"value": "python", "documents": 2}]
    assert "language 'python' is named" in code["explanation"]
    searched = mcp.ok("advanced_search", code["suggested_arguments"])
    assert searched["results"][0]["path"] == "src/users.py"
    whole = mcp.ok("suggest_query_params", {"source": "pgdocs", "user_query": "the entire backup guide"})
    assert whole["recommended_tool"] == "query_documents"
    assert mcp.call("suggest_query_params", {"source": "Pgdocs", "user_query": "x"}).error["code"] == "NOT_FOUND"


def test_the_flow_gate_requires_a_suggestion_for_the_exact_source(corpus: ConnectionPool, migrated_url: str,
                                                                  local_embedder: Embedder) -> None:
    clock = _Clock()
    gate = FlowGate(enabled=True, ttl_s=60, clock=clock)
    scoped = {"queries": ["partial index"], "filters": _source_filter("pgdocs")}
    with _served(migrated_url, corpus, local_embedder, gate.wrap(_tools())) as session:
        blocked = session.call("advanced_search", scoped).error
        assert blocked["code"] == "FLOW_GATE" and "source='pgdocs'" in blocked["message"]
        assert blocked["problems"] == [{"path": "filters.source_slug.any_of[0]",
                                        "rule": "needs a prior suggest_query_params call for this exact source"}]
        for tool, arguments in (("count", {"query_text": "index", "filters": _source_filter("pgdocs")}),
                                ("query_documents", {"query_text": "index", "filters": _source_filter("pgdocs")})):
            assert session.call(tool, arguments).error["code"] == "FLOW_GATE"
        assert session.ok("search", {"query": "partial index"})["results"]  # on no particular source
        assert session.ok("advanced_search", {"queries": ["partial index"]})["results"]
        assert session.ok("guided_query", {"user_query": "partial index", "source": "pgdocs"})["result"]
        assert session.call("suggest_query_params", {"source": "PGDOCS", "user_query": "x"}).is_error
        assert session.call("advanced_search", scoped).error["code"] == "FLOW_GATE"
        session.ok("suggest_query_params", {"source": "pgdocs", "user_query": "partial index"})
        assert session.ok("advanced_search", scoped)["results"]
        assert session.ok("count", {"query_text": "index", "filters": _source_filter("pgdocs")})["count"] >= 1
        both = session.call("advanced_search", {"queries": ["x"], "filters": _source_filter("pgdocs", "userlib")})
        assert both.error["problems"][0]["path"] == "filters.source_slug.any_of[1]"
        clock.now += 61
        assert session.call("advanced_search", scoped).error["code"] == "FLOW_GATE"


def test_the_flow_gate_is_off_by_default(mcp: McpSession) -> None:
    assert FlowGate.from_settings(Settings()).enabled is False
    on = Settings.model_validate({"flow_gate": True, "flow_gate_ttl_s": 30})
    assert FlowGate.from_settings(on).enabled is True and FlowGate.from_settings(on).ttl_s == 30
    with pytest.raises(ValidationError, match="flow_gate"):
        Settings.model_validate({"flow_gate": "maybe"})
    tools = _tools()
    assert FlowGate.from_settings(Settings()).wrap(tools) == tools
    assert mcp.ok("advanced_search", {"queries": ["partial index"], "filters": _source_filter("pgdocs")})["results"]


def test_guided_query_routes_suggests_and_counts(mcp: McpSession) -> None:
    body = mcp.ok("guided_query", {"user_query": "how many documents mention pg_dump archives"})
    trace = body["decision_trace"]
    assert trace["input_source"] is None and trace["routed_source"] == trace["selected_source"] == "pgdocs"
    assert trace["ranked_sources"][0]["slug"] == "pgdocs" and len(trace["ranked_sources"]) == 3
    assert trace["suggested_filters"] == _source_filter("pgdocs") and trace["suggested_fields"] == ["source_slug"]
    assert trace["selected_tool"] == "count" and trace["preset"] is None
    assert trace["rerank"] == {"reranked": False, "skipped_reason": "count does not rank"}
    assert "routing recommended 'pgdocs'" in trace["explanation"]
    assert body["result"]["count"] == 1 and body["result"]["sample"][0]["path"] == "docs/backup.md"


def test_guided_query_searches_with_a_preset(mcp: McpSession) -> None:
    body = mcp.ok("guided_query", {"user_query": "parse a user id in python", "top_k": 2})
    trace = body["decision_trace"]
    assert trace["selected_source"] == "userlib" and trace["selected_tool"] == "advanced_search"
    assert trace["preset"] == "detailed" and trace["suggested_fields"] == ["language", "source_slug"]
    assert trace["rerank"]["reranked"] is False and "no reranker" in trace["rerank"]["skipped_reason"]
    assert body["result"]["results"][0]["path"] == "src/users.py" and body["result"]["result_count"] <= 2
    fast = mcp.ok("guided_query", {"user_query": "partial index", "source": "pgdocs", "preferred_tool": "fast",
                                   "filters": {"content_type": {"any_of": ["markdown"]}}})
    trace = fast["decision_trace"]
    assert trace["input_source"] == "pgdocs" and trace["routed_source"] is None and trace["ranked_sources"] == []
    assert trace["filters"] == {**_source_filter("pgdocs"), "content_type": {"any_of": ["markdown"]}}
    assert trace["preset"] == "fast" and trace["rerank"]["skipped_reason"] == "preset='fast' skips reranking"
    assert "confidence_factors" not in fast["result"]["results"][0]
    conflict = mcp.call("guided_query", {"user_query": "x", "source": "pgdocs", "filters": _source_filter("notes")})
    assert conflict.error["code"] == "INVALID"
    assert mcp.call("guided_query", {"user_query": "x", "preferred_tool": "best"}).error["code"] == "INVALID"
    assert mcp.call("guided_query", {"user_query": "x", "source": "nope"}).error["code"] == "NOT_FOUND"


def test_advanced_search_presets(mcp: McpSession) -> None:
    arguments = {"queries": ["vacuum tuning autovacuum"], "limit": 3}
    detailed = mcp.ok("advanced_search", arguments)
    fast = mcp.ok("advanced_search", {**arguments, "preset": "fast", "rerank_instructions": "prefer docs"})
    full = mcp.ok("advanced_search", {**arguments, "preset": "full"})
    assert "preset" not in detailed and "neighbours" not in detailed["results"][0]
    assert "confidence_factors" in detailed["results"][0]
    assert fast["preset"] == "fast" and fast["rerank_skipped_reason"] == "preset='fast' skips reranking"
    assert "rerank_instructions were not used: preset='fast' skips reranking" in fast["notes"]
    light = fast["results"][0]
    assert "confidence_factors" not in light and "fts_rank" not in light and len(light["content"]) <= 500
    assert [row["chunk_id"] for row in fast["results"]] == [row["chunk_id"] for row in detailed["results"]]
    notes_hit = next(row for row in full["results"] if row["source"]["slug"] == "notes")
    assert {neighbour["offset"] for neighbour in notes_hit["neighbours"]} <= {-1, 1}
    assert notes_hit["neighbours"] and all(neighbour["content"] for neighbour in notes_hit["neighbours"])
    assert mcp.call("advanced_search", {**arguments, "preset": "turbo"}).error["code"] == "INVALID"
