"""From a walked file to a document to write: which files are ingested, and which changed.

``is_ingested`` says which files of a tree an ingest reads (a parser or a manifest reader
knows them); ``StoredDocument`` is what the source holds for a path; ``prepare_document``
skips a file whose hash and parser version match it, and parses any other, with the
version constraints it states, into the ``PendingDocument`` the writer stores. Kept apart
from ``engine.ingest.pipeline``: this is per file and touches no database or thread.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from uuid import UUID

from engine.ingest.batch import PendingDocument
from engine.ingest.manifest_paths import manifest_kind
from engine.ingest.model import PARSER_VERSION
from engine.ingest.parsers import ParseError, is_supported, parse_document
from engine.ingest.parsers.errors import NothingToIndex
from engine.ingest.summary import IngestSummary
from engine.ingest.versions import constraints_in_document
from engine.ingest.walk import FoundFile

__all__ = ["StoredDocument", "is_ingested", "prepare_document"]


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """The stored version of one path of the source, as far as change detection needs it."""

    id: UUID
    content_hash: bytes
    parser_version: int


def is_ingested(relative_path: str) -> bool:
    """Whether an ingest reads the file: a parser or a dependency-manifest reader knows it."""
    return is_supported(relative_path) or manifest_kind(relative_path) is not None


def prepare_document(
    item: FoundFile, stored: StoredDocument | None, summary: IngestSummary
) -> PendingDocument | None:
    """The document to write for ``item``; None when it is unchanged or fails to parse (counted in ``summary``)."""
    content_hash = hashlib.sha256(item.raw).digest()
    if stored is not None and stored.content_hash == content_hash and stored.parser_version == PARSER_VERSION:
        summary.unchanged += 1
        return None
    started = time.perf_counter()
    try:
        parsed = parse_document(item.relative_path, item.raw)
    except NothingToIndex as error:  # readable, but nothing to index (a scanned PDF)
        summary.skipped.append((item.relative_path, str(error)))
        return None
    except ParseError as error:
        summary.failed.append((item.relative_path, str(error)))
        return None
    finally:
        summary.parse_seconds += time.perf_counter() - started
    raw = parsed.text if parsed.text is not None else item.raw
    document = PendingDocument(item.relative_path, raw, content_hash, parsed, None if stored is None else stored.id)
    text = raw.decode("utf-8", errors="replace")
    skipped: list[tuple[str, str]] = []
    document.manifest_kind = manifest_kind(item.relative_path)
    if document.manifest_kind is not None:
        from engine.ingest.manifests import constraints_in_manifest  # its readers load only for a manifest

        document.constraints = constraints_in_manifest(item.relative_path, text, skipped=skipped) or []
    else:
        document.constraints = constraints_in_document(item.relative_path, text, skipped=skipped)
    summary.skipped.extend((f"{item.relative_path}: version constraint {what}", reason)
                           for what, reason in skipped)
    return document
