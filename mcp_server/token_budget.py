"""Token budgets: a result list packed best-first into what the caller says its context can take.

Tokens are estimated, not counted: about 4 characters per token (English prose and code under the
common BPE tokenizers), over the response's JSON. Results are kept in rank order while they fit; the
first that does not fit ends the list (a later, smaller one is not slipped in ahead of it), except
that the best result is never dropped: its content is cut at a line boundary instead, and says so.
"""

from __future__ import annotations

import math
from typing import Any

from mcp_server.envelope import to_json

CHARS_PER_TOKEN = 4
TOKENIZER_NOTE = f"estimated: {CHARS_PER_TOKEN} characters of JSON per token"
MIN_TOKENS = 200
MAX_TOKENS = 100_000


def estimated_tokens(value: Any) -> int:
    return math.ceil(len(to_json(value)) / CHARS_PER_TOKEN)


def pack(payload: dict[str, Any], results: list[dict[str, Any]], max_tokens: int) -> None:
    """Trim ``results`` (a list inside ``payload``) in place to fit ``max_tokens``, and say what was left out."""
    listed = len(results)
    kept: list[dict[str, Any]] = []
    results_copy = list(results)
    results.clear()
    payload["token_budget"] = {"max_tokens": max_tokens, "used_tokens": 0, "omitted_results": 0,
                               "tokenizer": TOKENIZER_NOTE}
    remaining = max_tokens - estimated_tokens(payload)
    for row in results_copy:
        cost = estimated_tokens(row) + 1
        if cost <= remaining:
            kept.append(row)
            remaining -= cost
            continue
        if not kept:
            _cut_to(row, remaining)
            kept.append(row)
        break
    results.extend(kept)
    payload["token_budget"]["omitted_results"] = listed - len(kept)
    payload["token_budget"]["used_tokens"] = estimated_tokens(payload)
    if listed > len(kept):
        payload["truncated"] = True


def _cut_to(row: dict[str, Any], tokens: int) -> None:
    """Cut ``row``'s content at the last line break that keeps the row within ``tokens``."""
    content: str = row["content"]

    def cut(keep: int) -> dict[str, Any]:
        shorter = {**row, "content": content[:keep], "truncated": True, "omitted_chars": len(content) - keep,
                   "cut_at": "line boundary" if keep else "start (not one whole line fits)"}
        if "highlights" in row:  # spans past the cut would point at nothing
            shorter["highlights"] = [span for span in row["highlights"] if span["end"] <= keep]
        return shorter

    frame = estimated_tokens(cut(0))
    keep = content.rfind("\n", 0, max(0, (tokens - frame) * CHARS_PER_TOKEN) + 1)
    keep = max(keep, 0)
    # JSON escapes make some characters cost more than one: shrink until the estimate holds
    while keep > 0 and estimated_tokens(cut(keep)) > tokens:
        keep = max(content.rfind("\n", 0, keep), 0)
    row.update(cut(keep))
