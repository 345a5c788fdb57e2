"""The response bound: whatever the content, a bounded payload fits, and says what it cut."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_server.bounds import bounded_json, wire_size

LIMIT = 16 * 1024
# Quotes, backslashes, newlines and control characters grow when escaped twice; astral characters are 4 bytes.
AWKWARD = ["a", " ", '"', "\\", "\n", "\x01", "é", "☕", "\U0001d538"]
awkward_text = st.text(alphabet=st.sampled_from(AWKWARD), max_size=6000)


def _wire_size_of_result(text: str) -> int:
    return wire_size(text) + len('{"content":[{"type":"text","text":}],"isError":false}')


@settings(max_examples=60, deadline=None)
@given(st.lists(awkward_text, max_size=12))
def test_any_list_of_contents_fits_and_cut_contents_are_marked(contents: list[str]) -> None:
    results: list[dict[str, Any]] = [{"rank": rank, "content": text} for rank, text in enumerate(contents)]
    payload: dict[str, Any] = {"results": results, "truncated": False}
    text = bounded_json(payload, results, droppable=[results], dropped_key="omitted_results", limit=LIMIT)
    assert _wire_size_of_result(text) <= LIMIT
    parsed = json.loads(text)
    kept = parsed["results"]
    assert len(kept) + parsed.get("omitted_results", 0) == len(contents)
    for result in kept:
        original = contents[result["rank"]]
        assert original.startswith(result["content"])
        if result["content"] != original:
            assert result["truncated"] is True and result["omitted_chars"] == len(original) - len(result["content"])
        else:
            assert "truncated" not in result
    changed = bool(parsed.get("omitted_results")) or any(result.get("truncated") for result in kept)
    assert parsed["truncated"] is changed


def test_short_contents_stay_whole_while_long_ones_share_the_rest() -> None:
    results = [{"content": "short"}, {"content": "x" * 50_000}, {"content": "y" * 50_000}]
    payload: dict[str, Any] = {"results": results, "truncated": False}
    parsed = json.loads(bounded_json(payload, results, limit=LIMIT))
    short, first, second = parsed["results"]
    assert short == {"content": "short"}
    assert first["truncated"] and second["truncated"]
    assert abs(len(first["content"]) - len(second["content"])) < 100  # an equal share each


def test_lists_without_text_lose_trailing_items_and_count_them() -> None:
    values = [[{"value": f"value-{i:05d}", "documents": i} for i in range(3000)], [{"value": "a", "documents": 1}]]
    payload: dict[str, Any] = {"facets": {"big": values[0], "small": values[1]}, "truncated": False}
    text = bounded_json(payload, [], droppable=values, dropped_key="omitted_values", limit=LIMIT)
    parsed = json.loads(text)
    assert _wire_size_of_result(text) <= LIMIT and parsed["truncated"] is True
    assert parsed["facets"]["small"] == [{"value": "a", "documents": 1}]
    kept = parsed["facets"]["big"]
    assert kept == [{"value": f"value-{i:05d}", "documents": i} for i in range(len(kept))]
    assert parsed["omitted_values"] == 3000 - len(kept) > 0
