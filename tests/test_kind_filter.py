"""The ``chunk_kind`` filter (definition, module, example, prose): in each leg, count, facets, grep and MCP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.corpus.facets import facet_values
from engine.embed.base import SPACES, Embedder
from engine.ingest.parsers.code import module_path
from engine.ingest.sources import SourceSpec
from engine.retrieval.counting import count_documents
from engine.retrieval.grep import grep
from engine.vocabulary import CHUNK_KINDS
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.corpus import ingest_alone, write_corpus
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.searching import search

BIG_EXAMPLE = "\n".join(f"items_{i} = build_index(concurrently=True, rows={i})" for i in range(240))
FILES = {
    "pkg/__init__.py": "from pkg.store import Store\n\nVERSION = '1.0'\n",
    "pkg/store.py": '''"""A store."""

import json

LIMIT = 10


class Store:
    """Keeps rows."""

    size = 3

    def connect(self) -> None:
        """Connect the store to its rows."""
        self.rows = json.loads("[]")


def store(value: int) -> int:
    """Store a value."""
    return value
''',
    "src/main/java/com/acme/Client.java": '''package com.acme;

import java.util.List;

public class Client {
    private int retries = 3;

    public void connect() {
        System.out.println("connect");
    }
}
''',
    "native/mod.rs": "use std::io;\n\nconst MAX: u32 = 4;\n\nfn helper() -> u32 {\n    MAX\n}\n",
    "types/index.d.ts": "import { Base } from './base';\n\nexport interface Options {\n  verbose: boolean;\n}\n",
    # a long code block has chunks of its own (code throughout); a short one shares its section's chunk
    "docs/building.md": f"# Building indexes\n\nBuild an index without locking writes.\n\n"
                        f"```python\n{BIG_EXAMPLE}\n```\n",
    "docs/locks.md": "# Locks\n\nBuilding an index without locking writes waits for running transactions; "
                     "an index built that way takes longer.\n",
}
#: (path, symbol_path) -> kind, as the parsers chunk FILES (checked below against their chunks)
SOURCE_KINDS: dict[tuple[str, str | None], str] = {
    ("pkg/__init__.py", "pkg"): "module",
    ("pkg/store.py", "pkg.store"): "module",
    ("pkg/store.py", "pkg.store.Store"): "definition",
    ("pkg/store.py", "pkg.store.Store.connect"): "definition",
    ("pkg/store.py", "pkg.store.store"): "definition",  # named like its module: still a definition
    ("src/main/java/com/acme/Client.java", "com.acme.Client"): "module",  # the file's class is its module
    ("src/main/java/com/acme/Client.java", "com.acme.Client.connect"): "definition",
    ("native/mod.rs", "native"): "module",
    ("native/mod.rs", "native.helper"): "definition",
    ("types/index.d.ts", "types.index"): "module",
    ("types/index.d.ts", "types.index.Options"): "definition",
}


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> ConnectionPool:
    ingest_alone(migrated_url, session_pool, local_embedder, write_corpus(tmp_path_factory.mktemp("kinds"), FILES),
                 SourceSpec(slug="kinds", kind="code_repo"))
    return session_pool


def _kinds(pool: ConnectionPool) -> list[tuple[str, str | None, str]]:
    with pool.connection() as conn:
        rows = conn.execute(
            "select d.path, c.symbol_path, quarry.chunk_kind(c.is_code, c.content_type, c.symbol_path, d.path)"
            " from quarry.chunks c join quarry.documents d on d.id = c.document_id order by d.path, c.ordinal"
        ).fetchall()
    return [(path, symbol, kind) for path, symbol, kind in rows]


def test_every_chunk_has_one_kind(corpus: ConnectionPool) -> None:
    rows = _kinds(corpus)
    sources = {(path, symbol): kind for path, symbol, kind in rows if not path.startswith("docs/")}
    assert sources == SOURCE_KINDS
    docs = [kind for path, _, kind in rows if path == "docs/building.md"]
    assert docs[0] == "prose" and set(docs[1:]) == {"example"} and len(docs) > 2
    assert {kind for path, _, kind in rows if path == "docs/locks.md"} == {"prose"}


@pytest.mark.parametrize("path", [
    "a/b/c.py", "pkg/__init__.py", "pkg/__init__.pyi", "__init__.py", "setup.py", "lib/mod.rs", "src/lib.rs",
    "types/index.d.ts", "types/index.d.mts", "web/app.test.ts", "x.y/z.js", "Makefile", "sql/015-filters.sql",
    "deep/mod/mod.py", "a/__init__/b.py",
])
def test_the_module_a_code_parser_names_is_the_files_module_in_sql(corpus: ConnectionPool, path: str) -> None:
    module = module_path(path)
    with corpus.connection() as conn:
        row = conn.execute("select quarry.file_module(%s), quarry.chunk_kind(true, 'code', %s, %s),"
                           " quarry.chunk_kind(true, 'code', %s, %s)",
                           (path, module, path, f"{module}.run", path)).fetchone()
    assert row == (module, "module", "definition"), path


def test_chunk_kind_applies_inside_each_leg(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    query = "connect the store"
    for mode in ("hybrid", "vector", "fts"):
        embedder = None if mode == "fts" else local_embedder
        definitions = search(corpus, embedder, query, mode=mode, limit=20, per_document=None,
                             filters={"chunk_kind": {"any_of": ["definition"]}})
        assert definitions and all(SOURCE_KINDS.get((hit.path, hit.symbol_path)) == "definition"
                                   for hit in definitions), mode
        prose = search(corpus, embedder, query, mode=mode, limit=20, per_document=None,
                       filters={"chunk_kind": {"none_of": ["definition", "module", "example"]}})
        assert all(not hit.is_code for hit in prose), mode


def test_the_vector_leg_filters_kinds_before_its_top_k(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    # one candidate per leg: the nearest chunk overall is prose, yet an example is found
    query = "build an index without locking writes"
    (nearest,) = search(corpus, local_embedder, query, mode="vector", limit=1, candidates=1, per_document=None)
    assert not nearest.is_code
    (example,) = search(corpus, local_embedder, query, mode="vector", limit=1, candidates=1, per_document=None,
                        filters={"chunk_kind": {"any_of": ["example"]}})
    assert example.path == "docs/building.md" and example.is_code


def test_the_keyword_leg_filters_kinds_before_its_top_k(corpus: ConnectionPool) -> None:
    query = "index without locking writes"
    (first,) = search(corpus, None, query, mode="fts", limit=1, candidates=1, per_document=None)
    assert not first.is_code
    found = search(corpus, None, query, mode="fts", limit=1, candidates=1, per_document=None,
                   filters={"chunk_kind": {"any_of": ["example"]}})
    assert [hit.path for hit in found] == ["docs/building.md"]


def test_counting_documents_by_kind(corpus: ConnectionPool) -> None:
    def counted(kinds: list[str]) -> int:
        with corpus.connection() as conn:
            row = conn.execute("select quarry.count_filtered_documents(%s::jsonb)",
                               (json.dumps({"chunk_kind": {"any_of": kinds}}),)).fetchone()
        assert row is not None
        return int(row[0])

    assert counted(["example"]) == 1
    assert counted(["definition"]) == 4  # store.py, Client.java, mod.rs, index.d.ts
    assert counted(["prose"]) == 2


def test_counting_by_kind_applies_in_the_keyword_leg(corpus: ConnectionPool) -> None:
    counted = count_documents(corpus, "connect", filters={"chunk_kind": {"any_of": ["module"]}})
    assert counted.count == 0  # "connect" is only in definitions (and the Java class's own body: not a module)


def test_facets_count_documents_per_kind_when_asked(corpus: ConnectionPool) -> None:
    every = facet_values(corpus)
    assert "chunk_kind" not in {summary.facet for summary in every}
    (kinds,) = facet_values(corpus, ["chunk_kind"])
    counts = {count.value: count.documents for count in kinds.values}
    assert counts == {"definition": 4, "module": 5, "example": 1, "prose": 2}
    assert [count.value for count in kinds.values] == ["module", "definition", "prose", "example"]
    (narrowed,) = facet_values(corpus, ["chunk_kind"], filters={"path": {"any_of": ["pkg/**"]},
                                                                 "chunk_kind": {"none_of": ["module"]}})
    assert {count.value: count.documents for count in narrowed.values} == dict.fromkeys(CHUNK_KINDS, 0) | {
        "definition": 1}
    (documents,) = facet_values(corpus, ["content_type"], filters={"chunk_kind": {"any_of": ["example"]}})
    assert {count.value: count.documents for count in documents.values}["markdown"] == 1


def test_grep_matches_lines_of_chunks_of_the_kind(corpus: ConnectionPool) -> None:
    every = grep(corpus, "connect", case_sensitive=False)
    assert {match.path for match in every.matches} == {"pkg/store.py", "src/main/java/com/acme/Client.java"}
    definitions = grep(corpus, "connect", case_sensitive=False, filters={"chunk_kind": {"any_of": ["definition"]}})
    assert definitions.matches and len(definitions.matches) == len(every.matches)
    modules = grep(corpus, "import", filters={"chunk_kind": {"any_of": ["module"]}})
    assert {match.path for match in modules.matches} == {"pkg/__init__.py", "pkg/store.py", "types/index.d.ts",
                                                          "src/main/java/com/acme/Client.java"}
    assert grep(corpus, "import", filters={"chunk_kind": {"any_of": ["definition"]}}).matches == []
    examples = grep(corpus, "build_index(", filters={"chunk_kind": {"any_of": ["example"]}}, limit=5)
    assert len(examples.matches) == 5 and {match.path for match in examples.matches} == {"docs/building.md"}


# --- through MCP -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp(corpus: ConnectionPool, migrated_url: str, local_embedder: Embedder) -> Iterator[McpSession]:
    backend = StaticBackend(Settings(database_url=migrated_url), corpus, dict.fromkeys(SPACES, local_embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def test_the_tools_take_a_closed_chunk_kind(mcp: McpSession, tmp_path: Path) -> None:
    tools = {tool.name: tool for tool in mcp.list_tools()}
    rule = tools["advanced_search"].input_schema["$defs"]["ChunkKindRule"]
    assert rule["properties"]["any_of"]["items"]["enum"] == list(CHUNK_KINDS)
    for name in ("advanced_search", "count", "query_documents", "grep", "facets", "guided_query"):
        assert "chunk_kind" in tools[name].input_schema["$defs"]["Filters"]["properties"], name

    found = mcp.ok("advanced_search", {"queries": ["connect the store"], "limit": 10,
                                       "filters": {"chunk_kind": {"any_of": ["definition"]}}})
    assert found["results"] and all(SOURCE_KINDS[(row["path"], row["symbol_path"])] == "definition"
                                    for row in found["results"])
    assert found["filters"] == {"chunk_kind": {"any_of": ["definition"]}}
    wrong = mcp.call("advanced_search", {"queries": ["x"], "filters": {"chunk_kind": {"any_of": ["function"]}}})
    problem = wrong.error["problems"][0]
    assert wrong.error["code"] == "INVALID" and problem["path"] == "filters.chunk_kind.any_of[0]"
    assert "definition" in problem["rule"]
    facets = mcp.ok("facets", {"facet": "chunk_kind"})["facets"]["chunk_kind"]
    assert facets["set"] == "fixed" and {value["value"] for value in facets["values"]} == set(CHUNK_KINDS)
    lines = mcp.ok("grep", {"pattern": "import", "filters": {"chunk_kind": {"any_of": ["module"]}}})
    assert lines["matches"] and all(match["path"] != "docs/building.md" for match in lines["matches"])
    documents = mcp.ok("query_documents", {"query_text": "build an index concurrently", "top_k": 3,
                                           "filters": {"chunk_kind": {"any_of": ["example"]}}})
    assert [document["path"] for document in documents["documents"]] == ["docs/building.md"]
