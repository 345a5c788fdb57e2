"""A parser's view of a file: strictly decoded UTF-8 text and the byte offset of each line.

Every parser but HTML's reports chunk spans as raw byte offsets and 1-based line numbers;
``SourceText`` decodes the file once (rejecting NUL bytes and invalid UTF-8 with
``ParseError``), drops a leading BOM, and maps offsets to lines. Separate from
``engine.ingest.parsers.packing``: parsers read a ``SourceText`` to find their blocks
before anything is packed.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

from engine.ingest.parsers.errors import ParseError

__all__ = ["SourceText"]

_UTF8_BOM = b"\xef\xbb\xbf"
_NEWLINE = 0x0A


class SourceText:
    """A strictly decoded UTF-8 file and the raw byte offset where each line starts.

    Lines are separated by ``\\n`` only (a ``\\r`` before it stays part of the line),
    so line numbers agree with ``raw[:offset].count(b"\\n") + 1``. A leading UTF-8 BOM
    is not content: ``text`` omits it and the first line starts after it.
    """

    __slots__ = ("_line_starts", "_lines", "body_start", "raw", "text")

    def __init__(self, raw: bytes) -> None:
        if b"\x00" in raw:
            # Postgres text cannot hold NUL, and text files do not contain it.
            raise ParseError("binary content: the file contains NUL bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ParseError(f"not valid UTF-8: {error.reason} at byte {error.start}") from None
        body_start = 0
        if raw.startswith(_UTF8_BOM):
            text = text[1:]
            body_start = len(_UTF8_BOM)
        self.raw = raw
        self.text = text
        self.body_start = body_start
        self._lines: list[str] | None = None
        self._line_starts: list[int] | None = None

    @property
    def lines(self) -> list[str]:
        """The decoded lines, without their ``\\n`` (computed on first use)."""
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines

    @property
    def line_starts(self) -> list[int]:
        """Raw byte offset where each line starts (computed on first use)."""
        if self._line_starts is None:
            line_lengths = (len(line) + 1 for line in self.raw[self.body_start :].split(b"\n"))
            starts = list(accumulate(line_lengths, initial=self.body_start))
            starts.pop()
            self._line_starts = starts
        return self._line_starts

    def line_number(self, byte_offset: int) -> int:
        """1-based number of the line holding ``byte_offset``."""
        return bisect_right(self._line_starts or self.line_starts, byte_offset)

    def line_end(self, index: int) -> int:
        """Byte offset just past the last character of line ``index`` (0-based), before its newline."""
        if index + 1 < len(self.line_starts):
            return self.line_starts[index + 1] - 1
        return len(self.raw)

    def is_line_start(self, byte_offset: int) -> bool:
        return byte_offset == self.body_start or self.raw[byte_offset - 1] == _NEWLINE
