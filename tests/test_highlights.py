"""Highlights: the query's terms as spans in each hit's content, identifiers split as the index splits them."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.retrieval.highlights import MAX_HIGHLIGHTS, Highlights, highlight, query_lexemes
from tests.corpus import write_corpus
from tests.searching import search_outcome


def test_words_and_identifier_parts_that_stem_to_a_query_lexeme(pool: ConnectionPool) -> None:
    lexemes = query_lexemes(pool, ["partial indexes on queries", "parse user ids"])
    assert {"partial", "index", "queri", "pars", "user", "id"} <= lexemes
    content = "A partial index speeds queries. parseUserId(raw) and PARSE_USER_ID; the predicate; ids."
    found = highlight(content, lexemes)
    assert [content[start:end] for start, end in found.spans] == [
        "partial", "index", "queries", "parse", "User", "Id", "PARSE", "USER", "ID", "ids"]
    assert found.snippet is not None and "partial index" in found.snippet
    assert highlight("nothing relevant here", lexemes) == Highlights([], None)


def test_spans_are_bounded_and_the_snippet_sits_where_they_cluster(pool: ConnectionPool) -> None:
    lexemes = query_lexemes(pool, ["vacuum"])
    content = "filler words. " * 100 + "vacuum " * 200
    found = highlight(content, lexemes)
    assert len(found.spans) == MAX_HIGHLIGHTS
    assert found.snippet is not None and found.snippet.startswith("…") and found.snippet.count("vacuum") > 20


@pytest.mark.parametrize("mode", ["hybrid", "fts"])
def test_every_hit_says_what_matched(pool: ConnectionPool, local_embedder: Embedder, tmp_path: Path,
                                     mode: str) -> None:
    Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000).ingest(
        write_corpus(tmp_path / "c"), SourceSpec(slug="sample"))
    outcome = search_outcome(pool, local_embedder, "create a partial index with a predicate", mode=mode, limit=5)
    rows = [hit.as_row() for hit in outcome.hits]
    assert rows and all("highlights" in row and "snippet" in row for row in rows)
    best = rows[0]
    marked = {best["content"][span["start"]:span["end"]].lower() for span in best["highlights"]}
    assert {"partial", "index", "predicate"} <= marked
    vector = search_outcome(pool, local_embedder, "create a partial index", mode="vector", limit=3)
    assert all("highlights" not in hit.as_row() for hit in vector.hits)
