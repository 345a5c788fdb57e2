"""Bring-your-own vector stores: every tool through the SDK's real client, checked against NumPy.

The MCP server runs as the read-only role ``quarry_reader`` (as ``quarry serve`` does), so
the narrow write grants of sql/095-vector-store-grants.sql are exercised too. Exact
searches must equal a NumPy ranking of the same data (up to ties); the HNSW path must
reach recall@10 >= 0.95 on 100k random vectors bulk-loaded through ``quarry vectors load``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from engine.cli.vectors import add_vectors_arguments, run_vectors
from engine.config import Settings
from engine.errors import InvalidRequestError
from engine.runtime import Runtime
from engine.store import api_keys
from engine.store.vector_stores import StagedVector, count_vectors, drop_store, load_vectors, search_vectors
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving

Matrix = npt.NDArray[np.float64]


@pytest.fixture(scope="module")
def mcp(migrated_url: str, reader_pool: ConnectionPool) -> Iterator[McpSession]:
    app = build_http_app(StaticBackend(Settings(database_url=migrated_url), reader_pool),
                         AccessPolicy.for_bind("127.0.0.1", no_auth=True))
    with serving(app) as url, mcp_session(http_transport(url + "/mcp")) as session:
        yield session


@pytest.fixture()
def stores(session_pool: ConnectionPool) -> ConnectionPool:
    """No vector stores at the start of a test (dropping needs the owner, not the reader)."""
    with session_pool.connection() as conn:
        names = [name for (name,) in conn.execute("select name from quarry.vector_stores").fetchall()]
    for name in names:
        drop_store(session_pool, name)
    return session_pool


def numpy_scores(data: Matrix, query: Matrix, metric: str) -> Matrix:
    if metric == "cosine":
        return (data @ query) / (np.linalg.norm(data, axis=1) * np.linalg.norm(query))
    if metric == "dot":
        return data @ query
    return np.linalg.norm(data - query, axis=1)


def assert_same_ranking(ids: list[str], scores: list[float], data: Matrix, query: Matrix, metric: str,
                        k: int) -> None:
    """Top-k equal to NumPy's up to ties: each rank holds a vector with NumPy's score at that rank."""
    exact = numpy_scores(data, query, metric)
    order = np.argsort(exact if metric == "euclidean" else -exact, kind="stable")[:k]
    assert len(ids) == k
    for rank, (vector_id, score) in enumerate(zip(ids, scores, strict=True)):
        expected = exact[order[rank]]
        assert exact[int(vector_id)] == pytest.approx(expected, rel=1e-5, abs=1e-5), (rank, vector_id)
        assert score == pytest.approx(expected, rel=1e-4, abs=1e-4)  # float32 storage vs float64


def load(pool: ConnectionPool, store: str, data: npt.NDArray[Any], *, metric: str = "cosine",
         namespace: str | None = None, metadata: list[dict[str, Any]] | None = None) -> None:
    rows = (StagedVector(str(i), np.asarray(vector, dtype=np.float32), metadata[i] if metadata else None)
            for i, vector in enumerate(data))
    load_vectors(pool, store, rows, namespace=namespace, metric=metric)  # type: ignore[arg-type]


# --- exact ranking against NumPy --------------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_search_matches_numpy_for_every_metric(mcp: McpSession, stores: ConnectionPool, metric: str) -> None:
    rng = np.random.default_rng(11)
    data = rng.standard_normal((400, 8)).astype(np.float32)
    load(stores, f"exact-{metric}", data, metric=metric)
    for query in rng.standard_normal((5, 8)):
        body = mcp.ok("vector_search", {"query": query.tolist(), "k": 15, "store_name": f"exact-{metric}"})
        assert body["metric"] == metric and body["search"] == "exact" and body["total_searched"] == 400
        ids = [hit["id"] for hit in body["results"]]
        scores = [hit["score"] for hit in body["results"]]
        assert scores == sorted(scores, reverse=metric != "euclidean")
        assert_same_ranking(ids, scores, data.astype(np.float64), query.astype(np.float32).astype(np.float64),
                            metric, 15)
        assert all("embedding" not in hit for hit in body["results"])


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_stores_wider_than_2000_dimensions_search_a_half_precision_index(
    mcp: McpSession, stores: ConnectionPool, metric: str,
) -> None:
    # OpenAI's 3,072-dimension embeddings: HNSW indexes vector up to 2,000 dimensions only, so
    # the graph holds halfvec copies; scores still come from the stored single-precision vectors.
    rng = np.random.default_rng(14)
    data = rng.standard_normal((400, 3072)).astype(np.float32)
    load(stores, f"wide-{metric}", data, metric=metric)
    with stores.connection() as conn:
        row = conn.execute("select pg_get_indexdef(format('quarry.%%I', quarry.vector_store_partition(s.id)"
                           " || '_hnsw')::regclass) from quarry.vector_stores s where s.name = %s",
                           (f"wide-{metric}",)).fetchone()
    assert row is not None
    opclass = {"cosine": "halfvec_cosine_ops", "dot": "halfvec_ip_ops", "euclidean": "halfvec_l2_ops"}[metric]
    assert re.search(rf"::(public\.)?halfvec\(3072\)\) (public\.)?{opclass}", row[0]), row[0]
    found = 0
    for source in rng.choice(400, size=10, replace=False):
        query = data[source] + 0.1 * rng.standard_normal(3072).astype(np.float32)  # near one stored vector
        result = search_vectors(stores, f"wide-{metric}", query, k=10, exact=False)
        assert not result.exact and result.hits[0].id == str(source)
        exact = numpy_scores(data.astype(np.float64), query.astype(np.float64), metric)
        for hit in result.hits:  # the stored vectors' scores, not the half-precision copies'
            assert hit.score == pytest.approx(exact[int(hit.id)], rel=1e-4, abs=1e-4)
        truth = np.argsort(exact if metric == "euclidean" else -exact, kind="stable")[:10]
        found += len({int(hit.id) for hit in result.hits} & set(truth.tolist()))
    assert found / 100 >= 0.9
    body = mcp.ok("vector_search", {"query": data[0].tolist(), "store_name": f"wide-{metric}", "k": 3})
    assert body["results"][0]["id"] == "0" and body["total_searched"] == 400
    with stores.connection() as conn:  # its ORDER BY is the index's expression: the search can read the index
        register_vector(conn)
        conn.execute("set local enable_sort = off")  # at 400 rows the planner would rather sort them all
        conn.execute("select * from quarry.vector_search(%s, %s, 10, exact => false)", (f"wide-{metric}", data[1]))
        scans = conn.execute("select pg_stat_get_xact_numscans(format('quarry.%%I', quarry.vector_store_partition(s.id)"
                             " || '_hnsw')::regclass) from quarry.vector_stores s where s.name = %s",
                             (f"wide-{metric}",)).fetchone()
    assert scans == (1,)


def test_a_value_beyond_half_precision_is_refused_by_a_wide_store_and_nothing_is_written(
    mcp: McpSession, stores: ConnectionPool,
) -> None:
    wide = np.full(3072, 0.5, dtype=np.float32)
    wide[7] = 70000.0
    error = mcp.call("vector_add", {"id": "a", "embedding": wide.tolist(), "store_name": "wide"}).error
    assert error["code"] == "INVALID" and "between -65504 and 65504" in error["message"], error
    rows = [StagedVector("ok", np.full(3072, 0.5, dtype=np.float32), None), StagedVector("big", wide, None)]
    with pytest.raises(InvalidRequestError, match=r"vector 2 \(id 'big'\): .*between -65504 and 65504"):
        load_vectors(stores, "wide", iter(rows))
    with stores.connection() as conn:
        assert conn.execute("select count(*) from quarry.vector_stores where name = 'wide'").fetchone() == (0,)
    mcp.ok("vector_add", {"id": "a", "embedding": np.full(3072, 0.5).tolist(), "store_name": "wide"})
    # a norm beyond half precision is fine when every value fits (2000 x sqrt(3072) = 110,851)
    alternating = np.resize([2000.0, -2000.0], 3072)
    added = mcp.ok("vector_add", {"id": "b", "embedding": alternating.tolist(), "store_name": "wide"})
    assert added["status"] == "added"
    query = np.full(3072, 0.5, dtype=np.float32)
    query[7] = 70000.0  # a query beyond half precision is ranked exactly instead of failing
    result = search_vectors(stores, "wide", query, k=1, exact=False)
    assert result.exact and [hit.id for hit in result.hits] == ["a"]
    narrow = np.full(2000, 0.5, dtype=np.float32)
    narrow[7] = 70000.0  # a single-precision index takes it
    assert mcp.ok("vector_add", {"id": "a", "embedding": narrow.tolist(), "store_name": "narrow"})["status"] == "added"


def test_another_metric_than_the_stores_is_ranked_exactly(mcp: McpSession, stores: ConnectionPool) -> None:
    rng = np.random.default_rng(12)
    data = rng.standard_normal((200, 6)).astype(np.float32)
    load(stores, "dots", data, metric="dot")
    query = rng.standard_normal(6).astype(np.float32)
    body = mcp.ok("vector_search", {"query": query.tolist(), "store_name": "dots", "metric": "euclidean", "k": 5})
    assert body["metric"] == "euclidean" and body["search"] == "exact" and "note" in body
    assert_same_ranking([h["id"] for h in body["results"]], [h["score"] for h in body["results"]],
                        data.astype(np.float64), query.astype(np.float64), "euclidean", 5)


def test_metadata_filter_ranks_only_matching_vectors(mcp: McpSession, stores: ConnectionPool) -> None:
    rng = np.random.default_rng(13)
    data = rng.standard_normal((300, 4)).astype(np.float32)
    metadata = [{"lang": "en" if i % 3 == 0 else "fr", "year": 2020 + i % 2, "title": f"doc {i}"} for i in range(300)]
    load(stores, "filtered", data, metadata=metadata)
    query = rng.standard_normal(4).astype(np.float32)
    body = mcp.ok("vector_search", {"query": query.tolist(), "k": 10, "store_name": "filtered",
                                    "metadata_filter": {"lang": "en", "year": 2020}})
    keep = [i for i, m in enumerate(metadata) if m["lang"] == "en" and m["year"] == 2020]
    assert body["total_searched"] == len(keep) == 50
    assert all(hit["metadata"]["lang"] == "en" and hit["metadata"]["year"] == 2020 for hit in body["results"])
    exact = numpy_scores(data[keep].astype(np.float64), query.astype(np.float64), "cosine")
    expected = [str(keep[i]) for i in np.argsort(-exact, kind="stable")[:10]]
    assert [hit["id"] for hit in body["results"]] == expected
    assert body["results"][0]["metadata"] == metadata[int(expected[0])]
    none = mcp.ok("vector_search", {"query": query.tolist(), "store_name": "filtered",
                                    "metadata_filter": {"lang": "de"}})
    assert none["results"] == [] and none["total_searched"] == 0


# --- add, idempotency, delete, count, namespaces ----------------------------------------------------------------


def test_add_is_idempotent_and_reports_what_changed(mcp: McpSession, stores: ConnectionPool) -> None:
    first = mcp.ok("vector_add", {"id": "doc-1", "embedding": [0.1, 0.2, 0.3], "metadata": {"a": 1}})
    assert first == {"status": "added", "id": "doc-1", "dimension": 3, "store_name": "default", "namespace": None,
                     "store_created": True}
    with stores.connection() as conn:
        before = conn.execute("select embedding::text, metadata, updated_at from quarry.store_vectors").fetchall()
    again = mcp.ok("vector_add", {"id": "doc-1", "embedding": [0.1, 0.2, 0.3], "metadata": {"a": 1}})
    assert again["status"] == "unchanged" and again["store_created"] is False
    with stores.connection() as conn:
        assert conn.execute("select embedding::text, metadata, updated_at from quarry.store_vectors").fetchall() \
            == before  # identical state, updated_at included
    assert mcp.ok("vector_add", {"id": "doc-1", "embedding": [0.1, 0.2, 0.3], "metadata": {"a": 2}})["status"] \
        == "updated"
    assert mcp.ok("vector_add", {"id": "doc-1", "embedding": [0.3, 0.2, 0.1], "metadata": {"a": 2}})["status"] \
        == "updated"
    assert mcp.ok("vector_add", {"id": "doc-1", "embedding": [0.3, 0.2, 0.1]})["status"] == "updated"  # {} now
    assert mcp.ok("vector_count", {}) == {"count": 1, "store_name": "default", "namespace": None,
                                          "store_exists": True, "dimension": 3, "metric": "cosine"}
    body = mcp.ok("vector_search", {"query": [0.3, 0.2, 0.1], "include_embeddings": True})
    [hit] = body["results"]
    assert hit["id"] == "doc-1" and hit["metadata"] == {} and hit["score"] == pytest.approx(1.0)
    assert hit["embedding"] == [0.3, 0.2, 0.1]  # the stored float32 values, in their shortest decimal form
    assert np.array_equal(np.array(hit["embedding"], dtype=np.float32), np.array([0.3, 0.2, 0.1], dtype=np.float32))


def test_delete_and_count(mcp: McpSession, stores: ConnectionPool) -> None:
    assert mcp.ok("vector_count", {"store_name": "nowhere"}) == {
        "count": 0, "store_name": "nowhere", "namespace": None, "store_exists": False, "dimension": None,
        "metric": None}
    assert mcp.ok("vector_delete", {"id": "x", "store_name": "nowhere"}) == {
        "deleted": False, "id": "x", "store_name": "nowhere", "namespace": None}
    for index in range(3):
        mcp.ok("vector_add", {"id": f"v{index}", "embedding": [1.0, float(index)], "store_name": "small",
                              "metric": "euclidean"})
    assert mcp.ok("vector_count", {"store_name": "small"})["count"] == 3
    assert mcp.ok("vector_delete", {"id": "v1", "store_name": "small"})["deleted"] is True
    assert mcp.ok("vector_delete", {"id": "v1", "store_name": "small"})["deleted"] is False
    assert mcp.ok("vector_count", {"store_name": "small"})["count"] == 2
    body = mcp.ok("vector_search", {"query": [1.0, 1.0], "store_name": "small"})
    assert [hit["id"] for hit in body["results"]] == ["v0", "v2"] and body["total_searched"] == 2
    assert [hit["score"] for hit in body["results"]] == pytest.approx([1.0, 1.0])  # a tie, broken by id
    for vector_id in ("v0", "v2"):
        mcp.ok("vector_delete", {"id": vector_id, "store_name": "small"})
    empty = mcp.ok("vector_search", {"query": [1.0, 1.0], "store_name": "small"})
    assert empty["results"] == [] and empty["total_searched"] == 0 and "note" not in empty
    unknown = mcp.ok("vector_search", {"query": [1.0, 1.0], "store_name": "nowhere"})
    assert unknown["results"] == [] and unknown["total_searched"] == 0 and "no store" in unknown["note"]


def test_namespaces_isolate(mcp: McpSession, stores: ConnectionPool) -> None:
    mcp.ok("vector_add", {"id": "same", "embedding": [1.0, 0.0], "namespace": "tenant-a", "metadata": {"t": "a"}})
    mcp.ok("vector_add", {"id": "same", "embedding": [0.0, 1.0], "namespace": "tenant-b", "metadata": {"t": "b"}})
    mcp.ok("vector_add", {"id": "other", "embedding": [1.0, 1.0]})
    for namespace, expected in (("tenant-a", {"t": "a"}), ("tenant-b", {"t": "b"})):
        body = mcp.ok("vector_search", {"query": [1.0, 0.0], "namespace": namespace})
        assert [(hit["id"], hit["metadata"]) for hit in body["results"]] == [("same", expected)]
        assert body["total_searched"] == 1
        assert mcp.ok("vector_count", {"namespace": namespace})["count"] == 1
    assert [hit["id"] for hit in mcp.ok("vector_search", {"query": [1.0, 0.0]})["results"]] == ["other"]
    assert mcp.ok("vector_delete", {"id": "same", "namespace": "tenant-a"})["deleted"] is True
    assert mcp.ok("vector_count", {"namespace": "tenant-a"})["count"] == 0
    assert mcp.ok("vector_count", {"namespace": "tenant-b"})["count"] == 1
    assert mcp.ok("vector_delete", {"id": "same"})["deleted"] is False  # the default namespace has no "same"


# --- rejections -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tool", "arguments", "code", "path", "says"), [
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0]}, "INVALID", None, "3-dimensional"),
    ("vector_add", {"id": "a", "embedding": []}, "INVALID", "embedding", "at least 1"),
    ("vector_add", {"id": "a", "embedding": [1.0, "2", 3.0]}, "INVALID", "embedding[1]", "number"),
    ("vector_add", {"id": "a", "embedding": [1.0, True, 3.0]}, "INVALID", "embedding[1]", "number"),
    ("vector_add", {"id": "a", "embedding": [[1.0], [2.0], [3.0]]}, "INVALID", "embedding[0]", "number"),
    ("vector_add", {"id": "a", "embedding": [1.0, 1e39, 3.0]}, "INVALID", None, "32-bit float"),
    ("vector_add", {"id": "a", "embedding": [0.0, 0.0, 0.0]}, "INVALID", None, "zero vector"),
    ("vector_add", {"id": "a", "embedding": "1,2,3"}, "INVALID", "embedding", "array"),
    ("vector_add", {"embedding": [1.0, 2.0, 3.0]}, "INVALID", "id", "required"),
    ("vector_add", {"id": "", "embedding": [1.0, 2.0, 3.0]}, "INVALID", "id", "empty"),
    ("vector_add", {"id": "x" * 257, "embedding": [1.0, 2.0, 3.0]}, "LIMIT", "id", "256"),
    ("vector_add", {"id": "a", "embedding": [1.0] * 4001}, "LIMIT", "embedding", "4000"),
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0, 3.0], "metadata": [1]}, "INVALID", "metadata", "object"),
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0, 3.0], "metadata": {"t": "x" * 5000}}, "LIMIT", "metadata",
     "4096"),
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0, 3.0], "metric": "dot"}, "INVALID", None, "cosine metric"),
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0, 3.0], "metric": "manhattan"}, "INVALID", "metric", "one of"),
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0, 3.0], "store_name": "bad name"}, "INVALID", "store_name",
     None),
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0, 3.0], "namespace": ""}, "INVALID", "namespace", "empty"),
    ("vector_add", {"id": "a", "embedding": [1.0, 2.0, 3.0], "vector": [1]}, "INVALID", "vector", "not an argument"),
    ("vector_search", {"query": [1.0, 2.0]}, "INVALID", None, "3-dimensional"),
    ("vector_search", {"query": [0.0, 0.0, 0.0]}, "INVALID", None, "zero query"),
    ("vector_search", {"query": [1.0, 2.0, 3.0], "k": 101}, "LIMIT", "k", "at most 100"),
    ("vector_search", {"query": [1.0, 2.0, 3.0], "k": 0}, "INVALID", "k", "at least 1"),
    ("vector_search", {"query": [1.0, 2.0, 3.0], "k": "5"}, "INVALID", "k", "integer"),
    ("vector_search", {"query": [1.0, 2.0, 3.0], "metadata_filter": {}}, "INVALID", "metadata_filter", "at least"),
    ("vector_search", {"query": [1.0, 2.0, 3.0], "metadata_filter": {"tags": ["a"]}}, "INVALID", "metadata_filter",
     "string, number, boolean or null"),
    ("vector_search", {"query": [1.0, 2.0, 3.0], "include_embeddings": 1}, "INVALID", "include_embeddings",
     "boolean"),
    ("vector_delete", {"id": "a", "namespace": "n" * 129}, "LIMIT", "namespace", "128"),
    ("vector_count", {"store_name": 5}, "INVALID", "store_name", "string"),
])
def test_rejections_name_the_argument_and_change_nothing(
    mcp: McpSession, stores: ConnectionPool, tool: str, arguments: dict[str, Any], code: str, path: str | None,
    says: str | None,
) -> None:
    mcp.ok("vector_add", {"id": "seed", "embedding": [1.0, 2.0, 3.0], "metadata": {"keep": True}})
    error = mcp.call(tool, arguments).error
    assert error["code"] == code, error
    if path is not None:
        assert path in [problem["path"] for problem in error["problems"]], error
    if says is not None:
        assert says in error["message"], error
    assert "Traceback" not in error["message"]
    assert mcp.ok("vector_count", {})["count"] == 1
    [hit] = mcp.ok("vector_search", {"query": [1.0, 2.0, 3.0]})["results"]
    assert hit["metadata"] == {"keep": True}


def test_writes_need_the_admin_scope_over_http_with_keys(
    migrated_url: str, reader_pool: ConnectionPool, stores: ConnectionPool,
) -> None:
    app = build_http_app(StaticBackend(Settings(database_url=migrated_url), reader_pool),
                         AccessPolicy.for_bind("127.0.0.1", no_auth=False))
    searcher = api_keys.create_key(stores, f"vec-search-{uuid.uuid4().hex[:6]}", ["search"])
    admin = api_keys.create_key(stores, f"vec-admin-{uuid.uuid4().hex[:6]}", ["admin"])
    with serving(app) as url:
        with mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {searcher.secret}"})) as session:
            for tool in ("vector_add", "vector_delete"):
                refused = session.call(tool, {"id": "a", "embedding": [1.0, 2.0]} if tool == "vector_add"
                                       else {"id": "a"})
                assert refused.error["code"] == "UNAUTHORIZED" and "admin" in refused.error["message"]
            assert session.ok("vector_count", {})["count"] == 0
            assert session.ok("vector_search", {"query": [1.0, 2.0]})["results"] == []
        with mcp_session(http_transport(url + "/mcp", {"Authorization": f"Bearer {admin.secret}"})) as session:
            assert session.ok("vector_add", {"id": "a", "embedding": [1.0, 2.0]})["status"] == "added"
            assert session.ok("vector_delete", {"id": "a"})["deleted"] is True


def test_the_server_role_writes_vectors_but_cannot_drop_stores_or_forge_counts(
    reader_pool: ConnectionPool, stores: ConnectionPool,
) -> None:
    load(stores, "owned", np.eye(3, dtype=np.float32))
    with reader_pool.connection() as conn:
        for statement in ("select quarry.drop_vector_store('owned')",
                          "update quarry.vector_namespaces set vectors = 99",
                          "select quarry.drop_vector_store_index(1)",
                          "create index on quarry.store_vectors (id)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(statement)
    assert count_vectors(stores, "owned") == 3


# --- bulk load (quarry vectors load) ----------------------------------------------------------------------------


def _vectors_command(migrated_url: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_vectors_arguments(parser.add_subparsers(dest="command"))
    with Runtime(Settings(database_url=migrated_url)) as runtime:
        return run_vectors(runtime, parser.parse_args(["vectors", *argv]))


def test_load_jsonl_is_idempotent_and_rejects_a_bad_line_whole(
    migrated_url: str, stores: ConnectionPool, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "vectors.jsonl"
    lines = [{"id": f"p{i}", "embedding": [float(i), 1.0, 0.5], "metadata": {"i": i}} for i in range(50)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    argv = ["load", str(path), "--store", "papers", "--namespace", "2024", "--metric", "euclidean", "--json"]
    assert _vectors_command(migrated_url, argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["read"], first["added"], first["dimension"], first["store_created"]) == (50, 50, 3, True)
    assert _vectors_command(migrated_url, argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["added"], again["updated"], again["unchanged"]) == (0, 0, 50)
    assert count_vectors(stores, "papers", namespace="2024") == 50
    found = search_vectors(stores, "papers", [3.0, 1.0, 0.5], k=1, namespace="2024")
    assert found.hits[0].id == "p3" and found.hits[0].metadata == {"i": 3} and found.hits[0].score == 0.0

    path.write_text(json.dumps(lines[0]) + "\n" + json.dumps({"id": "bad", "embedding": [1.0, "x", 2.0]}) + "\n")
    with pytest.raises(InvalidRequestError, match=r"vectors.jsonl:2: embedding\[1\] must be a number"):
        _vectors_command(migrated_url, ["load", str(path), "--store", "papers", "--namespace", "2024"])
    path.write_text(json.dumps({"id": "short", "embedding": [1.0, 2.0]}) + "\n")
    with pytest.raises(InvalidRequestError, match="3-dimensional"):
        _vectors_command(migrated_url, ["load", str(path), "--store", "papers", "--dimension", "2"])
    with pytest.raises(InvalidRequestError, match="3-dimensional"):
        _vectors_command(migrated_url, ["load", str(path), "--store", "papers"])
    assert count_vectors(stores, "papers", namespace="2024") == 50


def test_counts_follow_every_write(stores: ConnectionPool) -> None:
    load(stores, "counted", np.arange(1, 41, dtype=np.float32).reshape(20, 2), namespace="a")
    load(stores, "counted", np.arange(1, 21, dtype=np.float32).reshape(10, 2), namespace="b")
    with stores.connection() as conn:
        conn.execute("delete from quarry.store_vectors where namespace = 'a' and id in ('1', '2', '3')")
        conn.execute("update quarry.store_vectors set namespace = 'b' where namespace = 'a' and id = '19'")
        kept = dict(conn.execute("select namespace, vectors from quarry.vector_namespaces").fetchall())
        actual = dict(conn.execute("select namespace, count(*) from quarry.store_vectors group by 1").fetchall())
    assert kept == actual == {"a": 16, "b": 11}


# --- HNSW at scale ----------------------------------------------------------------------------------------------

SCALE, DIMENSION, QUERIES = 100_000, 32, 100


@pytest.fixture(scope="module")
def big_store(migrated_url: str, session_pool: ConnectionPool,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, npt.NDArray[np.float32]]]:
    """100k random 32-d vectors, bulk-loaded from a .npy file by `quarry vectors load`."""
    data = np.random.default_rng(2024).standard_normal((SCALE, DIMENSION)).astype(np.float32)
    path = tmp_path_factory.mktemp("vectors") / "random.npy"
    np.save(path, data)
    drop_store(session_pool, "random-100k")
    started = time.monotonic()
    assert _vectors_command(migrated_url, ["load", str(path), "--store", "random-100k"]) == 0
    print(f"\nloaded and indexed {SCALE} vectors in {time.monotonic() - started:.1f}s")
    yield "random-100k", data
    drop_store(session_pool, "random-100k")


@pytest.mark.slow
def test_hnsw_recall_at_10_on_100k_random_vectors(
    big_store: tuple[str, npt.NDArray[np.float32]], session_pool: ConnectionPool, mcp: McpSession,
) -> None:
    name, data = big_store
    unit = data.astype(np.float64) / np.linalg.norm(data.astype(np.float64), axis=1, keepdims=True)
    queries = np.random.default_rng(99).standard_normal((QUERIES, DIMENSION)).astype(np.float32)
    found, searching = 0, 0.0
    for query in queries:
        truth = set(np.argsort(-(unit @ query.astype(np.float64)))[:10].tolist())
        started = time.monotonic()
        result = search_vectors(session_pool, name, query, k=10)
        searching += time.monotonic() - started
        assert not result.exact and result.total_searched == SCALE
        found += len({int(hit.id) for hit in result.hits} & truth)
    recall = found / (10 * QUERIES)
    print(f"\nrecall@10 {recall:.3f} over {QUERIES} queries, {1000 * searching / QUERIES:.1f} ms per search")
    assert recall >= 0.95
    body = mcp.ok("vector_search", {"query": queries[0].tolist(), "store_name": name})
    assert body["search"] == "hnsw" and body["total_searched"] == SCALE and len(body["results"]) == 10


@pytest.mark.slow
def test_filtered_searches_keep_the_hnsw_scan(big_store: tuple[str, npt.NDArray[np.float32]],
                                             session_pool: ConnectionPool) -> None:
    name, data = big_store
    with session_pool.connection() as conn:
        register_vector(conn)
        store_id = conn.execute("select id from quarry.vector_stores where name = %s", (name,)).fetchone()
        assert store_id is not None
        conn.execute("set local hnsw.iterative_scan = relaxed_order")
        plan = "\n".join(row[0] for row in conn.execute(
            f"explain select v.id from quarry.store_vectors v where v.store_id = {store_id[0]} and v.namespace = ''"
            f" and v.metadata @> '{{}}'::jsonb order by (v.embedding::vector({DIMENSION})) <=> %s::vector({DIMENSION})"
            " limit 10", (data[0],)).fetchall())
    assert f"store_vectors_{store_id[0]}_hnsw" in plan, plan
    result = search_vectors(session_pool, name, data[0], k=10)
    assert result.hits[0].id == "0" and result.hits[0].score == pytest.approx(1.0)
