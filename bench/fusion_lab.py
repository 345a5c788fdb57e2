"""Fusion rules tried offline on every dev task at once, from each retrieval leg's own ranking.

    python bench/fusion_lab.py [--task all] [--depth 200]

bench/quality.py ingests the tasks; this reads each task's database and, per query, the
keyword leg (``quarry.bm25_top``) and the vector leg (``quarry.nearest_chunks``, text space)
``--depth`` chunks deep with their raw scores, cached as JSON under ``<home>/lab``. Candidate
fusion rules then rank documents from those lists in Python, scored by each task's headline
metric, so a rule is judged on all tasks in one run before it is written in SQL. The rules
named ``current`` reproduce quarry.hybrid_search (a check that the lab measures what ships).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

import psycopg
from pgvector.psycopg import register_vector

from bench.quality import DEFAULT_DATA, DEFAULT_HOME
from bench.tasks import TASKS, Task, load_task
from bench.vectors import cached_vectors
from engine.embed.local import LocalMiniLM
from engine.evaluation.metrics import ndcg_at_k, recall_at_k, reciprocal_rank_at_k
from engine.retrieval.grouping import SUPPORT_WEIGHT, SUPPORTING_CHUNKS

#: (chunk index, raw score) best first
Leg = list[tuple[int, float]]


@dataclass
class QueryLegs:
    query_id: str
    text: str
    fts: Leg
    vector: Leg
    #: the vector leg over the code space (code chunks only; the same model as text with the local default)
    code: Leg
    #: share of the query terms' IDF mass the keyword leg's best chunk holds (0 when nothing matched)
    coverage: float = 0.0
    #: query lexemes, and those the corpus has
    lexemes: int = 0
    known: int = 0
    #: sum of the known terms' BM25 IDF
    idf_mass: float = 0.0


@dataclass
class TaskLegs:
    task: str
    headline: str
    #: chunk index -> (document path, is_code)
    chunks: list[tuple[str, bool]]
    queries: list[QueryLegs]
    qrels: Mapping[str, Mapping[str, int]]
    #: document path -> its number of chunks
    lengths: Mapping[str, int]
    #: ranks and judgments at the level the task is judged (``bench.tasks.Task.judged``)
    judged: Callable[[Mapping[str, Sequence[str]]], tuple[Mapping[str, Sequence[str]], Mapping[str, Mapping[str, int]]]]


def dump(task: Task, home: Path, embedder: LocalMiniLM, depth: int) -> TaskLegs:
    cache = home / "lab" / f"{task.name}-{depth}.json"
    if cache.exists():
        raw = json.loads(cache.read_text())
        return TaskLegs(raw["task"], raw["headline"], [tuple(c) for c in raw["chunks"]],
                        [QueryLegs(q["query_id"], q["text"], [tuple(x) for x in q["fts"]],
                                   [tuple(x) for x in q["vector"]], [tuple(x) for x in q["code"]],
                                   q["coverage"], q["lexemes"], q["known"], q["idf_mass"])
                         for q in raw["queries"]], task.qrels, document_lengths(task, home), task.judged)
    from bench.quarry_system import bench_database_url

    # not migrated here: bench/quality.py did, and may be searching the database right now
    url = bench_database_url(home, f"bench_{task.name.replace('-', '_')}")
    vectors = cached_vectors(embedder, [q.text for q in task.queries], home / "vectors",
                             f"{task.name}-queries-{task.split}")
    index: dict[str, int] = {}
    chunks: list[tuple[str, bool]] = []
    chunk_ids: list[str] = []
    queries = []
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        for query, vector in zip(task.queries, vectors, strict=True):
            filters = json.dumps({"source_slug": {"any_of": [task.corpus_of[query.id]]}})
            resolved = "quarry.resolve_version_filters(%(filters)s::jsonb, 'permissive')"
            legs: dict[str, Leg] = {}
            for name, statement in (
                ("fts", f"select chunk_id, score from quarry.bm25_top(%(text)s, %(depth)s, 750, {resolved})"),
                ("vector", "select chunk_id, 1 - distance from quarry.nearest_chunks('text', %(vector)s, %(depth)s,"
                           f" {resolved})"),
                ("code", "select chunk_id, 1 - distance from quarry.nearest_chunks('code', %(vector)s, %(depth)s,"
                         f" {resolved})"),
            ):
                rows = conn.execute(statement, {"text": query.text, "depth": depth, "vector": vector,
                                                "filters": filters}).fetchall()
                legs[name] = []
                for chunk_id, score in rows:
                    key = str(chunk_id)
                    if key not in index:
                        index[key] = len(chunks)
                        chunks.append(("", False))
                        chunk_ids.append(key)
                    legs[name].append((index[key], float(score)))
            top = chunk_ids[legs["fts"][0][0]] if legs["fts"] else None
            row = conn.execute(COVERAGE, {"text": query.text, "chunk": top}).fetchone()
            assert row is not None
            queries.append(QueryLegs(query.id, query.text, legs["fts"], legs["vector"], legs["code"],
                                     float(row[0] or 0.0), int(row[1]), int(row[2]), float(row[3] or 0.0)))
        ids = list(index)
        for chunk_id, path, is_code in conn.execute(
                "select c.id::text, d.path, c.is_code from quarry.chunks c join quarry.documents d"
                " on d.id = c.document_id where c.id = any(%s::uuid[])", (ids,)):
            chunks[index[chunk_id]] = (path, is_code)
    legs_of_task = TaskLegs(task.name, task.headline, chunks, queries, task.qrels, document_lengths(task, home),
                            task.judged)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"task": task.name, "headline": task.headline, "chunks": chunks,
                                 "queries": [q.__dict__ for q in queries]}))
    return legs_of_task


def document_lengths(task: Task, home: Path) -> dict[str, int]:
    """Each document's number of chunks, cached beside the legs."""
    cache = home / "lab" / f"{task.name}-lengths.json"
    if cache.exists():
        lengths: dict[str, int] = json.loads(cache.read_text())
        return lengths
    from bench.quarry_system import bench_database_url

    url = bench_database_url(home, f"bench_{task.name.replace('-', '_')}")
    with psycopg.connect(url, autocommit=True) as conn:
        lengths = {path: int(count) for path, count in conn.execute(
            "select d.path, count(*) from quarry.chunks c join quarry.documents d on d.id = c.document_id"
            " group by d.path")}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(lengths))
    return lengths


COVERAGE = """
with lexemes as (select unnest(quarry.query_lexemes(%(text)s)) as lexeme),
terms as (
    select t.id, quarry.bm25_idf(s.chunk_count, t.chunk_frequency) as idf
    from lexemes l join quarry.text_terms t on t.lexeme = l.lexeme and t.chunk_frequency > 0, quarry.text_stats s
)
select sum(idf) filter (where exists (select 1 from quarry.chunk_terms ct
                                      where ct.chunk_id = %(chunk)s::uuid and terms.id = any (ct.term_ids)))
       / nullif(sum(idf), 0),
       (select count(*) from lexemes), count(*), sum(idf)
from terms
"""


# ------------------------------------------------------------------------------------------------ rules

#: rule(task legs, one query's legs) -> chunk index -> fused score
Rule = Callable[[TaskLegs, QueryLegs], dict[int, float]]


def max_normalised(leg: Leg) -> dict[int, float]:
    best = leg[0][1] if leg else 0.0
    return {chunk: score / best for chunk, score in leg} if best > 0 else {}


def min_max(leg: Leg) -> dict[int, float]:
    if not leg:
        return {}
    high, low = leg[0][1], leg[-1][1]
    return {chunk: (score - low) / (high - low) if high > low else 1.0 for chunk, score in leg}


def convex(weight_prose: float, weight_code: float, norm_fts: Callable[[Leg], dict[int, float]] = max_normalised,
           norm_vec: Callable[[Leg], dict[int, float]] = min_max, code_leg: bool = False) -> Rule:
    """Per-chunk-kind weights; ``code_leg``: a chunk's vector evidence is the better of its two lists (as SQL)."""
    def rule(task: TaskLegs, query: QueryLegs) -> dict[int, float]:
        fts, vec = norm_fts(query.fts), norm_vec(query.vector)
        if code_leg:
            for chunk, value in norm_vec(query.code).items():
                vec[chunk] = max(vec.get(chunk, 0.0), value)
        fused = {}
        for chunk in fts.keys() | vec.keys():
            w = weight_code if task.chunks[chunk][1] else weight_prose
            fused[chunk] = (1 - w) * fts.get(chunk, 0.0) + w * vec.get(chunk, 0.0)
        return fused
    return rule


def long_query_damped(weight_prose: float, weight_code: float, known: int, power: float = 1.0,
                      demote_tests: float = 1.0, demote_prose_of_long: float = 1.0) -> Rule:
    """Per-chunk-kind weights, the vector weight scaled by (known / query's known terms) ** power above
    ``known`` terms: the embedder reads a long query's start only, the keyword leg all of it.
    ``demote_tests`` scales test and docs files' scores when the query does not mention tests."""
    def rule(task: TaskLegs, query: QueryLegs) -> dict[int, float]:
        damping = min(1.0, (known / query.known) ** power) if query.known else 1.0
        fts, vec = max_normalised(query.fts), min_max(query.vector)
        about_tests = "test" in query.text.lower()
        fused = {}
        for chunk in fts.keys() | vec.keys():
            path, is_code = task.chunks[chunk]
            w = (weight_code if is_code else weight_prose) * damping
            value = (1 - w) * fts.get(chunk, 0.0) + w * vec.get(chunk, 0.0)
            if demote_tests != 1.0 and not about_tests and _is_test_or_doc(path):
                value *= demote_tests
            if demote_prose_of_long != 1.0 and damping < 1.0 and not is_code:
                value *= demote_prose_of_long
            fused[chunk] = value
        return fused
    return rule


def document_evidence(weight_prose: float, weight_code: float, half: float, known: int = 20,
                      prose_factor: float = 0.8) -> Rule:
    """As the shipped rule (long-query damping, prose of long queries x ``prose_factor``), each chunk's
    score blended with its document's: the document's best keyword and best vector evidence among the
    candidates, fused with the code weight when one of those chunks is code. A document of n chunks
    takes (n - 1) / (n - 1 + half) of its score from that, so a one-chunk document is ranked as before
    and a long page whose sections match the question's words and its meaning apart is no longer judged
    by one section alone."""
    def rule(task: TaskLegs, query: QueryLegs) -> dict[int, float]:
        damping = min(1.0, known / query.known) if query.known else 1.0
        fts, vec = max_normalised(query.fts), min_max(query.vector)
        candidates = fts.keys() | vec.keys()
        best_fts: dict[str, float] = {}
        best_vec: dict[str, float] = {}
        holds_code: dict[str, bool] = {}
        for chunk in candidates:
            path, is_code = task.chunks[chunk]
            best_fts[path] = max(best_fts.get(path, 0.0), fts.get(chunk, 0.0))
            best_vec[path] = max(best_vec.get(path, 0.0), vec.get(chunk, 0.0))
            holds_code[path] = holds_code.get(path, False) or is_code
        fused = {}
        for chunk in candidates:
            path, is_code = task.chunks[chunk]
            w = (weight_code if is_code else weight_prose) * damping
            own = (1 - w) * fts.get(chunk, 0.0) + w * vec.get(chunk, 0.0)
            # a page holding code (among the candidates) is weighed as code
            w_page = (weight_code if holds_code[path] else weight_prose) * damping
            page = (1 - w_page) * best_fts[path] + w_page * best_vec[path]
            extra = task.lengths.get(path, 1) - 1
            share = extra / (extra + half) if half > 0 else 1.0
            value = (1 - share) * own + share * page
            fused[chunk] = value * prose_factor if damping < 1.0 and not is_code else value
        return fused
    return rule


def _is_test_or_doc(path: str) -> bool:
    """Test and documentation files (demoting test files alone changed nothing on SWE-bench)."""
    parts = path.lower().split("/")
    name = parts[-1]
    return (any(part in ("test", "tests", "testing", "doc", "docs", "examples") for part in parts[:-1])
            or name.startswith("test_") or name.endswith(("_test.py", ".rst", ".md", ".txt")))


def rrf(k: int = 60, weight: float = 0.5) -> Rule:
    def rule(task: TaskLegs, query: QueryLegs) -> dict[int, float]:
        fused: dict[int, float] = {}
        for w, leg in ((1 - weight, query.fts), (weight, query.vector)):
            for rank, (chunk, _) in enumerate(leg, 1):
                fused[chunk] = fused.get(chunk, 0.0) + w / (k + rank)
        return fused
    return rule


def leg_only(name: str) -> Rule:
    def rule(task: TaskLegs, query: QueryLegs) -> dict[int, float]:
        leg = query.fts if name == "fts" else query.vector
        return {chunk: -rank for rank, (chunk, _) in enumerate(leg)}
    return rule


def z_scores(leg: Leg, top: int = 100) -> dict[int, float]:
    """Each score as standard deviations above the leg's mean over its first ``top`` (distribution-based)."""
    if not leg:
        return {}
    values = [score for _, score in leg[:top]]
    mean = fmean(values)
    spread = math.sqrt(fmean([(value - mean) ** 2 for value in values])) or 1.0
    return {chunk: (score - mean) / spread for chunk, score in leg}


def clarity(leg: Leg, head: int = 1, top: int = 50) -> float:
    """How far the leg's best score stands above its list (in standard deviations): a leg sure of its top."""
    if len(leg) < 3:
        return 0.0
    values = [score for _, score in leg[:top]]
    mean = fmean(values)
    spread = math.sqrt(fmean([(value - mean) ** 2 for value in values])) or 1.0
    return (fmean(values[:head]) - mean) / spread


def weighted(weight_of: Callable[[TaskLegs, QueryLegs], float],
             norm_fts: Callable[[Leg], dict[int, float]] = max_normalised,
             norm_vec: Callable[[Leg], dict[int, float]] = min_max) -> Rule:
    """Convex fusion with one vector weight per query (every chunk alike)."""
    def rule(task: TaskLegs, query: QueryLegs) -> dict[int, float]:
        w = weight_of(task, query)
        fts, vec = norm_fts(query.fts), norm_vec(query.vector)
        floor_fts = min(fts.values(), default=0.0)
        floor_vec = min(vec.values(), default=0.0)
        return {chunk: (1 - w) * fts.get(chunk, floor_fts) + w * vec.get(chunk, floor_vec)
                for chunk in fts.keys() | vec.keys()}
    return rule


def by_clarity(base: float = 0.5, head: int = 1) -> Callable[[TaskLegs, QueryLegs], float]:
    def weight(task: TaskLegs, query: QueryLegs) -> float:
        lexical, semantic = max(clarity(query.fts, head), 0.0), max(clarity(query.vector, head), 0.0)
        if lexical + semantic == 0:
            return base
        return semantic / (lexical + semantic)
    return weight


def by_length(short: float, long: float, words: int = 40) -> Callable[[TaskLegs, QueryLegs], float]:
    """A long query (an issue, a stack trace) leans on the keyword leg: the embedder reads only its start."""
    def weight(task: TaskLegs, query: QueryLegs) -> float:
        return long if len(query.text.split()) > words else short
    return weight


def by_coverage(low: float, high: float) -> Callable[[TaskLegs, QueryLegs], float]:
    """The keyword leg counts as much as its best chunk covers the query's terms (IDF-weighted):
    vector weight ``high`` when nothing matches, ``low`` when the best chunk holds every term."""
    def weight(task: TaskLegs, query: QueryLegs) -> float:
        return high - (high - low) * query.coverage
    return weight


def by_evidence(half: float, floor: float = 0.0, ceiling: float = 1.0) -> Callable[[TaskLegs, QueryLegs], float]:
    """The more query terms the corpus knows, the more keyword evidence there is to weigh: the vector weight is
    ``half / (known + half)`` (one half at ``half`` known terms), kept within [floor, ceiling]."""
    def weight(task: TaskLegs, query: QueryLegs) -> float:
        return min(ceiling, max(floor, half / (query.known + half)))
    return weight


def by_idf_mass(half: float, power: float = 1.0, floor: float = 0.0, ceiling: float = 1.0
                ) -> Callable[[TaskLegs, QueryLegs], float]:
    """As ``by_evidence``, weighing each known term by its IDF (rare terms are strong keyword evidence):
    the vector weight is 1 / (1 + (mass / half) ** power), within [floor, ceiling]."""
    def weight(task: TaskLegs, query: QueryLegs) -> float:
        share: float = (query.idf_mass / half) ** power
        return min(ceiling, max(floor, 1 / (1 + share)))
    return weight


def by_agreement(top: int = 10) -> Callable[[TaskLegs, QueryLegs], float]:
    """The vector weight from where the legs' tops fall in each other's lists."""
    def weight(task: TaskLegs, query: QueryLegs) -> float:
        fts_rank = {chunk: rank for rank, (chunk, _) in enumerate(query.fts)}
        vec_rank = {chunk: rank for rank, (chunk, _) in enumerate(query.vector)}
        depth = max(len(query.fts), len(query.vector), 1)
        # how well each leg's top is confirmed by the other: mean reciprocal rank of its top in the other
        lexical = fmean([1 / (1 + vec_rank.get(chunk, depth)) for chunk, _ in query.fts[:top]] or [0.0])
        semantic = fmean([1 / (1 + fts_rank.get(chunk, depth)) for chunk, _ in query.vector[:top]] or [0.0])
        if lexical + semantic == 0:
            return 0.5
        return lexical / (lexical + semantic)
    return weight


# ------------------------------------------------------------------------------------------------ scoring

def documents(task: TaskLegs, fused: Mapping[int, float], depth: int = 100, support: float = 0.0,
              support_chunks: int = SUPPORTING_CHUNKS) -> list[str]:
    """Chunks -> documents: the best chunk's score, plus ``support`` x each of the next few chunks' scores."""
    by_document: dict[str, list[float]] = {}
    for chunk, value in fused.items():
        by_document.setdefault(task.chunks[chunk][0], []).append(value)
    best: dict[str, float] = {}
    for path, values in by_document.items():
        values.sort(reverse=True)
        best[path] = values[0] + support * sum(values[1:1 + support_chunks])
    return sorted(best, key=lambda path: (-best[path], path))[:depth]


def score(task: TaskLegs, rule: Rule, support: float = 0.0) -> float:
    run, qrels = task.judged({query.query_id: documents(task, rule(task, query), support=support)
                              for query in task.queries})
    metric = {"R@10": recall_at_k, "MRR@10": reciprocal_rank_at_k}.get(task.headline, ndcg_at_k)
    return fmean(metric(ranking, qrels.get(query, {}), 10) for query, ranking in run.items())


def table(tasks: Sequence[TaskLegs], rules: Mapping[str, Rule], support: float = 0.0) -> str:
    lines = ["| rule | " + " | ".join(task.task for task in tasks) + " | worst gap to best leg |",
             "|---" * (len(tasks) + 2) + "|"]
    legs = {task.task: max(score(task, leg_only("fts")), score(task, leg_only("vector"))) for task in tasks}
    for name, rule in rules.items():
        values = [score(task, rule, support) for task in tasks]
        gap = min(value - legs[task.task] for value, task in zip(values, tasks, strict=True))
        lines.append(f"| {name} | " + " | ".join(f"{value:.3f}" for value in values) + f" | {gap:+.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", nargs="+", choices=[*TASKS, "all"], default=["all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--depth", type=int, default=200)
    parser.add_argument("--support", type=float, nargs="+", default=[0.0],
                        help=f"document score = best chunk + SUPPORT x the next {SUPPORTING_CHUNKS} chunks, as "
                             f"engine.retrieval.grouping (SUPPORT_WEIGHT {SUPPORT_WEIGHT}); one table per value")
    args = parser.parse_args()
    embedder = LocalMiniLM(args.home / "models")
    names = TASKS if "all" in args.task else args.task
    tasks = [dump(load_task(name, args.data, args.home / "trees"), args.home, embedder, args.depth) for name in names]
    rules: dict[str, Rule] = {
        "fts": leg_only("fts"),
        "vector": leg_only("vector"),
        "current (prose 0.45, long-query damping 20, prose of long x0.8, document evidence 15)":
            document_evidence(0.45, 0.8, 15),
        "before document evidence (prose 0.40)": long_query_damped(0.4, 0.8, 20, 1.0, 1.0, 0.8),
        **{f"prose {w}, document evidence {half}": document_evidence(w, 0.8, half)
           for w in (0.4, 0.45, 0.5) for half in (5, 15, 30)},
        "convex 0.4 / 0.8, code leg": convex(0.4, 0.8, code_leg=True),
        "convex 0.4 / 0.8, no code leg": convex(0.4, 0.8),
        "rrf k=60": rrf(),
        **{f"long-query damping {k}^{p}": long_query_damped(0.4, 0.8, k, p) for k in (20, 40) for p in (1.0, 2.0)},
        **{f"long-query damping {k}, tests x{d}": long_query_damped(0.4, 0.8, k, 1.0, d) for k in (20, 40)
           for d in (0.5, 0.8)},
        **{f"long-query damping {k}, prose of long x{d}": long_query_damped(0.4, 0.8, k, 1.0, 1.0, d)
           for k in (20, 30) for d in (0.5, 0.7, 0.8, 0.9)},
        **{f"convex {w}": convex(w, w) for w in (0.4, 0.5, 0.6, 0.7)},
        **{f"z-score {w}": convex(w, w, z_scores, z_scores) for w in (0.4, 0.5, 0.6)},
        "clarity top1, minmax": weighted(by_clarity()),
        "clarity top3, minmax": weighted(by_clarity(head=3)),
        "clarity top1, z": weighted(by_clarity(), z_scores, z_scores),
        "agreement": weighted(by_agreement()),
        "length 0.6 / 0.3, minmax": weighted(by_length(0.6, 0.3)),
        **{f"evidence {half}": weighted(by_evidence(half)) for half in (4, 6, 8, 10, 12)},
        **{f"idf mass {half}": weighted(by_idf_mass(half)) for half in (20, 25, 30)},
        **{f"idf mass {half} ^{power} in [{lo}, {hi}]": weighted(by_idf_mass(half, power, lo, hi))
           for half in (20, 25, 30) for power in (1, 2, 3) for lo in (0.3, 0.4) for hi in (0.8,)},
        **{f"coverage {lo}-{hi}": weighted(by_coverage(lo, hi)) for lo, hi in ((0.3, 0.8), (0.3, 0.9), (0.4, 0.9),
                                                                                 (0.2, 0.8), (0.3, 1.0))},
        "length 0.5 / 0.3, z": weighted(by_length(0.5, 0.3), z_scores, z_scores),
    }
    for support in args.support:
        print(f"\nsupport {support}:\n" + table(tasks, rules, support))


if __name__ == "__main__":
    main()
