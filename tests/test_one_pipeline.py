"""Every surface searches through one pipeline: the CLI answers as MCP does, and leg failures are data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.retrieval.hits import search_hits
from tests.corpus import FILES, write_corpus
from tests.mcp_harness import mcp_session, stdio_parameters
from tests.searching import search_outcome
from tests.test_cli import _quarry

CODE_FILE = {"lib/ids.py": '"""Identifiers."""\n\n\ndef parse_user_id(text: str) -> int:\n'
                           '    """Parse a user id from a string."""\n    return int(text)\n'}


@pytest.fixture()
def corpus(pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path) -> ConnectionPool:
    # both spaces embedded, as `quarry ingest` does with the local default
    Ingestor(pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path / "corpus", {**FILES, **CODE_FILE}), SourceSpec(slug="sample"))
    return pool


@pytest.mark.parametrize("query", ["how do I create a partial index", "parse a user id"])
def test_cli_search_json_is_mcp_search(corpus: ConnectionPool, database_url: str, model_cache: Path,
                                       tmp_path: Path, query: str) -> None:
    cli = _quarry(database_url, model_cache, "search", query, "--json", "--limit", "5")
    assert cli.returncode == 0, cli.stderr
    from_cli = json.loads(cli.stdout)
    with mcp_session(stdio_parameters(database_url, model_cache, tmp_path / "home")) as mcp:
        from_mcp = mcp.ok("search", {"query": query, "limit": 5})

    def answer(body: dict[str, object]) -> list[tuple[object, ...]]:
        rows = body["results"]
        assert isinstance(rows, list) and rows
        return [(row["rank"], row["chunk_id"], row["confidence"], row["fts_rank"], row["vector_rank"],
                 row["code_rank"], row["trust_score"]) for row in rows]

    assert answer(from_cli) == answer(from_mcp)
    same = ("mode_used", "code_mode", "code_mode_used", "vector_spaces", "degraded", "reranked")
    assert {key: from_cli[key] for key in same} == {key: from_mcp[key] for key in same}
    # one local model embeds both spaces: the text leg ranks code chunks, and the response says so
    assert from_cli["code_mode_used"] == "on" and from_cli["vector_spaces"] == ["text"]
    assert any("one model embeds both" in note for note in from_cli["notes"])


def test_a_skipped_leg_comes_back_as_data_even_with_no_hit(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    vectors = local_embedder.embed_queries(["zzqx unmatched"])
    page = search_hits(corpus, ["zzqx unmatched"], mode="hybrid", limit=5, text_vectors=vectors, code_mode="off",
                       version_match="permissive", query_model="another-model")
    assert page.hits == []  # no keyword match, and the vector leg sat out
    [failure] = page.failed_legs
    assert (failure.leg, failure.reason) == ("vector", "model_mismatch")
    assert failure.detail is not None and "another-model" in failure.detail

    found = search_hits(corpus, ["partial index"], mode="hybrid", limit=5, text_vectors=vectors, code_mode="off",
                        version_match="permissive", query_model="another-model")
    assert found.hits and [f.leg for f in found.failed_legs] == ["vector"]
    assert all(hit.vector_rank is None for hit in found.hits)


def test_the_pipeline_reports_a_skipped_leg_as_degradation(corpus: ConnectionPool, local_embedder: Embedder) -> None:
    class Renamed:
        """The local model under another name: as if the server were configured for a model the corpus lacks."""

        model_name, dimension = "another-model", local_embedder.dimension
        embed_queries = staticmethod(local_embedder.embed_queries)
        embed_documents = staticmethod(local_embedder.embed_documents)

    outcome = search_outcome(corpus, Renamed(), "partial index", code_mode="off")  # type: ignore[arg-type]
    assert outcome.degradation.degraded and outcome.degradation.fields()["hybrid_leg_failed"] == "vector"
    assert "another-model" in outcome.degradation.failed_legs["vector"]
    assert outcome.mode_used == "hybrid" and outcome.vector_spaces == [] and outcome.hits
