"""Token budgets: results packed best first, never cut mid-line without saying so; get_document resumes exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
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
from mcp_server.token_budget import LINE_BOUNDARY, MID_LINE, estimated_tokens, pack
from tests.corpus import write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving

LINES = "".join(f"Line {number}: vacuum reclaims the space of dead rows in table t{number}.\n"
                for number in range(1, 401))
ONE_LINE = "minified " * 700 + "\n"
FILES = {"docs/vacuum.md": f"# Vacuum\n\n{LINES}", "min/app.txt": ONE_LINE,
         "docs/short.md": "# Short\n\nVacuum in one line.\n"}


def _tokens(body: dict[str, Any]) -> float:
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False)) / 4


def test_a_row_is_cut_at_a_line_and_says_so_or_mid_line_only_when_no_line_fits() -> None:
    text = "".join(f"line {i}\n" for i in range(500))
    rows = [{"rank": 1, "content": text}, {"rank": 2, "content": "x"}]
    payload: dict[str, Any] = {"results": rows}
    pack(payload, rows, 300)
    (best,) = payload["results"]
    assert best["cut_at"] == LINE_BOUNDARY and text[len(best["content"])] == "\n"
    assert best["omitted_chars"] == len(text) - len(best["content"]) > 0 and best["truncated"] is True
    assert estimated_tokens(payload) <= 300 and payload["token_budget"]["omitted_results"] == 1
    assert payload["truncated"] is True

    long_line: list[dict[str, Any]] = [{"rank": 1, "content": "y" * 5000}]
    payload = {"results": long_line}
    pack(payload, long_line, 250)
    assert long_line[0]["cut_at"] == MID_LINE and 0 < len(long_line[0]["content"]) < 5000
    assert estimated_tokens(payload) <= 250


def test_fill_cuts_the_row_that_ends_the_list_at_a_line() -> None:
    chunks = [{"ordinal": index, "content": "".join(f"row {index}.{i}\n" for i in range(80))} for index in range(4)]
    payload: dict[str, Any] = {"chunks": chunks}
    pack(payload, chunks, 400, fill=True, omitted_key="omitted_chunks")
    assert len(chunks) == 2 and "truncated" not in chunks[0] and chunks[1]["cut_at"] == LINE_BOUNDARY
    assert payload["token_budget"]["omitted_chunks"] == 2 and estimated_tokens(payload) <= 400
    unfilled = [dict(chunk) for chunk in chunks[:1]] + [{"ordinal": 9, "content": "z" * 4000}]
    payload = {"chunks": unfilled}
    pack(payload, unfilled, 300, fill=True)  # not one line of the second fits: it is left for the next page
    assert [chunk["ordinal"] for chunk in unfilled] == [0]


@pytest.fixture(scope="module")
def mcp(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = write_corpus(tmp_path_factory.mktemp("budgets"), FILES)
    Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        root, SourceSpec(slug="budgets"))
    backend = StaticBackend(Settings(database_url=migrated_url), session_pool, dict.fromkeys(SPACES, local_embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def _document_id(mcp: McpSession, path: str) -> str:
    found = mcp.ok("grep", {"pattern": FILES[path][:6], "filters": {"path": {"any_of": [path]}}, "limit": 1})
    return str(found["matches"][0]["document_id"])


@pytest.mark.parametrize(("path", "budget"), [("docs/vacuum.md", 600), ("min/app.txt", 400)])
def test_get_document_pages_whole_lines_within_the_budget_and_resumes_where_it_stopped(
    mcp: McpSession, path: str, budget: int
) -> None:
    document_id = _document_id(mcp, path)
    whole = mcp.ok("get_document", {"document_id": document_id, "max_tokens": 100_000})  # a default page is bounded
    expected = {chunk["ordinal"]: chunk["content"] for chunk in whole["chunks"]}
    raw = FILES[path].encode()
    read: dict[int, str] = {}
    cursor: str | None = None
    pages = 0
    while True:
        page = mcp.ok("get_document", {"document_id": document_id, "max_tokens": budget,
                                       **({"cursor": cursor} if cursor else {})})
        pages += 1
        assert _tokens(page) <= budget and page["token_budget"]["used_tokens"] <= budget
        for chunk in page["chunks"]:
            ordinal = chunk["ordinal"]
            assert chunk.get("resumed_from_char", 0) == len(read.get(ordinal, ""))
            read[ordinal] = read.get(ordinal, "") + chunk["content"]
            # the spans are those of the piece returned
            assert raw[chunk["start_byte"]:chunk["end_byte"]].decode() == chunk["content"]
            assert chunk["start_line"] == raw[:chunk["start_byte"]].count(b"\n") + 1
            if chunk.get("truncated"):
                rest = expected[ordinal][len(read[ordinal]):]
                if chunk["cut_at"] == LINE_BOUNDARY:
                    assert rest.startswith("\n")
                else:
                    assert chunk["cut_at"] == MID_LINE and "\n" not in chunk["content"]
        cursor = page["next_cursor"]
        if cursor is None:
            assert page["remaining_chunks"] == 0
            break
        assert page["remaining_chunks"] > 0 and pages < 100
    assert {ordinal: text.strip("\n") for ordinal, text in read.items()} == {
        ordinal: text.strip("\n") for ordinal, text in expected.items()}
    assert pages > 2


def test_query_documents_packs_whole_documents_best_first(mcp: McpSession) -> None:
    every = mcp.ok("query_documents", {"query_text": "vacuum dead rows", "top_k": 3})
    assert len(every["documents"]) >= 2 and "token_budget" not in every
    budget = 800
    packed = mcp.ok("query_documents", {"query_text": "vacuum dead rows", "top_k": 3, "max_tokens": budget})
    assert _tokens(packed) <= budget and packed["token_budget"]["used_tokens"] <= budget
    (best,) = packed["documents"]
    assert best["document_id"] == every["documents"][0]["document_id"] and best["truncated"] is True
    assert best["cut_at"] == LINE_BOUNDARY and best["omitted_chars"] > 0
    assert best["merged_content"] and every["documents"][0]["merged_content"].startswith(best["merged_content"])
    assert packed["token_budget"]["omitted_documents"] == len(every["documents"]) - 1
    assert mcp.call("get_document", {"document_id": best["document_id"], "max_tokens": 199}).error["code"] == "INVALID"


def test_a_budget_without_room_for_text_is_refused_rather_than_paged_forever(mcp: McpSession) -> None:
    document_id = _document_id(mcp, "min/app.txt")
    reply = mcp.call("get_document", {"document_id": document_id, "max_tokens": 200})
    assert reply.error["code"] == "INVALID" and "max_tokens" in reply.error["message"]
    assert mcp.ok("get_document", {"document_id": document_id, "max_tokens": 400})["chunks"][0]["content"]
