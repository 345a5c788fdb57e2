"""What matched: the query's terms as character spans in a hit's content, and a snippet around them.

The keyword leg matches stemmed lexemes (``quarry.query_lexemes``: ``predicate`` is ``predic``,
``parseUserId`` is ``pars``, ``user``, ``id``). A word of the content is highlighted when one of its
parts (identifiers split as the index splits them) stems to a query lexeme. Stemming each word in
Postgres would cost a call per distinct word, so a part matches by the stem's shape instead: it is
the lexeme, starts with it (``indexes`` / ``index``), or ends in ``y`` where the stem has ``i``
(``query`` / ``queri``). That errs toward highlighting (``runway`` for ``run``), never misses an
exact word, and costs one call per search for the query's lexemes.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

#: Spans reported per hit at most (a page of code can hold a term hundreds of times).
MAX_HIGHLIGHTS = 50
#: Characters of a snippet, about (cut at word boundaries).
SNIPPET_CHARS = 240
#: A lexeme shorter than this matches only a part that is exactly it (``id`` is not a prefix rule).
MIN_PREFIX_LEXEME = 3

# identifier parts: snake_case pieces, camelCase humps, acronyms, digits
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# a run of word characters (ASCII letters, digits, underscore: what the index reads as one word)
_WORD_CHARS = re.compile(r"[A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Highlights:
    #: [start, end) character offsets into the content, in order, not overlapping
    spans: list[tuple[int, int]]
    snippet: str | None


def query_lexemes(pool: ConnectionPool, queries: Sequence[str]) -> frozenset[str]:
    """The lexemes the keyword leg searched for, over every query."""
    with pool.connection() as conn:
        rows = conn.execute("select distinct unnest(quarry.query_lexemes(q)) from unnest(%s::text[]) q",
                            (list(queries),)).fetchall()
    return frozenset(row[0] for row in rows)


class Highlighter:
    """Highlights of one search's hits: built once from the query's lexemes, applied to each hit."""

    def __init__(self, lexemes: frozenset[str]) -> None:
        self.lexemes = lexemes
        self.lengths = sorted({len(lexeme) for lexeme in lexemes if len(lexeme) >= MIN_PREFIX_LEXEME})
        #: what to look for in lowercased text: each lexeme, and the y form of one ending in i
        self.forms = sorted({form for lexeme in lexemes
                             for form in (lexeme, lexeme[:-1] + "y" if lexeme.endswith("i") else lexeme)})
        self.memo: dict[str, bool] = {}

    def highlight(self, content: str) -> Highlights:
        """Where ``content`` holds the query's terms, and a snippet around the densest stretch of them."""
        lowered = content.lower()
        if len(lowered) != len(content):  # a few non-ASCII letters lengthen when lowercased
            lowered = "".join(character.lower() if len(character.lower()) == 1 else character
                              for character in content)
        # only a word holding a lexeme (or its y form) can match: str.find finds those fast
        starts: set[int] = set()
        for form in self.forms:
            at = lowered.find(form)
            while at != -1:
                starts.add(at)
                at = lowered.find(form, at + 1)
        spans: list[tuple[int, int]] = []
        word_end = -1
        # the word around a match, found by regex both ways (the reversed text for its start):
        # stepping a character at a time in Python was most of a search's highlighting
        backwards = content[::-1]
        for at in sorted(starts):
            if at < word_end:
                continue  # inside the word just read
            start = at - _word_length(backwards, len(content) - at)
            word_end = at + _word_length(content, at)
            for part_start, part_end in self._parts(content[start:word_end]):
                spans.append((start + part_start, start + part_end))
                if len(spans) == MAX_HIGHLIGHTS:
                    return Highlights(spans, _snippet(content, spans))
        return Highlights(spans, _snippet(content, spans) if spans else None)

    def _parts(self, word: str) -> Iterable[tuple[int, int]]:
        """A plain word whole; an identifier (snake_case, camelCase) by the parts that match."""
        if word.isalpha() and (word.islower() or word[1:].islower() or word.isupper()):
            if self._matches(word.lower()):
                yield 0, len(word)
            return
        if word.lower() in self.lexemes:  # the index keeps a whole identifier as a lexeme too
            yield 0, len(word)
            return
        for part in _PART.finditer(word):
            if self._matches(part.group().lower()):
                yield part.start(), part.end()

    def _matches(self, word: str) -> bool:
        known = self.memo.get(word)
        if known is None:
            known = self.memo[word] = self._stems_to_a_lexeme(word)
        return known

    def _stems_to_a_lexeme(self, word: str) -> bool:
        lexemes = self.lexemes
        if word in lexemes or (word.endswith("s") and word[:-1] in lexemes):  # ids / id
            return True
        for length in self.lengths:
            if length > len(word):
                break
            if word[:length] in lexemes:
                return True
            if word[length - 1] == "y" and word[:length - 1] + "i" in lexemes:  # query / queri
                return True
        return False


def highlight(content: str, lexemes: frozenset[str]) -> Highlights:
    """``Highlighter(lexemes).highlight(content)``, for one text."""
    return Highlighter(lexemes).highlight(content)


def opening_snippet(content: str) -> str:
    """The start of ``content`` as a snippet (about SNIPPET_CHARS, cut at whitespace): for a hit nothing highlights."""
    head = content[:2 * SNIPPET_CHARS]
    text = " ".join(head.split())
    if len(text) <= SNIPPET_CHARS and len(head) == len(content):
        return text
    cut = text.rfind(" ", 0, SNIPPET_CHARS + 1)
    return text[:cut if cut > SNIPPET_CHARS // 2 else SNIPPET_CHARS] + "…"


def _word_length(text: str, at: int) -> int:
    """How many word characters follow one another from ``at`` on."""
    run = _WORD_CHARS.match(text, at)
    return run.end() - at if run is not None else 0


def _snippet(content: str, spans: list[tuple[int, int]]) -> str:
    """The window of about SNIPPET_CHARS holding the most spans, cut at whitespace, with … where it is cut."""
    best_start, best_count = spans[0][0], 0
    starts = [start for start, _ in spans]
    for index, start in enumerate(starts):
        count = bisect_left(starts, start + SNIPPET_CHARS, index) - index  # spans are in order
        if count > best_count:
            best_start, best_count = start, count
    begin = max(0, best_start - SNIPPET_CHARS // 4)
    end = min(len(content), begin + SNIPPET_CHARS)
    if begin > 0:
        space = content.find(" ", begin, best_start)
        begin = space + 1 if space != -1 else begin
    if end < len(content):
        space = content.rfind(" ", max(begin, end - 40), end)
        end = space if space != -1 else end
    text = " ".join(content[begin:end].split())
    return ("…" if begin > 0 else "") + text + ("…" if end < len(content) else "")
