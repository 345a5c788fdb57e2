"""The docs-server contract's ``generate_urls``, and ``guided_query``'s ``enrich_urls``: citation URLs from metadata.

A record is a metadata object (or ``{"metadata": {...}}``) as a search row carries it. A record
with a ``url`` keeps it (method ``metadata``); one naming a ``path`` or ``document_id`` gets the
URL Quarry's ``generate_urls`` makes (``engine.corpus.urls.citation_urls``: the source's template,
its base URL, the stored URL); any other gets none, and says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, Field

from engine.corpus.urls import UrlRequest, citation_urls
from mcp_server.bounds import bounded_json
from mcp_server.profiles.namespaces import Namespace
from mcp_server.schemas import _STRICT
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape
from mcp_server.tools.urls import MAX_URL_RECORDS

Record = Annotated[dict[str, Any], Field(max_length=64)]


class GenerateUrlsArgs(BaseModel):
    model_config = _STRICT

    namespace: Namespace
    records: list[Record] = Field(min_length=1, max_length=MAX_URL_RECORDS,
                                  description="Metadata objects, or {metadata: {...}}")


def _metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    inner = record.get("metadata")
    return dict(inner) if isinstance(inner, Mapping) else dict(record)


def _document_id(value: Any) -> UUID | None:
    try:
        return UUID(value) if isinstance(value, str) else None
    except ValueError:
        return None


def run_generate_urls(context: ToolContext, args: GenerateUrlsArgs) -> str:
    metadata = [_metadata(record) for record in args.records]
    results: list[dict[str, Any] | None] = [None] * len(metadata)
    wanted: list[tuple[int, UrlRequest]] = []
    for index, fields in enumerate(metadata):
        path = fields.get("path") if isinstance(fields.get("path"), str) and fields.get("path") else None
        document_id = _document_id(fields.get("document_id"))
        if isinstance(fields.get("url"), str) and fields["url"]:
            results[index] = {"index": index, "url": fields["url"], "method": "metadata",
                              "reason": "the record's metadata has a url", "metadata": fields}
        elif path is not None or document_id is not None:
            wanted.append((index, UrlRequest(path, document_id)))
        else:
            results[index] = {"index": index, "url": None, "method": "none",
                              "reason": "the record has no url, path or document_id to make one from",
                              "metadata": fields}
    if wanted:
        for (index, _), found in zip(wanted, citation_urls(context.backend.pool, args.namespace,
                                                           [request for _, request in wanted]), strict=True):
            results[index] = {"index": index, "url": found.url, "method": found.method, "reason": found.reason,
                              "metadata": metadata[index]}
    rows = [row for row in results if row is not None]
    payload = {"status": "success", "namespace": args.namespace, "count": len(rows), "results": rows,
               "truncated": False}
    return bounded_json(payload, [], droppable=[rows], dropped_key="omitted_results")


def enrich_urls(context: ToolContext, rows: list[dict[str, Any]]) -> None:
    """Give each search row without a url the citation URL its source makes (``metadata.url_method`` says how)."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        source = row["metadata"].get("source") if row["url"] is None else None
        if isinstance(source, str):
            by_source.setdefault(source, []).append(row)
    for source, missing in by_source.items():
        found = citation_urls(context.backend.pool, source,
                              [UrlRequest(None, UUID(row["document_id"])) for row in missing])
        for row, url in zip(missing, found, strict=True):
            row["url"] = url.url
            row["metadata"]["url_method"] = url.method


GENERATE_URLS = ToolSpec(
    name="generate_urls", title="Generate URLs", arguments=GenerateUrlsArgs, run=run_generate_urls, cost=one_token,
    description="URLs for up to 500 metadata records of a namespace (its url, else from path or document_id).",
    output_schema=shape({"status": "string", "namespace": "string", "count": "integer", "results": "array"}))
