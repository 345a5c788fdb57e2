"""The ``docs-server`` profile: the Pinecone-docs contract (contracts/000_…) over Quarry's engine.

Nine tools under the contract's names and arguments: ``namespace`` is a source slug, ``metadata_filter``
a Pinecone-style filter on Quarry's facets (``metadata_filter``), rows carry ``document_id, title, author,
url, content, score, reranked, metadata``. Every tool calls what Quarry's own tools call:
``engine.retrieval.pipeline.retrieve``, ``count_documents`` (through ``count_payload``), the whole-document
merge, routing, suggestions and citation URLs. Failures are ``{"status": "error", "code", "message"}``
(``docs_error``). The flow gate is on, as in the contract's full server, unless ``QUARRY_FLOW_GATE`` says
otherwise: ``query``, ``count`` and ``query_documents`` on a namespace need a ``suggest_query_params`` for
exactly that namespace string first (``guided_query`` makes its own).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from engine.config import Settings
from engine.corpus.whole_documents import DEFAULT_CHUNKS_PER_DOCUMENT, MAX_CHUNKS_PER_DOCUMENT
from engine.retrieval.pipeline import Retrieval, retrieve
from engine.retrieval.request import Filters as EngineFilters
from engine.retrieval.request import SearchRequest
from engine.retrieval.routing import recommended
from engine.retrieval.suggestions import suggest_query_params
from mcp_server.bounds import bounded_json
from mcp_server.envelope import ToolFailure
from mcp_server.flow_gate import FlowGate, GateRules
from mcp_server.limits import MAX_RESPONSE_BYTES
from mcp_server.profiles import Profile
from mcp_server.profiles.docs_urls import GENERATE_URLS, enrich_urls
from mcp_server.profiles.metadata_filter import engine_filters
from mcp_server.profiles.namespaces import (
    CACHE_TTL_S,
    CONTRACT_TOOL,
    Namespace,
    NamespaceCache,
    namespace_tools,
    suggested_namespace,
)
from mcp_server.schemas import _STRICT, QueryText
from mcp_server.tools import ToolContext, ToolSpec, one_token
from mcp_server.tools.count import count_payload
from mcp_server.tools.outputs import shape
from mcp_server.tools.presets import FAST_CONTENT_CHARS, FAST_NO_RERANK
from mcp_server.tools.query_documents import MAX_DOCUMENTS, bounded_documents, whole_documents
from mcp_server.tools.routing import route

MAX_TOP_K = 100
Preset = Literal["fast", "detailed", "full"]
MODES: dict[Preset, str] = {"full": "query", "fast": "query_fast", "detailed": "query_detailed"}
FieldName = Annotated[str, StringConstraints(min_length=1, max_length=64)]
MetadataFilter = Annotated[dict[str, Any], Field(max_length=16)]
_FILTER_HELP = "Pinecone-style: {field: value | {$eq|$in|$ne|$nin: ...}}, $and"
#: Metadata of a fast row: where the hit is.
_FAST_METADATA = ("chunk_id", "path", "source", "heading_path", "symbol_path", "rank")


class QueryArgs(BaseModel):
    model_config = _STRICT

    query_text: QueryText
    namespace: Namespace
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K)
    preset: Preset = Field(default="full", description="fast: no rerank, light fields")
    use_reranking: bool | None = Field(default=None, description="When the preset reranks; default true")
    metadata_filter: MetadataFilter | None = Field(default=None, description=_FILTER_HELP)
    fields: list[FieldName] | None = Field(default=None, max_length=50, description="Metadata fields to return")


class KeywordArgs(BaseModel):
    model_config = _STRICT

    query_text: QueryText
    namespace: Namespace
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K)
    metadata_filter: MetadataFilter | None = Field(default=None, description=_FILTER_HELP)
    fields: list[FieldName] | None = Field(default=None, max_length=50)


class CountArgs(BaseModel):
    model_config = _STRICT

    namespace: Namespace
    query_text: QueryText = Field(description="'document' counts every record's document")
    metadata_filter: MetadataFilter | None = Field(default=None, description=_FILTER_HELP)


class QueryDocumentsArgs(BaseModel):
    model_config = _STRICT

    query_text: QueryText
    namespace: Namespace
    top_k: int = Field(default=5, ge=1, le=MAX_DOCUMENTS)
    metadata_filter: MetadataFilter | None = Field(default=None, description=_FILTER_HELP)
    max_chunks_per_document: int = Field(default=DEFAULT_CHUNKS_PER_DOCUMENT, ge=1, le=MAX_CHUNKS_PER_DOCUMENT)


class GuidedArgs(BaseModel):
    model_config = _STRICT

    user_query: QueryText
    namespace: Namespace | None = None
    metadata_filter: MetadataFilter | None = Field(default=None, description=_FILTER_HELP)
    top_k: int | None = Field(default=None, ge=1, le=MAX_TOP_K)
    preferred_tool: Literal["auto", "count", "fast", "detailed", "full"] = "auto"
    enrich_urls: bool = True


def docs_error(error: ToolFailure) -> dict[str, Any]:
    """The contract's ToolError: ``{"status": "error", "code", "message", "suggestion"?, "problems"?, ...}``."""
    timed_out = error.code == "UNAVAILABLE" and "did not answer in time" in error.message
    body: dict[str, Any] = {"status": "error", "code": "TIMEOUT" if timed_out else error.code,
                            "message": error.message}
    if error.code == "FLOW_GATE":
        body["suggestion"] = "call suggest_query_params with this exact namespace first"
    inner = error.envelope()["error"]
    body |= {key: inner[key] for key in ("problems", "retry_after", "error_id") if key in inner}
    return body


def _leg(failed: object) -> str | None:
    """hybrid_leg_failed in the contract's terms: the sparse (keyword) or the dense (vector) leg."""
    return {"fts": "sparse", "vector": "dense", "code": "dense"}.get(str(failed)) if failed else None


def rerank_status(retrieval: Retrieval) -> str:
    if not retrieval.rerank.attempted:
        return "skipped"
    return "success" if any(hit.reranked for hit in retrieval.hits) or not retrieval.hits else "failed"


def _rows(retrieval: Retrieval, preset: Preset, fields: list[str] | None) -> list[dict[str, Any]]:
    rows = []
    for ranked in retrieval.hits:
        hit = ranked.hit
        metadata: dict[str, Any] = {
            "chunk_id": str(hit.chunk_id), "rank": ranked.rank, "path": hit.path, "source": hit.source_slug,
            "heading_path": hit.heading_path, "symbol_path": hit.symbol_path, "start_line": hit.start_line,
            "end_line": hit.end_line, "content_type": hit.content_type, "language": hit.language,
            "confidence": ranked.confidence, "trust_score": hit.trust["score"], "version_match": hit.version_match}
        if preset == "full":
            metadata |= {"confidence_factors": hit.trust["factors"], "fts_rank": hit.fts_rank,
                         "vector_rank": hit.vector_rank, "code_rank": hit.code_rank}
        if fields is not None:
            metadata = {name: metadata[name] for name in fields if name in metadata}
        elif preset == "fast":
            metadata = {name: metadata[name] for name in _FAST_METADATA}
        content = hit.content
        row: dict[str, Any] = {
            "document_id": str(hit.document_id), "paper_number": str(hit.document_id), "title": hit.title,
            "author": None, "url": hit.url, "content": content,
            # the order's own key: the rerank score for reranked rows, else the fused score
            "score": round(ranked.rerank_score if ranked.reranked and ranked.rerank_score is not None
                           else hit.fused_score, 4),
            "reranked": ranked.reranked, "metadata": metadata}
        if preset == "fast" and len(content) > FAST_CONTENT_CHARS:
            row |= {"content": content[:FAST_CONTENT_CHARS], "truncated": True,
                    "omitted_chars": len(content) - FAST_CONTENT_CHARS}
        rows.append(row)
    return rows


def query_payload(context: ToolContext, query: str, namespace: str | None, filters: EngineFilters | None, *,
                  top_k: int, preset: Preset, rerank: bool, keyword: bool = False,
                  fields: list[str] | None = None) -> tuple[dict[str, Any], Retrieval]:
    """The contract's QueryResponse (before the size bound) and the retrieval behind it."""
    reason = ("keyword_search does not rerank" if keyword else FAST_NO_RERANK if preset == "fast"
              else "use_reranking=false was requested")
    retrieval = retrieve(context.backend, SearchRequest(
        (query,), "fts" if keyword else "hybrid", limit=top_k, rerank=rerank, filters=filters,
        no_rerank_reason=reason))
    rows = _rows(retrieval, preset, fields)
    degradation = retrieval.degradation.fields()
    payload: dict[str, Any] = {
        "status": "success", "mode": "keyword" if keyword else MODES[preset], "query": query, "namespace": namespace,
        "result_count": len(rows), "results": rows,
        "ordered_by": "score: the rerank score where reranked, else the fused keyword and vector score",
        "reranked": any(row["reranked"] for row in rows), "rerank_skipped_reason": retrieval.rerank_skipped_reason,
        "degraded": degradation["degraded"], "degradation_reason": degradation["degradation_reason"],
        "hybrid_leg_failed": _leg(degradation["hybrid_leg_failed"]), "truncated": False}
    if fields is not None:
        payload["fields"] = fields
    return payload, retrieval


def _bounded(payload: dict[str, Any]) -> str:
    return bounded_json(payload, payload["results"], droppable=[payload["results"]], dropped_key="omitted_results",
                        limit=MAX_RESPONSE_BYTES)


def run_query(context: ToolContext, args: QueryArgs) -> str:
    rerank = args.preset != "fast" and args.use_reranking is not False
    payload, _ = query_payload(context, args.query_text, args.namespace,
                               engine_filters(args.metadata_filter, args.namespace), top_k=args.top_k,
                               preset=args.preset, rerank=rerank, fields=args.fields)
    if args.metadata_filter is not None:
        payload["metadata_filter"] = args.metadata_filter
    return _bounded(payload)


def run_keyword_search(context: ToolContext, args: KeywordArgs) -> str:
    payload, _ = query_payload(context, args.query_text, args.namespace,
                               engine_filters(args.metadata_filter, args.namespace), top_k=args.top_k,
                               preset="detailed", rerank=False, keyword=True, fields=args.fields)
    if args.metadata_filter is not None:
        payload["metadata_filter"] = args.metadata_filter
    return _bounded(payload)


def docs_count(context: ToolContext, query: str, namespace: str | None,
               filters: EngineFilters | None) -> dict[str, Any]:
    counted = count_payload(context, query, filters)
    return {"status": "success", "count": counted["count"], "truncated": counted["truncated"],
            "namespace": namespace, "method": counted["method"], "explanation": counted["explanation"]}


def run_count(context: ToolContext, args: CountArgs) -> str:
    payload = docs_count(context, args.query_text, args.namespace,
                         engine_filters(args.metadata_filter, args.namespace))
    if args.metadata_filter is not None:
        payload["metadata_filter"] = args.metadata_filter
    return bounded_json(payload, [])


def run_query_documents(context: ToolContext, args: QueryDocumentsArgs) -> str:
    retrieval, found = whole_documents(context, args.query_text, engine_filters(args.metadata_filter, args.namespace),
                                       args.top_k, args.max_chunks_per_document)
    documents = [{"document_id": row["document_id"], "content": row["content"], "chunk_count": row["chunk_count"],
                  "best_score": row["best_score"],
                  "metadata": {key: row[key] for key in ("rank", "title", "path", "url", "content_type", "language",
                                                         "score", "matched_chunks", "merged_chunks", "trust_score")}
                  | {"source": row["source"]["slug"]}}
                 for row in found]
    degradation = retrieval.degradation.fields()
    payload: dict[str, Any] = {
        "status": "success", "query": args.query_text, "namespace": args.namespace, "result_count": len(documents),
        "documents": documents, "ordered_by": "metadata.score (the best chunk's score, a little more per further "
        "matching chunk)", "degraded": degradation["degraded"], "degradation_reason": degradation["degradation_reason"],
        "hybrid_leg_failed": _leg(degradation["hybrid_leg_failed"]), "truncated": False}
    if args.metadata_filter is not None:
        payload["metadata_filter"] = args.metadata_filter
    return bounded_documents(payload, documents, MAX_RESPONSE_BYTES)


def guided_tool(cache: NamespaceCache, gate: FlowGate) -> ToolSpec[GuidedArgs]:
    def run(context: ToolContext, args: GuidedArgs) -> str:
        listed, hit = cache.get(context)
        trace: dict[str, Any] = {"cache_hit": hit, "input_namespace": args.namespace, "routed_namespace": None,
                                 "ranked_namespaces": []}
        selected = args.namespace
        if selected is None:
            ranked, _ = route(context, args.user_query)
            best = recommended(ranked)
            selected = trace["routed_namespace"] = best.signals.slug if best is not None else None
            trace["ranked_namespaces"] = [{"namespace": source.signals.slug, "score": source.score}
                                          for source in ranked[:3]]
        elif selected not in listed.names():
            raise ToolFailure("NOT_FOUND", f"namespace: no namespace {selected!r}; the namespaces are "
                              f"{', '.join(sorted(listed.names()))}")
        trace["selected_namespace"] = selected
        suggestion = suggest_query_params(context.backend.pool, selected, args.user_query) if selected else None
        if selected is not None:
            gate.record(selected)  # the contract's markSuggested: later gated calls on it pass
        filters: dict[str, Any] = {**(suggestion.filters if suggestion else {}),
                                   **(engine_filters(args.metadata_filter, selected) or {})}
        suggested_tool = CONTRACT_TOOL[suggestion.recommended_tool] if suggestion else "query"
        preferred = args.preferred_tool
        tool = ("count" if suggestion is not None and suggestion.use_count_tool else "full") \
            if preferred == "auto" else preferred
        trace |= {"suggested_fields": sorted(key for key in (suggestion.filters if suggestion else {})
                                             if key != "source_slug"),
                  "suggested_tool": suggested_tool, "selected_tool": "count" if tool == "count" else MODES[tool],
                  "enrich_urls": args.enrich_urls}
        why = [f"namespace {selected!r} was {'given' if args.namespace else 'routed'}" if selected
               else "no namespace has evidence for this query: every namespace is searched"]
        why += suggestion.explanation if suggestion else []
        why.append(f"preferred_tool={preferred!r}" + (f" chose {tool}" if preferred == "auto" else ""))
        trace["explanation"] = "; ".join(why)
        if tool == "count":
            trace["rerank_status"] = "skipped"
            result = docs_count(context, args.user_query, selected, filters or None)
            return bounded_json({"status": "success", "decision_trace": trace, "result": result}, [])
        result, retrieval = query_payload(context, args.user_query, selected, filters or None,
                                          top_k=args.top_k or 10, preset=tool, rerank=tool != "fast")
        trace["rerank_status"] = rerank_status(retrieval)
        if args.enrich_urls:
            enrich_urls(context, result["results"])
        payload = {"status": "success", "decision_trace": trace, "result": result}
        return bounded_json(payload, result["results"], droppable=[result["results"]], dropped_key="omitted_results",
                            limit=MAX_RESPONSE_BYTES)

    return ToolSpec(name="guided_query", title="Ask in one call", arguments=GuidedArgs, run=run, cost=lambda _: 2,
                    description="Route to a namespace, suggest, then count or query, in one call (no "
                                "suggest_query_params needed); returns decision_trace and result.",
                    output_schema=shape({"status": "string", "decision_trace": "object", "result": "object"}))


DOCS_INSTRUCTIONS = """\
A documentation search server over namespaces (one per indexed source). Typical flow: list_namespaces -> \
(optional) namespace_router -> suggest_query_params -> query | count | query_documents, with exactly the same \
namespace string throughout; without the suggestion those three answer FLOW_GATE. keyword_search needs no \
suggestion; guided_query does everything in one call. Results: status "success"; rows with document_id, title, \
author, url, content, score (ordered_by), reranked and metadata; degraded: true means part of the search failed \
(degradation_reason, hybrid_leg_failed). Errors: isError with {"status": "error", "code", "message"}."""

def _namespace_of(arguments: BaseModel) -> list[tuple[str, str]]:
    namespace = getattr(arguments, "namespace", None)
    return [("namespace", namespace)] if isinstance(namespace, str) else []


GATE_RULES = GateRules(frozenset({"query", "count", "query_documents"}), "suggest_query_params", "namespace",
                       _namespace_of, suggested_namespace)


def docs_server_tools(settings: Settings, *, gate_by_default: bool = True) -> list[ToolSpec[Any]]:
    """The nine tools, sharing one namespace cache and one flow gate (on unless ``QUARRY_FLOW_GATE`` is set,
    or ``gate_by_default`` is False)."""
    cache = NamespaceCache()
    gate = FlowGate.from_settings(settings, GATE_RULES, enabled_by_default=gate_by_default)
    if "flow_gate_ttl_s" not in settings.model_fields_set:
        gate.ttl_s = CACHE_TTL_S  # the contract's gate holds for its cache TTL
    specs: list[ToolSpec[Any]] = [
        *namespace_tools(cache),
        ToolSpec(name="count", title="Count documents", arguments=CountArgs, run=run_count, cost=one_token,
                 description="Semantic count of unique documents matching query_text in a namespace.",
                 output_schema=shape({"status": "string", "count": "integer", "truncated": "boolean"})),
        ToolSpec(name="query", title="Query a namespace", arguments=QueryArgs, run=run_query, cost=one_token,
                 description="Hybrid keyword and semantic retrieval in a namespace, reranked unless preset is "
                             "fast; rows best first with document_id, title, url, content, score, metadata.",
                 output_schema=shape({"status": "string", "mode": "string", "results": "array",
                                      "result_count": "integer", "degraded": "boolean"})),
        ToolSpec(name="keyword_search", title="Keyword search", arguments=KeywordArgs, run=run_keyword_search,
                 cost=one_token, description="Keyword (sparse) search only in a namespace; no suggestion needed.",
                 output_schema=shape({"status": "string", "results": "array", "result_count": "integer"})),
        ToolSpec(name="query_documents", title="Query whole documents", arguments=QueryDocumentsArgs,
                 run=run_query_documents, cost=one_token,
                 description="Search, then whole documents (merged_content of their chunks) best first.",
                 output_schema=shape({"status": "string", "documents": "array", "result_count": "integer"})),
        guided_tool(cache, gate),
        GENERATE_URLS,
    ]
    return gate.wrap([replace(spec, errors=docs_error) for spec in specs])


def docs_server_profile(settings: Settings) -> Profile:
    return Profile("docs-server", tuple(docs_server_tools(settings)), DOCS_INSTRUCTIONS)
