"""BM25 length normalisation in a corpus of prose and code together: one average length, or one per kind.

    python -m bench.mixed_corpus [--data DIR] [--home bench/.out/quality] [--fresh]

Quarry normalises a chunk's length against the corpus-wide average (``sql/018-text-index.sql``),
prose with b = 0.4 and code with b = 0.9. In a corpus mixing both, code chunks are shorter than
the average, so one might expect each kind normalised against its own average to rank better.
This bench measures that on a judged mixed corpus: SciFact's abstracts and CoSQA's Python
functions ingested as two sources of one database (``bench_mixed`` on the bench's embedded
server, built once; the model embeds ~19k chunks, ~4 minutes on two cores), each dataset's test
queries searched over both and scored against its own judgments (the other dataset's documents
are never relevant). Each query set is scored in fts and hybrid mode twice: with the postings
as Quarry indexes them (``quarry.rebuild_text_index()``: one average), then with every impact
recomputed against per-kind averages; the last step is another rebuild, which leaves the
database as Quarry would. Prints nDCG@10 per dataset, mode and variant.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path, PurePosixPath
from statistics import fmean

import psycopg
from psycopg_pool import ConnectionPool

from bench.beir import BeirDataset, load_beir
from bench.pipeline import bench_backend, ranked_chunks
from bench.quality import DEFAULT_DATA, DEFAULT_HOME
from bench.quarry_system import dataset_database_url, ingest_dataset
from bench.runs import top_documents
from bench.vectors import cached_vectors
from engine.embed.base import Vectors
from engine.embed.local import LocalMiniLM
from engine.evaluation.metrics import ndcg_at_k
from engine.retrieval.request import SearchMode
from engine.store.db import open_pool

DATABASE = "mixed"
#: The two corpora ingested together.
DATASETS = ("scifact", "cosqa")
CHUNK_DEPTH = 200  # as bench/quality.py: both legs 200 chunks deep, the first 10 documents scored

#: Per kind (prose, code): how many chunks, and their average weighted length as the postings hold it.
KIND_LENGTHS = """
select c.is_code, count(*) as chunks, avg(ct.chunk_length) as average_length
from quarry.chunks c
join quarry.chunk_terms ct on ct.chunk_id = c.id
group by c.is_code
"""
#: Every posting's impact (k1 0.9, b 0.4 prose / 0.9 code, as sql/018-text-index.sql) against the
#: average length of the chunk's own kind, where Quarry uses the corpus-wide one: each chunk's
#: impacts, then the lists by term written again from them (all in blocks, as after a rebuild).
PER_KIND_IMPACTS = """
do $per_kind$
begin
    with kinds as (""" + KIND_LENGTHS + """)
    update quarry.chunk_terms ct
    set impacts = (select array_agg(f.term_frequency * 1.9
                                    / (f.term_frequency + 0.9 * (1 - b.value + b.value * ct.chunk_length
                                                                  / k.average_length))
                                    order by u.position)
                   from unnest(ct.term_ids) with ordinality as u (term_id, position)
                   join quarry.text_terms t on t.id = u.term_id
                   join lateral quarry.weighted_term_frequencies(quarry.chunk_search_vector(c)) f
                     on f.lexeme = t.lexeme)
    from quarry.chunks c
    join kinds k on k.is_code = c.is_code
    cross join lateral (select case when c.is_code then 0.9 else 0.4 end as value) b
    where c.id = ct.chunk_id;
    truncate quarry.text_postings, quarry.text_posting_blocks;
    update quarry.text_stats set recent_postings = 0;
    perform quarry.pool_postings();
    insert into pg_temp.pooled_postings
    select u.term_id, null, null, ct.chunk_id, u.impact
    from quarry.chunk_terms ct cross join lateral unnest(ct.term_ids, ct.impacts) as u (term_id, impact);
    perform quarry.write_posting_blocks();
end
$per_kind$
"""
#: Each variant: the statement that sets the postings' impacts.
VARIANTS = {"global": "select quarry.rebuild_text_index()", "per-kind": PER_KIND_IMPACTS}


def build(url: str, data: Path, embedder: LocalMiniLM) -> None:
    with open_pool(url, min_size=1, max_size=4, name="bench-mixed") as pool:
        for name in DATASETS:
            started = time.perf_counter()
            summary = ingest_dataset(pool, embedder, name, load_beir(data / name, "test").documents)
            print(f"  ingested {name}: {summary.chunks_written:,} chunks in {time.perf_counter() - started:.0f} s",
                  flush=True)


def scores(pool: ConnectionPool, model_name: str, name: str, dataset: BeirDataset, vectors: Vectors,
           mode: SearchMode) -> float:
    per_query = []
    backend = bench_backend(pool, model_name, [query.text for query in dataset.queries], vectors)
    for query in dataset.queries:
        hits = ranked_chunks(backend, query.text, mode, CHUNK_DEPTH)
        ranking = top_documents((f"{hit.source_slug}:{PurePosixPath(hit.path).stem}" for hit in hits), 10)
        judged = {f"{name}:{document}": grade for document, grade in dataset.qrels.get(query.id, {}).items()}
        per_query.append(ndcg_at_k(ranking, judged, 10))
    return fmean(per_query)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--fresh", action="store_true", help="drop and ingest the mixed database again")
    args = parser.parse_args()
    embedder = LocalMiniLM(args.home / "models")
    url = dataset_database_url(args.home, DATABASE, fresh=args.fresh)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("select count(*) from quarry.chunks").fetchone()
        if not row or not row[0]:
            build(url, args.data, embedder)
        print("  chunks, average weighted length by kind: " + ", ".join(
            f"{'code' if is_code else 'prose'} {count:,} {length:.1f}"
            for is_code, count, length in conn.execute(KIND_LENGTHS + " order by 1")), flush=True)
        datasets = {name: load_beir(args.data / name, "test") for name in DATASETS}
        vectors = {name: cached_vectors(embedder, [q.text for q in dataset.queries], args.home / "vectors",
                                        f"{name}-queries-test") for name, dataset in datasets.items()}
        try:
            for variant, statement in VARIANTS.items():
                conn.execute(statement)
                conn.execute("vacuum analyze quarry.text_posting_blocks")
                with open_pool(url, min_size=1, max_size=1, name="bench-mixed") as pool:
                    for name, dataset in datasets.items():
                        for mode in ("fts", "hybrid"):
                            ndcg = scores(pool, embedder.model_name, name, dataset, vectors[name], mode)
                            print(f"  {variant:8} {name:8} {mode:6} nDCG@10 {ndcg:.4f}", flush=True)
        finally:
            conn.execute("select quarry.rebuild_text_index()")


if __name__ == "__main__":
    main()
