from __future__ import annotations

import psycopg

from engine.migrations import ensure_migrated, schema_fingerprint, upgrade


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
