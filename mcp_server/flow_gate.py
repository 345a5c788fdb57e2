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

    tools = FlowGate.from_settings(settings).wrap([SEARCH, ADVANCED_SEARCH, ...])

``GateRules`` say which tools it guards and where calls name their source: Quarry's tools, or the
docs-server contract's (``namespace``), whose gate is on unless ``QUARRY_FLOW_GATE`` is set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from engine.config import Settings
from mcp_server.envelope import Problem, ToolFailure
from mcp_server.tools import ToolContext, ToolSpec

GATED_TOOLS = frozenset({"search", "advanced_search", "count", "query_documents"})
SUGGESTING_TOOL = "suggest_query_params"
DEFAULT_TTL_S = 600.0


@dataclass(frozen=True, slots=True)
class GateRules:
    """Which tools a gate guards, which tool opens it, and where their calls name the source.

    Quarry's tools name a source in ``filters.source_slug.any_of`` and suggest for ``source``; the
    docs-server contract's tools name a ``namespace`` in both (``mcp_server.profiles.docs_server``).
    """

    gated: frozenset[str]
    suggesting: str
    #: The suggesting tool's argument naming the source, as the error tells the caller to pass it.
    argument: str
    #: (argument path, source) for each source a gated call is on.
    sources_of: Callable[[BaseModel], list[tuple[str, str]]]
    #: The source a successful suggestion opens the gate for (None: it opens none), from its arguments
    #: and its result's JSON text.
    suggested: Callable[[BaseModel, str], str | None]


def _filter_sources(arguments: BaseModel) -> list[tuple[str, str]]:
    return [(f"filters.source_slug.any_of[{index}]", source) for index, source in enumerate(sources_of(arguments))]


QUARRY_RULES = GateRules(GATED_TOOLS, SUGGESTING_TOOL, "source", _filter_sources,
                         lambda arguments, _: getattr(arguments, "source", None))


class FlowGate:
    """Which sources had a suggestion recently, and the check gated tools make."""

    def __init__(self, *, enabled: bool = False, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic, rules: GateRules = QUARRY_RULES) -> None:
        if ttl_s <= 0:
            raise ValueError("the flow gate's TTL must be positive")
        self.enabled = enabled
        self.ttl_s = ttl_s
        self.rules = rules
        self._clock = clock
        self._suggested: dict[str, float] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, rules: GateRules = QUARRY_RULES, *,
                      enabled_by_default: bool = False) -> FlowGate:
        """``QUARRY_FLOW_GATE`` (default off, or ``enabled_by_default`` when unset) and ``QUARRY_FLOW_GATE_TTL_S``."""
        enabled = settings.flow_gate if "flow_gate" in settings.model_fields_set else enabled_by_default
        return cls(enabled=enabled, ttl_s=settings.flow_gate_ttl_s, rules=rules)

    def record(self, source: str) -> None:
        with self._lock:
            self._suggested[source] = self._clock() + self.ttl_s

    def check(self, tool: str, sources: Sequence[tuple[str, str]]) -> None:
        """Raise ``FLOW_GATE`` naming the first (path, source) without a live suggestion."""
        now = self._clock()
        with self._lock:
            self._suggested = {source: until for source, until in self._suggested.items() if until > now}
            missing = [(path, source) for path, source in sources if source not in self._suggested]
        if missing:
            path, source = missing[0]
            suggesting, argument = self.rules.suggesting, self.rules.argument
            raise ToolFailure(
                "FLOW_GATE",
                f"this server requires {suggesting} before {tool} on a {argument}: call {suggesting} "
                f"with {argument}={source!r} and the user's question, then retry with its suggested filters "
                f"(a suggestion holds for {self.ttl_s:g} seconds and only for exactly that {argument} string)",
                problems=[Problem(path, f"needs a prior {suggesting} call for this exact {argument}")])

    def wrap(self, tools: Sequence[ToolSpec[Any]]) -> list[ToolSpec[Any]]:
        """The tools with the gate applied (unchanged when the gate is off)."""
        if not self.enabled:
            return list(tools)
        return [self._gated(spec) if spec.name in self.rules.gated
                else self._recording(spec) if spec.name == self.rules.suggesting else spec
                for spec in tools]

    def _gated(self, spec: ToolSpec[Any]) -> ToolSpec[Any]:
        inner = spec.run

        def run(context: ToolContext, arguments: BaseModel) -> str:
            self.check(spec.name, self.rules.sources_of(arguments))
            return inner(context, arguments)

        return replace(spec, run=run)

    def _recording(self, spec: ToolSpec[Any]) -> ToolSpec[Any]:
        inner = spec.run

        def run(context: ToolContext, arguments: BaseModel) -> str:
            text = inner(context, arguments)  # only a successful suggestion counts
            source = self.rules.suggested(arguments, text)
            if source is not None:
                self.record(source)
            return text

        return replace(spec, run=run)


def sources_of(arguments: BaseModel) -> list[str]:
    """The sources a call is on: its ``filters.source_slug.any_of`` (none for ``search``)."""
    filters = getattr(arguments, "filters", None)
    rule = getattr(filters, "source_slug", None)
    return list(dict.fromkeys(getattr(rule, "any_of", None) or []))
