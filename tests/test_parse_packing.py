"""The chunk packer: exact token counts, bounded pieces, exact spans; plus dispatch and text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ingest.model import MAX_CHUNK_TOKENS, estimate_tokens
from engine.ingest.parsers import SUPPORTED_EXTENSIONS, ParseError, is_supported, parse_document
from engine.ingest.parsers.packing import Block, bounded_pieces, pack_blocks
from engine.ingest.parsers.source_text import SourceText
from engine.ingest.parsers.tokens import count_tokens
from tests.parser_checks import assert_exact_chunks

# Text mixing ASCII words, punctuation, whitespace, accents, CJK, emoji, NBSP and
# other Unicode spaces: everything the token classes distinguish.
_ALPHABET = st.sampled_from(
    [*"ab_Z09 .,;:-(){}#`*\t\n\r", "é", "ß", "Ж", "中", "文", "—", "…", "\u00a0", "\u2003", "🎉", "\x0c"]
)
_TEXT = st.text(_ALPHABET, max_size=400)
_WORDS = st.lists(
    st.one_of(
        st.sampled_from(["alpha", "beta_gamma", "x" * 30, "naïve", "日本語テキスト", "—", "()", "==", "\t"]),
        st.text(_ALPHABET, max_size=12),
    ),
    max_size=120,
)


@given(_TEXT)
@settings(max_examples=300, deadline=None)
def test_count_tokens_equals_estimate_tokens(text: str) -> None:
    assert count_tokens(text) == estimate_tokens(text)


@given(st.text(st.sampled_from(list("abcdefghij_ .")), min_size=0, max_size=3000))
@settings(max_examples=100, deadline=None)
def test_count_tokens_equals_estimate_tokens_on_long_ascii(text: str) -> None:
    assert count_tokens(text) == estimate_tokens(text)


@given(_WORDS, st.integers(min_value=2, max_value=60))
@settings(max_examples=200, deadline=None)
def test_bounded_pieces_are_ordered_and_within_limit(words: list[str], limit: int) -> None:
    text = " ".join(words)
    previous_end = 0
    covered_tokens = 0
    for start, end in bounded_pieces(text, limit):
        assert previous_end <= start < end <= len(text)
        assert estimate_tokens(text[start:end]) <= limit
        covered_tokens += estimate_tokens(text[start:end])
        previous_end = end
    # Cuts fall between tokens except inside a word longer than the limit.
    if all(estimate_tokens(word) <= limit for word in text.split()):
        assert covered_tokens == estimate_tokens(text)


def test_long_line_and_giant_word_are_split() -> None:
    line = " ".join(f"word{index}" for index in range(1000)) + " " + "q" * 5000
    raw = f"def f():\n    x = '{line}'\n".encode()
    source = SourceText(raw)
    chunks = pack_blocks(source, [Block(0, len(raw))])
    assert len(chunks) > 5
    for chunk in chunks:
        assert estimate_tokens(chunk.content) <= MAX_CHUNK_TOKENS
        assert raw[chunk.start_byte : chunk.end_byte].decode() == chunk.content
    # All pieces of the one long line report that line.
    assert {chunk.start_line for chunk in chunks[1:]} == {2}


@given(st.lists(st.text(_ALPHABET, max_size=80), max_size=60), st.integers(min_value=3, max_value=50))
@settings(max_examples=200, deadline=None)
def test_pack_blocks_spans_are_exact(lines: list[str], limit: int) -> None:
    raw = "\n".join(lines).encode()
    source = SourceText(raw)
    # One block per line, as a line-based parser would report them.
    blocks = [
        Block(start, source.line_end(index))
        for index, start in enumerate(source.line_starts)
        if source.lines[index].strip()
    ]
    chunks = pack_blocks(source, blocks, limit=limit)
    previous_end = 0
    for chunk in chunks:
        assert raw[chunk.start_byte : chunk.end_byte].decode() == chunk.content
        assert chunk.start_byte >= previous_end
        assert estimate_tokens(chunk.content) <= limit
        assert chunk.start_line == raw.count(b"\n", 0, chunk.start_byte) + 1
        assert chunk.end_line == chunk.start_line + chunk.content.count("\n")
        previous_end = chunk.end_byte


def test_plain_text_paragraphs_are_packed() -> None:
    paragraphs = [f"Paragraph {index} says something about topic {index}." for index in range(60)]
    raw = "\n\n".join(paragraphs).encode()
    document = parse_document("notes.txt", raw)
    assert document.content_type == "text"
    assert document.title == "notes"
    assert 1 < len(document.chunks) < 60  # merged, yet bounded
    assert all(chunk.heading_path == () and not chunk.is_code for chunk in document.chunks)
    assert_exact_chunks(raw, document)


def test_dispatch_by_extension_with_text_fallback() -> None:
    assert parse_document("docs/a.MD", b"# A\n").content_type == "markdown"
    assert parse_document("docs/a.rst", b"A\n=\n").content_type == "rst"
    assert parse_document("docs/a.htm", b"<h1>A</h1>").content_type == "html"
    assert parse_document("src/a.py", b"x = 1\n").content_type == "code"
    assert parse_document("LICENSE", b"MIT License\n").content_type == "text"
    assert parse_document("setup.cfg", b"[metadata]\n").content_type == "text"
    assert {".md", ".mdx", ".rst", ".html", ".txt", ".py", ".tsx", ".rs", ".hpp"} <= set(SUPPORTED_EXTENSIONS)
    assert is_supported("README") and is_supported("a/b.Rs") and not is_supported("logo.png")


@pytest.mark.parametrize("path", ["a.md", "a.rst", "a.html", "a.txt", "a.py", "a.go"])
def test_undecodable_input_raises_parse_error(path: str) -> None:
    with pytest.raises(ParseError, match="UTF-8"):
        parse_document(path, b"ok \xff\xfe not utf-8")
    with pytest.raises(ParseError, match="NUL"):
        parse_document(path, b"binary\x00data")


def test_byte_order_mark_is_not_content() -> None:
    raw = "\ufeff# Título\n\nTexto com acentuação.\n".encode()
    document = parse_document("a.md", raw)
    assert document.title == "Título"
    assert document.chunks[0].start_byte == 3
    assert_exact_chunks(raw, document)
