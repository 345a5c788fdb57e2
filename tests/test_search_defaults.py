"""Each search default lives once: request defaults in engine.retrieval.request, ranking defaults in SQL.

psql callers of quarry.search_hits / quarry.hybrid_search get the request defaults as
parameter defaults; this test fails when they drift from Python's. Ranking parameters
default to null in both signatures, and only quarry.ranking_defaults() holds their values.
"""

from __future__ import annotations

import pytest
from psycopg_pool import ConnectionPool

from engine.retrieval.request import DEFAULT_CODE_MODE, DEFAULT_LIMIT, DEFAULT_MODE, DEFAULT_VERSION_MATCH, Ranking
from mcp_server.schemas import AdvancedSearchArgs, SearchArgs

REQUEST_DEFAULTS = {"search_mode": f"'{DEFAULT_MODE}'::text", "match_count": str(DEFAULT_LIMIT),
                    "code_mode": f"'{DEFAULT_CODE_MODE}'::text",
                    "version_matching": f"'{DEFAULT_VERSION_MATCH}'::text"}
RANKING_PARAMETERS = {"fusion", "vector_weight", "code_vector_weight", "rrf_k", "candidate_count"}


def _parameter_defaults(pool: ConnectionPool, function: str) -> dict[str, str]:
    """Each parameter of ``quarry.<function>`` that has a default, with its default as SQL text."""
    with pool.connection() as conn:
        row = conn.execute(
            "select p.proargnames, p.pronargs, p.pronargdefaults, pg_get_expr(p.proargdefaults, 0)"
            " from pg_proc p where p.oid = to_regproc(%s)", (f"quarry.{function}",)).fetchone()
    assert row is not None, function
    names, count, with_defaults, expressions = row
    # pg_get_expr gives the defaults as one comma-separated list: split it outside quotes and parentheses
    values, depth, quoted, current = [], 0, False, ""
    for character in expressions:
        if character == "'":
            quoted = not quoted
        elif not quoted and character in "([":
            depth += 1
        elif not quoted and character in ")]":
            depth -= 1
        if character == "," and depth == 0 and not quoted:
            values.append(current.strip())
            current = ""
        else:
            current += character
    values.append(current.strip())
    assert len(values) == with_defaults
    return dict(zip(names[count - with_defaults:count], values, strict=True))


@pytest.mark.parametrize("function", ["search_hits", "hybrid_search"])
def test_sql_request_defaults_are_pythons(pool: ConnectionPool, function: str) -> None:
    defaults = _parameter_defaults(pool, function)
    assert {name: defaults[name] for name in REQUEST_DEFAULTS} == REQUEST_DEFAULTS
    assert all(defaults[name].startswith("NULL") for name in RANKING_PARAMETERS)


def test_mcp_tools_take_the_request_defaults() -> None:
    search = SearchArgs(query="x")
    advanced = AdvancedSearchArgs(queries=["x"])
    for args in (search, advanced):
        assert (args.mode, args.code_mode, args.limit) == (DEFAULT_MODE, DEFAULT_CODE_MODE, DEFAULT_LIMIT)
    assert advanced.version_match == DEFAULT_VERSION_MATCH


def test_ranking_defaults_live_in_sql_and_python_overrides_only_what_it_sets(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        row = conn.execute("select fusion, vector_weight, code_vector_weight, rrf_k, candidate_count"
                           " from quarry.ranking_defaults()").fetchone()
    assert row is not None and row[0] in ("convex", "rrf") and all(value is not None for value in row)
    assert Ranking().arguments() == {}
    assert Ranking(vector_weight=0.5, rrf_k=10).arguments() == {"vector_weight": 0.5, "rrf_k": 10}
    assert set(Ranking(*row).arguments()) == RANKING_PARAMETERS
