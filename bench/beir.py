"""BEIR datasets as the benchmarks read them: corpus, the queries of one split, and its qrels.

Layout (see ../shared/data/README.md): ``corpus.jsonl`` (``_id``, ``title``, ``text``),
``queries.<split>.jsonl`` or ``queries.jsonl``, ``qrels/<split>.tsv`` with a header line.
Only queries judged in the split's qrels are kept, in file order.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from bench.metrics import Qrels


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


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as rows:
        reader = csv.reader(rows, delimiter="\t")
        header = next(reader)
        if header[:2] != ["query-id", "corpus-id"]:
            raise ValueError(f"{path}: expected a 'query-id corpus-id score' header, got {header}")
        for query_id, doc_id, score in reader:
            qrels.setdefault(query_id, {})[doc_id] = int(score)
    return qrels


def load_beir(directory: Path, split: str = "test") -> BeirDataset:
    """Load one BEIR dataset folder; raises FileNotFoundError when a part is missing."""
    qrels = read_qrels(directory / "qrels" / f"{split}.tsv")
    queries_path = directory / f"queries.{split}.jsonl"
    if not queries_path.exists():
        queries_path = directory / "queries.jsonl"
    queries = [Query(str(row["_id"]), row["text"]) for row in _read_jsonl(queries_path) if str(row["_id"]) in qrels]
    documents = [
        Document(str(row["_id"]), row.get("title") or "", row["text"])
        for row in _read_jsonl(directory / "corpus.jsonl")
    ]
    missing = set(qrels) - {query.id for query in queries}
    if missing:
        raise ValueError(f"{directory}: {len(missing)} judged queries have no text, e.g. {sorted(missing)[:3]}")
    return BeirDataset(directory.name, split, documents, queries, qrels)
