"""The ``kb`` profile against the knowledge-base contract (contracts/003_…), through the SDK's real client.

Written from the contract's text: exactly its eleven tools; closed inputs; the envelopes
``{"status":"ok","data":...}`` and ``{"status":"error","error":"CODE: message"}``; identifiers
published as anchored patterns and checked on arrival with the contract's message; evidence named
``e_`` + the SHA-256 of its exact bytes, read back in bounded byte ranges; cursors (default 20, max
100) bound to their selection; ``remaining_ids`` for record views; relevance search without a cursor;
``truncated``/``reason``/``frontier`` for traversals; atomic writes and deletes. Served over stdio
(``quarry mcp --tools kb``) and over HTTP without keys; with keys, a search key sees no write tool and
an admin key's evidence is indexed by ``quarry jobs run``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.embed.base import CODE_SPACE, TEXT_SPACE, Embedder
from engine.store import api_keys
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.mcp_harness import REPO, McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.test_profiles import call_result, profile_stdio

CONTRACT_TOOLS = {"kb_status", "kb_types", "kb_write", "kb_get", "kb_search", "kb_neighbors", "kb_delete",
                  "kb_ingest_evidence", "kb_read_evidence", "kb_jobs", "kb_reindex"}
CONTRACT_CODES = {"INVALID", "NOT_FOUND", "CONFLICT", "BUSY", "LIMIT", "PATH_DENIED", "IO_ERROR", "INDEX_ERROR",
                  "CANCELLED", "CONFIGURATION", "INTERNAL"}
GRAPH_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
EVIDENCE_ID = r"^e_[0-9a-f]{64}$"


@pytest.fixture(scope="module")
def evidence_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("evidence-root")
    (root / "recon").mkdir()
    (root / "recon" / "scan.jsonl").write_bytes(b'{"host": "api.example.com", "port": 443}\n')
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.txt").write_text("not evidence")
    (root / "linked").symlink_to(outside)
    return root


@pytest.fixture(scope="module", params=["stdio", "http"])
def mcp(request: pytest.FixtureRequest, migrated_url: str, reader_pool: ConnectionPool, model_cache: Path,
        local_embedder: Embedder, evidence_root: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    home = tmp_path_factory.mktemp("home")
    if request.param == "stdio":
        base = profile_stdio(migrated_url, model_cache, home, "kb")
        parameters = StdioServerParameters(command=base.command, args=base.args,
                                           env={**(base.env or {}), "QUARRY_KB_ROOT": str(evidence_root)},
                                           cwd=base.cwd)
        with mcp_session(parameters) as session:
            yield session
        return
    settings = Settings(database_url=migrated_url, tools="kb", kb_root=evidence_root, home=home)
    backend = StaticBackend(settings, reader_pool, {TEXT_SPACE: local_embedder, CODE_SPACE: local_embedder})
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


@pytest.fixture(autouse=True)
def empty_knowledge_base(session_pool: ConnectionPool) -> None:
    with session_pool.connection() as conn:
        conn.execute("delete from quarry.kb_evidence_links")
        conn.execute("delete from quarry.kb_records where kind = 'relation'")
        conn.execute("delete from quarry.kb_records")
        conn.execute("select quarry.kb_delete(null, array(select id from quarry.kb_evidence), true)")
        conn.execute("delete from quarry.jobs where kind = 'kb_index' and status = 'queued'")


def ok(mcp: McpSession, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    body = mcp.ok(tool, arguments or {})
    assert set(body) == {"status", "data"} and body["status"] == "ok", body
    return body["data"]


def error(mcp: McpSession, tool: str, arguments: dict[str, Any]) -> str:
    reply = mcp.call(tool, arguments)
    assert reply.is_error, reply.text[:500]
    body = reply.body
    assert body["status"] == "error" and isinstance(body["error"], str), body
    assert body["error"].split(":", 1)[0] in CONTRACT_CODES, body
    assert set(body) <= {"status", "error", "details"}
    return str(body["error"])


def sha(content: bytes) -> str:
    return "e_" + hashlib.sha256(content).hexdigest()


def test_exactly_the_eleven_tools_with_published_id_patterns(mcp: McpSession) -> None:
    tools = {tool.name: tool for tool in mcp.list_tools()}
    assert set(tools) == CONTRACT_TOOLS
    for tool in tools.values():
        assert tool.input_schema.get("additionalProperties") is False, tool.name  # closed inputs
        assert tool.output_schema is not None and {"status", "data"} <= set(tool.output_schema["properties"])
    neighbor_id = tools["kb_neighbors"].input_schema["properties"]["id"]
    assert neighbor_id["pattern"] == GRAPH_ID and neighbor_id["minLength"] == neighbor_id["maxLength"] == 36
    assert tools["kb_read_evidence"].input_schema["properties"]["evidence_id"]["pattern"] == EVIDENCE_ID


def test_ids_are_checked_on_arrival_with_the_contract_message(mcp: McpSession) -> None:
    said = error(mcp, "kb_neighbors", {"id": "550E8400-E29B-41D4-A716-446655440000"})
    assert said == ("INVALID: invalid tool request; id: non-canonical graph id: use the lowercase 8-4-4-4-12 "
                    "spelling")
    assert error(mcp, "kb_read_evidence", {"evidence_id": "e_ABC"}).startswith("INVALID: invalid tool request; "
                                                                                "evidence_id: non-canonical")
    assert error(mcp, "kb_status", {"verbose": True}).startswith("INVALID: invalid tool request; verbose")
    assert error(mcp, "kb_search", {"limit": "5"}).startswith("INVALID")  # no type coercion
    assert error(mcp, "kb_search", {"limit": 101}).startswith("LIMIT")  # lists and pages stop at 100


def test_text_evidence_is_stored_exactly_and_indexed(mcp: McpSession) -> None:
    text = "The fusion weights were tuned on SciFact; the quokka benchmark disagrees.\n"
    stored = ok(mcp, "kb_ingest_evidence", {"text": text, "source": "design review"})
    assert stored["evidence_id"] == sha(text.encode())
    assert stored["status"] == "completed" and stored["index_state"] == "ready" and stored["created"] is True
    assert stored["media_type"] == "text/plain" and stored["size"] == len(text.encode())
    again = ok(mcp, "kb_ingest_evidence", {"text": text})
    assert again["evidence_id"] == stored["evidence_id"] and again["created"] is False
    read = ok(mcp, "kb_read_evidence", {"evidence_id": stored["evidence_id"], "format": "text"})
    assert read["data"] == text and read["eof"] is True and read["size"] == len(text.encode())
    found = ok(mcp, "kb_search", {"kind": "evidence", "query": "quokka benchmark", "sort": "relevance"})
    assert found["results"][0]["id"] == stored["evidence_id"] and found["next_cursor"] is None
    literal = ok(mcp, "kb_search", {"kind": "evidence", "query": "quokka"})
    assert [row["id"] for row in literal["results"]] == [stored["evidence_id"]]
    assert "quokka" in literal["results"][0]["snippet"]
    assert ok(mcp, "kb_search", {"kind": "evidence", "query": "Quokka"})["results"] == []  # literal keeps case
    words = ok(mcp, "kb_search", {"kind": "evidence", "query": "benchmark QUOKKA", "query_mode": "words"})
    assert [row["id"] for row in words["results"]] == [stored["evidence_id"]]


def test_binary_evidence_keeps_its_bytes_and_is_not_indexed(mcp: McpSession) -> None:
    data = b"hello\r\n\xc3\xa4\x00\xff"
    stored = ok(mcp, "kb_ingest_evidence", {"base64": base64.b64encode(data).decode(), "source": "first"})
    assert stored["evidence_id"] == sha(data) and stored["index_state"] == "not_applicable"
    assert stored["media_type"] == "application/octet-stream"
    assert "MEDIA_TYPE_DEFAULTED_TEXT_INDEX_SKIPPED" in stored["warnings"]
    whole = ok(mcp, "kb_read_evidence", {"evidence_id": stored["evidence_id"]})
    assert base64.b64decode(whole["data"]) == data and whole["length"] == len(data)
    middle = ok(mcp, "kb_read_evidence", {"evidence_id": stored["evidence_id"], "offset": 5, "length": 2})
    assert base64.b64decode(middle["data"]) == b"\r\n" and middle["eof"] is False
    at_end = ok(mcp, "kb_read_evidence", {"evidence_id": stored["evidence_id"], "offset": len(data)})
    assert at_end["data"] == "" and at_end["eof"] is True
    assert error(mcp, "kb_read_evidence", {"evidence_id": stored["evidence_id"], "offset": len(data) + 1}
                 ).startswith("INVALID")
    assert error(mcp, "kb_read_evidence", {"evidence_id": stored["evidence_id"], "offset": 8, "length": 1,
                                           "format": "text"}).startswith("INVALID")  # splits a character
    assert error(mcp, "kb_read_evidence", {"evidence_id": stored["evidence_id"], "length": 65537}
                 ).startswith("LIMIT")
    assert error(mcp, "kb_read_evidence", {"evidence_id": sha(b"never stored")}).startswith("NOT_FOUND")
    assert error(mcp, "kb_ingest_evidence", {"base64": "not base64!"}).startswith("INVALID")
    assert error(mcp, "kb_ingest_evidence", {"text": "a", "base64": "YQ=="}).startswith("INVALID")
    assert error(mcp, "kb_ingest_evidence", {}).startswith("INVALID")


def test_path_evidence_is_read_only_inside_the_root(mcp: McpSession, evidence_root: Path) -> None:
    stored = ok(mcp, "kb_ingest_evidence", {"path": "recon/scan.jsonl", "media_type": "application/x-ndjson",
                                            "encoding": "utf-8", "source": "nuclei"})
    assert stored["evidence_id"] == sha((evidence_root / "recon" / "scan.jsonl").read_bytes())
    assert stored["index_state"] == "ready"
    absolute = ok(mcp, "kb_ingest_evidence", {"path": str(evidence_root / "recon" / "scan.jsonl"),
                                              "media_type": "application/x-ndjson"})
    assert absolute["evidence_id"] == stored["evidence_id"] and absolute["created"] is False
    assert error(mcp, "kb_ingest_evidence", {"path": "../outside/secret.txt"}).startswith("PATH_DENIED")
    assert error(mcp, "kb_ingest_evidence", {"path": "/etc/hostname"}).startswith("PATH_DENIED")
    assert error(mcp, "kb_ingest_evidence", {"path": "linked/secret.txt"}).startswith("PATH_DENIED")
    assert error(mcp, "kb_ingest_evidence", {"path": "recon/absent.txt"}).startswith("PATH_DENIED")


def _graph(mcp: McpSession) -> tuple[dict[str, Any], str]:
    proof = ok(mcp, "kb_ingest_evidence", {"text": "engine.retrieval imports engine.store"})["evidence_id"]
    written = ok(mcp, "kb_write", {
        "nodes": [
            {"type": "component", "properties": {"name": "engine.retrieval", "owner": {"team": "search"}},
             "label": "Retrieval", "evidence_add": [proof]},
            {"type": "component", "properties": {"name": "engine.store"}},
            {"type": "concept", "properties": {"name": "reciprocal rank fusion"}},
        ],
        "relations": [
            {"type": "depends_on", "source_ref": {"node_index": 0}, "target_ref": {"node_index": 1},
             "evidence_add": [proof]},
            {"type": "defines", "source_ref": {"node_index": 0}, "target_ref": {"node_index": 2}},
        ],
    })
    return written, proof


def test_write_creates_finds_again_and_patches_records(mcp: McpSession) -> None:
    written, proof = _graph(mcp)
    nodes = written["nodes"]
    assert [node["created"] for node in nodes] == [True, True, True]
    retrieval, store = nodes[0]["id"], nodes[1]["id"]
    assert written["relations"][0]["source_id"] == retrieval and written["relations"][0]["target_id"] == store
    # The same identity again is the stored node: a rescan, not a duplicate.
    again = ok(mcp, "kb_write", {"nodes": [{"type": "component", "properties": {"name": "engine.retrieval",
                                                                                 "language": "python"}}]})
    assert again["nodes"][0] == {"index": 0, "id": retrieval, "type": "component", "created": False}
    patched = ok(mcp, "kb_write", {"nodes": [{"id": retrieval, "properties": {"owner": {"lead": "ana"}},
                                              "remove_properties": ["/language"]}]})
    assert patched["nodes"][0]["created"] is False
    record = ok(mcp, "kb_get", {"kind": "nodes", "ids": [retrieval]})["records"][0]
    assert record["properties"] == {"name": "engine.retrieval", "owner": {"team": "search", "lead": "ana"}}
    assert record["evidence_ids"] == [proof] and record["label"] == "Retrieval"
    assert record["first_seen"].endswith("Z") and len(record["first_seen"]) == len("2026-12-02T10:00:00.000000Z")
    assert error(mcp, "kb_write", {"nodes": [{"id": retrieval, "remove_properties": ["/name"]}]}
                 ).startswith("INVALID: nodes[0]: property name is the node's identity")
    assert error(mcp, "kb_write", {"nodes": [{"type": "planet", "properties": {"name": "x"}}]}).startswith("INVALID")
    assert error(mcp, "kb_write", {"nodes": [{"type": "decision", "properties": {"name": "x"}}]}
                 ).startswith("INVALID")  # a decision is identified by its title
    assert error(mcp, "kb_write", {"relations": [{"type": "answers", "source_ref": {"id": retrieval},
                                                  "target_ref": {"id": store}}]}).startswith("INVALID")


def test_a_write_with_one_bad_item_writes_nothing(mcp: McpSession) -> None:
    said = error(mcp, "kb_write", {
        "nodes": [{"type": "concept", "properties": {"name": "atomicity"}}],
        "relations": [{"type": "relates_to", "source_ref": {"node_index": 0},
                       "target_ref": {"id": "00000000-0000-4000-8000-000000000000"}}],
    })
    assert said.startswith("NOT_FOUND: relations[0]")
    assert error(mcp, "kb_write", {"nodes": [{"type": "concept", "properties": {"name": "x"},
                                              "evidence_add": [sha(b"absent")]}]}).startswith("NOT_FOUND: nodes[0]")
    assert ok(mcp, "kb_search", {"kind": "nodes"})["results"] == []


def test_get_keeps_the_order_asked_and_names_the_missing(mcp: McpSession) -> None:
    written, proof = _graph(mcp)
    ids = [node["id"] for node in written["nodes"]]
    absent = "00000000-0000-4000-8000-000000000001"
    got = ok(mcp, "kb_get", {"kind": "nodes", "ids": [ids[2], absent, ids[0]]})
    assert [record["id"] for record in got["records"]] == [ids[2], ids[0]]
    assert got["missing_ids"] == [absent] and got["remaining_ids"] == []
    relation = ok(mcp, "kb_get", {"kind": "relations", "ids": [written["relations"][0]["id"]]})["records"][0]
    assert relation["type"] == "depends_on" and relation["evidence_ids"] == [proof]
    evidence = ok(mcp, "kb_get", {"kind": "evidence", "ids": [proof]})["records"][0]
    assert evidence["linked_records"] == 2 and evidence["index_state"] == "ready"
    links = ok(mcp, "kb_get", {"kind": "links", "id": proof, "limit": 1})
    assert len(links["links"]) == 1 and links["next_cursor"] is not None
    rest = ok(mcp, "kb_get", {"kind": "links", "id": proof, "limit": 1, "cursor": links["next_cursor"]})
    assert len(rest["links"]) == 1 and rest["next_cursor"] is None
    assert {links["links"][0]["record_id"], rest["links"][0]["record_id"]} == {ids[0],
                                                                              written["relations"][0]["id"]}


def test_search_pages_by_id_with_a_bound_cursor(mcp: McpSession) -> None:
    ok(mcp, "kb_write", {"nodes": [{"type": "note", "properties": {"title": f"finding {i:02d}", "n": i}}
                                   for i in range(25)]})
    first = ok(mcp, "kb_search", {"kind": "nodes", "type": "note"})
    assert len(first["results"]) == 20 and first["ordered_by"] == "id"  # the default page is 20
    ids = [row["id"] for row in first["results"]]
    assert ids == sorted(ids)
    second = ok(mcp, "kb_search", {"kind": "nodes", "type": "note", "cursor": first["next_cursor"]})
    assert len(second["results"]) == 5 and second["next_cursor"] is None
    assert not set(ids) & {row["id"] for row in second["results"]}
    # A cursor belongs to its selection: other filters with it are refused.
    assert error(mcp, "kb_search", {"kind": "nodes", "type": "concept", "cursor": first["next_cursor"]}
                 ).startswith("INVALID")
    literal = ok(mcp, "kb_search", {"kind": "nodes", "query": "finding 07"})
    assert [row["label"] for row in literal["results"]] == [None] and "finding 07" in literal["results"][0]["snippet"]
    ranked = ok(mcp, "kb_search", {"kind": "nodes", "query": "finding 07", "sort": "relevance"})
    assert ranked["next_cursor"] is None and ranked["ordered_by"] == "relevance"
    assert error(mcp, "kb_search", {"kind": "nodes", "sort": "relevance"}).startswith("INVALID")  # needs a query
    too_long = " ".join(["w"] * 33)
    assert error(mcp, "kb_search", {"query": too_long}).startswith("INVALID")


def test_neighbors_stay_within_their_budgets(mcp: McpSession) -> None:
    written, _ = _graph(mcp)
    retrieval, store, fusion = (node["id"] for node in written["nodes"])
    around = ok(mcp, "kb_neighbors", {"id": retrieval})
    assert {node["id"] for node in around["nodes"]} == {retrieval, store, fusion}
    assert around["truncated"] is False and around["reason"] is None and around["frontier"] == []
    out_of_store = ok(mcp, "kb_neighbors", {"id": store, "direction": "out"})
    assert out_of_store["relations"] == []
    small = ok(mcp, "kb_neighbors", {"id": retrieval, "max_nodes": 2})
    assert small["truncated"] is True and small["reason"] == "max_nodes" and small["frontier"] == [retrieval]
    shallow = ok(mcp, "kb_neighbors", {"id": store, "direction": "in", "max_depth": 1})
    assert [node["id"] for node in shallow["nodes"]] == [store, retrieval] and shallow["truncated"] is False
    typed = ok(mcp, "kb_neighbors", {"id": retrieval, "relation_types": ["defines"]})
    assert [relation["type"] for relation in typed["relations"]] == ["defines"]
    assert error(mcp, "kb_neighbors", {"id": "00000000-0000-4000-8000-000000000002"}).startswith("NOT_FOUND")
    assert error(mcp, "kb_neighbors", {"id": retrieval, "max_depth": 4}).startswith("LIMIT")


def test_delete_is_atomic_and_refuses_dependencies(mcp: McpSession) -> None:
    written, proof = _graph(mcp)
    retrieval, store, _ = (node["id"] for node in written["nodes"])
    absent = "00000000-0000-4000-8000-000000000003"
    assert error(mcp, "kb_delete", {"ids": [store, absent]}).startswith("NOT_FOUND")
    assert error(mcp, "kb_delete", {"ids": [store]}).startswith("CONFLICT: DEPENDENCIES_EXIST")
    assert error(mcp, "kb_delete", {"ids": [proof]}).startswith("CONFLICT: DEPENDENCIES_EXIST")
    assert error(mcp, "kb_delete", {"ids": [store, store]}).startswith("INVALID")
    assert len(ok(mcp, "kb_get", {"kind": "nodes", "ids": [store]})["records"]) == 1  # nothing went
    deleted = ok(mcp, "kb_delete", {"ids": [store], "cascade": True})
    assert deleted["status"] == "completed" and deleted["deleted"] == {"nodes": 1, "relations": 1, "evidence": 0}
    assert ok(mcp, "kb_get", {"kind": "nodes", "ids": [store]})["missing_ids"] == [store]
    gone = ok(mcp, "kb_delete", {"ids": [proof], "cascade": True})
    assert gone["deleted"]["evidence"] == 1
    assert ok(mcp, "kb_get", {"kind": "nodes", "ids": [retrieval]})["records"][0]["evidence_ids"] == []
    # Its indexed text went with it: no search finds deleted evidence.
    assert ok(mcp, "kb_search", {"kind": "evidence", "query": "imports engine.store"})["results"] == []


def test_types_list_the_catalogue_with_ready_counts(mcp: McpSession) -> None:
    _graph(mcp)
    first = ok(mcp, "kb_types", {"limit": 5})
    assert len(first["types"]) == 5 and first["next_cursor"] is not None
    every = ok(mcp, "kb_types", {"limit": 100})["types"]
    by_type = {(entry["kind"], entry["type"]): entry for entry in every}
    assert by_type[("nodes", "component")]["ready_count"] == 2
    assert by_type[("nodes", "component")]["identity"] == {"properties": ["name"]}
    assert by_type[("relations", "depends_on")]["ready_count"] == 1
    assert by_type[("evidence", "evidence")]["ready_count"] == 1
    one = ok(mcp, "kb_types", {"kind": "nodes", "type": "decision"})["types"]
    assert [entry["type"] for entry in one] == ["decision"] and one[0]["required"] == {"title": "string"}
    assert error(mcp, "kb_types", {"kind": "relations", "cursor": first["next_cursor"]}).startswith("INVALID")


def test_status_jobs_and_reindex(mcp: McpSession) -> None:
    _graph(mcp)
    status = ok(mcp, "kb_status")
    assert status["counts"]["nodes"] == 3 and status["counts"]["evidence"] == 1
    assert status["limits"]["page_default"] == 20 and status["limits"]["envelope_max_bytes"] == 256 * 1024
    rebuilt = ok(mcp, "kb_reindex")
    assert rebuilt["status"] == "completed"
    job = ok(mcp, "kb_jobs", {"action": "get", "job_id": rebuilt["job_id"]})
    assert job["kind"] == "kb_index" and job["status"] == "succeeded"
    listed = ok(mcp, "kb_jobs", {"limit": 1})
    assert len(listed["jobs"]) == 1
    assert ok(mcp, "kb_search", {"kind": "evidence", "query": "engine.store"})["results"]  # indexed again
    assert error(mcp, "kb_jobs", {"action": "get"}).startswith("INVALID")


def test_results_are_structured_as_well_as_text(mcp: McpSession) -> None:
    result = call_result(mcp, "kb_types", {"kind": "evidence"})
    assert result.structured_content is not None and result.structured_content["status"] == "ok"


def test_keys_a_search_key_reads_and_an_admin_key_queues_indexing(
        database_url: str, reader_pool: ConnectionPool, session_pool: ConnectionPool, model_cache: Path,
        tmp_path: Path) -> None:
    # database_url empties the job queue: `quarry jobs run` below runs every queued job, and another module on
    # this worker may have left one (test_mcp_fuzz queues an ingest of a path that does not exist)
    search_key = api_keys.create_key(session_pool, "kb-search", ["search"]).secret
    admin_key = api_keys.create_key(session_pool, "kb-admin", ["search", "admin"]).secret
    backend = StaticBackend(Settings(database_url=database_url, tools="kb"), reader_pool)
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False))
    with serving(app) as url:
        with mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {search_key}"})) as reader:
            assert {tool.name for tool in reader.list_tools()} == CONTRACT_TOOLS - {
                "kb_write", "kb_delete", "kb_ingest_evidence", "kb_reindex"}
            assert error(reader, "kb_write", {"nodes": [{"type": "concept", "properties": {"name": "x"}}]}
                         ).startswith("CONFIGURATION")
        with mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {admin_key}"})) as admin:
            stored = ok(admin, "kb_ingest_evidence", {"text": "a queued platypus"})
            assert stored["status"] == "accepted" and stored["index_state"] == "pending"
            env = {**os.environ, "DATABASE_URL": database_url, "QUARRY_MODEL_CACHE": str(model_cache),
                   "QUARRY_HOME": str(tmp_path)}
            ran = subprocess.run([sys.executable, "-m", "engine.cli", "jobs", "run"], cwd=REPO, env=env,
                                 capture_output=True, text=True, timeout=300)
            assert ran.returncode == 0, ran.stderr
            job = ok(admin, "kb_jobs", {"action": "get", "job_id": stored["job_id"]})
            assert job["status"] == "succeeded"
            found = ok(admin, "kb_search", {"kind": "evidence", "query": "platypus"})
            assert [row["id"] for row in found["results"]] == [stored["evidence_id"]]


# -- hostile calls: every kb tool answers in the contract's envelope, never INTERNAL -------------------------

HOSTILE = ["", " ", "'; drop table quarry.kb_records; --", "%", "_", "\\", "$$", "a & b | !c", "é" * 300,
           "\u202e", "a\x00b", "/", "~1", "/a/~0/0", "e_" + "f" * 64, "e_" + "F" * 64,
           "00000000-0000-4000-8000-000000000000", "00000000-0000-4000-8000-00000000000G", "null", "1e309"]


def _hostile_value() -> Any:
    from hypothesis import strategies as st

    # No lone surrogates: the SDK's HTTP client cannot encode them (test_mcp_fuzz sends them as raw JSON escapes).
    scalar = st.one_of(st.sampled_from(HOSTILE), st.text(st.characters(exclude_categories=("Cs",)), max_size=30),
                       st.integers(min_value=-2**70, max_value=2**70),
                       st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none())
    return st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.sampled_from(
                                                              ["id", "type", "name", "title", "node_index",
                                                               "properties", "/x", ""]), inner, max_size=4)),
                        max_leaves=12)


def test_hostile_calls_get_the_contract_envelope(migrated_url: str, reader_pool: ConnectionPool,
                                                 local_embedder: Embedder, evidence_root: Path,
                                                 tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    backend = StaticBackend(Settings(database_url=migrated_url, tools="kb", kb_root=evidence_root, home=tmp_path),
                            reader_pool, {TEXT_SPACE: local_embedder, CODE_SPACE: local_embedder})
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        schemas = {tool.name: tool.input_schema for tool in session.list_tools()}

        @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
        @given(st.data())
        def call(data: st.DataObject) -> None:
            tool = data.draw(st.sampled_from(sorted(schemas)))
            names = [*sorted(schemas[tool].get("properties", {})), "unknown_field"]
            chosen = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
            arguments = {name: data.draw(_hostile_value()) for name in chosen}
            reply = session.call(tool, arguments)
            body = reply.body
            if reply.is_error:
                assert body["status"] == "error" and isinstance(body["error"], str), body
                code = body["error"].split(":", 1)[0]
                assert code in CONTRACT_CODES - {"INTERNAL"}, (tool, arguments, body)
            else:
                assert body["status"] == "ok", body

        call()


def test_search_filters_records_by_exact_properties(mcp: McpSession) -> None:
    written, _ = _graph(mcp)
    retrieval = written["nodes"][0]["id"]
    by_team = ok(mcp, "kb_search", {"kind": "nodes", "properties": {"owner": {"team": "search"}}})
    assert [row["id"] for row in by_team["results"]] == [retrieval]  # nested objects match by containment
    named = ok(mcp, "kb_search", {"kind": "nodes", "type": "component", "properties": {"name": "engine.store"}})
    assert [row["id"] for row in named["results"]] == [written["nodes"][1]["id"]]
    assert ok(mcp, "kb_search", {"kind": "nodes", "properties": {"name": "ENGINE.STORE"}})["results"] == []  # exact
    assert ok(mcp, "kb_search", {"kind": "nodes", "properties": {"owner": "search"}})["results"] == []
    assert error(mcp, "kb_search", {"kind": "evidence", "properties": {"name": "x"}}).startswith("INVALID")
    assert error(mcp, "kb_search", {"kind": "nodes", "properties": {}}).startswith("INVALID")
