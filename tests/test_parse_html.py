"""HTML docs pages: chrome dropped, headings as paths, code kept verbatim, best-effort spans."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.ingest.model import Chunk
from engine.ingest.parsers import ParseError, parse_document
from tests.parser_checks import assert_bounded_chunks

POSTGRES_MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")

PAGE = """\
<!DOCTYPE html>
<html><head>
<title>json — JSON encoder — Quarry 1.0 documentation</title>
<style>.x { color: red }</style>
<script>var tracking = "SCRIPT_TEXT";</script>
</head>
<body>
<header class="site"><a href="/">SITE_BANNER</a></header>
<nav role="navigation"><ul><li><a href="a.html">NAV_LINK</a></li></ul></nav>
<div class="related"><a href="prev.html">RELATED_BAR</a></div>
<div class="sphinxsidebar"><h3>SIDEBAR_HEADING</h3><p>SIDEBAR_TEXT</p></div>
<div class="body" role="main">
  <h1>json — JSON encoder<a class="headerlink" href="#json">¶</a></h1>
  <p>Intro   paragraph
     spanning source lines.</p><p>Second paragraph.</p>
  <h2 id="usage">Basic Usage</h2>
  <p>Call <code>dumps</code> like this:</p>
  <div class="highlight"><pre><span class="kn">import</span> json
for item in items:
    print(json.dumps(item))
</pre></div>
  <table><tr><td>cell one</td><td>cell two</td></tr><tr><th>cell three</th></tr></table>
  <p>After the table.</p>
  <h3>Options</h3>
  <dl><dt>indent</dt><dd>How far to indent.</dd></dl>
  <h2>Überblick — naïve</h2>
  <p>Ünïcödé text.</p>
  <form><input name="q"><button>SEARCH_BUTTON</button></form>
</div>
<aside>ASIDE_TEXT</aside>
<div class="footer">FOOTER_TEXT</div>
<footer>SITE_FOOTER</footer>
</body></html>
"""


def _chunk_with(chunks: list[Chunk], text: str) -> Chunk:
    return next(chunk for chunk in chunks if text in chunk.content)


def test_chrome_is_dropped_and_content_kept() -> None:
    document = parse_document("library/json.html", PAGE.encode())
    text = "\n".join(chunk.content for chunk in document.chunks)
    for chrome in (
        "SCRIPT_TEXT",
        "color: red",
        "SITE_BANNER",
        "NAV_LINK",
        "RELATED_BAR",
        "SIDEBAR",
        "SEARCH_BUTTON",
        "ASIDE_TEXT",
        "FOOTER",
        "¶",
    ):
        assert chrome not in text
    assert "Intro paragraph spanning source lines." in text
    assert "Second paragraph." in text
    assert_bounded_chunks(document)


def test_docbook_navigation_tables_are_chrome_and_data_tables_are_not() -> None:
    # Valgrind's manual (DocBook): prev/up/home bars as bare tables on every page, beside real tables.
    page = ('<html><head><title>Memcheck</title></head><body>'
            '<table summary="Navigation header" width="100%"><tr><td>NAV_PREV</td><td>NAV_HOME</td></tr></table>'
            '<h1>Memcheck</h1><p>Finds leaks.</p><table summary="Options"><tr><td>--leak-check</td></tr></table>'
            '<table summary="NAVIGATION footer"><tr><td>NAV_NEXT</td></tr></table></body></html>')
    text = "\n".join(chunk.content for chunk in parse_document("mc-manual.html", page.encode()).chunks)
    assert "NAV_" not in text
    assert "Finds leaks." in text and "--leak-check" in text


def test_title_heading_paths_and_code() -> None:
    document = parse_document("library/json.html", PAGE.encode())
    assert document.title == "json — JSON encoder"
    assert document.content_type == "html"
    chunks = document.chunks
    assert _chunk_with(chunks, "Intro paragraph").heading_path == ("json — JSON encoder",)
    usage = _chunk_with(chunks, "import json")
    assert usage.heading_path == ("json — JSON encoder", "Basic Usage")
    # <pre> keeps its newlines and indentation.
    assert "import json\nfor item in items:\n    print(json.dumps(item))" in usage.content
    # Table text stays in document order, one cell per line.
    assert usage.content.index("cell one") < usage.content.index("cell three") < usage.content.index("After")
    options = _chunk_with(chunks, "How far to indent.")
    assert options.heading_path == ("json — JSON encoder", "Basic Usage", "Options")
    assert "indent\nHow far to indent." in options.content
    assert _chunk_with(chunks, "Ünïcödé").heading_path == ("json — JSON encoder", "Überblick — naïve")


def test_spans_point_at_the_section_heading_in_raw_bytes() -> None:
    raw = PAGE.encode()
    document = parse_document("library/json.html", raw)
    sections = {chunk.heading_path[-1]: chunk for chunk in document.chunks if chunk.heading_path}
    for title, tag in (("Basic Usage", b"<h2"), ("Options", b"<h3"), ("Überblick — naïve", b"<h2")):
        chunk = sections[title]
        assert raw[chunk.start_byte : chunk.start_byte + 3] == tag
        assert title.encode() in raw[chunk.start_byte : chunk.end_byte]
        assert chunk.start_line == raw.count(b"\n", 0, chunk.start_byte) + 1
        assert chunk.end_line == raw.count(b"\n", 0, chunk.end_byte - 1) + 1
    # Sections follow each other without overlap.
    starts = [chunk.start_byte for chunk in document.chunks]
    assert starts == sorted(starts)


def test_code_only_chunk_is_code_and_long_sections_are_bounded() -> None:
    code = "\n".join(f"select {index} from t where x = {index};" for index in range(400))
    words = " ".join(f"word{index}" for index in range(2000))
    raw = f"<html><body><h1>Long</h1><p>{words}</p><h2>Code</h2><pre>{code}</pre></body></html>".encode()
    document = parse_document("long.html", raw)
    assert document.title == "Long"
    assert len(document.chunks) > 10
    code_chunks = [chunk for chunk in document.chunks if chunk.heading_path == ("Long", "Code")]
    assert len(code_chunks) > 1 and all(chunk.is_code for chunk in code_chunks[1:])
    assert_bounded_chunks(document)


def test_odd_input_does_not_break_parsing() -> None:
    raw = "<h2>Unclosed <p>text \ufdd0 with a marker-like char<h2></h2><pre>x".encode()
    assert_bounded_chunks(parse_document("odd.html", raw))
    assert parse_document("empty.html", b"").chunks == []
    with pytest.raises(ParseError):
        parse_document("latin1.html", "<p>caf\xe9</p>".encode("latin-1"))


@pytest.mark.skipif(not POSTGRES_MANUAL.is_dir(), reason="postgresql-doc-15 is not installed")
def test_real_postgresql_manual_page() -> None:
    raw = (POSTGRES_MANUAL / "sql-select.html").read_bytes()
    document = parse_document("sql-select.html", raw)
    assert document.title == "SELECT"
    text = "\n".join(chunk.content for chunk in document.chunks)
    # The navigation header and footer (Prev / Up / Home / Next cells) are gone.
    assert not {"Prev", "Up", "Home", "Next"} & {line.strip() for line in text.split("\n")}
    synopsis = _chunk_with(document.chunks, "[ WITH [ RECURSIVE ]")
    assert synopsis.heading_path == ("Synopsis",)
    assert "\nSELECT [ ALL | DISTINCT" in synopsis.content
    paths = {chunk.heading_path for chunk in document.chunks}
    assert ("Description",) in paths
    assert ("Parameters", "FROM Clause") in paths
    assert_bounded_chunks(document)
