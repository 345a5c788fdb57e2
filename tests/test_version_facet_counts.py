"""Version facet counts kept per source and combination (and their totals) against a per-document oracle.

The oracle counts, for every document, the names quarry.document_constraints gives it (its own and its
governing manifests'); the kept counts, quarry.facet_values and a stale source's live count must agree
with it after an ingest, a re-ingest that changed nested manifests, writes made directly in SQL and a
rebuild.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import write_corpus

RUNTIME = "@midnight-ntwrk/compact-runtime"
GUIDE = ("---\nversion: \">=0.16\"\n---\n# Counter guide\n\nIncrement the counter ledger from a circuit.\n\n"
         "```compact\npragma language_version 0.17.0;\nledger counter: Counter;\n```\n")
APP: dict[str, str] = {
    "package.json": json.dumps({"name": "app", "dependencies": {RUNTIME: "^0.8.1", "left-pad": "^1.3.0"},
                                "engines": {"node": ">=18"}}),
    "src/counter.ts": "// Increment the counter ledger\nexport function incrementCounter() {}\n",
    "src/util/deep.ts": "// A helper deep below the root manifest\nexport function helper() {}\n",
    "docs/guide.md": GUIDE,
    "examples/next/package.json": json.dumps({"name": "next", "dependencies": {RUNTIME: "^0.9.0"}}),
    "examples/next/counter.ts": "// Increment with the next runtime\nexport function incrementNext() {}\n",
    "examples/next/nested/inner.ts": "// Nested below examples/next, no manifest of its own\nexport const inner = 1;\n",
    "examples/next/page.md": "# Next page\n\n```compact\npragma language_version >=0.18.0;\n```\n",
    # shares a prefix with examples/next but is not below it: governed by the root manifest
    "examples/next-gen/gen.ts": "// Next generation, governed from the root\nexport const gen = 2;\n",
    "examples/mixed/package.json": json.dumps({"name": "mixed",
                                               "dependencies": {RUNTIME: "^0.9.0", "other-lib": "0.8.5"}}),
    "examples/mixed/counter.ts": "// Increment, mixed dependencies\nexport function incrementMixed() {}\n",
    "examples/gone/package.json": json.dumps({"name": "gone", "dependencies": {"gone-lib": "^1.0.0"}}),
    "examples/gone/main.ts": "// A directory a re-ingest removes\nexport const gone = 3;\n",
    "tools/pyproject.toml": "[project]\nname = \"tools\"\nrequires-python = \">=3.10\"\n"
                            "dependencies = [\"requests>=2.31\"]\n",
    "tools/script.py": "def run():\n    \"\"\"Run the tools.\"\"\"\n    return 1\n",
    # npm is nearer here than the root's package.json; pyproject still comes from tools/
    "tools/web/package.json": json.dumps({"name": "web", "dependencies": {"left-pad": "^2.0.0"}}),
    "tools/web/app.js": "// The web tool\nfunction start() { return 1; }\n",
}
DOCS: dict[str, str] = {
    "guide/current.md": "---\ncompact_version: \">=0.17.2 <0.18\"\n---\n# Counters\n\nA Counter grows by one.\n",
    "guide/pragma.md": "# Pragmas\n\n```compact\npragma language_version 0.17.0;\n```\n",
    "guide/plain.md": "# Notes\n\nNothing versioned here.\n",
}
VERSION_FACETS = ("language_target", "sdk_dependency")

Counts = dict[tuple[str, str], int]


@dataclass
class Corpus:
    url: str
    root: Path
    ingestor: Ingestor
    app_id: int
    docs_id: int


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("version-facets")
    ingestor = Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(root / "app", APP), SourceSpec(slug="app", kind="code_repo"))
    ingestor.ingest(write_corpus(root / "docs", DOCS), SourceSpec(slug="compact-docs", kind="docs_site"))
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        ids: dict[str, int] = dict(conn.execute("select slug, id from quarry.sources").fetchall())
    yield Corpus(migrated_url, root, ingestor, ids["app"], ids["compact-docs"])


def _oracle(conn: psycopg.Connection[Any], source_id: int | None = None, where: LiteralString = "true",
            params: dict[str, Any] | None = None) -> Counts:
    """Per document: the names quarry.document_constraints gives it, counted once per document.

    ``where``: a further condition on the document ``d`` and its source ``s``.
    """
    query = sql.SQL(
        "select vc.facet, vc.name, count(distinct d.id) from quarry.documents d"
        " join quarry.sources s on s.id = d.source_id"
        " cross join lateral quarry.document_constraints(d.id) vc"
        " where vc.name <> '' and (%(source)s::bigint is null or d.source_id = %(source)s) and ({})"
        " group by 1, 2").format(sql.SQL(where))
    rows = conn.execute(query, {"source": source_id, **(params or {})}).fetchall()
    return {(facet, name): documents for facet, name, documents in rows}


def _kept(conn: psycopg.Connection[Any], source_id: int | None = None) -> Counts:
    """The kept per-source rows (per combination of document facet values) summed per (facet, name)."""
    rows = conn.execute("select facet, name, sum(documents)::bigint from quarry.version_facet_combinations"
                        " where %(source)s::bigint is null or source_id = %(source)s group by 1, 2",
                        {"source": source_id})
    return {(facet, name): documents for facet, name, documents in rows}


def _totals(conn: psycopg.Connection[Any]) -> Counts:
    rows = conn.execute("select facet, name, sum(documents)::bigint from quarry.version_facet_totals group by 1, 2")
    return {(facet, name): documents for facet, name, documents in rows}


def _assert_combinations(conn: psycopg.Connection[Any]) -> None:
    """Counts kept per combination of document facet values: a row per combination and name, as the documents
    say, and the totals their sums over the sources."""
    combination: LiteralString = "array[d.content_type, d.language, d.package, d.deprecated::text]"
    expected = conn.execute(sql.SQL(
        "select d.source_id, {}, vc.facet, vc.name, count(distinct d.id) from quarry.documents d"
        " cross join lateral quarry.document_constraints(d.id) vc where vc.name <> ''"
        " group by d.source_id, {}, vc.facet, vc.name").format(sql.SQL(combination), sql.SQL(combination))).fetchall()
    kept = conn.execute("select source_id, combination, facet, name, documents"
                        " from quarry.version_facet_combinations").fetchall()
    assert sorted(kept, key=repr) == sorted(expected, key=repr)
    totals = conn.execute("select combination, facet, name, documents from quarry.version_facet_combination_totals")
    summed = conn.execute("select combination, facet, name, sum(documents)::bigint"
                          " from quarry.version_facet_combinations group by 1, 2, 3")
    assert sorted(totals, key=repr) == sorted(summed, key=repr)
    per_source = conn.execute("select source_id, facet, name, documents from quarry.version_facet_source_totals")
    summed = conn.execute("select source_id, facet, name, sum(documents)::bigint"
                          " from quarry.version_facet_combinations group by 1, 2, 3")
    assert sorted(per_source, key=repr) == sorted(summed, key=repr)


def _facets(conn: psycopg.Connection[Any], filters: dict[str, Any] | None = None) -> Counts:
    """What quarry.facet_values lists for both version facets, each asked for alone, with room for every value."""
    found: Counts = {}
    for facet in VERSION_FACETS:
        rows = conn.execute("select facet_key, facet_value, documents, total_values"
                            " from quarry.facet_values(%s, %s, null, 10000)",
                            (facet, None if filters is None else Jsonb(filters))).fetchall()
        assert all(key == facet and total == len(rows) for key, _, _, total in rows), rows
        found.update({(key, value): documents for key, value, documents, _ in rows})
    return found


def _every_facet(conn: psycopg.Connection[Any], filters: dict[str, Any] | None = None) -> Counts:
    """The version facets of the every-facet listing (facet null)."""
    rows = conn.execute("select facet_key, facet_value, documents from quarry.facet_values(null, %s, null, 10000)"
                        " where facet_key in ('language_target', 'sdk_dependency')",
                        (None if filters is None else Jsonb(filters),)).fetchall()
    return {(key, value): documents for key, value, documents in rows}


def _stale(conn: psycopg.Connection[Any]) -> set[int]:
    return {source_id for (source_id,) in conn.execute("select source_id from quarry.version_facets_stale")}


def _document_id(conn: psycopg.Connection[Any], source_id: int, path: str) -> Any:
    row = conn.execute("select id from quarry.documents where source_id = %s and path = %s",
                       (source_id, path)).fetchone()
    assert row is not None, path
    return row[0]


def _assert_consistent(conn: psycopg.Connection[Any]) -> None:
    """Nothing stale; kept rows, totals and facet_values (unfiltered and per source) equal the oracle."""
    assert _stale(conn) == set()
    everything = _oracle(conn)
    assert _kept(conn) == everything
    assert _totals(conn) == everything
    assert _facets(conn) == everything
    assert _every_facet(conn) == everything
    for slug, source_id in conn.execute("select slug, id from quarry.sources order by id").fetchall():
        expected = _oracle(conn, source_id)
        assert _kept(conn, source_id) == expected
        assert _facets(conn, {"source_slug": {"any_of": [slug]}}) == expected
    _assert_combinations(conn)


def _document_facets(conn: psycopg.Connection[Any], filters: dict[str, Any]) -> Counts:
    """What quarry.facet_values lists for the source- and document-level facets, asked for every facet at once."""
    rows = conn.execute("select facet_key, facet_value, documents from quarry.facet_values(null, %s, null, 10000)"
                        " where not facet_key = any (%s)", (Jsonb(filters), list(VERSION_FACETS)))
    return {(facet, value): documents for facet, value, documents in rows}


def _document_oracle(conn: psycopg.Connection[Any], where: LiteralString,
                     params: dict[str, Any] | None = None) -> Counts:
    """Per document the filters allow (``where`` on ``d`` and ``s``): its source's and its own facet values."""
    query = sql.SQL(
        "select f.facet, f.value, count(*) from quarry.documents d join quarry.sources s on s.id = d.source_id"
        " cross join lateral (values ('source_slug', s.slug), ('kind', s.kind), ('attribution', s.attribution),"
        " ('verified', s.verified::text), ('deprecated', (d.deprecated or s.deprecated)::text),"
        " ('content_type', d.content_type), ('language', d.language), ('package', d.package)) f (facet, value)"
        " where f.value is not null and ({}) group by 1, 2").format(sql.SQL(where))
    return {(facet, value): documents for facet, value, documents in conn.execute(query, params or {})}


def _assert_document_filters(conn: psycopg.Connection[Any], corpus: Corpus) -> None:
    """facet_values under document-level filters equals the oracle over the documents the filters allow:
    the version facets, and the source- and document-level ones."""
    def check(filters: dict[str, Any], where: LiteralString, params: dict[str, Any] | None = None,
              source_id: int | None = None) -> None:
        assert _facets(conn, filters) == _oracle(conn, source_id, where, params)
        source: LiteralString = "true" if source_id is None else "d.source_id = %(source)s"
        assert (_document_facets(conn, filters)
                == _document_oracle(conn, where + " and " + source, {**(params or {}), "source": source_id}))

    types = [value for (value,) in conn.execute("select distinct content_type from quarry.documents order by 1")]
    assert "code" in types and len(types) > 1
    for content_type in types:
        check({"content_type": {"any_of": [content_type]}}, "d.content_type = %(value)s", {"value": content_type})
    languages = [value for (value,) in conn.execute(
        "select distinct language from quarry.documents where language is not null order by 1")]
    assert len(languages) > 1
    for language in languages:
        check({"language": {"any_of": [language]}}, "d.language = %(value)s", {"value": language})
    check({"content_type": {"none_of": ["code"]}}, "d.content_type <> 'code'")
    for deprecated in (True, False):
        check({"deprecated": {"any_of": [str(deprecated).lower()]}}, "(d.deprecated or s.deprecated) = %(value)s",
              {"value": deprecated})
    check({"content_type": {"any_of": ["code"]}, "source_slug": {"any_of": ["app"]}}, "d.content_type = 'code'",
          source_id=corpus.app_id)
    # a version rule is checked per document: no kept count can answer it
    assert (_facets(conn, {"sdk_dependency": {"any_of": [RUNTIME]}, "content_type": {"any_of": ["code"]}})
            == _oracle(conn, where="d.content_type = 'code' and exists (select 1 from quarry.document_constraints(d.id)"
                                   " own where own.facet = 'sdk_dependency' and own.name = %(runtime)s)",
                       params={"runtime": RUNTIME}))


def test_an_ingest_leaves_counts_equal_to_the_oracle(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url, autocommit=True) as conn:
        app = _oracle(conn, corpus.app_id)
        # the corpus exercises what the counts must get right: nearest manifest per kind, nested
        # directories, a prefix-sharing sibling and names documents state themselves
        assert app[("sdk_dependency", "left-pad")] == 9  # the root's 7 outside examples/*/ and tools/web/, and those 2
        assert app[("sdk_dependency", RUNTIME)] == 13  # the root's 7, examples/next's 4, examples/mixed's 2
        assert app[("sdk_dependency", "requests")] == 4  # tools/ and tools/web/
        assert app[("language_target", "compact")] == 2
        assert ("sdk_dependency", "gone-lib") in app
        _assert_consistent(conn)


def test_a_reingest_with_changed_nested_manifests_recounts(corpus: Corpus) -> None:
    app = corpus.root / "app"
    (app / "examples/mixed/package.json").write_text(
        json.dumps({"name": "mixed", "dependencies": {RUNTIME: "^0.9.0", "added-lib": "^3.0.0"}}), encoding="utf-8")
    (app / "examples/next/package.json").write_text(json.dumps({"name": "next"}), encoding="utf-8")
    shutil.rmtree(app / "examples/gone")
    corpus.ingestor.ingest(app, SourceSpec(slug="app", kind="code_repo"))
    with psycopg.connect(corpus.url, autocommit=True) as conn:
        names = _oracle(conn, corpus.app_id)
        assert ("sdk_dependency", "added-lib") in names
        assert ("sdk_dependency", "other-lib") not in names
        assert ("sdk_dependency", "gone-lib") not in names
        _assert_consistent(conn)


def test_a_stale_source_is_counted_live_until_refreshed(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url, autocommit=True) as writer, psycopg.connect(corpus.url) as reader:
        _assert_consistent(writer)
        before = _oracle(writer, corpus.app_id)
        manifest = _document_id(writer, corpus.app_id, "examples/mixed/package.json")
        row = writer.execute("select kind, scope from quarry.manifests where document_id = %s", (manifest,)).fetchone()
        assert row is not None
        # committed: another connection sees the mark with the change, and counts the source live
        writer.execute("delete from quarry.manifests where document_id = %s", (manifest,))
        assert _stale(writer) == {corpus.app_id}
        changed = _oracle(reader, corpus.app_id)
        assert changed != before  # examples/mixed/counter.ts now inherits the root's names
        assert _kept(reader, corpus.app_id) == before  # the kept rows are now wrong ...
        assert _facets(reader, {"source_slug": {"any_of": ["app"]}}) == changed  # ... and not read
        assert _facets(reader) == _oracle(reader)
        assert _every_facet(reader) == _oracle(reader)
        _assert_document_filters(reader, corpus)
        reader.rollback()
        writer.execute("select quarry.refresh_version_facet_counts()")
        _assert_consistent(writer)
        assert _kept(writer, corpus.app_id) == changed
        writer.execute("insert into quarry.manifests (document_id, source_id, kind, scope) values (%s, %s, %s, %s)",
                       (manifest, corpus.app_id, *row))
        assert _stale(writer) == {corpus.app_id}
        assert _facets(writer, {"source_slug": {"any_of": ["app"]}}) == before
        # only the sources asked for are refreshed
        writer.execute("insert into quarry.version_facets_stale (source_id) values (%s)", (corpus.docs_id,))
        writer.execute("select quarry.refresh_version_facet_counts(array[%s]::bigint[])", (corpus.docs_id,))
        assert _stale(writer) == {corpus.app_id}
        assert _kept(writer, corpus.app_id) == changed
        writer.execute("select quarry.refresh_version_facet_counts(array[%s]::bigint[])", (corpus.app_id,))
        assert _kept(writer, corpus.app_id) == before
        _assert_consistent(writer)

        # a source marked with nothing changed: counted live, the same counts
        writer.execute("insert into quarry.version_facets_stale (source_id) values (%s), (%s)",
                       (corpus.app_id, corpus.docs_id))
        assert _facets(writer) == _oracle(writer)
        assert _facets(writer, {"source_slug": {"any_of": ["compact-docs"]}}) == _oracle(writer, corpus.docs_id)
        writer.execute("select quarry.refresh_version_facet_counts()")
        _assert_consistent(writer)

        # in one transaction: a deleted document marks its source, the transaction's own reads count it live
        with writer.transaction(force_rollback=True):
            writer.execute("select quarry.delete_documents(array[%s]::uuid[])",
                           (_document_id(writer, corpus.app_id, "examples/next/page.md"),))
            assert _stale(writer) == {corpus.app_id}
            assert _facets(writer) == _oracle(writer)
            assert _facets(writer, {"source_slug": {"any_of": ["app"]}}) == _oracle(writer, corpus.app_id)
            assert writer.execute("select quarry.refresh_version_facet_counts()").fetchone() != (0,)
            assert _stale(writer) == set()
            assert _kept(writer) == _oracle(writer)
            _assert_combinations(writer)
        _assert_consistent(writer)


def test_a_deprecation_keeps_version_facets_right(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url, autocommit=True) as conn:
        _assert_consistent(conn)
        try:
            conn.execute("select quarry.deprecate_document('app', 'examples/mixed/counter.ts')")
            conn.execute("update quarry.documents set deprecated = true where source_id = %s and path = %s",
                         (corpus.app_id, "src/counter.ts"))
            conn.execute("select quarry.deprecate_source('compact-docs')")
            # what a document inherits does not depend on its deprecation; counts kept per combination of
            # document facet values (deprecated among them) do, and are then recounted
            assert _stale(conn) == {corpus.app_id}
            _assert_document_filters(conn, corpus)
            conn.execute("select quarry.refresh_version_facet_counts()")
            _assert_consistent(conn)
            _assert_document_filters(conn, corpus)
        finally:
            conn.execute("select quarry.deprecate_source('compact-docs', false)")
            conn.execute("select quarry.deprecate_document('app', 'examples/mixed/counter.ts', false)")
            conn.execute("update quarry.documents set deprecated = false where source_id = %s and path = %s",
                         (corpus.app_id, "src/counter.ts"))
            conn.execute("select quarry.refresh_version_facet_counts()")
        _assert_consistent(conn)


def test_a_mark_held_by_a_writing_transaction_is_skipped(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url, autocommit=True) as conn, psycopg.connect(corpus.url) as writing:
        manifest = _document_id(conn, corpus.app_id, "tools/web/package.json")
        conn.execute("update quarry.manifests set kind = kind where document_id = %s", (manifest,))
        assert _stale(conn) == {corpus.app_id}
        # the writer holds the mark's row until it commits: a refresh now could not see its writes
        writing.execute("delete from quarry.manifests where document_id = %s", (manifest,))
        assert conn.execute("select quarry.refresh_version_facet_counts()").fetchone() == (0,)
        assert _stale(conn) == {corpus.app_id}
        writing.rollback()
        assert conn.execute("select quarry.refresh_version_facet_counts()").fetchone() != (0,)
        _assert_consistent(conn)


def test_a_document_level_filter_counts_the_matching_documents(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url, autocommit=True) as conn:
        assert _stale(conn) == set()
        _assert_document_filters(conn, corpus)


def test_a_rebuild_restores_corrupted_counts(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url, autocommit=True) as conn:
        expected = _oracle(conn)
        conn.execute("update quarry.version_facet_combinations set documents = documents + 5")
        conn.execute("delete from quarry.version_facet_combinations where source_id = %s"
                     " and facet = 'language_target'", (corpus.docs_id,))
        conn.execute("update quarry.version_facet_totals set documents = documents + 7")
        conn.execute("update quarry.version_facet_combination_totals set documents = documents + 3")
        conn.execute("update quarry.version_facet_source_totals set documents = documents + 1")
        assert _kept(conn) != expected
        assert _totals(conn) != expected
        assert _facets(conn) != expected
        assert _facets(conn, {"source_slug": {"any_of": ["app"]}}) != _oracle(conn, corpus.app_id)
        conn.execute("select quarry.rebuild_facet_counts()")
        assert _kept(conn) == expected
        _assert_consistent(conn)


def test_removing_a_source_takes_its_counts_with_it(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url) as conn:
        try:
            assert _kept(conn, corpus.docs_id)
            conn.execute("select quarry.remove_source('compact-docs')")
            assert _kept(conn, corpus.docs_id) == {}
            assert _oracle(conn) == _oracle(conn, corpus.app_id)
            _assert_consistent(conn)
        finally:
            conn.rollback()


def test_moving_a_document_marks_its_source(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url) as conn:
        try:
            conn.execute("update quarry.documents set content_hash = content_hash where source_id = %s",
                         (corpus.app_id,))
            assert _stale(conn) == set()  # nothing a count depends on changed
            moved = _document_id(conn, corpus.app_id, "src/counter.ts")
            conn.execute("update quarry.documents set path = 'examples/next/moved.ts' where id = %s", (moved,))
            assert _stale(conn) == {corpus.app_id}
            assert _facets(conn) == _oracle(conn)  # it now inherits next's names, counted live
        finally:
            conn.rollback()


def test_truncating_sources_empties_the_totals(corpus: Corpus) -> None:
    with psycopg.connect(corpus.url) as conn:
        try:
            conn.execute("truncate quarry.sources cascade")
            assert _totals(conn) == {} and _kept(conn) == {}
            assert _facets(conn) == {}
        finally:
            conn.rollback()
