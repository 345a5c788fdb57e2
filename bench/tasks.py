"""The retrieval tasks bench/quality.py measures: a corpus (or several) as files, judged queries, a metric.

Every task is ingested by Quarry's real pipeline from files on disk, and every system ranks
documents named by their path in the corpus:

- BEIR folders (``scifact``, ``cosqa``, ``business-reports``): each document written as a file
  (``<_id>.md`` holding ``# title`` and the text; CoSQA as ``<_id>.py``, and ``cosqa-md`` the same
  code as Markdown, so a code corpus ingested as prose is measured too).
- ``conala-pydocs``: programming intents against the Python 3.11 HTML docs (Debian's
  ``python3.11-doc``: ``library/``, ``reference/`` and ``tutorial/``), judged per page.
- ``swebench``: GitHub issues against the repository checkout each was filed on (one source per
  instance, the query searching its own), judged by the file the fix edits.

Peers see the same documents: a BEIR document's title and text; a page's or file's text as
Quarry's parser reads it (an HTML page without its navigation, a source file as it is).
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.beir import Document, Query, load_beir
from engine.evaluation.judgments import load_qrels, load_queries
from engine.evaluation.metrics import Qrels, Run
from engine.ingest.parsers import parse_document
from engine.ingest.parsers.errors import ParseError
from engine.vocabulary import SourceKind

PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
PYTHON_DOC_FOLDERS = ("library", "reference", "tutorial")
#: Every dev task; ``test`` splits of SciFact and CoSQA are the published ones (their figures stay comparable).
TASKS = ("scifact", "cosqa", "cosqa-md", "business-reports", "conala-pydocs", "swebench")


@dataclass(frozen=True)
class Corpus:
    """One Quarry source: the files under ``root``, and the same documents as the peers read them."""

    slug: str
    root: Path
    kind: SourceKind
    documents: list[Document]


@dataclass(frozen=True)
class Task:
    name: str
    split: str
    corpora: list[Corpus]
    queries: list[Query]
    #: query id -> document path -> grade
    qrels: Qrels
    #: query id -> the slug of the corpus it searches (every query: the only corpus, for one-corpus tasks)
    corpus_of: dict[str, str]
    #: the figure the task is judged by (R@10 for issue -> file: one gold file, so a hit in the top 10)
    headline: str = "nDCG@10"
    is_code: bool = False
    notes: list[str] = field(default_factory=list)
    #: document path -> what the judgments are about, when that is not the document (a report of chunk files)
    judged_unit: Callable[[str], str] | None = None

    def queries_of(self, slug: str) -> list[Query]:
        return [query for query in self.queries if self.corpus_of[query.id] == slug]

    def judged(self, run: Run) -> tuple[Run, Qrels]:
        """The run and the judgments at the level the task is judged: each ranking's documents as their units,
        each unit where its first document was."""
        unit = self.judged_unit
        if unit is None:
            return run, self.qrels
        qrels: dict[str, dict[str, int]] = {}
        for query, judged in self.qrels.items():
            for path, grade in judged.items():
                qrels.setdefault(query, {})[unit(path)] = max(grade, qrels.get(query, {}).get(unit(path), 0))
        return {query: list(dict.fromkeys(unit(path) for path in ranking)) for query, ranking in run.items()}, qrels


def load_task(name: str, data: Path, trees: Path, split: str = "test") -> Task:
    """The task ``name`` with its files written (once) under ``trees/<name>``."""
    if name in ("scifact", "cosqa", "cosqa-md", "business-reports"):
        return _beir_task(name, data, trees, split)
    if name == "conala-pydocs":
        return _python_docs_task(data / "conala-pydocs-dev", trees / name)
    if name == "swebench":
        return _swebench_task(data / "swebench-dev", trees / name)
    raise ValueError(f"unknown task {name!r}: expected one of {', '.join(TASKS)}")


def _beir_task(name: str, data: Path, trees: Path, split: str) -> Task:
    folder = "cosqa" if name == "cosqa-md" else name
    suffix = ".py" if name == "cosqa" else ".md"
    if name == "business-reports":
        split = "test"  # its only judged split
    dataset = load_beir(data / folder, split)
    root = trees / name
    documents = []
    for document in dataset.documents:
        path = f"{document.id}{suffix}"
        body = document.text if suffix == ".py" else (
            f"# {document.title}\n\n{document.text}\n" if document.title else f"{document.text}\n")
        _write_once(root / path, body)
        documents.append(Document(path, document.title, document.text))
    qrels = {query: {f"{doc}{suffix}": grade for doc, grade in judged.items()}
             for query, judged in dataset.qrels.items()}
    kind: SourceKind = "code_repo" if suffix == ".py" else "docs_site"
    task = Task(name, dataset.split, [Corpus(name, root, kind, documents)], dataset.queries, qrels,
                dict.fromkeys((query.id for query in dataset.queries), name), is_code=folder == "cosqa")
    if name == "business-reports":
        # every chunk of one report is judged relevant: ranking any of them first is the right answer, and
        # the data's README asks for report-level figures (chunk-level nDCG@10 was 0.091 for every system)
        task = replace(task, judged_unit=_report_of)
    return task


def _report_of(path: str) -> str:
    """``59f11d5004ed84ad_chunk_3.md`` -> ``59f11d5004ed84ad``."""
    return path.rsplit("_chunk_", 1)[0]


def _python_docs_task(folder: Path, root: Path) -> Task:
    if not PYTHON_DOCS.is_dir():
        raise FileNotFoundError(f"{PYTHON_DOCS} is missing: apt-get install python3.11-doc")
    documents = []
    for top in PYTHON_DOC_FOLDERS:
        for page in sorted((PYTHON_DOCS / top).rglob("*.html")):
            path = page.relative_to(PYTHON_DOCS).as_posix()
            raw = page.read_bytes()
            _write_once(root / path, raw)
            documents.append(Document(path, *_parsed_text(path, raw)))
    qrels = load_qrels(folder / "qrels" / "dev.tsv")
    queries = [Query(query_id, text) for query_id, text in load_queries(folder / "queries.jsonl").items()
               if query_id in qrels]
    slug = "python-docs"
    return Task("conala-pydocs", "dev", [Corpus(slug, root, "docs_site", documents)], queries, qrels,
                dict.fromkeys((query.id for query in queries), slug))


def _swebench_task(folder: Path, root: Path) -> Task:
    qrels = load_qrels(folder / "qrels" / "dev.tsv")
    texts = load_queries(folder / "queries.jsonl")
    corpora, queries, corpus_of = [], [], {}
    for line in (folder / "instances.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        instance = json.loads(line)
        instance_id: str = instance["instance_id"]
        tree = root / instance_id
        if not tree.is_dir():
            partial = tree.with_name(tree.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            with tarfile.open(folder / "corpora" / f"{instance_id}.tar.gz") as archive:
                archive.extractall(partial, filter="data")
            partial.rename(tree)
        documents = []
        for file in sorted(path for path in tree.rglob("*") if path.is_file()):
            relative = file.relative_to(tree).as_posix()
            try:
                documents.append(Document(relative, "", file.read_text(encoding="utf-8")))
            except UnicodeDecodeError:
                continue  # Quarry skips it too (not UTF-8 text)
        slug = instance_id.lower()
        corpora.append(Corpus(slug, tree, "code_repo", documents))
        queries.append(Query(instance_id, texts[instance_id]))
        corpus_of[instance_id] = slug
    return Task("swebench", "dev", corpora, queries, qrels, corpus_of, headline="R@10", is_code=True)


def _parsed_text(path: str, raw: bytes) -> tuple[str, str]:
    """A page's title and text as Quarry's parser reads it (navigation and markup stripped)."""
    try:
        parsed = parse_document(path, raw)
    except ParseError:
        return "", raw.decode("utf-8", "replace")
    return parsed.title, "\n\n".join(chunk.content for chunk in parsed.chunks)


def _write_once(path: Path, content: str | bytes) -> None:
    """Write a corpus file unless it already holds ``content`` (an unchanged tree re-ingests for free)."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def all_documents(task: Task) -> Sequence[Document]:
    return [document for corpus in task.corpora for document in corpus.documents]
