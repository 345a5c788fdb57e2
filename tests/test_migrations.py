from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from alembic import command
from engine.embed.base import Embedder
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.store.db import open_pool
from engine.store.migrations import alembic_config, ensure_migrated, schema_fingerprint, upgrade
from tests.corpus import write_corpus


def test_upgrade_is_idempotent_and_records_the_fingerprint(database_url: str) -> None:
    upgrade(database_url)
    upgrade(database_url)
    assert ensure_migrated(database_url) is False
    with psycopg.connect(database_url) as conn:
        stored = conn.execute("select fingerprint from quarry.schema_state").fetchone()
        tables = conn.execute(
            "select count(*) from information_schema.tables where table_schema = 'quarry'"
        ).fetchone()
    assert stored == (schema_fingerprint(),)
    assert tables is not None and tables[0] >= 6


def test_every_quarry_function_is_documented(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        undocumented = conn.execute(
            """
            select p.proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname = 'quarry' and obj_description(p.oid, 'pg_proc') is null
            """
        ).fetchall()
    assert undocumented == []


def test_identifier_words_split_code_names(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        def matches(document: str, query: str) -> bool:
            # the text leg matches a chunk when they share a lexeme (any-term BM25)
            row = conn.execute(
                "select quarry.query_lexemes(%s) && array(select lexeme from"
                " unnest(quarry.chunk_tsvector(null, '{}', null, %s)))",
                (query, document),
            ).fetchone()
            return bool(row and row[0])

        for document in ["def parseUserId(raw):", "def parse_user_id(raw):", "HTTPServer.parseUserId()"]:
            row = conn.execute(
                "select array_agg(lexeme order by lexeme) from unnest(quarry.chunk_tsvector(null, '{}', null, %s))",
                (document,),
            ).fetchone()
            assert row is not None
            assert {"pars", "user", "id"} <= set(row[0]), document
        assert matches("def parseUserId(raw):", "parse user id")
        assert matches("def parse_user_id(raw):", "parseUserId")
        assert not matches("completely unrelated words", "parse user id")


@pytest.fixture()
def scratch_url(server_url: str) -> Iterator[str]:
    """A database of its own, for migrations run down and up again."""
    name = "quarry_migration_test"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(server_url, dbname=name)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def _alembic(url: str, direction: str, revision: str) -> None:
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            getattr(command, direction)(config, revision)
    finally:
        engine.dispose()


def _migrated_with_sample_corpus(url: str, embedder: Embedder, root: Path) -> None:
    """Migrate ``url`` to the head and ingest the sample corpus (written under ``root``) into it."""
    upgrade(url)
    with open_pool(url, min_size=1, max_size=4, name="migration-test") as pool:
        Ingestor(pool, {"text": embedder}, max_file_bytes=1_000_000).ingest(
            write_corpus(root), SourceSpec(slug="sample"))


def test_0014_rebuilds_every_space_index_in_half_precision_and_rewrites_deferred_ones(
    scratch_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(scratch_url)
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        conn.execute("select quarry.create_space_generation('text', 'model', 3, 'text')")
        conn.execute("select quarry.create_space_generation('code', 'model', 3, 'code')")
        conn.execute("select quarry.defer_space_index('code')")  # as a killed bulk load leaves it
        conn.execute("drop index quarry.embeddings_hnsw_code")

    def definitions() -> tuple[str, str]:
        with psycopg.connect(scratch_url, autocommit=True) as conn:
            built = conn.execute("select pg_get_indexdef('quarry.embeddings_hnsw_text'::regclass)").fetchone()
            deferred = conn.execute("select definition from quarry.deferred_vector_indexes where space = 'code'"
                                    ).fetchone()
        assert built is not None and deferred is not None
        return built[0], deferred[0]

    def restored() -> str:
        """Build the deferred index as the next ingest would, and return its definition."""
        with psycopg.connect(scratch_url, autocommit=True) as conn:
            conn.execute("select quarry.restore_space_indexes()")
            row = conn.execute("select pg_get_indexdef('quarry.embeddings_hnsw_code'::regclass)").fetchone()
            conn.execute("select quarry.defer_space_index('code')")
            conn.execute("drop index quarry.embeddings_hnsw_code")
        assert row is not None
        return str(row[0])

    half = re.compile(r"::(public\.)?halfvec\(3\)\) (public\.)?halfvec_cosine_ops")
    single = re.compile(r"::(public\.)?vector\(3\)\) (public\.)?vector_cosine_ops")
    built, deferred = definitions()
    assert half.search(built) and half.search(deferred)
    _alembic(scratch_url, "downgrade", "0013_ingest")
    built, deferred = definitions()
    assert single.search(built) and single.search(deferred) and single.search(restored())
    capsys.readouterr()
    upgrade(scratch_url)  # as quarry migrate does, saying what it rebuilds
    assert "quarry: rebuilding the HNSW index of embedding space text (halfvec, 0 vectors)" in capsys.readouterr().err
    built, deferred = definitions()
    assert half.search(built) and "ef_construction='128'" in built
    assert half.search(deferred) and half.search(restored())


def test_0015_recomputes_code_postings_with_their_own_length_normalisation(
    scratch_url: str, local_embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _migrated_with_sample_corpus(scratch_url, local_embedder, tmp_path)

    Postings = dict[tuple[object, int], tuple[bool, float, float, float]]

    def impacts() -> tuple[Postings, float]:
        """(chunk, term) -> is the chunk code, its impact, term frequency, chunk length; and the average length."""
        with psycopg.connect(scratch_url) as conn:
            # from 0022 most postings are in blocks, and their term frequency is the chunk's
            rows = conn.execute(
                "select p.chunk_id, p.term_id, c.is_code, p.impact, f.term_frequency, ct.chunk_length"
                " from quarry.text_index_postings p join quarry.chunks c on c.id = p.chunk_id"
                " join quarry.chunk_terms ct on ct.chunk_id = p.chunk_id"
                " join quarry.text_terms t on t.id = p.term_id"
                " join lateral quarry.weighted_term_frequencies("
                " quarry.chunk_tsvector(c.title, c.heading_path, c.symbol_path, c.content)) f on f.lexeme = t.lexeme"
                if conn.execute("select to_regclass('quarry.chunk_terms') is not null").fetchone() == (True,) else
                "select p.chunk_id, p.term_id, c.is_code, p.impact, p.term_frequency, p.chunk_length"
                " from quarry.text_postings p join quarry.chunks c on c.id = p.chunk_id").fetchall()
            stats = conn.execute("select total_length / chunk_count from quarry.text_stats").fetchone()
        assert stats is not None
        return {(row[0], row[1]): (row[2], row[3], row[4], row[5]) for row in rows}, float(stats[0])

    def expected(b: float, frequency: float, length: float, average: float) -> float:
        return frequency * 1.9 / (frequency + 0.9 * (1 - b + b * length / average))

    ingested, average = impacts()
    assert {is_code for is_code, *_ in ingested.values()} == {True, False}
    for is_code, impact, frequency, length in ingested.values():
        assert impact == pytest.approx(expected(0.9 if is_code else 0.4, frequency, length, average), rel=1e-5)

    _alembic(scratch_url, "downgrade", "0014_hnsw")  # code back to prose's b = 0.4, prose untouched
    downgraded, average = impacts()
    for key, (is_code, impact, frequency, length) in downgraded.items():
        assert impact == pytest.approx(expected(0.4, frequency, length, average), rel=1e-5)
        assert is_code or impact == ingested[key][1]
    capsys.readouterr()
    upgrade(scratch_url)
    assert re.search(r"quarry: recomputing the BM25 impacts of \d+ code postings \(length normalisation b = 0.9\)",
                     capsys.readouterr().err)
    assert {key: value[1] for key, value in impacts()[0].items()} == pytest.approx(
        {key: value[1] for key, value in ingested.items()}, rel=1e-5)


def test_0025_fills_the_per_source_version_totals_from_the_kept_combinations(scratch_url: str) -> None:
    upgrade(scratch_url)
    _alembic(scratch_url, "downgrade", "0024_half_precision_embeddings")
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        sources = [conn.execute("insert into quarry.sources (slug, display_name) values (%s, %s) returning id",
                                (slug, slug)).fetchone() for slug in ("one", "two")]
        combinations = ("{code,python,NULL,false}", "{markdown,NULL,NULL,false}", "{code,typescript,p1,true}")
        conn.execute("insert into quarry.version_facet_combinations (source_id, combination, facet, name, documents)"
                     " select s.id, c.combination::text[], f.facet, f.name, s.id + length(c.combination) + f.n"
                     " from unnest(%s::bigint[]) s (id) cross join unnest(%s::text[]) c (combination)"
                     " cross join (values ('sdk_dependency', 'react', 1), ('sdk_dependency', 'vue', 2),"
                     "             ('language_target', 'python', 3)) f (facet, name, n)",
                     ([row[0] for row in sources if row], list(combinations)))
    upgrade(scratch_url)
    with psycopg.connect(scratch_url) as conn:
        kept = conn.execute("select source_id, facet, name, documents from quarry.version_facet_source_totals"
                            " order by 1, 2, 3").fetchall()
        summed = conn.execute("select source_id, facet, name, sum(documents)::bigint"
                              " from quarry.version_facet_combinations group by 1, 2, 3 order by 1, 2, 3").fetchall()
    assert len(kept) == 6 and kept == summed


def test_0027_gives_every_chunk_its_documents_length_and_checks_it(
    scratch_url: str, local_embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _migrated_with_sample_corpus(scratch_url, local_embedder, tmp_path)

    def lengths() -> dict[object, int]:
        with psycopg.connect(scratch_url) as conn:
            return {chunk: length for chunk, length in conn.execute("select id, document_chunks from quarry.chunks")}

    ingested = lengths()
    assert max(ingested.values()) > 1
    _alembic(scratch_url, "downgrade", "0026_text_postings_deferred")
    capsys.readouterr()
    upgrade(scratch_url)  # as quarry migrate does, saying what it rewrites
    assert f"quarry: storing each chunk's document length in quarry.chunks ({len(ingested)} chunks)" in (
        capsys.readouterr().err)
    assert lengths() == ingested
    with psycopg.connect(scratch_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("update quarry.chunks set document_chunks = ordinal where ordinal > 0")
