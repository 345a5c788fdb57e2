"""Retrieval quality on judged queries: the metrics, BEIR judgments, and the ``quarry eval`` gate.

    quarry eval --queries FILE --qrels FILE [--min-ndcg X] [--min-mrr X] [--min-recall X] [--min-recall-100 X]

A docs team keeps a few dozen judged queries next to its docs; CI ingests the change and
runs ``quarry eval``, which exits 3 when a metric falls below its minimum.

Modules: ``metrics`` (nDCG@k, MRR@k, Recall@k, as trec_eval computes them; the
benchmarks use the same code), ``judgments`` (BEIR queries and qrels loaders that refuse
malformed input by file and line), ``runner`` (the search loop and the report; it
imports the search stack, so it is not re-exported here); the CLI command is ``engine.cli.evaluate``.

Decisions:

* **What a corpus-id names.** A Quarry document is (source, path relative to the source
  root). A qrels corpus-id is that path (``docs/indexes.md``), or ``slug:path`` when two
  sources hold the same path; ``--doc-id stem`` matches the file name without extension
  instead, for BEIR corpora ingested one file per document (``4983.md`` is ``4983``, as
  ``bench/`` ingests SciFact). A hit answers to whichever form the qrels use; unjudged
  hits stay ``slug:path``, so distinct documents are never merged. Judged ids no searched
  document answers to are listed (``missing_documents``): a renamed page shows up there
  rather than as an unexplained drop.
* **Chunks to documents.** The search ranks chunks; documents are ranked from them as
  ``group_by="document"`` ranks them (``engine.retrieval.grouping``: the best chunk, with a
  small bounded contribution of the next two). Each query ranks ``--chunk-depth``
  chunks (200, both legs as deep) and is searched again twice as deep until 100
  distinct documents are filled, the corpus runs out, or 1000 chunks (the SQL limit).
* **Which search.** The retrieval pipeline MCP serves (``engine.retrieval.pipeline.retrieve``)
  at MCP's defaults: the configured embedders and reranker, ``code_mode`` on, the SQL
  ranking defaults; ``--mode``/``--code-mode``/``--source`` narrow it. The one
  difference is depth: each query ranks the chunk list (200), so both legs go that deep
  where MCP's ``search`` ranks 50 candidates per leg, and the vector leg's min-max
  normalisation spans more rows; a top 10 can differ slightly from the MCP tool's.
  A reranker, when configured, reorders the first 30-50 chunks as MCP's does.
* **Scoring.** Queries with at least one judgment > 0 are scored (trec_eval skips the
  rest); a judged query missing from the queries file is an error, a query without
  judgments is ignored (both counted in the notes). Means are rounded to 4 decimals,
  and the rounded value is what the gate compares, so the printed figure decides.
"""

from engine.evaluation.judgments import load_qrels, load_queries
from engine.evaluation.metrics import (
    METRICS,
    Qrels,
    Run,
    evaluate,
    first_occurrences,
    ndcg_at_k,
    per_query,
    recall_at_k,
    reciprocal_rank_at_k,
)

__all__ = [
    "METRICS",
    "Qrels",
    "Run",
    "evaluate",
    "first_occurrences",
    "load_qrels",
    "load_queries",
    "ndcg_at_k",
    "per_query",
    "recall_at_k",
    "reciprocal_rank_at_k",
]
