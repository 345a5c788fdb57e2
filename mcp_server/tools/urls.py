"""``generate_urls``: citation URLs for documents of a source, from its URL template and a fallback chain."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from engine.corpus.urls import UrlRequest, citation_urls
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, AnyUuid
from mcp_server.tools import ToolContext, ToolSpec, one_token

#: Records per call, at most.
MAX_URL_RECORDS = 500

SourceSlug = Annotated[str, StringConstraints(min_length=1, max_length=63)]


class UrlRecord(BaseModel):
    """A document to cite: its path in the source, its document_id, or both."""

    model_config = _STRICT

    path: str | None = Field(default=None, min_length=1, max_length=1_000,
                             description="Path of the document within its source, e.g. 'docs/indexes.md'.")
    document_id: AnyUuid | None = Field(default=None, description="A document_id from a search result.")

    @model_validator(mode="after")
    def _names_a_document(self) -> UrlRecord:
        if self.path is None and self.document_id is None:
            raise PydanticCustomError("empty_rule", "needs path, document_id or both")
        return self


class GenerateUrlsArgs(BaseModel):
    model_config = _STRICT

    source: SourceSlug = Field(description="The source's slug (see list_sources).")
    records: list[UrlRecord] = Field(min_length=1, max_length=MAX_URL_RECORDS,
                                     description=f"1-{MAX_URL_RECORDS} documents to cite.")


def run_generate_urls(context: ToolContext, args: GenerateUrlsArgs) -> str:
    found = citation_urls(context.backend.pool, args.source,
                          [UrlRequest(record.path, record.document_id) for record in args.records])
    urls = [{"path": row.path, "document_id": str(row.document_id) if row.document_id else None, "url": row.url,
             "method": row.method, "reason": row.reason, "indexed": row.indexed} for row in found]
    methods: dict[str, int] = {}
    for row in found:
        methods[row.method] = methods.get(row.method, 0) + 1
    payload: dict[str, Any] = {"source": args.source, "urls": urls, "url_count": len(urls), "methods": methods,
                               "truncated": False}
    return bounded_json(payload, [], droppable=[urls], dropped_key="omitted_urls")


GENERATE_URLS = ToolSpec(
    name="generate_urls",
    title="Make citation URLs",
    description=(
        f"Citation URLs for up to {MAX_URL_RECORDS} documents of one source, each named by path, document_id or "
        "both. Each row has url, method and reason; methods in fallback order: url_template (the source's "
        "template with {path}, {path_no_ext}, {stem}), base_url (base URL + path), stored (the URL recorded at "
        "ingest), none (url null: cite 'source:path'). indexed says whether the path is an indexed document; "
        "a template makes URLs for paths that are not."
    ),
    arguments=GenerateUrlsArgs,
    run=run_generate_urls,
    cost=one_token,
)
