"""The response bound: whatever the content, a bounded payload fits, and says what it cut; and every tool's
default response stays within 32 KB on a real corpus (Quarry's own docs and code) unless asked for more."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from mcp_server.auth import AccessPolicy
from mcp_server.bounds import DEFAULT_RESPONSE_BYTES, bounded_json, wire_size
from mcp_server.envelope import to_json
from mcp_server.http_app import build_http_app
from mcp_server.limits import MAX_RESPONSE_BYTES
from mcp_server.tools import all_tools
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving

LIMIT = 16 * 1024
# Quotes, backslashes, newlines and control characters grow when escaped twice; astral characters are 4 bytes.
AWKWARD = ["a", " ", '"', "\\", "\n", "\x01", "é", "☕", "\U0001d538"]
awkward_text = st.text(alphabet=st.sampled_from(AWKWARD), max_size=6000)


def _wire_size_of_result(text: str) -> int:
    """Measured by serialising, not with ``wire_size``: the bound is checked against what it estimates."""
    wrapper = '{"content":[{"type":"text","text":}],"isError":false}'
    return len(json.dumps(text, ensure_ascii=False).encode()) + len(wrapper)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | awkward_text,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(awkward_text, inner, max_size=4),
                    max_leaves=20))
def test_wire_size_is_the_size_of_json_text_escaped_as_a_string(value: Any) -> None:
    json_text = to_json(value)
    assert wire_size(json_text) == len(json.dumps(json_text, ensure_ascii=False).encode())


@settings(max_examples=60, deadline=None)
@given(st.lists(awkward_text, max_size=12))
def test_any_list_of_contents_fits_and_cut_contents_are_marked(contents: list[str]) -> None:
    results: list[dict[str, Any]] = [{"rank": rank, "content": text} for rank, text in enumerate(contents)]
    payload: dict[str, Any] = {"results": results, "truncated": False}
    text = bounded_json(payload, results, droppable=[results], dropped_key="omitted_results", limit=LIMIT)
    assert _wire_size_of_result(text) <= LIMIT
    parsed = json.loads(text)
    kept = parsed["results"]
    assert len(kept) + parsed.get("omitted_results", 0) == len(contents)
    for result in kept:
        original = contents[result["rank"]]
        assert original.startswith(result["content"])
        if result["content"] != original:
            assert result["truncated"] is True and result["omitted_chars"] == len(original) - len(result["content"])
        else:
            assert "truncated" not in result
    changed = bool(parsed.get("omitted_results")) or any(result.get("truncated") for result in kept)
    assert parsed["truncated"] is changed


def test_short_contents_stay_whole_while_long_ones_share_the_rest() -> None:
    results = [{"content": "short"}, {"content": "x" * 50_000}, {"content": "y" * 50_000}]
    payload: dict[str, Any] = {"results": results, "truncated": False}
    parsed = json.loads(bounded_json(payload, results, limit=LIMIT))
    short, first, second = parsed["results"]
    assert short == {"content": "short"}
    assert first["truncated"] and second["truncated"]
    assert abs(len(first["content"]) - len(second["content"])) < 100  # an equal share each


def test_lists_without_text_lose_trailing_items_and_count_them() -> None:
    values = [[{"value": f"value-{i:05d}", "documents": i} for i in range(3000)], [{"value": "a", "documents": 1}]]
    payload: dict[str, Any] = {"facets": {"big": values[0], "small": values[1]}, "truncated": False}
    text = bounded_json(payload, [], droppable=values, dropped_key="omitted_values", limit=LIMIT)
    parsed = json.loads(text)
    assert _wire_size_of_result(text) <= LIMIT and parsed["truncated"] is True
    assert parsed["facets"]["small"] == [{"value": "a", "documents": 1}]
    kept = parsed["facets"]["big"]
    assert kept == [{"value": f"value-{i:05d}", "documents": i} for i in range(len(kept))]
    assert parsed["omitted_values"] == 3000 - len(kept) > 0


# --- every tool's default response on a real corpus: Quarry's own docs and code -------------------------------

REPO = Path(__file__).resolve().parent.parent
#: Quarry's own tree, in part: its long docs (benchmark logs, the README) and the code serving them.
OWN_FILES = ["README.md", "docs/BENCHMARKS.md", "engine/retrieval/pipeline.py"]
OWN_GLOBS = ["mcp_server/tools/*.py"]


@pytest.fixture(scope="module")
def own_repo(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
             tmp_path_factory: pytest.TempPathFactory) -> ConnectionPool:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("own") / "quarry"
    paths = [REPO / name for name in OWN_FILES] + [path for glob in OWN_GLOBS for path in sorted(REPO.glob(glob))]
    for path in paths:
        target = root / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=2_000_000).ingest(
        root, SourceSpec(slug="quarry", kind="mixed", attribution="official",
                         url_template="https://github.com/example/quarry/blob/main/{path}"))
    return session_pool


@pytest.fixture(scope="module")
def served(own_repo: ConnectionPool, migrated_url: str, local_embedder: Embedder) -> Iterator[McpSession]:
    backend = StaticBackend(Settings(database_url=migrated_url), own_repo, dict.fromkeys(SPACES, local_embedder))
    with serving(build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))) as url, \
            mcp_session(http_transport(url + "/mcp")) as session:
        yield session


@pytest.mark.slow  # ingesting part of Quarry's own tree
def test_every_tool_answers_within_32_kb_by_default_on_quarrys_own_repo(served: McpSession,
                                                                         own_repo: ConnectionPool) -> None:
    with own_repo.connection() as conn:
        document_id, chunk_id = (str(value) for value in conn.execute(
            "select d.id, c.id from quarry.documents d join quarry.chunks c on c.document_id = d.id "
            "order by octet_length(d.raw) desc, c.ordinal limit 1").fetchone() or ())
    question = "how are search results ranked, reranked and bounded in size"
    calls: dict[str, dict[str, Any]] = {
        "search": {"query": question},
        "advanced_search": {"queries": [question, "response size bound truncation"]},
        "grep": {"pattern": "def "},
        "facets": {},
        "get_document": {"document_id": document_id},
        "get_chunk": {"chunk_id": chunk_id, "before": 20, "after": 20},
        "read_document_bytes": {"document_id": document_id, "offset": 0, "length": 16384},
        "list_sources": {},
        "status": {},
        "count": {"query_text": "rerank"},
        "query_documents": {"query_text": question},
        "generate_urls": {"source": "quarry", "records": [{"path": "README.md"}]},
        "route_sources": {"user_query": question},
        "suggest_query_params": {"source": "quarry", "user_query": question},
        "guided_query": {"user_query": question},
        "jobs": {"action": "list"},
        "neighbors": {"id": document_id},
        "vector_search": {"query": [0.1, 0.2]},
        "vector_count": {},
    }
    assert set(calls) | {"vector_add", "vector_delete", "add_source", "refresh_source", "remove_source"} == \
        {spec.name for spec in all_tools()}  # every reading tool is measured
    sizes = {}
    for tool, arguments in calls.items():
        reply = served.call(tool, arguments)
        assert not reply.is_error, (tool, reply.text[:300])
        sizes[tool] = reply.wire_bytes
    print("default response bytes:", sizes)
    assert all(size <= DEFAULT_RESPONSE_BYTES for size in sizes.values()), sizes
    # asked for, more comes: up to the cap
    larger = served.call("query_documents", {"query_text": question, "max_tokens": 60_000})
    assert DEFAULT_RESPONSE_BYTES < larger.wire_bytes <= MAX_RESPONSE_BYTES
    page = served.call("get_document", {"document_id": document_id, "max_tokens": 30_000})
    assert DEFAULT_RESPONSE_BYTES < page.wire_bytes <= MAX_RESPONSE_BYTES
