"""Cut document text into chunks under ``MAX_CHUNK_TOKENS``, with exact byte and line spans.

Parsers other than HTML describe a document as *blocks*: byte ranges of the raw file
(a paragraph, a fenced code block, a function) grouped by section. ``pack_blocks``
merges consecutive blocks of one section while they fit the token bound, splits a
block that does not fit on line boundaries (preferring a blank line) and a line that
does not fit between tokens, and trims surrounding whitespace. So every chunk it
makes satisfies, with no exception for long lines:

* ``content == raw[start_byte:end_byte].decode("utf-8")``;
* ``estimate_tokens(content) <= MAX_CHUNK_TOKENS``;
* ``content`` holds at least one word character (chunks of only brackets, rules or
  whitespace carry nothing to retrieve and are dropped).

HTML chunk content is extracted text rather than a raw slice; ``pack_text_blocks``
applies the same bound to plain strings.

Token counts come from ``engine.ingest.parsers.tokens``; the file a parser reads blocks
from is a ``SourceText`` (``engine.ingest.parsers.source_text``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from engine.ingest.model import MAX_CHUNK_TOKENS, Chunk
from engine.ingest.parsers.source_text import SourceText
from engine.ingest.parsers.tokens import TOKEN, WORD_CHARACTER, count_tokens, count_utf8_tokens, line_token_counts

__all__ = [
    "Block",
    "bounded_pieces",
    "pack_blocks",
    "pack_text_blocks",
]

# A group of blocks this small (at most 1/4 of the bound: a heading, an intro line)
# before a block too large for one chunk joins that block's first piece instead of
# standing alone as a near-empty chunk.
_LEAD_IN_SHARE = 4


@dataclass(frozen=True, slots=True)
class Block:
    """A byte range of the raw file that should stay in one chunk when it fits."""

    start: int  # inclusive
    end: int  # exclusive
    is_code: bool = False


def bounded_pieces(text: str, limit: int = MAX_CHUNK_TOKENS) -> list[tuple[int, int]]:
    """Split ``text`` into consecutive character ranges of at most ``limit`` tokens each.

    Cuts fall on line boundaries, at a blank line when one closes at least half a
    piece; a line over the limit is cut between tokens, and a single word over it (a
    base64 blob) every ``8 * (limit - 1)`` characters. Ranges may start or end with
    whitespace, which the caller trims; whitespace-only stretches produce no range.
    """
    pieces: list[tuple[int, int]] = []
    piece_start = piece_end = piece_tokens = 0
    blank_end = blank_resume = 0
    tokens_before_blank = -1  # -1: no blank line in the current piece yet
    line_start = 0
    for line, tokens in zip(text.split("\n"), line_token_counts(text), strict=True):
        line_end = line_start + len(line)
        if tokens > limit:
            if piece_tokens:
                pieces.append((piece_start, piece_end))
            pieces.extend((line_start + start, line_start + end) for start, end in _split_long_line(line, limit))
            piece_tokens, tokens_before_blank = 0, -1
        elif tokens == 0:
            if piece_tokens:
                blank_end, blank_resume = piece_end, line_end + 1
                tokens_before_blank = piece_tokens
        else:
            if piece_tokens + tokens > limit:
                after_blank = piece_tokens - tokens_before_blank
                if 2 * tokens_before_blank >= limit and after_blank + tokens <= limit:
                    pieces.append((piece_start, blank_end))
                    piece_start, piece_tokens = blank_resume, after_blank
                else:
                    pieces.append((piece_start, piece_end))
                    piece_tokens = 0
                tokens_before_blank = -1
            if not piece_tokens:
                piece_start = line_start
            piece_tokens += tokens
            piece_end = line_end
        line_start = line_end + 1
    if piece_tokens:
        pieces.append((piece_start, piece_end))
    return pieces


def _split_long_line(line: str, limit: int) -> list[tuple[int, int]]:
    pieces: list[tuple[int, int]] = []
    longest_word = 8 * (limit - 1)  # 1 + longest_word // 8 == limit
    piece_start = piece_tokens = 0
    for match in TOKEN.finditer(line):
        start, end = match.span()
        cost = 1 + (end - start) // 8
        if cost > limit:
            if piece_tokens:
                pieces.append((piece_start, start))
            pieces.extend((cut, min(cut + longest_word, end)) for cut in range(start, end, longest_word))
            piece_start, piece_tokens = end, 0
            continue
        if piece_tokens + cost > limit:
            pieces.append((piece_start, start))
            piece_start, piece_tokens = start, 0
        piece_tokens += cost
    if piece_tokens:
        pieces.append((piece_start, len(line)))
    return pieces


def _utf8_offsets(text: str, character_offsets: list[int]) -> list[int]:
    """Byte offsets, within ``text.encode()``, of non-decreasing character offsets."""
    if text.isascii():
        return character_offsets
    byte_offsets: list[int] = []
    characters = byte_count = 0
    for offset in character_offsets:
        byte_count += len(text[characters:offset].encode("utf-8"))
        characters = offset
        byte_offsets.append(byte_count)
    return byte_offsets


class _ChunkWriter:
    """Turns trimmed, bounded byte ranges of one section into ``Chunk`` objects."""

    __slots__ = ("chunks", "heading_path", "limit", "source", "symbol_path")

    def __init__(
        self,
        source: SourceText,
        heading_path: tuple[str, ...],
        symbol_path: str | None,
        limit: int,
    ) -> None:
        self.source = source
        self.heading_path = heading_path
        self.symbol_path = symbol_path
        self.limit = limit
        self.chunks: list[Chunk] = []

    def write(self, start: int, end: int, is_code: bool, *, within_limit: bool) -> None:
        span = self._trimmed(start, end)
        if span is None:
            return
        begin, finish = span
        content = self.source.raw[begin:finish].decode("utf-8")
        if not within_limit and count_tokens(content) > self.limit:
            self.write_split(begin, finish, is_code)
            return
        if WORD_CHARACTER.search(content) is None:
            return
        self.chunks.append(
            Chunk(
                content=content,
                start_line=self.source.line_number(begin),
                end_line=self.source.line_number(finish - 1),
                start_byte=begin,
                end_byte=finish,
                heading_path=self.heading_path,
                symbol_path=self.symbol_path,
                is_code=is_code,
            )
        )

    def write_split(
        self, start: int, end: int, is_code: bool, *, body_start: int = -1, lead_in_is_code: bool = True
    ) -> None:
        """Write [start, end) as bounded pieces.

        Bytes before ``body_start`` are a short lead-in (a heading, an intro line) that
        flows into the first piece; a piece holding some of it is code only if the
        lead-in is too.
        """
        text = self.source.raw[start:end].decode("utf-8")
        pieces = bounded_pieces(text, self.limit)
        offsets = _utf8_offsets(text, [offset for piece in pieces for offset in piece])
        for index in range(0, len(offsets), 2):
            piece_start = start + offsets[index]
            piece_is_code = is_code and (piece_start >= body_start or lead_in_is_code)
            self.write(piece_start, start + offsets[index + 1], piece_is_code, within_limit=True)

    def _trimmed(self, start: int, end: int) -> tuple[int, int] | None:
        """The span without surrounding whitespace, keeping the first line's indentation.

        Indentation is kept only when it begins a line, so a method chunk reads
        ``    def run(self):`` like the source, while a piece cut mid-line starts at its
        first word.
        """
        raw = self.source.raw
        segment = raw[start:end]
        left_stripped = segment.lstrip()
        if not left_stripped:
            return None
        first_visible = end - len(left_stripped)
        finish = start + len(segment.rstrip())
        newline = raw.rfind(b"\n", start, first_visible)
        if newline >= 0:
            return newline + 1, finish
        if self.source.is_line_start(start):
            return start, finish
        return first_visible, finish


def _fits_whole(raw: bytes, blocks: list[Block], limit: int) -> bool:
    if count_utf8_tokens(raw[blocks[0].start : blocks[-1].end]) > limit:
        return False
    return not any(raw[before.end : after.start].strip() for before, after in pairwise(blocks))


def pack_blocks(
    source: SourceText,
    blocks: Iterable[Block],
    *,
    heading_path: tuple[str, ...] = (),
    symbol_path: str | None = None,
    limit: int = MAX_CHUNK_TOKENS,
) -> list[Chunk]:
    """Chunks for one section's blocks (in document order, non-overlapping).

    Consecutive blocks are merged while the total fits ``limit`` and only whitespace
    separates them (text a parser dropped, such as MDX imports, must not reappear in
    a merged span). A chunk is code when every block in it is.
    """
    writer = _ChunkWriter(source, heading_path, symbol_path, limit)
    raw = source.raw
    blocks = list(blocks)
    if len(blocks) > 1 and _fits_whole(raw, blocks, limit):  # the common case, one count
        is_code = all(block.is_code for block in blocks)
        writer.write(blocks[0].start, blocks[-1].end, is_code, within_limit=True)
        return writer.chunks
    group_start = group_end = group_tokens = group_size = 0
    group_is_code = True
    for block in blocks:
        tokens = count_utf8_tokens(raw[block.start : block.end])
        if tokens == 0:
            continue
        adjacent = group_tokens > 0 and not raw[group_end : block.start].strip()
        if tokens > limit and adjacent and group_tokens <= limit // _LEAD_IN_SHARE:
            writer.write_split(
                group_start, block.end, block.is_code, body_start=block.start, lead_in_is_code=group_is_code
            )
            group_tokens = 0
            continue
        if group_tokens and (group_tokens + tokens > limit or not adjacent):
            writer.write(group_start, group_end, group_is_code, within_limit=group_size == 1)
            group_tokens = 0
        if tokens > limit:
            writer.write_split(block.start, block.end, block.is_code)
            continue
        if not group_tokens:
            group_start, group_is_code, group_size = block.start, True, 0
        group_end = block.end
        group_tokens += tokens
        group_size += 1
        group_is_code = group_is_code and block.is_code
    if group_tokens:
        # One block was counted exactly; a merged group is recounted in case a
        # caller's block boundaries split a token (the sum would then be off).
        writer.write(group_start, group_end, group_is_code, within_limit=group_size == 1)
    return writer.chunks


def _trimmed_text(text: str, start: int, end: int) -> str:
    """``text[start:end]`` without surrounding whitespace, keeping a line-start indentation."""
    piece = text[start:end].rstrip()
    visible = piece.lstrip()
    indented = piece[: len(piece) - len(visible)]
    newline = indented.rfind("\n")
    if newline >= 0:
        return piece[newline + 1 :]
    return piece if start == 0 or text[start - 1] == "\n" else visible


def pack_text_blocks(blocks: Iterable[tuple[str, bool]], limit: int = MAX_CHUNK_TOKENS) -> list[tuple[str, bool]]:
    """Join ``(text, is_code)`` blocks with newlines into ``(content, is_code)`` chunks.

    Same bound and merge rule as ``pack_blocks``, for content that is not a raw slice.
    """
    blocks = list(blocks)
    if len(blocks) > 1:
        whole = "\n".join(text for text, _ in blocks)
        if count_tokens(whole) <= limit:  # the common case, one count
            is_code = all(is_code for _, is_code in blocks)
            return [(whole, is_code)] if WORD_CHARACTER.search(whole) else []
    packed: list[tuple[str, bool]] = []
    group: list[str] = []
    group_tokens = 0
    group_is_code = True
    for text, is_code in blocks:
        tokens = count_tokens(text)
        if tokens == 0:
            continue
        lead_in, lead_in_is_code = "", True
        if tokens > limit and group and group_tokens <= limit // _LEAD_IN_SHARE:
            lead_in, lead_in_is_code = "\n".join(group) + "\n", group_is_code
            group, group_tokens = [], 0
        if group and group_tokens + tokens > limit:
            packed.append(("\n".join(group), group_is_code))
            group, group_tokens = [], 0
        if tokens > limit:
            combined = lead_in + text
            for start, end in bounded_pieces(combined, limit):
                piece_is_code = is_code and (start >= len(lead_in) or lead_in_is_code)
                packed.append((_trimmed_text(combined, start, end), piece_is_code))
            continue
        if not group:
            group_is_code = True
        group.append(text)
        group_tokens += tokens
        group_is_code = group_is_code and is_code
    if group:
        packed.append(("\n".join(group), group_is_code))
    return [(content, is_code) for content, is_code in packed if WORD_CHARACTER.search(content)]
