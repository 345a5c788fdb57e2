"""Version-aware retrieval through the MCP client: strict keeps only satisfying content,
permissive drops breaking mismatches and demotes the rest, and an empty strict search
lists the indexed versions instead of substituting one."""

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
from tests.corpus import write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving

LEDGER = "Increment the counter ledger from a circuit: call `increment` on the `Counter` ledger field."
# Shares fewer words with the query than LEDGER does: the versioned near miss stays the best match.
PARAPHRASE = "A Counter field grows by one when a circuit calls increment on it."
COMPACT_DOCS = {
    # The best lexical and semantic match, written for 0.17.0: a near miss for >=0.17.2 <0.18.
    "guide/near-miss.md": "# Counter ledger increment\n\n" + LEDGER * 3 + "\n\n```compact\n"
                          "pragma language_version 0.17.0;\nledger counter: Counter;\n```\n",
    "guide/current.md": "---\nversion: \">=0.17.2 <0.18\"\n---\n# Counters\n\n" + PARAPHRASE + "\n",
    "guide/compatible.md": "---\nversion: \">=0.16\"\n---\n# Fields\n\n" + PARAPHRASE + "\n",
    "guide/old.md": "---\nversion: 0.15\n---\n# Counter ledger increment (old)\n\n" + LEDGER * 3 + "\n",
    "guide/unversioned.md": "# Notes\n\n" + PARAPHRASE + "\n",
}
RUNTIME = "@midnight-ntwrk/compact-runtime"
APP = {
    "package.json": json.dumps({"name": "app", "dependencies": {RUNTIME: "^0.8.1", "left-pad": "^1.3.0"}}),
    "src/counter.ts": "// Increment the counter ledger with the compact runtime\n"
                      "export function incrementCounter() {}\n",
    "examples/next/package.json": json.dumps({"name": "next", "dependencies": {RUNTIME: "^0.9.0"}}),
    "examples/next/counter.ts": "// Increment the counter ledger with the compact runtime\n"
                                "export function incrementCounterNext() {}\n",
    "examples/mixed/package.json": json.dumps({"name": "mixed",
                                               "dependencies": {RUNTIME: "^0.9.0", "other-lib": "0.8.5"}}),
    "examples/mixed/counter.ts": "// Increment the counter ledger with the compact runtime\n"
                                 "export function incrementCounterMixed() {}\n",
}


@pytest.fixture(scope="module")
def mcp(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("versions")
    ingestor = Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(root / "docs", COMPACT_DOCS), SourceSpec(slug="compact-docs", kind="docs_site"))
    ingestor.ingest(write_corpus(root / "app", APP), SourceSpec(slug="app", kind="code_repo"))
    backend = StaticBackend(Settings(database_url=migrated_url), session_pool, dict.fromkeys(SPACES, local_embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def _search(mcp: McpSession, filters: dict[str, Any], version_match: str, query: str = LEDGER) -> dict[str, Any]:
    return mcp.ok("advanced_search", {"queries": [query], "filters": filters, "version_match": version_match,
                                      "limit": 20})


def _paths(body: dict[str, Any]) -> list[str]:
    return [result["path"] for result in body["results"]]


def test_the_near_miss_is_the_best_match_without_a_version_rule(mcp: McpSession) -> None:
    body = _search(mcp, {"source_slug": {"any_of": ["compact-docs"]}}, "permissive")
    assert _paths(body)[0] in {"guide/near-miss.md", "guide/old.md"}


def test_strict_keeps_only_content_that_satisfies_the_range(mcp: McpSession) -> None:
    body = _search(mcp, {"language_target": {"version_satisfies": ">=0.17.2 <0.18"}}, "strict")
    assert set(_paths(body)) == {"guide/current.md", "guide/compatible.md"}
    matches = {result["path"]: result["version_match"] for result in body["results"]}
    assert matches == {"guide/current.md": "exact", "guide/compatible.md": "compatible"}
    assert body["results"][0]["path"] == "guide/current.md"
    for result in body["results"]:
        assert result["confidence_factors"]["version_match"]["raw"] == result["version_match"]


def test_strict_holds_within_a_source_filter(mcp: McpSession) -> None:
    # a filter that leaves a source out: the keyword leg checks its postings against the chunks that pass
    body = _search(mcp, {"source_slug": {"any_of": ["compact-docs"]},
                         "language_target": {"version_satisfies": ">=0.17.2 <0.18"}}, "strict")
    assert set(_paths(body)) == {"guide/current.md", "guide/compatible.md"}
    assert all(result["fts_rank"] is not None for result in body["results"])


def test_permissive_drops_breaking_mismatches_and_demotes_near_misses(mcp: McpSession) -> None:
    body = _search(mcp, {"language_target": {"version_satisfies": ">=0.17.2 <0.18"}}, "permissive")
    paths = _paths(body)
    assert "guide/old.md" not in paths  # 0.15: a different (breaking) line
    assert {"guide/near-miss.md", "guide/current.md", "guide/compatible.md", "guide/unversioned.md"} <= set(paths)
    match = {result["path"]: result for result in body["results"]}
    assert match["guide/near-miss.md"]["version_match"] == "mismatch"
    assert match["guide/unversioned.md"]["version_match"] == "unknown"
    assert paths.index("guide/current.md") < paths.index("guide/near-miss.md")
    assert match["guide/near-miss.md"]["trust_score"] < match["guide/current.md"]["trust_score"]


def test_manifest_constraints_govern_their_directories(mcp: McpSession) -> None:
    rule = {"sdk_dependency": {"any_of": [RUNTIME], "version_satisfies": ">=0.8 <0.9"}}
    query = "increment the counter ledger with the compact runtime"
    strict = _search(mcp, rule, "strict", query)
    assert "src/counter.ts" in _paths(strict)
    assert not {"examples/next/counter.ts", "examples/mixed/counter.ts"} & set(_paths(strict))
    permissive = _search(mcp, rule, "permissive", query)
    # ^0.9.0 is a breaking line away from 0.8; the docs source declares no such dependency at all
    assert "src/counter.ts" in _paths(permissive)
    assert {"examples/next/counter.ts", "examples/mixed/counter.ts"}.isdisjoint(_paths(permissive))
    assert all(result["source"]["slug"] == "app" for result in permissive["results"])


def test_the_package_and_the_range_hold_for_the_same_dependency(mcp: McpSession) -> None:
    # examples/mixed depends on other-lib 0.8.5 and on the runtime ^0.9: no single dependency matches
    body = _search(mcp, {"sdk_dependency": {"any_of": [RUNTIME], "version_satisfies": "0.8.5"}}, "strict",
                   "increment counter mixed")
    assert "examples/mixed/counter.ts" not in _paths(body)


def test_an_empty_strict_search_lists_the_indexed_versions(mcp: McpSession) -> None:
    body = _search(mcp, {"language_target": {"version_satisfies": "<0.10"}}, "strict")
    assert body["results"] == []
    written = {item["as_written"] for item in body["version_hint"]}
    assert written == {"0.15", "pragma language_version 0.17.0;", ">=0.17.2 <0.18", ">=0.16"}
    assert all(item["facet"] == "language_target" and item["documents"] >= 1 for item in body["version_hint"])
    assert any("no other version was substituted" in note for note in body["notes"])
    package = _search(mcp, {"sdk_dependency": {"any_of": [RUNTIME], "version_satisfies": "^2"}}, "strict")
    assert package["results"] == [] and {item["name"] for item in package["version_hint"]} == {RUNTIME}


def test_version_facets_list_languages_and_packages(mcp: McpSession) -> None:
    facets = mcp.ok("facets", {"facet": "sdk_dependency"})["facets"]["sdk_dependency"]["values"]
    assert {item["value"] for item in facets} >= {RUNTIME, "left-pad", "other-lib"}
    compact = mcp.ok("facets", {"facet": "language_target"})["facets"]["language_target"]["values"]
    assert {item["value"] for item in compact} == {"compact"}


def test_a_malformed_range_is_invalid(mcp: McpSession) -> None:
    reply = mcp.call("advanced_search", {"queries": ["x"],
                                         "filters": {"language_target": {"version_satisfies": "^^1"}}})
    assert reply.error["code"] == "INVALID"
    assert reply.error["problems"][0]["path"] == "filters.language_target.version_satisfies"


def test_source_version_applies_where_documents_state_none(mcp: McpSession, migrated_url: str) -> None:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("select quarry.set_source_version('compact-docs', '0.17.5')")
    try:
        body = _search(mcp, {"language_target": {"version_satisfies": ">=0.17.2 <0.18"}}, "strict")
        assert "guide/unversioned.md" in _paths(body)
    finally:
        with psycopg.connect(migrated_url, autocommit=True) as conn:
            conn.execute("select quarry.set_source_version('compact-docs', null)")
