"""Keep every tool result under ``MAX_RESPONSE_BYTES`` serialised, by truncating rather than failing, and
under ``DEFAULT_RESPONSE_BYTES`` unless the caller asks for more (``response_limit``).

The payload travels as JSON text inside a JSON-RPC message, so it is escaped twice;
sizes here are measured that way. When a payload is too big, the long ``content``
fields share the space left after everything else (small ones stay whole, long ones
are cut to an equal share) and each cut field says so (``truncated: true`` and
``omitted_chars``). Only if metadata alone cannot fit are trailing items of the
droppable lists dropped (longest list first), and the payload then counts them.
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from typing import Any

from mcp_server.envelope import to_json
from mcp_server.limits import MAX_RESPONSE_BYTES

#: A response a caller did not ask to be larger stays within this: an assistant pays each byte in context.
DEFAULT_RESPONSE_BYTES = 32 * 1024
#: Tokens of that bound (``mcp_server.token_budget`` estimates 4 characters of JSON per token), with room
#: for the escaping and wrapping the byte count includes.
DEFAULT_RESPONSE_TOKENS = 7_000


def response_limit(max_tokens: int | None) -> int:
    """The byte bound of a response: ``DEFAULT_RESPONSE_BYTES``, or what ``max_tokens`` asks (up to the cap)."""
    if max_tokens is None:
        return DEFAULT_RESPONSE_BYTES
    return min(MAX_RESPONSE_BYTES, max(DEFAULT_RESPONSE_BYTES, max_tokens * 4 + 4096))

#: Room for the JSON-RPC and CallToolResult wrapping around the payload text.
_WRAPPER_BYTES = 1024
#: Room per cut field for its markers.
_MARKER_BYTES = 48
_ROUNDS = 6


def wire_size(json_text: str) -> int:
    """Bytes ``json_text`` (JSON, as ``to_json`` writes it) takes once escaped as a JSON string.

    JSON text holds no raw control character, so escaping it adds only the two quotes around it and
    a backslash before each quote and backslash: counted, where serialising it again cost a tenth
    of a search's time in Python.
    """
    return len(json_text.encode()) + 2 + json_text.count('"') + json_text.count("\\")


def bounded_json(
    payload: dict[str, Any],
    texts: list[dict[str, Any]],
    *,
    droppable: Sequence[MutableSequence[Any]] = (),
    dropped_key: str = "omitted_items",
    limit: int = MAX_RESPONSE_BYTES,
) -> str:
    """``payload`` as JSON text whose wire size is at most ``limit``; ``texts`` are dicts inside it with ``content``."""
    budget = limit - _WRAPPER_BYTES
    originals = {id(item): len(item["content"]) for item in texts}
    listed = sum(len(items) for items in droppable)
    for attempt in range(_ROUNDS):
        text = to_json(payload)
        size = wire_size(text)
        if size <= budget:
            return text
        payload["truncated"] = True
        reachable = {id(item) for item in _reachable(payload, texts)}
        live = [item for item in texts if id(item) in reachable]
        costs = [wire_size(to_json(item["content"])) for item in live]
        # Estimates are per field; each further round leaves more slack for what they miss.
        room = budget - (size - sum(costs)) - _MARKER_BYTES * len(live) - 512 * attempt
        if room < 0 or not live:
            if not _drop(droppable, size - budget + 512 * (attempt + 1)):
                break
            payload[dropped_key] = listed - sum(len(items) for items in droppable)
            continue
        for item, cap in zip(live, _shares(costs, room), strict=True):
            _cut(item, cap)
            omitted = originals[id(item)] - len(item["content"])
            if omitted:
                item["truncated"] = True
                item["omitted_chars"] = omitted
    text = to_json(payload)
    if wire_size(text) > budget:
        raise AssertionError("a tool result does not fit the response bound even after truncation")
    return text


def _drop(lists: Sequence[MutableSequence[Any]], excess: int) -> bool:
    """Pop trailing items, longest list first, until about ``excess`` wire bytes are gone; False if none left."""
    dropped = 0
    while dropped < excess:
        longest = max(lists, key=len, default=None)
        if not longest:
            return dropped > 0
        dropped += wire_size(to_json(longest.pop()))
    return True


def _reachable(payload: dict[str, Any], texts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The text holders still in the payload (a dropped list item takes its text with it)."""
    found: list[dict[str, Any]] = []
    wanted = {id(item) for item in texts}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if id(node) in wanted:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(payload)
    return found


def _shares(costs: list[int], room: int) -> list[int]:
    """Water-filling: fields under an equal share keep their size; the rest split what is left equally."""
    caps = list(costs)
    remaining = room
    order = sorted(range(len(costs)), key=lambda index: costs[index])
    for position, index in enumerate(order):
        share = remaining // (len(order) - position)
        if costs[index] <= share:
            remaining -= costs[index]
            continue
        for rest in order[position:]:
            caps[rest] = share
        break
    return caps


def _cut(item: dict[str, Any], cap: int) -> None:
    content: str = item["content"]
    cost = wire_size(to_json(content))
    if cost <= cap:
        return
    keep = int(len(content) * cap / cost)
    while keep > 0 and wire_size(to_json(content[:keep])) > cap:
        keep = int(keep * 0.9)
    item["content"] = content[:keep]
    if "highlights" in item:  # spans past the cut would point at nothing
        item["highlights"] = [span for span in item["highlights"] if span["end"] <= keep]
