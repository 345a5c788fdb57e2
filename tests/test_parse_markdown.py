"""Markdown and MDX: heading paths, front matter, fences, MDX noise, bounds and exact spans."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ingest.model import Chunk
from engine.ingest.parsers import parse_document
from tests.parser_checks import assert_exact_chunks

DOCUMENT = """\
---
title: "Quarry guide"
tags: [a, b]
---
Intro before any heading.

# Install

Install it.

## From source

Clone the repo:

```bash
# this is a shell comment, not a heading
git clone https://example.com/quarry.git
```

From PyPI
---------

Run pip.

Usage
=====

### Flags

Use `--fast`.
"""


def _chunk_with(chunks: list[Chunk], text: str) -> Chunk:
    return next(chunk for chunk in chunks if text in chunk.content)


def test_heading_paths_atx_setext_and_front_matter() -> None:
    raw = DOCUMENT.encode()
    document = parse_document("docs/guide.md", raw)
    assert document.title == "Quarry guide"
    assert document.content_type == "markdown"
    assert document.language is None
    chunks = document.chunks
    assert "tags:" not in "".join(chunk.content for chunk in chunks)
    assert _chunk_with(chunks, "Intro before").heading_path == ()
    assert _chunk_with(chunks, "Install it.").heading_path == ("Install",)
    assert _chunk_with(chunks, "Clone the repo").heading_path == ("Install", "From source")
    assert _chunk_with(chunks, "Run pip.").heading_path == ("Install", "From PyPI")
    assert _chunk_with(chunks, "Use `--fast`").heading_path == ("Usage", "Flags")
    # The shell comment inside the fence is code, not a heading.
    fenced = _chunk_with(chunks, "git clone")
    assert fenced.heading_path == ("Install", "From source")
    assert "# this is a shell comment" in fenced.content
    assert all("this is a shell comment" not in part for chunk in chunks for part in chunk.heading_path)
    assert_exact_chunks(raw, document)


def test_bare_parent_heading_joins_its_first_child() -> None:
    raw = b"# Usage\n\n### Flags\n\nUse them.\n"
    (chunk,) = parse_document("a.md", raw).chunks
    assert chunk.heading_path == ("Usage", "Flags")
    assert chunk.content.startswith("# Usage")


def test_title_falls_back_to_first_h1_then_file_stem() -> None:
    assert parse_document("a/b.md", b"## Sub\n\n# Main title\n\ntext\n").title == "Main title"
    assert parse_document("a/notes.markdown", b"just text\n").title == "notes"
    assert parse_document("a/x.md", b"Setext Title\n===\n\nbody\n").title == "Setext Title"


def test_heading_markup_is_cleaned() -> None:
    raw = b"# The `parse_document()` [API](https://x.y) **now** ##\n\ntext\n"
    (chunk,) = parse_document("a.md", raw).chunks
    assert chunk.heading_path == ("The parse_document() API now",)


def test_fence_is_not_split_when_it_fits_but_is_when_it_alone_exceeds_the_bound() -> None:
    prose = "\n\n".join(f"Paragraph {index} explains one more detail of the setup." for index in range(25))
    fence_lines = "\n".join(f"    step_{index}(argument_{index})" for index in range(20))
    raw = f"# Setup\n\n{prose}\n\n```python\n{fence_lines}\n```\n\nAfter.\n".encode()
    chunks = parse_document("a.md", raw).chunks
    holding = [chunk for chunk in chunks if "step_" in chunk.content]
    assert len(holding) == 1
    assert holding[0].content.count("```") == 2

    huge = "\n".join(f"value_{index} = compute({index}, {index + 1})" for index in range(300))
    raw = f"# Big\n\n```python\n{huge}\n```\n".encode()
    document = parse_document("a.md", raw)
    pieces = [chunk for chunk in document.chunks if "value_" in chunk.content]
    assert len(pieces) > 1
    assert all(chunk.heading_path == ("Big",) for chunk in pieces)
    assert all(chunk.is_code for chunk in pieces[1:])
    assert_exact_chunks(raw, document)


def test_mdx_drops_esm_and_jsx_only_lines() -> None:
    raw = b"""import Tabs from '@theme/Tabs';
export const meta = {
  author: 'x',
};

# Title

<Tabs>
<TabItem value="py" label="Python">

Install with pip.

</TabItem>
</Tabs>

{/* a comment */}
Done.
"""
    document = parse_document("docs/page.mdx", raw)
    text = "\n".join(chunk.content for chunk in document.chunks)
    assert "import" not in text and "export" not in text and "author" not in text
    assert "<Tabs>" not in text and "TabItem" not in text and "comment" not in text
    assert "Install with pip." in text and "Done." in text
    assert_exact_chunks(raw, document)


def test_multibyte_text_gets_exact_byte_offsets() -> None:
    raw = "# Überblick\n\nÄpfel und Birnen — 中文 🎉.\n\n## Détails\n\nnaïve café\n".encode()
    document = parse_document("a.md", raw)
    assert [chunk.heading_path for chunk in document.chunks] == [("Überblick",), ("Überblick", "Détails")]
    assert_exact_chunks(raw, document)


def test_long_sections_are_bounded() -> None:
    words = " ".join(f"token{index}" for index in range(3000))
    raw = f"# Long\n\n{words}\n\n## Next\n\nshort\n".encode()
    document = parse_document("a.md", raw)
    assert len(document.chunks) > 5
    assert_exact_chunks(raw, document)


_MARKDOWN_LINES = st.sampled_from(
    [
        "",
        "# Title",
        "## Section ##",
        "### Deep `code`",
        "Setext heading",
        "===",
        "---",
        "```",
        "```python",
        "~~~",
        "# comment in maybe-fence",
        "- item one",
        "1. numbered",
        "> quote",
        "| a | b |",
        "    indented code",
        "Plain paragraph text with words.",
        "Ünïcödé — 中文 🎉",
        "---",
        "title: x",
        "<Component prop='x' />",
        "import X from 'y'",
        "word " * 300,
    ]
)


@given(st.lists(_MARKDOWN_LINES, max_size=60), st.booleans())
@settings(max_examples=150, deadline=None)
def test_markdown_chunk_invariants(lines: list[str], mdx: bool) -> None:
    raw = "\n".join(lines).encode()
    document = parse_document("doc.mdx" if mdx else "doc.md", raw)
    assert_exact_chunks(raw, document)
    assert all(len(part) <= 200 for chunk in document.chunks for part in chunk.heading_path)


def test_unfenced_code_pasted_into_markdown_is_code_and_prose_stays_prose() -> None:
    pasted = ("def write_boolean(self, n):\n    t = TYPE_BOOL_TRUE\n    if n is False:\n"
              "        t = TYPE_BOOL_FALSE\n    self.stream.write(t)\n")
    [chunk] = parse_document("snippets.md", pasted.encode()).chunks
    assert chunk.is_code
    prose = ("# Guide\n\nFor example, if the index is partial, the planner uses it only when the query's\n"
             "condition implies the index predicate. Two cases follow:\n\nNothing else changes.\n")
    assert not any(chunk.is_code for chunk in parse_document("guide.md", prose.encode()).chunks)
