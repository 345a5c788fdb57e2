"""Citation URLs for documents of a source, synthesized from metadata with a fallback chain.

For each record (a path, a document id, or both), in order:

1. ``url_template``: the source's current template applied to the path
   (``{path}``, ``{path_no_ext}``, ``{stem}``; see ``engine.ingest.sources.document_url``);
2. ``base_url``: the source's base URL joined with the path;
3. ``stored``: the URL recorded for the document when it was ingested (an earlier
   template or base URL);
4. ``none``: no URL; ``reason`` says what is missing.

A path need not be indexed (a template makes URLs for any path); a document id must
name a document of the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from psycopg_pool import ConnectionPool

from engine.errors import NotFoundError
from engine.ingest.sources import document_url

UrlMethod = Literal["url_template", "base_url", "stored", "none"]


@dataclass(frozen=True, slots=True)
class UrlRequest:
    path: str | None = None
    document_id: UUID | None = None


@dataclass(frozen=True, slots=True)
class CitationUrl:
    path: str | None
    document_id: UUID | None
    url: str | None
    method: UrlMethod
    reason: str
    indexed: bool


def citation_urls(pool: ConnectionPool, source: str, records: Sequence[UrlRequest]) -> list[CitationUrl]:
    """One citation URL per record, in order (raises ``NotFoundError`` for an unknown source)."""
    with pool.connection() as conn:
        found = conn.execute("select id, base_url, url_template from quarry.sources where slug = %s",
                             (source,)).fetchone()
        if found is None:
            raise NotFoundError("source: no source has this slug; list them with list_sources or route_sources")
        source_id, base_url, url_template = found
        rows = conn.execute(
            "select id, path, url from quarry.documents"
            " where source_id = %s and (id = any (%s) or path = any (%s))",
            (source_id, [r.document_id for r in records if r.document_id is not None],
             [r.path for r in records if r.path is not None]),
        ).fetchall()
    by_id = {row[0]: (row[1], row[2]) for row in rows}
    by_path = {row[1]: (row[0], row[2]) for row in rows}
    results = []
    for record in records:
        path, document_id, stored, indexed = record.path, record.document_id, None, False
        if document_id is not None:
            if document_id not in by_id:
                results.append(CitationUrl(path, document_id, None, "none",
                                           f"no document of source '{source}' has this document_id", False))
                continue
            known_path, stored = by_id[document_id]
            if path is not None and path != known_path:
                results.append(CitationUrl(path, document_id, None, "none",
                                           "path and document_id name different documents", True))
                continue
            path, indexed = known_path, True
        elif path in by_path:
            document_id, stored = by_path[path]
            indexed = True
        assert path is not None  # a record names a path or a document id
        results.append(_resolve(source, path, document_id, stored, indexed, base_url, url_template))
    return results


def _resolve(source: str, path: str, document_id: UUID | None, stored: str | None, indexed: bool,
             base_url: str | None, url_template: str | None) -> CitationUrl:
    if url_template:
        return CitationUrl(path, document_id, document_url(None, url_template, path), "url_template",
                           f"the url_template of source '{source}' applied to the path", indexed)
    if base_url:
        return CitationUrl(path, document_id, document_url(base_url, None, path), "base_url",
                           f"source '{source}' has no url_template; its base_url joined with the path", indexed)
    if stored:
        return CitationUrl(path, document_id, stored, "stored",
                           f"source '{source}' has no url_template or base_url now; the URL recorded at ingest",
                           indexed)
    why = "the document has no recorded URL" if indexed else "the path is not an indexed document"
    return CitationUrl(path, document_id, None, "none",
                       f"source '{source}' has no url_template or base_url and {why}; cite it as "
                       f"'{source}:{path}'", indexed)
