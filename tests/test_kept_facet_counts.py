"""Version facet counts kept per source and in total answer as a per-document count does, whatever wrote last.

The oracle is per document: the names ``quarry.document_constraints`` gives it (its own constraints and
its governing manifests'). ``quarry.facet_values`` reads the kept counts when nothing is stale and
computes a stale source's live; either way it must answer what the oracle does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from engine.embed.base import SPACES, Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from tests.corpus import write_corpus

VERSION_FACETS = ("language_target", "sdk_dependency")
APP = {
    "package.json": json.dumps({"name": "app", "dependencies": {"react": "^18.2.0", "left-pad": "^1.3.0"}}),
    "src/main.ts": "// the application\nexport function main() {}\n",
    "examples/next/package.json": json.dumps({"name": "next", "dependencies": {"react": "^19.0.0", "next": "^15"}}),
    "examples/next/page.ts": "// a page\nexport function page() {}\n",
    "examples/next/deep/widget.ts": "// a widget\nexport function widget() {}\n",
    "examples/old/package.json": json.dumps({"name": "old", "dependencies": {"jquery": "^3"}}),
    "examples/old/legacy.ts": "// legacy code\nexport function legacy() {}\n",
    "tools/pyproject.toml": "[project]\nname = \"tools\"\ndependencies = [\"requests>=2.31\"]\n",
    "tools/run.py": "def run():\n    return 1\n",
    "guide/counter.md": "---\nversion: \">=0.17.2 <0.18\"\n---\n# Counters\n\n```compact\n"
                        "pragma language_version 0.17.0;\nledger counter: Counter;\n```\n",
    "guide/notes.md": "# Notes\n\nNothing versioned here.\n",
}
DOCS = {
    "intro.md": "---\nversion: \"0.15\"\n---\n# Intro\n\n```compact\npragma language_version 0.15.0;\n```\n",
    "plain.md": "# Plain\n\nNo version.\n",
}


@pytest.fixture(scope="module")
def corpus(migrated_url: str, session_pool: ConnectionPool, local_embedder: Embedder,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Ingestor, Path]]:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")
    root = tmp_path_factory.mktemp("kept-facets")
    ingestor = Ingestor(session_pool, dict.fromkeys(SPACES, local_embedder), max_file_bytes=1_000_000)
    ingestor.ingest(write_corpus(root / "app", APP), SourceSpec(slug="app", kind="code_repo"))
    ingestor.ingest(write_corpus(root / "docs", DOCS), SourceSpec(slug="docs", kind="docs_site"))
    yield ingestor, root
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources, quarry.embedding_spaces cascade")


def _oracle(conn: psycopg.Connection[Any], slug: str | None = None,
            content_type: str | None = None) -> dict[tuple[str, str], int]:
    rows = conn.execute(
        "select vc.facet, vc.name, count(distinct d.id) from quarry.documents d"
        " join quarry.sources s on s.id = d.source_id"
        " cross join lateral quarry.document_constraints(d.id) vc"
        " where vc.name <> '' and (%(slug)s::text is null or s.slug = %(slug)s)"
        "   and (%(type)s::text is null or d.content_type = %(type)s)"
        " group by 1, 2", {"slug": slug, "type": content_type}).fetchall()
    return {(facet, name): int(documents) for facet, name, documents in rows}


def _facets(conn: psycopg.Connection[Any], filters: dict[str, Any] | None = None) -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for facet in VERSION_FACETS:
        rows = conn.execute("select facet_key, facet_value, documents"
                            " from quarry.facet_values(%s, %s::jsonb, null, 1000)",
                            (facet, json.dumps(filters) if filters else None)).fetchall()
        found.update({(key, value): int(documents) for key, value, documents in rows})
    return found


def _kept(conn: psycopg.Connection[Any]) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """(per-source rows summed per name, the totals)."""
    summed = conn.execute("select facet, name, sum(documents) from quarry.version_facet_counts"
                          " group by 1, 2").fetchall()
    totals = conn.execute("select facet, name, documents from quarry.version_facet_totals").fetchall()
    return ({(facet, name): int(n) for facet, name, n in summed}, {(facet, name): int(n) for facet, name, n in totals})


def _stale(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute("select s.slug from quarry.version_facets_stale st"
                        " join quarry.sources s on s.id = st.source_id")
    return {slug for (slug,) in rows.fetchall()}


def _assert_kept_match(conn: psycopg.Connection[Any]) -> None:
    oracle = _oracle(conn)
    assert _stale(conn) == set()
    summed, totals = _kept(conn)
    assert summed == oracle
    assert totals == oracle
    for slug in ("app", "docs"):
        assert _facets(conn, {"source_slug": {"any_of": [slug]}}) == _oracle(conn, slug)
    assert _facets(conn) == oracle


def test_an_ingest_leaves_counts_kept_and_right(corpus: tuple[Ingestor, Path], migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        oracle = _oracle(conn)
        # the corpus exercises inheritance: a nested manifest's names, and a page stating its own
        # the root's package.json governs every document without a nearer one (tools/ has a pyproject.toml,
        # another kind), examples/next's its own three, examples/old's none: 6 + 3
        assert oracle[("sdk_dependency", "react")] == 9
        assert oracle[("sdk_dependency", "jquery")] == 2
        assert ("language_target", "compact") in oracle
        _assert_kept_match(conn)


def test_filtered_facets_count_the_matching_documents(corpus: tuple[Ingestor, Path], migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        for content_type in ("code", "markdown"):
            expected = _oracle(conn, content_type=content_type)
            assert expected
            assert _facets(conn, {"content_type": {"any_of": [content_type]}}) == expected


def test_a_stale_source_is_counted_live_until_refreshed(corpus: tuple[Ingestor, Path], migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        before = _oracle(conn)
        # a manifest's names gone: every document below it loses them
        conn.execute("delete from quarry.version_constraints vc using quarry.documents d"
                     " where d.id = vc.document_id and d.path = 'examples/next/package.json'")
        assert _stale(conn) == {"app"}
        after = _oracle(conn)
        assert after != before
        assert _facets(conn) == after  # not the kept rows, which still count next's names
        assert _facets(conn, {"source_slug": {"any_of": ["app"]}}) == _oracle(conn, "app")
        summed, _ = _kept(conn)
        assert summed == before
        conn.execute("select quarry.refresh_version_facet_counts()")
        _assert_kept_match(conn)
        conn.rollback()  # the corpus as ingested, for the other tests
    with psycopg.connect(migrated_url) as conn:
        _assert_kept_match(conn)


def test_a_write_that_moves_no_document_marks_nothing(corpus: tuple[Ingestor, Path], migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        conn.execute("update quarry.documents set deprecated = true where path = 'src/main.ts'")
        assert _stale(conn) == set()
        conn.execute("update quarry.documents set path = 'examples/old/main.ts' where path = 'src/main.ts'")
        assert _stale(conn) == {"app"}
        assert _facets(conn) == _oracle(conn)  # main.ts now inherits old's jquery, not the root's names
        conn.rollback()


def test_a_reingest_after_manifests_change_recounts(corpus: tuple[Ingestor, Path], migrated_url: str) -> None:
    ingestor, root = corpus
    app = root / "app"
    (app / "examples/old/package.json").write_text(json.dumps({"dependencies": {"jquery": "^3", "lodash": "^4"}}))
    shutil.rmtree(app / "examples/next")
    ingestor.ingest(app, SourceSpec(slug="app", kind="code_repo"))
    with psycopg.connect(migrated_url) as conn:
        oracle = _oracle(conn)
        assert ("sdk_dependency", "next") not in oracle
        assert oracle[("sdk_dependency", "lodash")] == 2
        _assert_kept_match(conn)


def test_deleting_a_source_takes_its_counts_out_of_the_totals(corpus: tuple[Ingestor, Path],
                                                               migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        conn.execute("delete from quarry.sources where slug = 'docs'")
        _assert_kept_match(conn)
        assert ("language_target", "compact") in _kept(conn)[1]  # app's guide still states it
        conn.rollback()


def test_reindex_recounts_totals_that_drifted(corpus: tuple[Ingestor, Path], migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        conn.execute("update quarry.version_facet_totals set documents = documents + 5")
        conn.execute("update quarry.version_facet_counts set documents = documents + 1")
        assert _kept(conn)[1] != _oracle(conn)
        conn.execute("select quarry.rebuild_facet_counts()")
        _assert_kept_match(conn)
        conn.rollback()


def test_truncating_sources_empties_the_totals(migrated_url: str, corpus: tuple[Ingestor, Path]) -> None:
    with psycopg.connect(migrated_url) as conn:
        conn.execute("truncate quarry.sources cascade")
        assert _kept(conn) == ({}, {})
        assert _facets(conn) == {}
        conn.rollback()
