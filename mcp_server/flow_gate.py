"""The flow gate: optionally make assistants call ``suggest_query_params`` before searching a source.

Off by default. When on (``QUARRY_FLOW_GATE=on``), a call of ``search``,
``advanced_search``, ``count`` or ``query_documents`` *on a source* (its
``filters.source_slug.any_of`` names it) fails with ``FLOW_GATE`` unless
``suggest_query_params`` succeeded for exactly that source string within the last
``QUARRY_FLOW_GATE_TTL_S`` seconds (default 600); the error says what to call. Calls on
no particular source (``search`` never names one) pass, and so does ``guided_query``,
which makes its own suggestion.

The gate steers assistants towards well-filtered queries; it is not access control.
Its memory is per server process and shared by that server's clients. It works by
wrapping tool specs, so the tools themselves know nothing of it::

    tools = FlowGate.from_environment().wrap([SEARCH, ADVANCED_SEARCH, ...])
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from engine.config import Settings
from mcp_server.envelope import Problem, ToolFailure
from mcp_server.tools import ToolContext, ToolSpec

GATED_TOOLS = frozenset({"search", "advanced_search", "count", "query_documents"})
SUGGESTING_TOOL = "suggest_query_params"
DEFAULT_TTL_S = 600.0
_ON = {"on", "true", "1", "yes"}
_OFF = {"off", "false", "0", "no", ""}


class FlowGate:
    """Which sources had a suggestion recently, and the check gated tools make."""

    def __init__(self, *, enabled: bool = False, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s <= 0:
            raise ValueError("the flow gate's TTL must be positive")
        self.enabled = enabled
        self.ttl_s = ttl_s
        self._clock = clock
        self._suggested: dict[str, float] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> FlowGate:
        """``QUARRY_FLOW_GATE`` (default off) and ``QUARRY_FLOW_GATE_TTL_S`` (default 600)."""
        return cls(enabled=settings.flow_gate, ttl_s=settings.flow_gate_ttl_s)

    def record(self, source: str) -> None:
        with self._lock:
            self._suggested[source] = self._clock() + self.ttl_s

    def check(self, tool: str, sources: Sequence[str]) -> None:
        """Raise ``FLOW_GATE`` naming the first source without a live suggestion."""
        now = self._clock()
        with self._lock:
            self._suggested = {source: until for source, until in self._suggested.items() if until > now}
            missing = [source for source in sources if source not in self._suggested]
        if missing:
            index = list(sources).index(missing[0])
            raise ToolFailure(
                "FLOW_GATE",
                f"this server requires suggest_query_params before {tool} on a source: call suggest_query_params "
                f"with source={missing[0]!r} and the user's question, then retry with its suggested filters "
                f"(a suggestion holds for {self.ttl_s:g} seconds and only for exactly that source string)",
                problems=[Problem(f"filters.source_slug.any_of[{index}]",
                                  "needs a prior suggest_query_params call for this exact source")])

    def wrap(self, tools: Sequence[ToolSpec[Any]]) -> list[ToolSpec[Any]]:
        """The tools with the gate applied (unchanged when the gate is off)."""
        if not self.enabled:
            return list(tools)
        return [self._gated(spec) if spec.name in GATED_TOOLS
                else self._recording(spec) if spec.name == SUGGESTING_TOOL else spec
                for spec in tools]

    def _gated(self, spec: ToolSpec[Any]) -> ToolSpec[Any]:
        inner = spec.run

        def run(context: ToolContext, arguments: BaseModel) -> str:
            self.check(spec.name, sources_of(arguments))
            return inner(context, arguments)

        return replace(spec, run=run)

    def _recording(self, spec: ToolSpec[Any]) -> ToolSpec[Any]:
        inner = spec.run

        def run(context: ToolContext, arguments: BaseModel) -> str:
            text = inner(context, arguments)  # only a successful suggestion counts
            self.record(arguments.source)  # type: ignore[attr-defined]
            return text

        return replace(spec, run=run)


def sources_of(arguments: BaseModel) -> list[str]:
    """The sources a call is on: its ``filters.source_slug.any_of`` (none for ``search``)."""
    filters = getattr(arguments, "filters", None)
    rule = getattr(filters, "source_slug", None)
    return list(dict.fromkeys(getattr(rule, "any_of", None) or []))
