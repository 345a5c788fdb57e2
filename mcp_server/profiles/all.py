"""The ``all`` profile: every tool of every profile, once.

Where two profiles name a tool alike (``count``, ``query_documents``, ``suggest_query_params``,
``guided_query``, ``generate_urls`` in ``default`` and ``docs-server``; the four ``vector_*`` in
``default`` and ``vectors``), Quarry's own ``default`` tool is served: its answers are a superset
of the contract's, and a contract client uses its contract's profile. The contracts' other tools
(``list_namespaces``, ``namespace_router``, ``query``, ``keyword_search``) and the knowledge base's
``kb_*`` are added beside them.
Their flow gate is off unless ``QUARRY_FLOW_GATE`` is set: the ``suggest_query_params`` served here
is Quarry's, which opens Quarry's gate, not the docs-server's.
"""

from __future__ import annotations

from typing import Any

from engine.config import Settings
from mcp_server.profiles import Profile
from mcp_server.profiles.default import DEFAULT_INSTRUCTIONS, default_profile
from mcp_server.profiles.docs_server import DOCS_INSTRUCTIONS, docs_server_tools
from mcp_server.profiles.kb import KB_INSTRUCTIONS, kb_tools
from mcp_server.profiles.vectors import vectors_profile
from mcp_server.tools import ToolSpec


def all_profile(settings: Settings) -> Profile:
    tools: dict[str, ToolSpec[Any]] = {}
    served = (*default_profile(settings).tools, *docs_server_tools(settings, gate_by_default=False),
              *vectors_profile(settings).tools, *kb_tools())
    for spec in served:
        tools.setdefault(spec.name, spec)  # the first profile to name a tool keeps it
    instructions = (DEFAULT_INSTRUCTIONS + "\n\nAlso served, in the docs-server contract's shapes: list_namespaces, "
                    "namespace_router, query and keyword_search (see its instructions below).\n\n" + DOCS_INSTRUCTIONS
                    + "\n\nAnd the knowledge base's kb_* tools: " + KB_INSTRUCTIONS)
    return Profile("all", tuple(tools.values()), instructions)
