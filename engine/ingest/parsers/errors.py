"""The one exception parsers raise.

``ParseError`` means "this file cannot become a document" (not UTF-8, binary); the
ingestion pipeline skips the file and records ``str(error)`` as the reason.
"""

from __future__ import annotations


class ParseError(Exception):
    """A file that cannot be parsed; the message says why, for the skip log."""
