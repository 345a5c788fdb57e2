"""``search`` and ``advanced_search``: hybrid retrieval, reranking, confidence, trust and honest degradation.

The retrieval itself (embedding, the SQL call, reranking, degradation) is
``engine.retrieval.pipeline``, as for every surface; this module turns it into the two tools' responses,
shaped by ``advanced_search``'s ``preset`` (see ``mcp_server.tools.presets``).
"""

from __future__ import annotations

from typing import Any

from engine.retrieval.pipeline import retrieve
from engine.retrieval.request import NO_RERANK_REQUESTED, SearchRequest
from engine.retrieval.version_hint import has_version_rule, version_hint
from mcp_server.bounds import bounded_json
from mcp_server.schemas import AdvancedSearchArgs, SearchArgs
from mcp_server.token_budget import pack
from mcp_server.tools import ToolContext, ToolSpec
from mcp_server.tools.presets import FAST_NO_RERANK, Preset, shape_results

__all__ = ["ADVANCED_SEARCH", "SEARCH", "run_advanced_search", "run_search", "search_payload"]


def run_search(context: ToolContext, args: SearchArgs) -> str:
    return _execute(context, SearchRequest((args.query,), args.mode, args.code_mode, args.limit),
                    max_tokens=args.max_tokens)


def run_advanced_search(context: ToolContext, args: AdvancedSearchArgs) -> str:
    filters = args.filters.as_engine_filters() if args.filters is not None else None
    fast = args.preset == "fast"
    request = SearchRequest(tuple(args.queries), args.mode, args.code_mode, args.limit, rerank=args.rerank and not fast,
                            rerank_instructions=args.rerank_instructions, filters=filters or None,
                            version_match=args.version_match, per_document=args.per_document,
                            no_rerank_reason=FAST_NO_RERANK if fast else NO_RERANK_REQUESTED, group_by=args.group_by)
    return _execute(context, request, args.preset, args.max_tokens)


def _execute(context: ToolContext, request: SearchRequest, preset: Preset = "detailed",
             max_tokens: int | None = None) -> str:
    payload, texts = search_payload(context, request, preset)
    if max_tokens is not None:
        pack(payload, payload["results"], max_tokens)
    return bounded_json(payload, texts, droppable=[payload["results"]], dropped_key="omitted_results")


def search_payload(context: ToolContext, request: SearchRequest,
                   preset: Preset = "detailed") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The search response before the size bound, and the dicts whose ``content`` the bound may cut."""
    retrieval = retrieve(context.backend, request)
    payload = retrieval.summary()
    notes = retrieval.notes()
    # a document row carries spans, not content: a preset shapes chunk rows only (fast still skips reranking)
    texts = shape_results(context, preset, payload["results"]) if retrieval.documents is None else []
    if preset != "detailed":
        payload["preset"] = preset
    if request.filters:
        payload["filters"] = request.filters
        if not retrieval.hits and request.version_match == "strict" and has_version_rule(request.filters):
            payload["version_hint"] = version_hint(context.backend.pool, request.filters)
            notes.append("strict version matching left nothing; version_hint lists the versions that are indexed "
                         "for the requested languages / packages (no other version was substituted)")
    payload["notes"] = notes
    payload["truncated"] = False
    return payload, texts


def _distinct_queries(args: AdvancedSearchArgs) -> int:
    return len(set(args.queries))


SEARCH = ToolSpec(
    name="search",
    title="Search documentation and code",
    description=(
        "Search the indexed documentation and source code with one query: a question, an error message, an "
        "API or identifier name, or keywords. Start here. mode='hybrid' (default) fuses keyword and semantic "
        "ranking and suits almost everything; 'fts' is keyword-only (exact identifiers, no embedding call); "
        "'vector' is semantic-only. code_mode='on' (default) also searches the code embedding space, "
        "'exclusive' searches only code, 'off' only the general space. Returns up to `limit` (1-50) chunks, "
        "best first, each with chunk_id and document_id, content, source, path, title, url, heading_path or "
        "symbol_path, line span, confidence (0-1: rerank score when reranked, else calibrated retrieval "
        "strength), trust_score with confidence_factors, per-leg ranks, and highlights ({start, end} spans of the "
        "query's terms in content) with a snippet around them. For several phrasings, filters "
        "(source, language, package, version) or rerank instructions use advanced_search. To read around a "
        "result use get_chunk (neighbours) or get_document."
    ),
    arguments=SearchArgs,
    run=run_search,
    cost=lambda _: 1,
)

ADVANCED_SEARCH = ToolSpec(
    name="advanced_search",
    title="Search with several queries, filters and version matching",
    description=(
        "Search with 1-10 phrasings of the same need (fused; a repeated query counts once) and optional facet "
        "filters. Call `facets` first to learn valid filter values (source slugs, languages, packages). "
        "filters: {\"<facet>\": {\"any_of\": [...], \"none_of\": [...]}}; facets are ANDed, any_of values ORed, "
        "none_of values excluded. Facets: source_slug, language, package (open sets); kind (docs_site, "
        "code_repo, standalone, mixed), attribution (official, maintainer, community, unknown), content_type "
        "(markdown, rst, html, text, code), chunk_kind (definition, module, example, prose), verified and "
        "deprecated (booleans); and the version facets "
        "language_target and sdk_dependency, which also take version_satisfies (a node-semver range), e.g. "
        "{\"sdk_dependency\": {\"any_of\": [\"react\"], \"version_satisfies\": \"^18\"}}. path (globs such as "
        "src/**/*.py) and symbol (dotted names such as Client.connect) narrow by location. version_match='strict' "
        "keeps only content whose constraints satisfy the range (when nothing is left, version_hint lists the "
        "indexed versions; no other version is substituted); 'permissive' (default) drops breaking mismatches and "
        "ranks unknown or near misses lower. rerank and rerank_instructions (<= 400 characters) steer the "
        "reranker when one is configured; the response says whether reranking ran. Results have the same fields "
        "as `search`, plus version_match per result. preset: 'detailed' (default) as described; 'fast' skips "
        "reranking and returns light results (no confidence_factors or per-leg ranks, content cut to 500 "
        "characters); 'full' adds to each result its neighbouring chunks (the one before and after it). "
        "group_by='document' returns files instead: one row per document (path, score, confidence, "
        "matched_chunks) with spans, its best 1-3 chunks (chunk_id, lines, snippet, highlights in the snippet)."
    ),
    arguments=AdvancedSearchArgs,
    run=run_advanced_search,
    cost=_distinct_queries,
)
