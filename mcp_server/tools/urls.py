"""``generate_urls``: citation URLs for documents of a source, from its URL template and a fallback chain."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from engine.corpus.urls import UrlRequest, citation_urls
from mcp_server.bounds import bounded_json
from mcp_server.schemas import _STRICT, AnyUuid
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.outputs import shape

#: Records per call, at most.
MAX_URL_RECORDS = 500

SourceSlug = Annotated[str, StringConstraints(min_length=1, max_length=63)]


class UrlRecord(BaseModel):
    """A document to cite: its path in the source, its document_id, or both."""

    model_config = _STRICT

    path: str | None = Field(default=None, min_length=1, max_length=1_000)
    document_id: AnyUuid | None = Field(default=None)

    @model_validator(mode="after")
    def _names_a_document(self) -> UrlRecord:
        if self.path is None and self.document_id is None:
            raise PydanticCustomError("empty_rule", "needs path, document_id or both")
        return self


class GenerateUrlsArgs(BaseModel):
    model_config = _STRICT

    source: SourceSlug
    records: list[UrlRecord] = Field(min_length=1, max_length=MAX_URL_RECORDS)


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
    description="Citation URLs for documents of a source, by path or document_id.",
    arguments=GenerateUrlsArgs,
    run=run_generate_urls,
    cost=one_token,
    output_schema=shape({"urls": "array"}),
)
