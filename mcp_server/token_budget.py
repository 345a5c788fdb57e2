"""Token budgets: a result list packed best-first into what the caller says its context can take.

Tokens are estimated, not counted: about 4 characters per token (English prose and code under the
common BPE tokenizers), over the response's JSON. Results are kept in rank order while they fit; the
first that does not fit ends the list (a later, smaller one is not slipped in ahead of it), except
that the best result is never dropped: it is cut instead, and says so. A result with ``content`` is
cut at a line boundary (mid-line only when not one whole line fits, and then it says that); a
document row (``group_by="document"``) keeps its first spans. ``fill`` (a page of one document, where
results are consecutive pieces of one text) also cuts the result that ends the list, at a line
boundary, so the page holds whole lines up to the budget.
"""

from __future__ import annotations

import math
from typing import Any

from mcp_server.envelope import to_json

CHARS_PER_TOKEN = 4
TOKENIZER_NOTE = f"estimated: {CHARS_PER_TOKEN} characters of JSON per token"
MIN_TOKENS = 200
MAX_TOKENS = 100_000
LINE_BOUNDARY = "line boundary"
MID_LINE = "mid-line (not one whole line fits)"


def estimated_tokens(value: Any) -> int:
    return math.ceil(len(to_json(value)) / CHARS_PER_TOKEN)


def pack(payload: dict[str, Any], results: list[dict[str, Any]], max_tokens: int, *,
         omitted_key: str = "omitted_results", fill: bool = False, reserve_tokens: int = 0) -> None:
    """Trim ``results`` (a list inside ``payload``) in place to fit ``max_tokens``, and say what was left out.

    ``payload["token_budget"]`` reports the budget, the tokens used and how many results were left out
    (under ``omitted_key``); a cut result has ``truncated``, ``omitted_chars`` (or ``omitted_spans``) and
    ``cut_at``. ``reserve_tokens`` is room kept for what the caller adds afterwards.
    """
    listed = len(results)
    kept: list[dict[str, Any]] = []
    results_copy = list(results)
    results.clear()
    # measured with the widest values its fields can take, so filling them in never overspends
    payload["token_budget"] = {"max_tokens": max_tokens, "used_tokens": max_tokens, omitted_key: listed,
                               "tokenizer": TOKENIZER_NOTE}
    payload.setdefault("truncated", False)
    remaining = max_tokens - reserve_tokens - estimated_tokens(payload)
    cut = False
    for row in results_copy:
        cost = estimated_tokens(row) + 1
        if cost <= remaining:
            kept.append(row)
            remaining -= cost
            continue
        if not kept:  # the best result is kept, cut when it can be
            cut = _cut_to(row, remaining - 1, mid_line=True)
            kept.append(row)
        elif fill and _cut_to(row, remaining - 1, mid_line=False):
            cut = True
            kept.append(row)
        break
    results.extend(kept)
    payload["token_budget"][omitted_key] = listed - len(kept)
    if listed > len(kept) or cut:
        payload["truncated"] = True
    payload["token_budget"]["used_tokens"] = estimated_tokens(payload)


def _cut_to(row: dict[str, Any], tokens: int, *, mid_line: bool) -> bool:
    """Cut ``row`` to fit ``tokens``; False (``row`` unchanged) when nothing of it would be left."""
    if isinstance(row.get("content"), str):
        return _cut_content(row, tokens, mid_line=mid_line)
    if isinstance(row.get("spans"), list):
        return _cut_spans(row, tokens)
    return False


def _cut_content(row: dict[str, Any], tokens: int, *, mid_line: bool) -> bool:
    """Cut ``row``'s content at the last line break that keeps the row within ``tokens`` (else mid-line)."""
    content: str = row["content"]

    def cut(keep: int, where: str) -> dict[str, Any]:
        shorter = {**row, "content": content[:keep], "truncated": True, "omitted_chars": len(content) - keep,
                   "cut_at": where}
        if "highlights" in row:  # spans past the cut would point at nothing
            shorter["highlights"] = [span for span in row["highlights"] if span["end"] <= keep]
        return shorter

    room = max(0, (tokens - estimated_tokens(cut(0, MID_LINE))) * CHARS_PER_TOKEN)
    keep = content.rfind("\n", 0, room + 1)
    # JSON escapes make some characters cost more than one: shrink until the estimate holds
    while keep > 0 and estimated_tokens(cut(keep, LINE_BOUNDARY)) > tokens:
        keep = content.rfind("\n", 0, keep)
    if keep > 0:
        row.update(cut(keep, LINE_BOUNDARY))
        return True
    if not mid_line:
        return False
    keep = min(room, len(content))
    while keep > 0 and (over := estimated_tokens(cut(keep, MID_LINE)) - tokens) > 0:
        keep = max(0, keep - over * CHARS_PER_TOKEN)
    space = content.rfind(" ", keep // 2, keep)  # between words where one is near
    row.update(cut(space + 1 if space > 0 else keep, MID_LINE))
    return True


def _cut_spans(row: dict[str, Any], tokens: int) -> bool:
    """Keep ``row``'s first spans (its best chunks) while the row fits ``tokens``, at least its best one."""
    spans: list[Any] = row["spans"]
    if len(spans) <= 1:
        return False
    keep = next((keep for keep in range(len(spans) - 1, 1, -1)
                 if estimated_tokens({**row, "spans": spans[:keep], "truncated": True, "omitted_spans": 0}) <= tokens),
                1)
    row.update({"spans": spans[:keep], "truncated": True, "omitted_spans": len(spans) - keep})
    return True
