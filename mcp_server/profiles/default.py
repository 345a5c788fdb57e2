"""The ``default`` profile: Quarry's own tools, names and envelope.

Every tool of ``mcp_server.tools.all_tools``; the ones that write or bring your own vectors are
listed to admin keys only (``ToolSpec.audience``), so a search key's ``tools/list`` stays small.
"""

from __future__ import annotations

from engine.config import Settings
from mcp_server.flow_gate import FlowGate
from mcp_server.profiles import Profile
from mcp_server.tools import all_tools

DEFAULT_INSTRUCTIONS = """\
Quarry searches an indexed corpus of documentation and source code (docs sites, code repositories, \
standalone pages), ranking by keyword and semantic similarity together.

How to work with it:
1. Start with `search` for a question, an error message, an API or identifier name.
2. For several phrasings of one need, or to restrict by source, language, package, kind or format, call \
`facets` first to see which filter values exist, then `advanced_search` with `queries` and `filters`.
3. Results are chunks of documents. Read around a hit with `get_chunk` (neighbouring chunks) or \
`get_document` (the whole document, page by page via `next_cursor`); `read_document_bytes` returns exact \
raw bytes, e.g. a chunk's start_byte/end_byte span.
4. For "how many" questions use `count`; for whole pages `query_documents`; to cite, `generate_urls`. \
When unsure which source to ask, `route_sources` ranks them and `suggest_query_params` proposes filters; \
`guided_query` does routing, suggestion and the search or count in one call and explains its choices.
5. For the user's version, filter `advanced_search` on `language_target` / `sdk_dependency` with \
`version_satisfies` (a node-semver range); `version_match: "strict"` never substitutes another version.
6. `list_sources` shows what is indexed; `status` shows health, models, embedding coverage and limits; \
`jobs` shows ingestion jobs. Admin keys also see `vector_*` (your own embeddings) and the source tools.

Reading results: `confidence` (0-1) is how strongly retrieval ranked a chunk; `trust_score` (0-1) is how \
far to trust its source, explained by `confidence_factors` (attribution, verification, freshness, \
deprecation, version match). When sources disagree prefer higher trust; be careful with deprecated ones. \
Rows come in the order `ordered_by` names; `confidence_monotone: false` says a lower row shows a higher \
confidence (it also weighs absolute semantic similarity). `degraded: true` means part of the search failed \
and the results come from what still worked \
(`degradation_reason` and `hybrid_leg_failed` say what); they are usable but may be ranked less well. \
`reranked: false` with `rerank_skipped_reason` means the fused order was kept. `notes` explain arguments \
that had no effect. Responses stay under about 32 KB unless `max_tokens` asks for more (up to 256 KiB); cut content \
is marked `truncated: true`: read the rest with get_chunk, get_document or read_document_bytes. \
Full reference: docs/TOOLS.md.

Errors arrive as {"error": {"code", "message", "problems": [{"path", "rule"}]}}: INVALID (fix the named \
argument), LIMIT (ask for less: fewer queries, a smaller limit), NOT_FOUND (an unknown id: search again), \
RATE_LIMITED (wait retry_after seconds), UNAUTHORIZED (API key missing, revoked or without the needed \
scope), UNAVAILABLE (a dependency is down: retry later), BUSY (the server is at capacity: retry after \
retry_after seconds), FLOW_GATE (call suggest_query_params for that \
source first), INTERNAL (a bug: quote error_id)."""



def default_profile(settings: Settings) -> Profile:
    return Profile("default", tuple(FlowGate.from_settings(settings).wrap(all_tools())), DEFAULT_INSTRUCTIONS)
