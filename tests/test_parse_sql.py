"""SQL scripts: statements split outside literals and bodies, named ``create`` statements as symbols."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers import is_supported, parse_document
from engine.ingest.parsers.sql import statement_spans
from tests.parser_checks import assert_exact_chunks

MIGRATION = """\
-- Search functions: re-applied on every migrate.

set search_path = quarry;

-- Ranks chunks; the body's own semicolons must not cut it.
create or replace function quarry.search(query text, lim int default 10)
returns setof bigint
language plpgsql stable
as $body$
begin
    -- a ; in a comment, 'a ; in a string', and $$ nested $$ quotes
    return query select id from quarry.chunks where content ~ ';' limit lim;
end;
$body$;
comment on function quarry.search(text, int) is 'Chunks matching a query; one line for \\df+.';

create table if not exists "Quarry"."Odd Name" (id bigint primary key, note text default 'it''s; fine');
create index on quarry.chunks (id);
create unique index concurrently if not exists chunks_id on quarry.chunks (id);
/* a block /* nested */ comment; still a comment */
insert into quarry.settings values (E'quote \\' ; semicolon', 1);
"""


def _parse(path: str, source: str) -> ParsedDocument:
    raw = source.encode()
    document = parse_document(path, raw)
    assert (document.content_type, document.language) == ("code", "sql")
    assert all(chunk.is_code for chunk in document.chunks)
    assert_exact_chunks(raw, document)
    return document


def test_statements_end_only_at_semicolons_outside_literals_comments_and_bodies() -> None:
    raw = MIGRATION.encode()
    statements = [raw[start:end].decode().strip() for start, end in statement_spans(raw)]

    # each statement with the comments above it, up to and including its own `;`
    assert [statement.splitlines()[-1] for statement in statements] == [
        "set search_path = quarry;",
        "$body$;",
        "comment on function quarry.search(text, int) is 'Chunks matching a query; one line for \\df+.';",
        """create table if not exists "Quarry"."Odd Name" (id bigint primary key, note text default 'it''s; fine');""",
        "create index on quarry.chunks (id);",
        "create unique index concurrently if not exists chunks_id on quarry.chunks (id);",
        "insert into quarry.settings values (E'quote \\' ; semicolon', 1);",
    ]
    assert "return query" in statements[1] and "end;" in statements[1]


def test_created_objects_are_symbols_and_other_statements_module_chunks() -> None:
    document = _parse("sql/020-search.sql", MIGRATION)

    paths = [chunk.symbol_path for chunk in document.chunks]
    assert paths == [
        "sql.020-search",  # file header and `set search_path`
        "sql.020-search.quarry.search",
        "sql.020-search",  # comment on function
        "sql.020-search.Quarry.Odd Name",
        "sql.020-search",  # `create index on` names no index: it stays with the module
        "sql.020-search.chunks_id",
        "sql.020-search",  # a nested block comment, an insert
    ]
    search = document.chunks[1]
    assert search.content.startswith("-- Ranks chunks")  # the comment right above it belongs to it
    assert search.content.endswith("$body$;")
    assert "-- Search functions" in document.chunks[0].content and "create index on" in document.chunks[4].content
    assert "nested */ comment; still" in document.chunks[6].content


def test_a_long_function_is_split_with_one_symbol_path() -> None:
    body = "\n".join(f"    perform quarry.step_{index}(argument_{index});" for index in range(200))
    document = _parse("f.sql", f"create function f() returns void language plpgsql as $$\nbegin\n{body}\nend;\n$$;\n")

    assert len(document.chunks) > 1
    assert {chunk.symbol_path for chunk in document.chunks} == {"f.f"}


def test_unterminated_literals_run_to_the_end_without_failing() -> None:
    document = _parse("broken.sql", "select 1;\ncreate function g() returns int as $$ select 'open;\n")
    assert [chunk.symbol_path for chunk in document.chunks] == ["broken", "broken.g"]


def test_sql_extensions_are_supported() -> None:
    assert all(is_supported(f"db/schema{extension}") for extension in (".sql", ".psql", ".pgsql"))


_SQL_FRAGMENTS = st.sampled_from(
    ["", ";", "select 1;", "create function f() as $$", "$$;", "$tag$", "'", "''", '"', "--", "/*", "*/",
     "create table t (a int);", "E'\\'", "create index on t (a);", "  -- comment", "Ünïcödé 中文;", "x" * 3000]
)


@given(lines=st.lists(_SQL_FRAGMENTS, max_size=40))
@settings(max_examples=50, deadline=None)
def test_sql_chunk_invariants_on_arbitrary_input(lines: list[str]) -> None:
    _parse("db/x.sql", "\n".join(lines))
