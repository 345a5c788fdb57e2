"""The exceptions parsers raise.

``ParseError`` means "this file cannot become a document" (not UTF-8, damaged): the ingest
lists it as failed, with ``str(error)`` as the reason. ``NothingToIndex`` means a readable file
holds nothing to index (a scanned PDF without a text layer, one that needs a password): the
ingest lists it as skipped, with the reason.
"""

from __future__ import annotations


class ParseError(Exception):
    """A file that cannot be parsed; the message says why, for the skip log."""


class NothingToIndex(ParseError):
    """A readable file with no text to index here: the reason is what the skip list shows."""
