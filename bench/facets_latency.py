"""`facets` and `count` at scale: the engine calls the tools make, on a synthetic corpus of many sources.

    python bench/facets_latency.py [--home bench/.out/facets] [--sources 200] [--documents 500]
                                   [--chunks 10] [--rounds 10] [--fresh]

Issue 29's goal is 20 ms at most for `count` and `facets` answers at 1M chunks. What makes them slow
is not the chunks but the sources: many releases of the same repositories, each with nested
manifests whose dependencies every document below them inherits (the version facets). So the
corpus is generated in SQL to that shape: ``--sources`` sources (12 repositories, as many releases
of each as it takes), ``--documents`` documents per source (the first 8 are manifests: a root
``package.json`` and one per package directory, 20 dependencies each, from a pool of 400 names;
about one document in 20 states a language target of its own), ``--chunks`` chunks per document.
The defaults give 200 sources, 100,000 documents, 1,000,000 chunks, 1,600 manifests and about
37,000 version constraints. It is built once per home (``--fresh`` rebuilds it); no embedding, no
postings: neither call reads them.

Each round times, through ``engine.corpus.facets.facet_values`` and
``engine.retrieval.counting.count_documents``, each case twice, in alternating order: with the
version facet counts kept (``quarry.version_facet_combinations`` and their totals, what a reader
sees after an ingest), and with every source marked stale (``quarry.version_facets_stale``), which
makes ``quarry.facet_values`` count the version facets live, as it does for a source whose
ingest has not finished. The two must answer the same: the bench stops if they differ. Printed:
p50 / p95 milliseconds of each and live over kept; then what keeping the counts costs an ingest
(``quarry.refresh_version_facet_counts`` for one stale source, as the end of an ingest runs it)
and a migrate (every source). Results go to ``OUT/facets.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from bench.latency import load_average, machine
from bench.quarry_system import bench_database_url
from engine.corpus.facets import facet_values
from engine.retrieval.counting import count_documents
from engine.retrieval.request import Filters
from engine.store.db import open_pool
from engine.store.migrations import ensure_migrated

REPOSITORIES = 12
MANIFESTS_PER_SOURCE = 8  # the root package.json and packages/p1 .. p7
DEPENDENCIES_PER_MANIFEST = 20
DEPENDENCY_NAMES = 400

# One statement per table, each a pure function of the source and document numbers, so a build is
# repeatable. A release k of repository r: its manifests mostly share their dependencies with
# the repository's other releases, one in five shifted by the release number (new names appear).
_SOURCES = """
    insert into quarry.sources (slug, display_name, kind, attribution, verified)
    select format('repo%%s-r%%s', i %% %(repositories)s, i / %(repositories)s), format('Repository %%s', i),
           case when i %% 4 = 3 then 'docs_site' else 'code_repo' end,
           case when i %% 2 = 0 then 'official' else 'community' end, i %% 3 = 0
    from generate_series(0, %(sources)s - 1) i
"""
_DOCUMENTS = """
    insert into quarry.documents (source_id, path, title, content_hash, raw, content_type, parser_version,
                                  language, package)
    select s.id,
           case when j = 0 then 'package.json'
                when j < %(manifests)s then format('packages/p%%s/package.json', j)
                when j %% %(manifests)s = 0 then format('src/f%%s.%%s', j, extension)
                else format('packages/p%%s/src/f%%s.%%s', j %% %(manifests)s, j, extension) end,
           format('File %%s', j), sha256(convert_to(s.id || '/' || j, 'UTF8')), convert_to('', 'UTF8'),
           case when j < %(manifests)s then 'text' when extension = 'md' then 'markdown' else 'code' end, 1,
           case extension when 'ts' then 'typescript' when 'py' then 'python' end,
           case when j %% %(manifests)s = 0 then 'root' else format('p%%s', j %% %(manifests)s) end
    from quarry.sources s
    cross join generate_series(0, %(documents)s - 1) j
    cross join lateral (select (array['ts', 'ts', 'py', 'md', 'ts'])[1 + j %% 5] as extension) e
"""
_MANIFESTS = """
    insert into quarry.manifests (document_id, source_id, kind, scope)
    select d.id, d.source_id, 'package.json', coalesce(substring(d.path from '^(.*)/package\\.json$'), '')
    from quarry.documents d where d.path like '%%package.json'
"""
_CONSTRAINTS = """
    with ranges as (
        select n, format('^%%s.0.0', n) as range_text, quarry.version_range(format('^%%s.0.0', n)) as version_range
        from generate_series(1, 5) n
    ),
    stated as (
        -- manifests: their dependencies
        select m.document_id, m.source_id, 'sdk_dependency' as facet,
               format('lib%%s', (repository * 31 + directory * 17 + q * 7
                                 + case when q %% 5 = 0 then release * 3 else 0 end) %% %(names)s) as name,
               1 + q %% 5 as n, 'package.json:dependencies' as origin
        from quarry.manifests m
        join quarry.sources s on s.id = m.source_id
        cross join lateral (select split_part(s.slug, '-r', 1)::text as repository_slug) slug
        cross join lateral (select substring(slug.repository_slug from 5)::int as repository,
                                   substring(s.slug from '-r(\\d+)$')::int as release,
                                   coalesce(substring(m.scope from 'p(\\d+)$')::int, 0) as directory) numbers
        cross join generate_series(0, %(dependencies)s - 1) q
        union all
        -- about one document in 20: a language target of its own
        select d.id, d.source_id, 'language_target',
               case d.content_type when 'markdown' then 'compact' else d.language end,
               1 + abs(hashtext(d.path)) %% 5, 'pragma'
        from quarry.documents d
        where d.content_type <> 'text' and abs(hashtext(d.source_id || d.path)) %% 20 = 0
    )
    insert into quarry.version_constraints (document_id, source_id, facet, name, range_text, version_range, raw,
                                            origin)
    select st.document_id, st.source_id, st.facet, st.name, r.range_text, r.version_range, r.range_text, st.origin
    from stated st join ranges r on r.n = st.n
    -- a dependency listed twice in one manifest is one constraint
    group by st.document_id, st.source_id, st.facet, st.name, r.range_text, r.version_range, st.origin
"""
_CHUNKS = """
    insert into quarry.chunks (document_id, source_id, ordinal, content, title, content_type, is_code,
                               start_line, end_line, start_byte, end_byte, token_estimate, document_chunks)
    select d.id, d.source_id, k, format('part %%s of %%s', k, d.path), d.title, d.content_type,
           d.content_type = 'code', k * 10 + 1, k * 10 + 10, k * 400, k * 400 + 399, 100, %(chunks)s
    from quarry.documents d cross join generate_series(0, %(chunks)s - 1) k
"""


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    call: Callable[[ConnectionPool], object]


def cases(first_slug: str) -> list[Case]:
    one_source: Filters = {"source_slug": {"any_of": [first_slug]}}
    python: Filters = {"language": {"any_of": ["python"]}}
    code: Filters = {"kind": {"any_of": ["code_repo"]}}
    return [
        Case("facets()", lambda pool: facet_values(pool)),
        Case("facets(sdk_dependency)", lambda pool: facet_values(pool, ["sdk_dependency"])),
        Case("facets(source_slug=one)", lambda pool: facet_values(pool, filters=one_source)),
        Case("facets(language=python)", lambda pool: facet_values(pool, filters=python)),
        Case("facets(kind=code_repo)", lambda pool: facet_values(pool, filters=code)),
        Case("count()", lambda pool: count_documents(pool, "documents")),
        Case("count(source_slug=one)", lambda pool: count_documents(pool, "documents", filters=one_source)),
        Case("count(language=python)", lambda pool: count_documents(pool, "documents", filters=python)),
    ]


def build(url: str, sources: int, documents: int, chunks: int) -> dict[str, float]:
    """Generate the corpus (the tables emptied first); seconds per step."""
    parameters = {"repositories": REPOSITORIES, "sources": sources, "documents": documents, "chunks": chunks,
                  "manifests": MANIFESTS_PER_SOURCE, "dependencies": DEPENDENCIES_PER_MANIFEST,
                  "names": DEPENDENCY_NAMES}
    timings: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("truncate quarry.sources cascade")
        for step, statement in (("sources", _SOURCES), ("documents", _DOCUMENTS), ("manifests", _MANIFESTS),
                                ("version_constraints", _CONSTRAINTS), ("chunks", _CHUNKS)):
            started = time.perf_counter()
            conn.execute(statement, parameters)
            timings[step] = time.perf_counter() - started
            print(f"  {step:<20} {timings[step]:7.1f} s", flush=True)
        started = time.perf_counter()
        conn.execute("vacuum analyze")
        conn.execute("select quarry.refresh_version_facet_counts()")
        timings["vacuum_analyze_refresh"] = time.perf_counter() - started
    return timings


def corpus_size(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute("select (select count(*) from quarry.sources), (select count(*) from quarry.documents),"
                           " (select count(*) from quarry.chunks), (select count(*) from quarry.manifests),"
                           " (select count(*) from quarry.version_constraints)").fetchone()
    assert row is not None
    return dict(zip(("sources", "documents", "chunks", "manifests", "version_constraints"), row, strict=True))


def mark_stale(url: str, stale: bool) -> None:
    """Every source stale, or none: the data is unchanged, so the kept counts stay right either way."""
    with psycopg.connect(url, autocommit=True) as conn:
        if stale:
            conn.execute("insert into quarry.version_facets_stale (source_id) select id from quarry.sources"
                         " on conflict do nothing")
        else:
            conn.execute("delete from quarry.version_facets_stale")


def timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    answer = call()
    return (time.perf_counter() - started) * 1000, answer


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def refresh_costs(url: str, rounds: int) -> dict[str, float]:
    """Milliseconds of the refresh an ingest's end runs (one source) and a migrate's (every source)."""
    one: list[float] = []
    every: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        source = conn.execute("select min(id) from quarry.sources").fetchone()
        assert source is not None
        for _ in range(rounds):
            conn.execute("insert into quarry.version_facets_stale values (%s) on conflict do nothing", source)
            elapsed, _ = timed(lambda: conn.execute(
                "select quarry.refresh_version_facet_counts(array[%s]::bigint[])", source))
            one.append(elapsed)
        for _ in range(max(1, rounds // 5)):
            mark_stale(url, True)
            elapsed, _ = timed(lambda: conn.execute("select quarry.refresh_version_facet_counts()"))
            every.append(elapsed)
    return {"one_source_ms": statistics.median(one), "every_source_ms": statistics.median(every)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=Path("bench/.out/facets"))
    parser.add_argument("--sources", type=int, default=200)
    parser.add_argument("--documents", type=int, default=500, help="per source")
    parser.add_argument("--chunks", type=int, default=10, help="per document")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--fresh", action="store_true", help="rebuild the corpus")
    args = parser.parse_args(argv)

    url = bench_database_url(args.home, "bench_facets", fresh=args.fresh)
    ensure_migrated(url)
    wanted = {"sources": args.sources, "documents": args.sources * args.documents,
              "chunks": args.sources * args.documents * args.chunks}
    size = corpus_size(url)
    timings: dict[str, float] = {}
    if any(size[key] != value for key, value in wanted.items()):
        print(f"building the corpus: {wanted}", flush=True)
        timings = build(url, args.sources, args.documents, args.chunks)
        size = corpus_size(url)
    print(f"corpus: {size}", flush=True)
    with psycopg.connect(url) as conn:
        row = conn.execute("select slug from quarry.sources order by id limit 1").fetchone()
    assert row is not None
    measured = cases(row[0])
    samples: dict[str, dict[str, list[float]]] = {case.name: {"kept": [], "live": []} for case in measured}
    load_before = load_average()
    pool = open_pool(url, min_size=1, max_size=1)
    try:
        for case in measured:  # warm: plans cached, pages read
            case.call(pool)
        for round_number in range(args.rounds):
            order = ("kept", "live") if round_number % 2 == 0 else ("live", "kept")
            answers: dict[str, dict[str, object]] = {}
            for state in order:
                mark_stale(url, state == "live")
                answers[state] = {}
                for case in measured:
                    elapsed, answer = timed(lambda case=case: case.call(pool))  # type: ignore[misc]
                    samples[case.name][state].append(elapsed)
                    answers[state][case.name] = answer
            for case in measured:
                if answers["kept"][case.name] != answers["live"][case.name]:
                    print(f"{case.name}: kept and live counts differ", file=sys.stderr)
                    return 1
            print(f"  round {round_number + 1}/{args.rounds} done", flush=True)
    finally:
        mark_stale(url, False)
        pool.close()
    refresh = refresh_costs(url, args.rounds)
    results: dict[str, Any] = {}
    print(f"\n{'case':<26} {'kept p50':>9} {'p95':>8} {'live p50':>9} {'p95':>8} {'live/kept':>9}")
    for name, by_state in samples.items():
        row_values = {state: {"p50": statistics.median(values), "p95": percentile(values, 0.95)}
                      for state, values in by_state.items()}
        results[name] = row_values
        print(f"{name:<26} {row_values['kept']['p50']:9.1f} {row_values['kept']['p95']:8.1f}"
              f" {row_values['live']['p50']:9.1f} {row_values['live']['p95']:8.1f}"
              f" {row_values['live']['p50'] / row_values['kept']['p50']:8.2f}x")
    print(f"\nrefresh, one stale source (an ingest's end): {refresh['one_source_ms']:.1f} ms;"
          f" every source (a migrate): {refresh['every_source_ms']:.0f} ms")
    load_after = load_average()
    print(f"load average {load_before} -> {load_after}")
    report = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(), "corpus": size,
              "build_seconds": timings, "rounds": args.rounds, "milliseconds": results, "refresh": refresh,
              "load_average": [load_before, load_after]}
    args.home.mkdir(parents=True, exist_ok=True)
    (args.home / "facets.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
