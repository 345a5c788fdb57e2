"""Tool profiles: which tools a server lists, under which names, arguments and envelopes.

``default`` is Quarry's own surface; ``docs-server``, ``vectors`` and ``kb`` answer the contracts in
``../shared/contracts`` (their tool names, arguments, defaults, limits and response shapes);
``all`` is every tool of every profile, Quarry's own winning a name two profiles share. A profile
is an adapter: its tools call the same engine functions as Quarry's (``engine.retrieval``,
``engine.corpus``, ``engine.store``), never a second search, count or store.

Chosen with ``QUARRY_TOOLS`` or ``quarry serve|mcp --tools PROFILE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import Settings
from engine.vocabulary import TOOL_PROFILES
from mcp_server.tools import ToolSpec

__all__ = ["PROFILE_NAMES", "Profile", "build_profile"]


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    tools: tuple[ToolSpec[Any], ...]
    #: What the server tells a client at initialisation: how to use these tools.
    instructions: str


PROFILE_NAMES = TOOL_PROFILES


def build_profile(name: str, settings: Settings) -> Profile:
    """The profile called ``name``, with the flow gate ``settings`` configure applied to its tools."""
    from mcp_server.profiles.all import all_profile
    from mcp_server.profiles.default import default_profile
    from mcp_server.profiles.docs_server import docs_server_profile
    from mcp_server.profiles.kb import kb_profile
    from mcp_server.profiles.vectors import vectors_profile

    builders = {"default": default_profile, "docs-server": docs_server_profile, "vectors": vectors_profile,
                "kb": kb_profile, "all": all_profile}
    if set(builders) != set(PROFILE_NAMES):
        raise AssertionError("mcp_server.profiles is out of step with Settings.tools")
    if name not in builders:
        raise ValueError(f"no tool profile {name!r}; the profiles are {', '.join(PROFILE_NAMES)}")
    return builders[name](settings)
