"""quarry.version_* (sql/005-semver.sql) against npm's semver, the reference for node-semver ranges.

One long-lived node process (tests/semver_oracle/oracle.js) answers batches of cases, and
each batch is one SQL query over ``unnest``, so thousands of generated cases take seconds.
Node and npm are required: without them these tests fail rather than skip.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg_pool import ConnectionPool

from tests.node_semver import SemverOracle

BATCH = 50  # cases per example: one oracle request and one SQL query each
# Each example is a batch of BATCH cases. Shrinking a fixed-size batch would replay it
# hundreds of times, so it is off: a failure lists every disagreeing case instead.
GENERATED = settings(
    max_examples=40,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def sql_column(pool: ConnectionPool, expression: str, cases: Sequence[Sequence[str]]) -> list[Any]:
    """Evaluate expression (over columns a, b) for every case in one query, in case order."""
    query = sql.SQL("select {} from unnest(%(a)s::text[], %(b)s::text[]) with ordinality as t(a, b, n) order by n")
    with pool.connection() as conn:
        rows = conn.execute(
            query.format(sql.SQL(expression)),  # expression: fixed text from this module
            {"a": [case[0] for case in cases], "b": [case[-1] for case in cases]},
        ).fetchall()
    return [row[0] if len(row) == 1 else tuple(row) for row in rows]


# ---------------------------------------------------------------- the generated grammar
# Versions and partial versions are enumerated once and sampled whole: one draw each keeps
# generation (hypothesis costs tens of microseconds a draw) well below the SQL time.

NUMBERS = ["0", "1", "2", "10"]
PRERELEASES = ["alpha", "alpha.1", "alpha.beta", "beta.2", "beta.11", "rc.1", "0", "1", "a-b", "1a", "-", "10.x1"]
VERSIONS = [
    f"{prefix}{major}.{minor}.{patch}{prerelease}{build}"
    for prefix in ["", "v"]
    for major, minor, patch in itertools.product(NUMBERS, repeat=3)
    for prerelease in ["", "", *(f"-{identifiers}" for identifiers in PRERELEASES)]
    for build in ["", "", "", "+build", "+001"]
]
# 1, 1.2, 1.x, 1.2.*, X.x.x: numbers, then wildcards, never the other way round
PARTIALS = [
    prefix + ".".join(parts)
    for prefix in ["", "v"]
    for length in (1, 2, 3)
    for numbered in range(length + 1)
    for parts in itertools.product(*([NUMBERS] * numbered + [["x", "X", "*"]] * (length - numbered)))
    if numbered < 3
]
OPERATORS = ["", "", "=", "<", "<=", ">", ">=", "^", "^", "~", "~", "~>", "> ", "<= ", "^ ", "~ "]

# boundaries and repeats, so comparators often share a version: 0.0.0, the -0 lower bounds
HOT_VERSIONS = [
    "0.0.0",
    "v0.0.0",
    "0.0.0-0",
    "0.0.1",
    "1.0.0",
    "1.0.0-0",
    "1.2.3",
    "v1.2.3",
    "1.2.3-alpha",
    "1.2.3-beta",
    "2.0.0-0",
    "2.0.0",
]

versions = st.one_of(st.sampled_from(VERSIONS), st.sampled_from(HOT_VERSIONS))
partial_versions = st.one_of(versions, st.sampled_from(PARTIALS))
# <1.2, >= 1.2.3-beta, =1.2.3, ^0.0.3, ~1.2, ~>1, 1.x, *
comparators = st.builds("".join, st.tuples(st.sampled_from(OPERATORS), partial_versions))
# comparators that must all hold, or a hyphen range 1.2 - 2.3.4
comparator_sets = st.one_of(
    *[st.lists(comparators, min_size=1, max_size=3).map(" ".join)] * 3,
    st.lists(comparators, min_size=1, max_size=3).map("  ".join),
    st.builds(" - ".join, st.tuples(partial_versions, partial_versions)),
)
# sets joined by ||; now and then empty or * (any version)
ranges = st.one_of(
    *[st.builds(str.join, st.sampled_from([" || ", "||", " ||  "]), st.lists(comparator_sets, min_size=1, max_size=3))]
    * 12,
    st.sampled_from(["", " ", "*", "x"]),
)


# quarry.version_comparators(a) written the way node-semver prints a Range: sets joined by
# ||, comparators by a space, = left out, * as nothing
DESUGARED = """(
    select string_agg(s.comparators, '||' order by s.alternative) from (
        select c.alternative,
               string_agg(case (c.comparator).operator when '*' then '' when '=' then (c.comparator).version
                          else (c.comparator).operator || (c.comparator).version end,
                          ' ' order by c.position) as comparators
        from quarry.version_comparators(a) c group by c.alternative) s)"""


def disagreements(cases: Sequence[Sequence[str]], expected: list[Any], got: list[Any]) -> list[str]:
    return [
        f"{case!r}: semver {want!r}, quarry {have!r}"
        for case, want, have in zip(cases, expected, got, strict=True)
        if want != have
    ]


# ---------------------------------------------------------------- differential tests


@pytest.mark.slow  # a minute beside the other worker: its module starts early, not in the run's tail
@settings(GENERATED, max_examples=100)
@given(cases=st.lists(st.tuples(ranges, ranges), min_size=BATCH, max_size=BATCH))
def test_version_satisfies_agrees_with_semver_intersects(
    session_pool: ConnectionPool, semver_oracle: SemverOracle, cases: list[tuple[str, str]]
) -> None:
    expected = semver_oracle.ask("intersects", cases)
    got = sql_column(
        session_pool,
        "quarry.version_satisfies(a, b), quarry.version_range(a) && quarry.version_range(b)",
        cases,
    )
    assert disagreements(cases, expected, [satisfies for satisfies, _ in got]) == []
    # && on the stored multiranges is a sound prefilter: it never drops a match
    assert [case for case, want, (_, overlaps) in zip(cases, expected, got, strict=True) if want and not overlaps] == []


@GENERATED
@given(cases=st.lists(st.tuples(ranges), min_size=BATCH, max_size=BATCH))
def test_version_comparators_desugar_like_semver(
    session_pool: ConnectionPool, semver_oracle: SemverOracle, cases: list[tuple[str]]
) -> None:
    expected = semver_oracle.ask("desugar", cases)
    assert disagreements(cases, expected, sql_column(session_pool, DESUGARED, cases)) == []


@GENERATED
@given(cases=st.lists(st.tuples(versions, ranges), min_size=BATCH, max_size=BATCH))
def test_version_contains_agrees_with_semver_satisfies(
    session_pool: ConnectionPool, semver_oracle: SemverOracle, cases: list[tuple[str, str]]
) -> None:
    expected = semver_oracle.ask("satisfies", cases)
    got = sql_column(
        session_pool, "quarry.version_contains(b, a), quarry.version_range(b) @> quarry.version_key(a)", cases
    )
    assert disagreements(cases, expected, [contains for contains, _ in got]) == []
    assert [case for case, want, (_, inside) in zip(cases, expected, got, strict=True) if want and not inside] == []


@settings(GENERATED, max_examples=20)
@given(cases=st.lists(st.tuples(versions, versions), min_size=BATCH, max_size=BATCH))
def test_semver_cmp_agrees_with_semver_compare(
    session_pool: ConnectionPool, semver_oracle: SemverOracle, cases: list[tuple[str, str]]
) -> None:
    expected = semver_oracle.ask("compare", cases)
    assert disagreements(cases, expected, sql_column(session_pool, "quarry.semver_cmp(a, b)", cases)) == []


# ---------------------------------------------------------------- tricky cases, by hand

PRECEDENCE = [  # semver.org section 11, then numbers by value, not by text
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1-0",
    "1.0.1",
    "1.2.0",
    "1.10.0",
    "2.0.0-0",
    "2.0.0",
    "10.0.0",
    "1234567890.0.0",
]


def test_version_keys_sort_in_semver_precedence(pool: ConnectionPool, semver_oracle: SemverOracle) -> None:
    with pool.connection() as conn:
        rows = conn.execute(
            "select v from unnest(%s::text[]) v order by quarry.version_key(v)", (list(reversed(PRECEDENCE)),)
        ).fetchall()
    assert [row[0] for row in rows] == PRECEDENCE
    pairs = list(itertools.pairwise(PRECEDENCE))
    assert semver_oracle.ask("compare", pairs) == [-1] * len(pairs)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("v1.2.3", "=1.2.3", 0),
        (" 1.2.3 ", "1.2.3", 0),
        ("1.2.3+build.1", "1.2.3+other", 0),
        ("1.0.0-a", "1.0.0-a-b", -1),  # a shorter identifier sorts first
        ("1.0.0-a-b", "1.0.0-ab", -1),  # '-' is below letters
        ("1.0.0-1a", "1.0.0-a", -1),  # alphanumerics compare as text
        ("1.0.0-999", "1.0.0-a", -1),  # numbers sort before words
        ("1.0.0-alpha", "1.0.0-alpha.0", -1),  # fewer identifiers sort first
    ],
)
def test_semver_cmp_cases(pool: ConnectionPool, a: str, b: str, expected: int) -> None:
    with pool.connection() as conn:
        assert conn.execute("select quarry.semver_cmp(%s, %s), quarry.semver_cmp(%s, %s)", (a, b, b, a)).fetchone() == (
            expected,
            -expected,
        )


@pytest.mark.parametrize(
    ("range_text", "desugared"),
    [
        ("^0.0.3", ">=0.0.3 <0.0.4-0"),
        ("^0.2.3", ">=0.2.3 <0.3.0-0"),
        ("^1.2.3-beta.2", ">=1.2.3-beta.2 <2.0.0-0"),
        ("^0.x", "<1.0.0-0"),  # >=0.0.0 means any version, dropped beside another comparator
        ("~1.2", ">=1.2.0 <1.3.0-0"),
        ("~>1", ">=1.0.0 <2.0.0-0"),
        ("<1.2", "<1.2.0-0"),
        (">1.2", ">=1.3.0"),
        ("<=1.2", "<1.3.0-0"),
        ("1.2 - 2.3.4", ">=1.2.0 <=2.3.4"),
        ("1.2.3 - 2.3", ">=1.2.3 <2.4.0-0"),
        ("v1.2.3 - *", ">=1.2.3"),
        ("1.x || >=2.5.0 || 5.0.0 - 7.2.3", ">=1.0.0 <2.0.0-0||>=2.5.0||>=5.0.0 <=7.2.3"),
        ("*", ""),
        ("", ""),
        ("1.2.3 || *", ""),  # any alternative that is * makes the range *
        (">x || 1.2.3", "1.2.3"),  # null sets are dropped beside others
        ("<0", "<0.0.0-0"),
        (">=v0.0.0", ">=0.0.0"),  # node-semver rewrites only ">=0.0.0" as written to *
    ],
)
def test_version_comparators_cases(
    pool: ConnectionPool, semver_oracle: SemverOracle, range_text: str, desugared: str
) -> None:
    assert semver_oracle.ask("desugar", [[range_text]]) == [desugared]
    assert sql_column(pool, DESUGARED, [[range_text]]) == [desugared]


@pytest.mark.parametrize(
    ("constraint", "range_text", "expected"),
    [
        ("^1.2.3", "1.x", True),
        ("^1.2.3", ">=2", False),
        ("^0.0.3", "0.0.4", False),
        ("~1.2.3", "1.2.9 || 3", True),
        (">=1.2.3 <1.2.3", "*", False),  # unsatisfiable on its own
        (">=1.0.0 <=1.0.0", "1.0.0", True),
        (">1.0.0", "<=1.0.0", False),
        # prereleases: a lone prerelease meets only comparators naming one of its release
        ("1.2.3-beta", ">=1.0.0", False),
        ("1.2.3-beta", ">=1.2.3-alpha", True),
        ("1.2.3-beta", "^1.2.3-alpha <2", False),  # every bound must: <2 is <2.0.0-0, of 2.0.0
        ("1.2.3-beta", "*", False),
        ("*", "1.2.3-beta", True),  # node-semver is not symmetric here
        (">=1.2.3-beta", "<1.2.3", True),  # two bounds overlap as intervals
        (">1.2.3-a <1.2.3-a.0", "*", True),  # though no version lies strictly between
        # <0.0.0 "cannot be lower than anything": it meets only * and lone versions
        ("<0.0.0", "*", True),
        ("<0.0.0-beta", ">=0.0.0-alpha", False),
        ("<0.0.0-beta", "0.0.0-alpha", True),
        ("<0", "*", True),
        ("<0", "<1", False),
        ("1.2.3-beta", "1.2.3-beta", True),
        ("1.2.3-beta", "1.2.3-beta || *", False),  # "|| *" makes the range just *
    ],
)
def test_version_satisfies_cases(
    pool: ConnectionPool, semver_oracle: SemverOracle, constraint: str, range_text: str, expected: bool
) -> None:
    assert semver_oracle.ask("intersects", [[constraint, range_text]]) == [expected]
    with pool.connection() as conn:
        row = conn.execute("select quarry.version_satisfies(%s, %s)", (constraint, range_text)).fetchone()
    assert row == (expected,)


@pytest.mark.parametrize(
    ("range_text", "version", "expected"),
    [
        ("^1.2.3-beta.1", "1.2.3-beta.2", True),
        ("^1.2.3-beta.1", "1.2.4-beta.2", False),  # prereleases of other releases stay out
        ("^1.2.3-beta.1", "1.9.0", True),
        ("<2", "2.0.0-rc.1", False),  # <2 is <2.0.0-0
        ("*", "1.0.0-rc.1", False),
        ("1.2.3 - 2.3.4", "v2.3.4+build", True),
    ],
)
def test_version_contains_cases(
    pool: ConnectionPool, semver_oracle: SemverOracle, range_text: str, version: str, expected: bool
) -> None:
    assert semver_oracle.ask("satisfies", [[version, range_text]]) == [expected]
    with pool.connection() as conn:
        row = conn.execute("select quarry.version_contains(%s, %s)", (range_text, version)).fetchone()
    assert row == (expected,)


def test_version_range_multiranges(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        row = conn.execute(
            """select quarry.version_range('^1.2.3 || 1.5 - 2')::text,
                      quarry.version_range('*')::text,
                      quarry.version_range('>=2 <1')::text,
                      quarry.version_range('1.2.3') @> quarry.version_key('1.2.3+build'),
                      quarry.version_range('~1.2') <@ quarry.version_range('^1'),
                      quarry.version_range(null) is null and quarry.version_satisfies(null, '*') is null"""
        ).fetchone()
    assert row == ("{[11.12.13~,13.10.10-.10)}", "{(,)}", "{}", True, True, True)


@pytest.mark.parametrize(
    ("range_text", "offending", "semver_accepts"),
    [
        (">=1.2.3foo", "1.2.3foo", False),
        ("1.x.3", "1.x.3", False),
        ("01.2.3", "01.2.3", False),
        ("1.2.3-01", "1.2.3-01", False),
        ("^1.2.3-", "1.2.3-", False),
        ("latest", "latest", False),
        ("1.2.3 -2", "-2", False),
        ("1.2.3 - 2 - 3", "-", False),
        (">=", ">=", False),
        ("1 ||| 2", "|", False),
        ("> < 1", "<", False),
        ("9007199254740992.0.0", "9007199254740992.0.0", False),
        ("<=9007199254740991", "<=9007199254740991", False),  # its bound, <9007199254740992.0.0-0, is too big
        # stricter than node-semver, which guesses: drops the -beta, reads "1.2 ||" as *, ...
        ("1.2.x-beta", "1.2.x-beta", True),
        ("1.2 ||", "1.2 ||", True),
        ("1.2+build", "1.2+build", True),
        ("v=1.2", "v=1.2", True),
    ],
)
def test_malformed_ranges_raise_naming_the_text(
    pool: ConnectionPool, semver_oracle: SemverOracle, range_text: str, offending: str, semver_accepts: bool
) -> None:
    [semver_answer] = semver_oracle.ask("desugar", [[range_text]])
    assert isinstance(semver_answer, str) == semver_accepts
    with pool.connection() as conn, pytest.raises(psycopg.errors.InvalidParameterValue) as raised:
        conn.execute("select quarry.version_range(%s)", (range_text,))
    message = str(raised.value).splitlines()[0]
    assert f'"{offending}"' in message
    assert range_text.strip() in message


@pytest.mark.parametrize("version", ["1.2", "1.2.x", "abc", "1.2.3.4", "1.2.3-", "1.2.3-a..b", ">1.2.3", ""])
def test_invalid_versions_raise(pool: ConnectionPool, version: str) -> None:
    with pool.connection() as conn, pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid version"):
        conn.execute("select quarry.semver_cmp(%s, '1.0.0')", (version,))


def test_gist_index_serves_overlap_and_containment(pool: ConnectionPool) -> None:
    with pool.connection() as conn, conn.transaction():
        conn.execute("create temp table constraints (id int, versions quarry.semver_multirange) on commit drop")
        conn.execute(
            """insert into constraints
               select g, quarry.version_range(format('~%s.%s.%s', g % 20, g / 20 % 30, g / 600))
               from generate_series(1, 6000) g"""
        )
        conn.execute("create index constraints_versions_idx on constraints using gist (versions)")
        conn.execute("analyze constraints")
        for operator in ["&&", "<@"]:
            query = sql.SQL(
                "explain select id from constraints where versions {} quarry.version_range('1.2.3 - 1.2.5')"
            )
            plan = "\n".join(str(row[0]) for row in conn.execute(query.format(sql.SQL(operator))))
            assert "constraints_versions_idx" in plan, plan
        row = conn.execute(
            """select count(*) filter (where versions && quarry.version_range('1.2.3 - 1.2.5')),
                      count(*) filter (where quarry.version_satisfies(
                          format('~%s.%s.%s', id % 20, id / 20 % 30, id / 600), '1.2.3 - 1.2.5'))
               from constraints"""
        ).fetchone()
    assert row is not None and row[0] == row[1] > 0


@pytest.mark.parametrize(("versions", "widened"), [
    (">=0.17.2 <0.18", ">=0.17.0-0 <0.18.0-0"),
    ("^1.2.3", ">=1.0.0-0 <2.0.0-0"),
    ("1.2.3 - 2.0.1", ">=1.0.0-0 <3.0.0-0"),
    (">=0.16", ">=0.16.0-0"),
    ("<0.5.1", "<0.6.0-0"),
    ("0.15.x || 0.17.1", ">=0.15.0-0 <0.16.0-0 || >=0.17.0-0 <0.18.0-0"),
])
def test_compatibility_lines_widen_to_whole_lines(pool: ConnectionPool, versions: str, widened: str) -> None:
    with pool.connection() as conn:
        row = conn.execute("select quarry.compatibility_lines(quarry.version_range(%s)) = quarry.version_range(%s)",
                           (versions, widened)).fetchone()
    assert row == (True,)
