"""BEIR datasets as the benchmarks read them: corpus, the queries of one split, and its qrels.

Layout (see ../shared/data/README.md): ``corpus.jsonl`` (``_id``, ``title``, ``text``),
``queries.<split>.jsonl`` or ``queries.jsonl``, ``qrels/<split>.tsv`` with a header line.
Only queries judged in the split's qrels are kept, in file order. Queries and qrels are read
by ``engine.evaluation.judgments``, the loaders ``quarry eval`` uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine.evaluation.judgments import load_qrels, load_queries
from engine.evaluation.metrics import Qrels


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    title: str
    text: str

    @property
    def full_text(self) -> str:
        """Title and body as one passage, the way BEIR feeds documents to retrievers."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    text: str


@dataclass(frozen=True, slots=True)
class BeirDataset:
    name: str
    split: str
    documents: list[Document]
    queries: list[Query]
    qrels: Qrels


def _read_jsonl(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_beir(directory: Path, split: str = "test") -> BeirDataset:
    """Load one BEIR dataset folder; a missing or malformed queries / qrels file raises InvalidRequestError."""
    qrels = load_qrels(directory / "qrels" / f"{split}.tsv")
    queries_path = directory / f"queries.{split}.jsonl"
    if not queries_path.exists():
        queries_path = directory / "queries.jsonl"
    queries = [Query(query_id, text) for query_id, text in load_queries(queries_path).items() if query_id in qrels]
    documents = [
        Document(str(row["_id"]), row.get("title") or "", row["text"])
        for row in _read_jsonl(directory / "corpus.jsonl")
    ]
    missing = set(qrels) - {query.id for query in queries}
    if missing:
        raise ValueError(f"{directory}: {len(missing)} judged queries have no text, e.g. {sorted(missing)[:3]}")
    return BeirDataset(directory.name, split, documents, queries, qrels)
