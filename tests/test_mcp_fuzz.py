"""Hostile input against every MCP tool: hypothesis-generated arguments never yield ``INTERNAL``,
a traceback or a change to stored data, and malformed JSON-RPC never yields an HTTP 500.

The server runs as production does: streamable HTTP, API keys required, the read-only
database role. Arguments come from each tool's published JSON schema: valid-shaped
calls carrying hostile strings (SQL injection, tsquery and regex metacharacters, NUL,
lone surrogates, node-semver edge cases, forged cursors), then one mutation: a wrong
type, an unknown field, a missing field, 50+ levels of nesting or a string near the
1 MiB request bound. Arguments JSON cannot carry as the SDK client writes it (NaN,
lone surrogates) go as raw JSON-RPC.

Writes: the fuzzing key has scope ``search``, so every write (``jobs`` cancel/retry,
``vector_add``, ``vector_delete``) must answer ``UNAUTHORIZED`` or ``INVALID``, and
every table but the key and rate-limit bookkeeping must be byte-identical afterwards.
The write tools are then fuzzed once more with an ``admin`` key, where only the corpus
tables (not jobs or vector stores, which those tools exist to change) must stay put.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError
from psycopg import sql
from psycopg_pool import ConnectionPool

from engine.admin.jobs import JobRun
from engine.admin.jobs import encode_cursor as jobs_cursor
from engine.config import Settings
from engine.corpus.documents import encode_cursor as document_cursor
from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.store import api_keys
from engine.store.db import READER_ROLE, open_pool
from engine.store.vector_stores import add_vector
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from mcp_server.limits import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES
from mcp_server.ratelimit import RatePolicy
from mcp_server.tools import all_tools
from tests.corpus import FILES, write_corpus
from tests.mcp_harness import McpSession, StaticBackend, ToolReply, http_transport, mcp_session, rpc, serving

TOOLS = [spec.name for spec in all_tools()]
WRITE_TOOLS = ("jobs", "vector_add", "vector_delete")
#: Codes a hostile call may get; INTERNAL (a bug) and UNAVAILABLE (a query the input made too slow) may not.
EXPECTED_CODES = frozenset({"INVALID", "LIMIT", "NOT_FOUND", "UNAUTHORIZED", "FLOW_GATE"})
#: Tables that change on every keyed call by design (key use, token buckets): not stored data.
BOOKKEEPING = frozenset({"api_keys", "rate_limit_buckets"})
#: What an admin's vector_add / vector_delete / jobs cancel and retry exist to change.
WRITABLE = frozenset({"jobs", "vector_stores", "store_vectors", "vector_namespaces"})
#: More examples for a deeper hunt than the suite's ~60 s budget allows: QUARRY_FUZZ_SCALE=10 pytest ...
SCALE = float(os.environ.get("QUARRY_FUZZ_SCALE", "1"))
RATE = RatePolicy(per_minute=1e9, burst=1e9)  # metered like production, never refused here
STORE, DIMENSION = "fuzz", 3

VERSIONED = {
    "package.json": json.dumps({"name": "app", "dependencies": {"@scope/runtime": "^0.8.1", "left-pad": "1.3.0"}}),
    "src/counter.ts": "// Increment the counter with the runtime\nexport function incrementCounter() {}\n",
    "guide/current.md": "---\nversion: \">=0.17.2 <0.18\"\n---\n# Counters\n\nA counter grows by one.\n",
}

# --- hostile text -------------------------------------------------------------------------------------------------

INJECTION = [
    "'; drop table quarry.chunks; --", "' or '1'='1", "\" or 1=1 --", "$$", "$q$ select 1 $q$", "\\x00", "E'\\'",
    "'); select pg_sleep(30); --", "1; truncate quarry.sources cascade", "%s", "%(query)s", "{}", "{0}", "\\",
    "\\\\", "';copy quarry.chunks to '/tmp/x';--", "/* */", "--", "\x00", "a\x00b", "\\u0000", "null", "NULL",
]
TSQUERY = [
    "&", "|", "!", "(", ")", ":", "*", "'", "\"", "<", ">", "~", "^", "$", "[", "]", "a & b", "!!a", "a:*", ":*",
    "a <-> b", "a <1> b", "a <99999> b", "(((", ")))", "'a' & 'b'", "&&||!!", "a:ABCD", "a:Z", "!(", "<->",
    "foo:* & !bar | (baz <2> qux)", "a & (b | !c)",
]
REGEX = [
    ".*", "(a+)+$", "[", "(?", "[[:alpha:]", "a{1,99999}", "^$", "%", "_", "\\d+", "(?<x>", "*+?", "\\1", "[^]",
    "[z-a]", "(?i)", "\\E\\Q",
]
SEMVER = [
    "^", "~", ">=", "<", "1.2.3 - ", " - 2", "||", "|| ||", "x", "*", "X.x.*", "99999999999999999999",
    "9007199254740992", "0.0.9007199254740992", "1.2.3-", "v1.2.3", "=1", "^0.0.0-0", ">=1 <", "1.2.3+build.1",
    "1.x.x.x", "~>1.2", "^1.2.3-alpha.99999999999999999999", "1.2.3 || || 2", "<=>1", "1.2.3-\u03b1", ">1.2.3 <1.2.3",
    "1.2.3-" + "a." * 60 + "b", "^" * 150, "1.2.3 - 4.5.6 - 7", "^0.8", ">=0.15", "0.17.2", "1 - 2 || >=3 <4",
    "1.2.3-0.0000001", "01.02.03", "-1.2.3", "1.2.-3", "1.2.3.4", "~1.2.3-beta.2", "^1.2.3 || ^", ">=1.0.0-rc.1",
    "1.2.3-+", "1.2.3+", "1e3", "0x10", "1.2.3 \t 4.5.6",
]
UNICODE = [
    "\u202e", "\ufeff", "é", "e\u0301", "\U0010ffff", "\U0001d518\U0001d52b\U0001d526", "日本語のクエリ",
    "\u0000\u0001\u001f", "\u2028\u2029", "\ud800", "\udfff", "a\ud83db", "\ufffe\uffff", "Ω" * 300,
]
PLAIN = ["partial index", "parse user id", "how many documents mention pg_dump", "counter", "index", "a", " x "]
HOSTILE_PIECES = [*INJECTION, *TSQUERY, *REGEX, *SEMVER, *UNICODE, *PLAIN]

#: Plausible values per field name, so generated calls get past the schema into the engine and SQL.
FIELD_VALUES: dict[str, list[str]] = {
    "source": ["sample", "app", "nope"], "source_slug": ["sample", "app"], "store_name": [STORE, "default", "x.y"],
    "namespace": ["ns", "tenant-1"], "id": ["v1", "v2"], "version_satisfies": SEMVER, "path": ["docs/indexes.md"],
    "any_of": ["python", "sample", "@scope/runtime", "left-pad", "markdown", "typescript"],
    "none_of": ["python", "sample", "@scope/runtime"], "prefix": ["p", "@", "%", "_", "\\"],
    "rerank_instructions": ["prefer reference pages"],
}


def hostile_text() -> st.SearchStrategy[str]:
    """Strings that have broken parsers before: metacharacters, payloads, odd Unicode, mixes of them."""
    pieces = st.sampled_from(HOSTILE_PIECES)
    return st.one_of(
        pieces,
        st.lists(pieces, min_size=2, max_size=6).map(" ".join),
        st.lists(pieces, min_size=2, max_size=6).map("".join),
        st.text(alphabet=st.sampled_from(list("&|!():*\\'\"<>~^$[]{}%_.-+ \x00\t\n")), min_size=1, max_size=40),
        st.text(max_size=60),  # any code point, surrogates included
    )


def huge_text() -> st.SearchStrategy[str]:
    """A string of up to ~0.9 MiB as JSON (under the request bound), built without drawing every character."""
    return st.builds(lambda piece, size: piece * (size // (len(json.dumps(piece)) - 2) + 1),
                     st.sampled_from(["x", "ab ", "'; drop table x; --", "é", "\x00", "a & b | "]),
                     st.integers(min_value=1_001, max_value=900_000))


def deep_value(depth: int, in_object: bool) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value} if in_object else [value]
    return value


def deep_nesting() -> st.SearchStrategy[Any]:
    return st.builds(deep_value, st.integers(min_value=50, max_value=120), st.booleans())


WRONG_TYPES: list[Any] = [None, True, False, 0, -1, 2**31, 2**63, -(2**70), 1.5, -0.0, 1e308, "5", "true", "",
                          [], [None], ["x"], {}, {"any_of": 1}, {"$ne": 1}]


def wrong_value() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(WRONG_TYPES).map(copy.deepcopy), deep_nesting(), hostile_text(), huge_text())


def json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=False, allow_infinity=False), hostile_text())
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text(), inner,
                                                                                             max_size=3),
                        max_leaves=8)


# --- arguments from a tool's JSON schema --------------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    """Real ids and cursors, so hostile calls also reach rows that exist."""

    document_ids: list[str]
    chunk_ids: list[str]
    job_ids: list[str]
    cursors: list[str]


def for_schema(schema: Mapping[str, Any], defs: Mapping[str, Any], known: Known,
               field: str = "") -> st.SearchStrategy[Any]:
    """Values shaped like ``schema`` (ignoring its bounds: out-of-range values are wanted too), hostile inside."""
    if "$ref" in schema:
        return for_schema(defs[schema["$ref"].rsplit("/", 1)[1]], defs, known, field)
    if "anyOf" in schema:
        return st.one_of(*(for_schema(option, defs, known, field) for option in schema["anyOf"]))
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), st.sampled_from(schema["enum"]), hostile_text())
    kind = schema.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low, high = schema.get("minimum", -(2**31)), schema.get("maximum", 2**31)
        return st.one_of(st.integers(low, high), st.integers(low, high),
                         st.sampled_from([low - 1, high + 1, 0, -1, 2**31, 2**32 - 1, 2**63, 2**64, -(2**63) - 1]))
    if kind == "number":
        return st.one_of(st.floats(-10, 10, allow_nan=False), st.floats(allow_nan=False, allow_infinity=False),
                         st.sampled_from([0.0, -0.0, 5e-324, 1e308, -1e308, 3.4e38, 1e39]))
    if kind == "string":
        if schema.get("format") == "uuid":
            odd_forms = ["00000000-0000-0000-0000-000000000000", "{" + str(uuid.UUID(int=1)) + "}",
                         uuid.UUID(int=2).hex, "urn:uuid:" + str(uuid.UUID(int=3))]
            return st.one_of(st.sampled_from(known.document_ids + known.chunk_ids + known.job_ids),
                             st.uuids().map(str), st.sampled_from(odd_forms), hostile_text())
        if field == "cursor":
            return st.one_of(st.sampled_from(known.cursors), hostile_text())
        plausible = FIELD_VALUES.get(field, PLAIN)
        return st.one_of(st.sampled_from(plausible), st.sampled_from(plausible), hostile_text(),
                         st.tuples(st.sampled_from(plausible), hostile_text()).map("".join))
    if kind == "array":
        items = for_schema(schema.get("items", {}), defs, known, field)
        if schema.get("items", {}).get("type") == "number":  # embeddings: mostly the store's dimension
            return st.one_of(st.lists(items, min_size=DIMENSION, max_size=DIMENSION), st.lists(items, max_size=5),
                             st.builds(lambda n: [0.5] * n, st.sampled_from([1999, 2000, 2001])))
        return st.lists(items, max_size=4)
    if kind == "object" and "properties" in schema:
        properties = schema["properties"]
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {name: for_schema(properties[name], defs, known, name) for name in properties if name in required},
            optional={name: for_schema(properties[name], defs, known, name)
                      for name in properties if name not in required})
    if kind == "object":  # free-form metadata and metadata filters
        return st.dictionaries(st.one_of(st.sampled_from(["lang", "year"]), hostile_text()), json_values(), max_size=4)
    return json_values()


@st.composite
def tool_arguments(draw: st.DrawFn, schema: Mapping[str, Any], known: Known) -> Any:
    """A valid-shaped call with hostile strings, then (usually) one mutation."""
    arguments: dict[str, Any] = draw(for_schema(schema, schema.get("$defs", {}), known))
    names = list(schema.get("properties", {}))
    mutation = draw(st.sampled_from(["none", "none", "wrong_type", "unknown_field", "drop", "deep", "huge",
                                     "nested_wrong"]))
    if mutation == "wrong_type" and names:
        arguments[draw(st.sampled_from(names))] = draw(wrong_value())
    elif mutation == "unknown_field":
        arguments[draw(st.one_of(st.sampled_from(["__proto__", "$where", "query;", "filters.kind"]), hostile_text()))] \
            = draw(wrong_value())
    elif mutation == "drop" and arguments:
        del arguments[draw(st.sampled_from(sorted(arguments)))]
    elif mutation == "deep" and names:
        arguments[draw(st.sampled_from(names))] = draw(deep_nesting())
    elif mutation == "huge" and names:
        arguments[draw(st.sampled_from(names))] = draw(huge_text())
    elif mutation == "nested_wrong":
        nested = [value for value in arguments.values() if isinstance(value, dict) and value]
        if nested:
            target = draw(st.sampled_from(nested))
            key = draw(st.sampled_from(sorted(target)))
            rule = target[key]
            if isinstance(rule, dict) and rule:
                rule[draw(st.sampled_from(sorted(rule)))] = draw(wrong_value())
            else:
                target[key] = draw(wrong_value())
    return arguments


# --- the server and the invariants --------------------------------------------------------------------------------


@dataclass
class Fuzzed:
    url: str
    search_key: str
    admin_key: str
    known: Known
    schemas: dict[str, dict[str, Any]]
    owner: ConnectionPool
    http: httpx2.Client
    search: McpSession
    admin: McpSession


@pytest.fixture(scope="module")
def fuzzed(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces, quarry.jobs cascade")
    root = tmp_path_factory.mktemp("fuzz")
    ingestor = Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(root / "sample", FILES), SourceSpec(slug="sample", kind="docs_site",
                                                                      attribution="official"))
    ingestor.ingest(write_corpus(root / "app", VERSIONED), SourceSpec(slug="app", kind="code_repo"))
    add_vector(session_pool, STORE, "v1", [0.1, 0.2, 0.3], metadata={"lang": "en", "year": 2024})
    add_vector(session_pool, STORE, "v2", [0.3, 0.2, 0.1], metadata={"lang": "fr"}, namespace="ns")
    # a job for the jobs tool to act on; closed so it does not keep one of the pool's connections
    JobRun.create(session_pool, "ingest", "sample", {"path": "/srv/docs", "source": {"slug": "sample"}}).close()
    with session_pool.connection() as conn:
        documents = [str(row[0]) for row in conn.execute("select id from quarry.documents order by path")]
        chunks = [str(row[0]) for row in conn.execute("select id from quarry.chunks order by id limit 5")]
        jobs = [str(row[0]) for row in conn.execute("select id from quarry.jobs")]
    first = uuid.UUID(documents[0])
    cursors = [document_cursor(first, 1), document_cursor(first, 2**32 - 1), document_cursor(uuid.uuid4(), 0),
               jobs_cursor(uuid.UUID(jobs[0])), jobs_cursor(uuid.uuid4()), "AAAA", "=" * 10, "é"]
    known = Known(documents, chunks, jobs, cursors)
    suffix = uuid.uuid4().hex[:8]
    search_key = api_keys.create_key(session_pool, f"fuzz-search-{suffix}", ["search"]).secret
    admin_key = api_keys.create_key(session_pool, f"fuzz-admin-{suffix}", ["admin"]).secret
    reader = open_pool(migrated_url, Settings(database_url=migrated_url), role=READER_ROLE, min_size=1, max_size=4)
    backend = StaticBackend(Settings(database_url=migrated_url), reader, dict.fromkeys(SPACES, local_embedder))
    app = build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=False), RATE)
    try:
        with serving(app) as url, httpx2.Client(timeout=120) as http, \
                mcp_session(http_transport(url + "/mcp", _bearer(search_key))) as search, \
                mcp_session(http_transport(url + "/mcp", _bearer(admin_key))) as admin:
            # every tool: a search key is not shown the admin tools, and the fuzz calls them too
            schemas = {tool.name: tool.input_schema for tool in admin.list_tools()}
            yield Fuzzed(url, search_key, admin_key, known, schemas, session_pool, http, search, admin)
    finally:
        reader.close()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def stored_data(pool: ConnectionPool, *, skip: frozenset[str] = frozenset()) -> dict[str, tuple[int, str]]:
    """Row count and an md5 of every row, per table of the quarry schema (partitions under their parent)."""
    with pool.connection() as conn:
        tables = [row[0] for row in conn.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = 'quarry' and c.relkind in ('r', 'p') and not c.relispartition order by 1")]
        fingerprint: dict[str, tuple[int, str]] = {}
        for table in tables:
            if table in BOOKKEEPING or table in skip:
                continue
            row = conn.execute(sql.SQL("select count(*), md5(coalesce(string_agg(t::text, E'\\n' order by t::text), "
                                       "'')) from quarry.{} t").format(sql.Identifier(table))).fetchone()
            assert row is not None
            fingerprint[table] = (int(row[0]), str(row[1]))
    return fingerprint


def _wire_safe(arguments: Any) -> bool:
    """Whether the SDK client can send ``arguments`` as they are (strict JSON, encodable as UTF-8)."""
    try:
        json.dumps(arguments, allow_nan=False).encode()
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return False
    return isinstance(arguments, dict)


def raw_call(fuzzed: Fuzzed, key: str, tool: str, arguments: Any) -> ToolReply:
    """One tools/call as raw JSON-RPC (escaped: lone surrogates as \\udXXX, NaN as the bare literal)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}})
    response = fuzzed.http.post(fuzzed.url + "/mcp", content=body.encode(), headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream", **_bearer(key)})
    assert response.status_code < 500 and "Traceback" not in response.text, response.text[:2000]
    payload = response.json()
    if "error" in payload:  # a JSON-RPC error: the request itself was refused (e.g. arguments not an object)
        assert payload["error"]["code"] in (-32700, -32600, -32602), payload
        return ToolReply(True, json.dumps({"error": {"code": "INVALID", "message": payload["error"]["message"]}}))
    result = payload["result"]
    return ToolReply(bool(result.get("isError")), result["content"][0]["text"])


def call(fuzzed: Fuzzed, session: McpSession, key: str, tool: str, arguments: Any) -> ToolReply:
    if not _wire_safe(arguments):
        return raw_call(fuzzed, key, tool, arguments)
    try:
        return session.call(tool, arguments)
    except MCPError as error:  # the server refused the request at the JSON-RPC level
        assert error.error.code in (-32700, -32600, -32602), error
        return ToolReply(True, json.dumps({"error": {"code": "INVALID", "message": str(error)}}))


def check_reply(tool: str, arguments: Any, reply: ToolReply, *, may_write: bool) -> None:
    shown = f"{tool} {json.dumps(arguments)[:600]} -> {reply.text[:600]}"
    assert "Traceback" not in reply.text and 'File "' not in reply.text, shown
    body = json.loads(reply.text)
    assert isinstance(body, dict), shown
    if reply.is_error:
        assert body["error"]["code"] in EXPECTED_CODES, shown
        return
    assert reply.wire_bytes <= MAX_RESPONSE_BYTES, shown
    if not may_write:  # a search-scoped key reached a write: the scope check failed
        writes = tool in ("vector_add", "vector_delete") or (
            tool == "jobs" and isinstance(arguments, dict) and arguments.get("action") in ("cancel", "retry"))
        assert not writes, shown


def fuzz_tool(fuzzed: Fuzzed, tool: str, session: McpSession, key: str, *, may_write: bool,
              max_examples: int) -> None:
    strategy = tool_arguments(fuzzed.schemas[tool], fuzzed.known)

    @fuzz_settings(max_examples=max_examples)
    @given(arguments=strategy)
    def run(arguments: Any) -> None:
        check_reply(tool, arguments, call(fuzzed, session, key, tool, arguments), may_write=may_write)

    for arguments in [{}, *EXPLICIT.get(tool, [])]:
        run = example(arguments=arguments)(run)
    run()


def fuzz_settings(max_examples: int) -> settings:
    return settings(max_examples=max(1, round(max_examples * SCALE)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


VERSION_FILTER = {"sdk_dependency": {"any_of": ["@scope/runtime"], "version_satisfies": "^0.8"},
                  "language_target": {"version_satisfies": ">=0.15"}}
#: Always tried, besides the generated calls. Two bugs this file found answered INTERNAL to these:
#: - the read-only role lacked usage on schema quarry_types, so every version_satisfies filter failed;
#: - a NUL character reached a Postgres text parameter (psycopg.DataError) instead of being INVALID.
EXPLICIT: dict[str, list[Any]] = {
    "advanced_search": [{"queries": ["counter"], "filters": VERSION_FILTER},
                        {"queries": ["a\x00b"]}, {"queries": ["ok"], "filters": {"package": {"any_of": ["\x00"]}}}],
    "count": [{"query_text": "counter", "filters": VERSION_FILTER}],
    "query_documents": [{"query_text": "counter", "filters": VERSION_FILTER}],
    "facets": [{"filters": VERSION_FILTER}, {"prefix": "\x00"}],
    "guided_query": [{"user_query": "counter", "filters": VERSION_FILTER}, {"user_query": "x", "source": "\x00"}],
    "suggest_query_params": [{"source": "sample", "user_query": "\x00"}, {"source": "\x00", "user_query": "x"}],
    "search": [{"query": "a\x00b"}, {"query": "\ud800"}],
    "route_sources": [{"user_query": "a\x00b"}],
    "generate_urls": [{"source": "\x00", "records": [{"path": "a"}]},
                      {"source": "sample", "records": [{"path": "\x00"}]}],
    "get_document": [{"document_id": str(uuid.UUID(int=5)), "cursor": "\x00"}],
    "jobs": [{"action": "list", "cursor": "\x00"}],
    "vector_add": [{"id": "v9", "embedding": [0.1, 0.2, 0.3], "store_name": STORE, "metadata": {"k": "\ud800"}},
                   {"id": "v9", "embedding": [0.1, 0.2, 0.3], "store_name": STORE, "metadata": {"\x00": 1}}],
    "vector_search": [{"query": [0.1, 0.2, 0.3], "store_name": STORE, "metadata_filter": {"lang": "\ud800"}}],
}


@pytest.mark.parametrize("tool", TOOLS)
def test_hostile_arguments_never_fail_internally_or_change_data(fuzzed: Fuzzed, tool: str) -> None:
    before = stored_data(fuzzed.owner)
    fuzz_tool(fuzzed, tool, fuzzed.search, fuzzed.search_key, may_write=False, max_examples=15)
    assert stored_data(fuzzed.owner) == before


@pytest.mark.parametrize("tool", WRITE_TOOLS)
def test_hostile_writes_by_an_admin_never_fail_internally_or_touch_the_corpus(fuzzed: Fuzzed, tool: str) -> None:
    before = stored_data(fuzzed.owner, skip=WRITABLE)
    fuzz_tool(fuzzed, tool, fuzzed.admin, fuzzed.admin_key, may_write=True, max_examples=20)
    assert stored_data(fuzzed.owner, skip=WRITABLE) == before


def test_every_tool_is_in_the_catalogue_fuzzed(fuzzed: Fuzzed) -> None:
    assert set(fuzzed.schemas) == set(TOOLS)


NOT_OBJECTS: list[Any] = [None, [], ["query", "x"], "query=x", 0, 1.5, True, deep_value(200, False),
                          deep_value(200, True)]


@pytest.mark.parametrize("tool", TOOLS)
def test_arguments_that_are_not_an_object_are_refused(fuzzed: Fuzzed, tool: str) -> None:
    for arguments in NOT_OBJECTS:
        reply = raw_call(fuzzed, fuzzed.search_key, tool, arguments)
        check_reply(tool, arguments, reply, may_write=False)
        if arguments is not None:
            assert reply.is_error, (tool, arguments)


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


@pytest.mark.parametrize("tool", TOOLS)
def test_non_finite_numbers_in_every_field_are_refused(fuzzed: Fuzzed, tool: str) -> None:
    for name in fuzzed.schemas[tool].get("properties", {}):
        for literal in NON_FINITE:
            # Python's json reads these literals; the SDK client would have sent null instead.
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": tool, "arguments": {name: "@@"}}}).replace('"@@"', literal)
            response = rpc(fuzzed.url, body, _bearer(fuzzed.search_key))
            assert response.status_code < 500 and "Traceback" not in response.text, response.text[:1000]
            result = response.json().get("result")
            if result is not None:
                error = json.loads(result["content"][0]["text"])["error"]
                assert result["isError"] is True and error["code"] in ("INVALID", "LIMIT"), (tool, name, error)


# --- malformed JSON-RPC -------------------------------------------------------------------------------------------

_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "x"}}}


def _with(**changes: Any) -> bytes:
    message: dict[str, Any] = {**_CALL, **changes}
    return json.dumps({key: value for key, value in message.items() if value is not _DROP}).encode()


_DROP = object()
MALFORMED: dict[str, bytes] = {
    "empty body": b"",
    "not json": b"drop table quarry.chunks",
    "truncated": json.dumps(_CALL).encode()[:-7],
    "trailing garbage": json.dumps(_CALL).encode() + b"}}}",
    "invalid utf-8": json.dumps(_CALL).encode().replace(b'"x"', b'"\xff\xfe\xc3"'),
    "overlong utf-8 nul": json.dumps(_CALL).encode().replace(b'"x"', b'"\xc0\x80"'),
    "raw nul byte": json.dumps(_CALL).encode().replace(b'"x"', b'"a\x00b"'),
    "utf-16": json.dumps(_CALL).encode("utf-16"),
    "bom": b"\xef\xbb\xbf" + json.dumps(_CALL).encode(),
    "lone surrogate escape": json.dumps(_CALL).encode().replace(b'"x"', b'"\\ud800"'),
    "string": b'"tools/call"',
    "number": b"1",
    "null": b"null",
    "empty array": b"[]",
    "batch": json.dumps([_CALL, _CALL]).encode(),
    "deep array": b"[" * 200_000 + b"]" * 200_000,
    "deep object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "deep arguments": json.dumps({**_CALL, "params": {"name": "search", "arguments": {"query": "x"}}}).encode()
    .replace(b'"x"', b'[' * 100_000 + b']' * 100_000),
    "params list": _with(params=["search", {"query": "x"}]),
    "params string": _with(params="search"),
    "params null": _with(params=None),
    "params missing": _with(params=_DROP),
    "name missing": _with(params={"arguments": {"query": "x"}}),
    "name number": _with(params={"name": 7, "arguments": {}}),
    "name object": _with(params={"name": {"$ne": ""}, "arguments": {}}),
    "name injection": _with(params={"name": "search'; drop table quarry.chunks; --", "arguments": {}}),
    "name huge": _with(params={"name": "s" * 500_000, "arguments": {}}),
    "method unknown": _with(method="tools/destroy"),
    "method number": _with(method=5),
    "jsonrpc 1.0": _with(jsonrpc="1.0"),
    "id object": _with(id={"a": 1}),
    "id float": _with(id=1.5),
    "id huge": _with(id=10**400),
    "duplicate keys": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", '
                      b'"arguments": {"query": "x", "query": 5}}}',
    "over the size bound": _with(params={"name": "search", "arguments": {"query": "x" * (MAX_REQUEST_BYTES + 1)}}),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_json_rpc_gets_an_error_never_a_500(fuzzed: Fuzzed, case: str) -> None:
    response = rpc(fuzzed.url, MALFORMED[case], _bearer(fuzzed.search_key))
    assert response.status_code < 500, (case, response.status_code, response.text[:1000])
    assert "Traceback" not in response.text and 'File "' not in response.text, response.text[:1000]
    if response.status_code == 200 and response.content:
        payload = response.json()
        answers = payload if isinstance(payload, list) else [payload]
        for answer in answers:
            if "error" in answer:
                assert answer["error"]["code"] != -32603, (case, answer)  # JSON-RPC's internal error
            else:
                text = answer["result"]["content"][0]["text"]
                assert json.loads(text).get("error", {}).get("code") != "INTERNAL", (case, text)


def test_other_methods_and_headers(fuzzed: Fuzzed) -> None:
    good = json.dumps(_CALL).encode()
    variants: list[tuple[str, Callable[[], httpx2.Response]]] = [
        ("get", lambda: _status_only(fuzzed, "GET")),
        ("delete", lambda: fuzzed.http.delete(fuzzed.url + "/mcp", headers=_bearer(fuzzed.search_key))),
        ("put", lambda: fuzzed.http.put(fuzzed.url + "/mcp", content=good, headers=_bearer(fuzzed.search_key))),
        ("text/plain", lambda: rpc(fuzzed.url, good, {**_bearer(fuzzed.search_key), "content-type": "text/plain"})),
        ("no accept", lambda: rpc(fuzzed.url, good, {**_bearer(fuzzed.search_key), "accept": "text/html"})),
        ("bad protocol version", lambda: rpc(fuzzed.url, good, {**_bearer(fuzzed.search_key),
                                                                 "mcp-protocol-version": "'; drop table x; --"})),
        ("bearer injection", lambda: rpc(fuzzed.url, good, _bearer("qry_'; drop table quarry.api_keys; --"))),
        ("bearer huge", lambda: rpc(fuzzed.url, good, _bearer("qry_" + "a" * 60_000))),
        ("session id", lambda: rpc(fuzzed.url, good, {**_bearer(fuzzed.search_key), "mcp-session-id": "../../x"})),
    ]
    for name, send in variants:
        response = send()
        assert response.status_code < 500, (name, response.status_code, response.text[:500])
        assert "Traceback" not in response.text, (name, response.text[:500])


def _status_only(fuzzed: Fuzzed, method: str) -> httpx2.Response:
    """The response head only: a GET may open a server-sent event stream that stays open."""
    with fuzzed.http.stream(method, fuzzed.url + "/mcp", headers={**_bearer(fuzzed.search_key),
                                                                   "accept": "text/event-stream"}) as response:
        return httpx2.Response(response.status_code)


# --- hostile text where the engine reads it ---------------------------------------------------------------------

#: (tool, arguments around one string), for every string the engine passes to SQL, a parser or a decoder.
READ_SITES: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
    ("search", lambda text: {"query": text, "mode": "fts"}),
    ("search", lambda text: {"query": text}),
    ("advanced_search", lambda text: {"queries": [text, "partial index"], "mode": "fts", "rerank": False}),
    ("advanced_search", lambda text: {"queries": ["counter"], "mode": "fts",
                                      "filters": {"sdk_dependency": {"version_satisfies": text}}}),
    ("advanced_search", lambda text: {"queries": ["counter"], "mode": "fts", "version_match": "strict",
                                      "filters": {"language_target": {"any_of": [text], "version_satisfies": text}}}),
    ("advanced_search", lambda text: {"queries": ["index"], "mode": "fts", "filters": {
        "source_slug": {"any_of": [text]}, "language": {"none_of": [text]}, "package": {"any_of": [text, "app"]}}}),
    ("advanced_search", lambda text: {"queries": ["index"], "rerank_instructions": text}),
    ("facets", lambda text: {"prefix": text}),
    ("facets", lambda text: {"facet": "sdk_dependency", "filters": {"sdk_dependency": {"version_satisfies": text}}}),
    ("count", lambda text: {"query_text": text}),
    ("count", lambda text: {"query_text": "counter", "filters": {"language_target": {"version_satisfies": text}}}),
    ("query_documents", lambda text: {"query_text": text, "top_k": 2}),
    ("generate_urls", lambda text: {"source": text, "records": [{"path": "a.md"}]}),
    ("generate_urls", lambda text: {"source": "sample", "records": [{"path": text}]}),
    ("route_sources", lambda text: {"user_query": text}),
    ("suggest_query_params", lambda text: {"source": "sample", "user_query": text}),
    ("suggest_query_params", lambda text: {"source": text, "user_query": "how many documents"}),
    ("guided_query", lambda text: {"user_query": text, "preferred_tool": "fast"}),
    ("guided_query", lambda text: {"user_query": "counter", "source": text}),
    ("get_document", lambda text: {"document_id": str(uuid.UUID(int=9)), "cursor": text}),
    ("jobs", lambda text: {"action": "list", "cursor": text}),
    ("jobs", lambda text: {"action": "list", "source": text}),
    ("vector_search", lambda text: {"query": [0.1, 0.2, 0.3], "store_name": STORE, "namespace": text}),
    ("vector_search", lambda text: {"query": [0.1, 0.2, 0.3], "store_name": STORE, "metadata_filter": {text: text}}),
    ("vector_search", lambda text: {"query": [0.1, 0.2, 0.3], "store_name": text}),
    ("vector_count", lambda text: {"store_name": STORE, "namespace": text}),
]
WRITE_SITES: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
    ("vector_add", lambda text: {"id": text, "embedding": [0.1, 0.2, 0.3], "store_name": STORE}),
    ("vector_add", lambda text: {"id": "w", "embedding": [0.1, 0.2, 0.3], "store_name": STORE, "namespace": text,
                                 "metadata": {text: text, "nested": [text, {text: None}]}}),
    ("vector_add", lambda text: {"id": "w", "embedding": [0.1], "store_name": text}),
    ("vector_delete", lambda text: {"id": text, "store_name": STORE, "namespace": text}),
]


def fuzz_sites(fuzzed: Fuzzed, sites: list[tuple[str, Callable[[str], dict[str, Any]]]], session: McpSession,
               key: str, *, may_write: bool, max_examples: int) -> None:
    @fuzz_settings(max_examples=max_examples)
    @given(site=st.sampled_from(sites), text=st.one_of(hostile_text(), st.sampled_from(HOSTILE_PIECES)))
    def run(site: tuple[str, Callable[[str], dict[str, Any]]], text: str) -> None:
        tool, build = site
        arguments = build(text)
        check_reply(tool, arguments, call(fuzzed, session, key, tool, arguments), may_write=may_write)

    run()


@pytest.mark.slow  # the file's fuzzing takes a minute or more: its module starts early
def test_hostile_text_where_the_engine_reads_it(fuzzed: Fuzzed) -> None:
    before = stored_data(fuzzed.owner)
    fuzz_sites(fuzzed, READ_SITES, fuzzed.search, fuzzed.search_key, may_write=False, max_examples=150)
    assert stored_data(fuzzed.owner) == before


def test_hostile_text_in_writes_by_an_admin(fuzzed: Fuzzed) -> None:
    before = stored_data(fuzzed.owner, skip=WRITABLE)
    fuzz_sites(fuzzed, WRITE_SITES, fuzzed.admin, fuzzed.admin_key, may_write=True, max_examples=40)
    assert stored_data(fuzzed.owner, skip=WRITABLE) == before


def test_plausible_hostile_calls_reach_the_engine(fuzzed: Fuzzed) -> None:
    """The generators are not all refused by the schema: hostile calls that are valid return results."""
    body = fuzzed.search.ok("advanced_search", {
        "queries": ["'; drop table quarry.chunks; --", "a & (b | !c) counter increment :* <->"],
        "filters": VERSION_FILTER | {"language_target": {"version_satisfies": "* || ^0.0.0-0"}}})
    assert body["results"], body
    assert fuzzed.search.ok("facets", {"prefix": "%", "facet": "package"})["facets"]["package"]["values"] == []
