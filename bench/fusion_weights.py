"""How the hybrid fusion weight was chosen, and what it is worth on queries it was not chosen on.

    python -m bench.fusion_weights [--dataset scifact] [--split test] [--weights 0.3,0.35,...]
                                   [--folds 5] [--repeats 20]

SciFact has only a test split, so a weight picked on it is picked on the queries it is then
scored on. This bench measures that optimism instead of ignoring it: it runs Quarry's hybrid
search once per candidate weight (per-query nDCG@10 through the same metric code as
``bench/quality.py``), then cross-validates the choice, i.e. for each of ``--folds`` folds of the
queries it picks the best weight on the other folds and scores the held-out fold with it,
``--repeats`` times over different random fold splits. The cross-validated nDCG@10 is what the
weight-choosing procedure is worth on unseen queries; the weight chosen on all queries is what
Quarry ships. ``--parameter code_vector_weight`` does the same for the weight of code chunks
(CoSQA). Reads the corpus ``bench/quality.py`` ingested (``bench/.out/quality``).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from statistics import mean, pstdev
from typing import Any

from bench.beir import load_beir
from bench.quality import DEFAULT_DATA, DEFAULT_HOME
from bench.runs import top_documents
from engine.embed.local import LocalMiniLM
from engine.evaluation.metrics import ndcg_at_k
from engine.retrieval.request import Ranking
from engine.store.db import open_pool

DEFAULT_WEIGHTS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)

#: Per query, per weight: nDCG@10.
Scores = Mapping[float, Mapping[str, float]]


def weight_scores(dataset_name: str, split: str, data: Path, home: Path, parameter: str,
                  weights: Sequence[float], chunk_depth: int, depth: int) -> Scores:
    from bench.pipeline import bench_backend, ranked_chunks
    from bench.quarry_system import dataset_database_url
    from bench.vectors import cached_vectors

    dataset = load_beir(data / dataset_name, split)
    embedder = LocalMiniLM(home / "models")
    vectors = cached_vectors(embedder, [q.text for q in dataset.queries], home / "vectors",
                             f"{dataset_name}-queries-{split}")
    url = dataset_database_url(home, dataset_name)
    scores: dict[float, dict[str, float]] = {}
    with open_pool(url, min_size=1, max_size=1, name="quarry-bench") as pool:
        with pool.connection() as conn:  # the shipped weights hold the other parameter fixed
            row = conn.execute("select vector_weight, code_vector_weight from quarry.ranking_defaults()").fetchone()
        assert row is not None
        shipped_prose, shipped_code = row
        backend = bench_backend(pool, embedder.model_name, [q.text for q in dataset.queries], vectors)
        for weight in weights:
            per_query: dict[str, float] = {}
            prose = weight if parameter == "vector_weight" else shipped_prose
            code = weight if parameter == "code_vector_weight" else shipped_code
            for query in dataset.queries:
                hits = ranked_chunks(backend, query.text, "hybrid", chunk_depth,
                                     Ranking(vector_weight=prose, code_vector_weight=code))
                ranking = top_documents((PurePosixPath(hit.path).stem for hit in hits), depth)
                per_query[query.id] = ndcg_at_k(ranking, dataset.qrels.get(query.id, {}), 10)
            scores[weight] = per_query
            print(f"  {parameter} {weight:.2f}: nDCG@10 {mean(per_query.values()):.4f}", flush=True)
    return scores


def best_weight(scores: Scores, queries: Sequence[str]) -> float:
    """The weight with the highest mean nDCG@10 over ``queries`` (the smaller weight on a tie)."""
    return max(sorted(scores), key=lambda weight: mean(scores[weight][q] for q in queries))


def cross_validate(scores: Scores, folds: int, repeats: int, seed: int) -> dict[str, Any]:
    """Held-out nDCG@10 of "pick the best weight on the other folds", over ``repeats`` random splits."""
    queries = sorted(next(iter(scores.values())))
    rng = random.Random(seed)
    estimates: list[float] = []
    chosen: dict[float, int] = {}
    for _ in range(repeats):
        order = queries[:]
        rng.shuffle(order)
        held_out_scores: list[float] = []
        for fold in range(folds):
            held_out = order[fold::folds]
            held = set(held_out)
            weight = best_weight(scores, [q for q in order if q not in held])
            chosen[weight] = chosen.get(weight, 0) + 1
            held_out_scores.extend(scores[weight][q] for q in held_out)
        estimates.append(mean(held_out_scores))
    return {"ndcg@10_mean": round(mean(estimates), 4), "ndcg@10_sd_over_repeats": round(pstdev(estimates), 4),
            "weights_chosen": {str(w): n for w, n in sorted(chosen.items())}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--parameter", choices=("vector_weight", "code_vector_weight"), default="vector_weight")
    parser.add_argument("--weights", default=",".join(map(str, DEFAULT_WEIGHTS)))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--chunk-depth", type=int, default=200, help="as bench/quality.py (default: 200)")
    parser.add_argument("--depth", type=int, default=100)
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",")]
    scores = weight_scores(args.dataset, args.split, args.data, args.home, args.parameter, weights,
                           args.chunk_depth, args.depth)
    all_queries = sorted(next(iter(scores.values())))
    report = {
        "dataset": args.dataset, "split": args.split, "parameter": args.parameter, "queries": len(all_queries),
        "ndcg@10_by_weight": {str(w): round(mean(s.values()), 4) for w, s in scores.items()},
        "chosen_on_all_queries": best_weight(scores, all_queries),
        "cross_validated": {"folds": args.folds, "repeats": args.repeats, "seed": args.seed,
                            **cross_validate(scores, args.folds, args.repeats, args.seed)},
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
