"""Whether a block of prose-file text is really code: source pasted into Markdown or plain text without a fence.

A code corpus written as ``.md`` (snippets, READMEs that paste whole functions) would otherwise be
ranked as prose: weighted towards keywords, which natural-language questions share little with
code, and normalised for length like prose. A block counts as code when most of its lines look
like code lines (a statement keyword, an assignment, a call, a line ending in ``:`` ``;`` or a
bracket), so a prose paragraph that mentions ``for`` or ends with a colon stays prose.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_KEYWORD = re.compile(
    r"^\s*(?:def|class|return|import|from\s+[\w.]+\s+import|elif|else|try|except|finally|raise|yield|async|await"
    r"|lambda|pass|break|continue|assert|function|const|let|var|public|private|protected|static|void|func|fn"
    r"|package|#include|using|namespace|switch|case|if|for|while|with)\b"
)
_DECORATOR_OR_COMMENT = re.compile(r"^\s*(?:@\w|//|/\*|\*\s|#\s|#!)")
_ASSIGNMENT = re.compile(r"^\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*(?:=|\+=|-=|\*=|/=|:=)\s*[^=\s]")
_CALL = re.compile(r"^\s*[A-Za-z_][\w.]*\(.*\)\s*;?\s*$")
_CODE_ENDING = re.compile(r"[:;{}()\[\],]\s*$|^\s*[}\])]")
_DOCSTRING_QUOTES = re.compile(r"^\s*(?:\"\"\"|''')")
#: Share of non-blank lines that must look like code, and how many lines a block needs to be judged.
CODE_LINE_SHARE = 0.6
MIN_LINES = 2


def looks_like_code(lines: Sequence[str]) -> bool:
    """True when at least ``CODE_LINE_SHARE`` of the block's (at least ``MIN_LINES``) non-blank lines are code."""
    filled = [line for line in lines if line.strip()]
    if len(filled) < MIN_LINES:
        return False
    code = sum(1 for line in filled if _is_code_line(line))
    return code >= CODE_LINE_SHARE * len(filled)


def _is_code_line(line: str) -> bool:
    return bool(_KEYWORD.match(line) or _DECORATOR_OR_COMMENT.match(line) or _ASSIGNMENT.match(line)
                or _CALL.match(line) or _CODE_ENDING.search(line) or _DOCSTRING_QUOTES.match(line))
