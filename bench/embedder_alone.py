"""The embedder alone over exactly what a first ingest of a folder makes it embed.

    QUARRY_HOME=DIR python -m bench.embedder_alone FOLDER

The reference ``bench/ingest_throughput.py --first-ingest`` divides a first ingest's time by.
The folder is listed and parsed with the ingest's own code (``engine.ingest.walk``,
``changed_files``, ``batch``) and cut where the parser cuts it: a segment is whole documents up
to ``_BATCH_CHUNKS`` chunks, and each writer embeds one segment per ``embed_documents`` call.
Each configured model gets what ``BatchWriter._embed`` gives it: the embedding inputs of the
chunks its spaces hold (``ModelGroup.wanted``: with the local default one model serves the text
and code spaces and embeds each input once for both), each input once, in the segment where it
first occurs (later ones reuse its stored vector), in that segment's order.

Each local model's session is loaded before the clock starts, as ``quarry ingest`` loads it
before its ingest starts; the load is timed apart. Prints one JSON object: per model, the texts,
calls and seconds of ``embed_documents``; and the hex SHA-256 of every input, which the bench
checks against the vectors the ingest stored. No database is opened.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from engine.config import get_settings
from engine.embed.base import CODE_SPACE, Embedder
from engine.embed.local import LocalMiniLM
from engine.ingest.batch import ModelGroup, PendingDocument, Segment, input_hash
from engine.ingest.changed_files import is_ingested, prepare_document
from engine.ingest.pipeline import _BATCH_CHUNKS  # the parser's segment size: defined once, there
from engine.ingest.summary import IngestSummary
from engine.ingest.walk import SkippedFile, list_tree, read_tree
from engine.providers.selection import build_embedders


def first_ingest_segments(root: Path, max_file_bytes: int) -> Iterator[Segment]:
    """The segments ``Ingestor._parse_tree`` hands the writers when the source holds no document yet."""
    summary = IngestSummary(source="embedder-alone")  # prepare_document counts skips and failures here
    listing = list_tree(root, is_supported=is_ingested, max_file_bytes=max_file_bytes)
    pending: list[PendingDocument] = []
    pending_chunks = 0
    for item in read_tree(listing):
        if isinstance(item, SkippedFile):
            continue
        document = prepare_document(item, None, summary)
        if document is None:
            continue
        pending.append(document)
        pending_chunks += len(document.parsed.chunks)
        if pending_chunks >= _BATCH_CHUNKS:
            yield Segment.of(pending)
            pending, pending_chunks = [], 0
    if pending:
        yield Segment.of(pending)


def model_groups(embedders: Mapping[str, Embedder]) -> list[ModelGroup]:
    """One group per embedder object, as ``Ingestor._model_groups`` forms them (logical space names)."""
    groups: list[ModelGroup] = []
    for space, embedder in embedders.items():
        group = next((group for group in groups if group.embedder is embedder), None)
        if group is None:
            group = ModelGroup(len(groups), embedder, {})
            groups.append(group)
        group.spaces[space] = space == CODE_SPACE
    return groups


def embedding_calls(groups: list[ModelGroup], segments: Iterator[Segment]) -> dict[int, list[list[str]]]:
    """Per group, the texts of each ``embed_documents`` call a first ingest makes, in order."""
    calls: dict[int, list[list[str]]] = {group.number: [] for group in groups}
    embedded: dict[int, set[bytes]] = {group.number: set() for group in groups}
    for segment in segments:
        for group in groups:
            first: dict[bytes, str] = {}
            for index in group.wanted(segment):
                digest = segment.hashes[index]
                if digest not in embedded[group.number] and digest not in first:
                    first[digest] = segment.inputs[index]
            if first:
                calls[group.number].append(list(first.values()))
                embedded[group.number].update(first)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    settings = get_settings()
    groups = model_groups(build_embedders(settings))
    calls = embedding_calls(groups, first_ingest_segments(args.folder.resolve(), settings.max_file_bytes))
    models: list[dict[str, Any]] = []
    hashes: list[str] = []
    for group in groups:
        started = time.perf_counter()
        if isinstance(group.embedder, LocalMiniLM):
            group.embedder.prepare()
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        for texts in calls[group.number]:
            group.embedder.embed_documents(texts)
        seconds = time.perf_counter() - started
        texts_embedded = [text for texts in calls[group.number] for text in texts]
        hashes += [input_hash(text).hex() for text in texts_embedded]
        models.append({"model": group.embedder.model_name, "spaces": sorted(group.spaces),
                       "texts": len(texts_embedded), "calls": len(calls[group.number]),
                       "seconds": round(seconds, 3), "load_seconds": round(loaded, 3)})
    print(json.dumps({"models": models, "input_hashes": hashes}))


if __name__ == "__main__":
    main()
