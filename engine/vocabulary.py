"""Quarry's closed vocabularies: the names a caller chooses from, defined once and importing nothing.

They live apart from the modules that use them so the CLI builds its whole parser (``quarry
--help``, usage errors, every command's choices) without loading pydantic, psycopg or numpy,
which cost a second of a CLI command's start; those modules import them from here.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

#: What a source is: sets how fast its results lose trust with age, and a search filter.
SourceKind = Literal["docs_site", "code_repo", "standalone", "mixed"]
#: Who publishes a source: a trust factor of every result.
Attribution = Literal["official", "maintainer", "community", "unknown"]

#: What a chunk is (``quarry.chunk_kind``, sql/015-filters.sql), one kind each: a source file's code inside a named
#: definition, a source file's code outside any (imports, constants, top-level statements), code in documentation
#: (a fenced or ``<pre>`` block, code pasted in text), and everything else (prose, plain text, data files).
CHUNK_KINDS: Final[tuple[str, ...]] = ("definition", "module", "example", "prose")

JobKind = Literal["ingest", "reembed", "reindex", "remove_source", "kb_index"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]
JOB_KINDS: Final[tuple[JobKind, ...]] = get_args(JobKind)
JOB_STATUSES: Final[tuple[JobStatus, ...]] = get_args(JobStatus)
#: Jobs on one page of a job listing, at most.
MAX_JOBS_PAGE: Final = 100

#: How a vector store compares vectors.
Metric = Literal["cosine", "dot", "euclidean"]
METRICS: Final[tuple[Metric, ...]] = get_args(Metric)

#: The MCP tool profiles (mcp_server.profiles): Quarry's own, or a contract's names and envelopes.
ToolProfile = Literal["default", "docs-server", "vectors", "kb", "all"]
TOOL_PROFILES: Final[tuple[ToolProfile, ...]] = get_args(ToolProfile)
