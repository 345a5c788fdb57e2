"""reStructuredText: heading levels by adornment order, literal blocks, bounds and exact spans."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ingest.model import Chunk
from engine.ingest.parsers import parse_document
from tests.parser_checks import assert_exact_chunks

DOCUMENT = """\
=================
 The Quarry book
=================

Preface text.

Installing
==========

Install it::

    pip install quarry
    quarry --help

From source
-----------

Clone it.

.. code-block:: python

   import quarry
   quarry.run()

Details
~~~~~~~

Fine print.

Using
=====

Use it.

A
-

Too short underline is still a title when at least as long as the title.

Not a title
::

Ends here.
"""


def _chunk_with(chunks: list[Chunk], text: str) -> Chunk:
    return next(chunk for chunk in chunks if text in chunk.content)


def test_heading_levels_follow_adornment_order() -> None:
    raw = DOCUMENT.encode()
    document = parse_document("docs/book.rst", raw)
    assert document.title == "The Quarry book"
    assert document.content_type == "rst"
    chunks = document.chunks
    book = "The Quarry book"
    assert _chunk_with(chunks, "Preface text").heading_path == (book,)
    assert _chunk_with(chunks, "Install it::").heading_path == (book, "Installing")
    assert _chunk_with(chunks, "Clone it.").heading_path == (book, "Installing", "From source")
    assert _chunk_with(chunks, "Fine print.").heading_path == (book, "Installing", "From source", "Details")
    assert _chunk_with(chunks, "Use it.").heading_path == (book, "Using")
    assert _chunk_with(chunks, "Too short").heading_path == (book, "Using", "A")
    # "::" under text is a literal-block marker, not an underline (too short).
    assert _chunk_with(chunks, "Ends here.").heading_path == (book, "Using", "A")
    assert_exact_chunks(raw, document)


def test_literal_blocks_and_code_directives_are_code() -> None:
    raw = (
        b"Title\n=====\n\nIntro::\n\n"
        + b"\n".join(f"    line_{index} = {index}".encode() for index in range(300))
        + b"\n\nBack to prose.\n\n.. code-block:: rust\n\n"
        + b"\n".join(f"   let v{index} = {index};".encode() for index in range(300))
        + b"\n\nThe end.\n"
    )
    document = parse_document("a.rst", raw)
    code = [chunk for chunk in document.chunks if chunk.is_code]
    assert any("line_150" in chunk.content for chunk in code)
    assert any("let v150" in chunk.content for chunk in code)
    assert not any(chunk.is_code for chunk in document.chunks if "The end." in chunk.content)
    assert_exact_chunks(raw, document)


def test_title_markup_is_cleaned_and_stem_is_the_fallback() -> None:
    assert parse_document("x.rst", b":mod:`json` --- JSON\n====================\n\nx\n").title == "json --- JSON"
    assert parse_document("docs/intro.rst", b"No titles here.\n").title == "intro"


def test_transitions_and_indented_lines_are_not_titles() -> None:
    raw = b"Title\n=====\n\nPara one.\n\n----------\n\nPara two.\n\n  indented\n  --------\n"
    chunks = parse_document("a.rst", raw).chunks
    assert {chunk.heading_path for chunk in chunks} == {("Title",)}


def test_multibyte_titles_and_offsets() -> None:
    raw = "Überschrift\n===========\n\nInhalt — 中文.\n\nZweite Ebene\n------------\n\nnaïve 🎉\n".encode()
    document = parse_document("a.rst", raw)
    assert [chunk.heading_path for chunk in document.chunks] == [
        ("Überschrift",),
        ("Überschrift", "Zweite Ebene"),
    ]
    assert_exact_chunks(raw, document)


_RST_LINES = st.sampled_from(
    [
        "",
        "Title",
        "=====",
        "-----",
        "~~~~~~~~~~",
        "::",
        "Example::",
        "    indented literal",
        "   >>> doctest()",
        ">>> doctest()",
        ".. code-block:: python",
        ".. note::",
        "Plain paragraph text.",
        "Ünïcödé — 中文 🎉",
        "word " * 300,
    ]
)


@given(st.lists(_RST_LINES, max_size=60))
@settings(max_examples=150, deadline=None)
def test_rst_chunk_invariants(lines: list[str]) -> None:
    raw = "\n".join(lines).encode()
    assert_exact_chunks(raw, parse_document("doc.rst", raw))
