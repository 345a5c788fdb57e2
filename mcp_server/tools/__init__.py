"""The tools Quarry serves: each is a strict argument model, a description written for an LLM,
a rate-limit cost and a blocking ``run`` that returns the bounded JSON result.

``run`` executes in a worker thread (database and model calls block); it raises
``ToolFailure`` or a ``QuarryError`` for expected failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal

from engine.store.api_keys import Scope, VerifiedKey
from mcp_server.backend import Backend
from mcp_server.envelope import ErrorStyle, quarry_error
from mcp_server.ratelimit import RatePolicy
from mcp_server.schemas import ArgsT


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may use: the backend, the rate policy to report (None when not metered), and the caller.

    ``caller`` is the API key of an HTTP request; None on stdio and in ``--no-auth`` mode,
    where whoever reaches the server owns it.
    """

    backend: Backend
    rate_policy: RatePolicy | None = None
    caller: VerifiedKey | None = None

    def require_scope(self, scope: Scope, action: str) -> None:
        """Raise UNAUTHORIZED unless the caller may do ``action`` (no key: the local owner may)."""
        if self.caller is not None and not self.caller.allows(scope):
            from mcp_server.envelope import ToolFailure

            raise ToolFailure("UNAUTHORIZED", f"{action} needs an API key with the {scope!r} scope; "
                              f"this key has {', '.join(self.caller.scopes)}")


Audience = Literal["everyone", "admin"]


@dataclass(frozen=True, slots=True)
class ToolSpec(Generic[ArgsT]):
    name: str
    title: str
    description: str
    arguments: type[ArgsT]
    run: Callable[[ToolContext, ArgsT], str]
    cost: Callable[[ArgsT], int]
    #: False for a tool that can change state (e.g. cancel a job): clients see it in the annotations.
    read_only: bool = True
    #: What ``structuredContent`` holds (``mcp_server.tools.outputs.shape``).
    output_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    #: admin: listed only to callers that may use it (an admin key, or no key: stdio and ``--no-auth``).
    audience: Audience = "everyone"
    #: How this tool's failures look: Quarry's envelope, or the one its contract specifies.
    errors: ErrorStyle = quarry_error
    #: Publish ``filters`` with every fixed facet's values (else one generic rule: ``published_schema``).
    full_filters: bool = False


def one_token(_: Any) -> int:
    return 1


def all_tools() -> list[ToolSpec[Any]]:
    from mcp_server.tools.count import COUNT
    from mcp_server.tools.documents import GET_CHUNK, GET_DOCUMENT, READ_DOCUMENT_BYTES
    from mcp_server.tools.facets import FACETS
    from mcp_server.tools.grep import GREP
    from mcp_server.tools.guided import GUIDED_QUERY
    from mcp_server.tools.jobs import JOBS
    from mcp_server.tools.query_documents import QUERY_DOCUMENTS
    from mcp_server.tools.relations import NEIGHBORS
    from mcp_server.tools.routing import ROUTE_SOURCES
    from mcp_server.tools.search import ADVANCED_SEARCH, SEARCH
    from mcp_server.tools.sources import ADD_SOURCE, REFRESH_SOURCE, REMOVE_SOURCE
    from mcp_server.tools.status import LIST_SOURCES, STATUS
    from mcp_server.tools.suggest import SUGGEST_QUERY_PARAMS
    from mcp_server.tools.urls import GENERATE_URLS
    from mcp_server.tools.vectors import VECTOR_ADD, VECTOR_COUNT, VECTOR_DELETE, VECTOR_SEARCH

    return [SEARCH, ADVANCED_SEARCH, GREP, FACETS, GET_DOCUMENT, GET_CHUNK, READ_DOCUMENT_BYTES, LIST_SOURCES, STATUS,
            COUNT, QUERY_DOCUMENTS, GENERATE_URLS, ROUTE_SOURCES, SUGGEST_QUERY_PARAMS, GUIDED_QUERY, JOBS,
            NEIGHBORS, VECTOR_ADD, VECTOR_SEARCH, VECTOR_DELETE, VECTOR_COUNT, ADD_SOURCE, REFRESH_SOURCE,
            REMOVE_SOURCE]
