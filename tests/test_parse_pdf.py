"""PDF and DOCX files: text located by page (PDF) or heading (DOCX), skips with reasons, real ingest."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool
from pypdf import PdfReader, PdfWriter
from pypdf.generic import IndirectObject

from engine.embed.base import Embedder
from engine.ingest.model import MAX_CHUNK_TOKENS, estimate_tokens
from engine.ingest.parsers import ParseError, is_supported, parse_document
from engine.ingest.parsers.docx import MAX_DOCX_XML_BYTES
from engine.ingest.parsers.pdf import MAX_PDF_PAGES, NO_TEXT_REASON, NothingToIndex
from engine.ingest.pipeline import Ingestor
from engine.ingest.sources import SourceSpec
from engine.ingest.walk import looks_binary
from tests.parser_checks import assert_exact_chunks
from tests.searching import search

# -- building real files --------------------------------------------------------------------


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def make_pdf(pages: list[list[str] | None], *, title: str | None = None) -> bytes:
    """A PDF written object by object: one Helvetica text line per entry, None for an image-only page.

    The binary comment after the header (NUL included) is what real PDFs start with, so the
    walk's binary-content test sees this file as binary too.
    """
    font = 3 + 2 * len(pages)
    kids = " ".join(f"{3 + 2 * index} 0 R" for index in range(len(pages)))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode()]
    for index, lines in enumerate(pages):
        if lines is None:
            stream = b"0.5 g 72 72 468 648 re f"  # a grey rectangle: what a scan's page holds, text-wise
        else:
            shown = " T* ".join(f"{_pdf_string(line)} Tj" for line in lines)
            stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET".encode("latin-1")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 {font} 0 R"
                       f" >> >> /Contents {4 + 2 * index} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    info = ""
    if title is not None:
        objects.append(f"<< /Title {_pdf_string(title)} >>".encode("latin-1"))
        info = f" /Info {len(objects)} 0 R"
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\x00\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def extracted_text(pages: list[list[str] | None]) -> bytes:
    """What the parser's spans index: each page's lines, one blank line between pages."""
    return "\n\n".join("\n".join(lines or []) for lines in pages).encode()


def rewritten(raw: bytes, *, outline: Sequence[tuple[str, int, int | None]] = (), user_password: str | None = None
              ) -> bytes:
    """``raw`` through pypdf's writer: outline entries (title, page, index of parent entry), encryption."""
    writer = PdfWriter(clone_from=PdfReader(BytesIO(raw)))
    entries: list[IndirectObject] = []
    for title, page, parent in outline:
        entries.append(writer.add_outline_item(title=title, page_number=page,
                                               parent=None if parent is None else entries[parent]))
    if user_password is not None:
        writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = BytesIO()
    writer.write(out)
    return out.getvalue()


_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def make_docx(body: str, *, styles: str | None = None) -> bytes:
    """A .docx holding ``body`` (WordprocessingML inside ``w:body``) and an optional styles part."""
    out = BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        archive.writestr("word/document.xml", f'<?xml version="1.0"?><w:document xmlns:w="{_W}"><w:body>{body}'
                                              "</w:body></w:document>")
        if styles is not None:
            archive.writestr("word/styles.xml", f'<?xml version="1.0"?><w:styles xmlns:w="{_W}">{styles}</w:styles>')
    return out.getvalue()


def _zip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    out = BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def paragraph(text: str, style: str | None = None) -> str:
    properties = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{properties}<w:r><w:t>{text}</w:t></w:r></w:p>"


# -- PDF ------------------------------------------------------------------------------------

MANUAL = [
    ["Installing Quarry", "Run pip install quarry (it needs Python 3.11)."],
    None,
    ["Searching", "Use quarry search to rank chunks by meaning and words."],
]


def test_pages_become_chunks_located_by_page() -> None:
    raw = make_pdf(MANUAL, title="The Quarry Manual")
    document = parse_document("docs/manual.pdf", raw)
    assert is_supported("docs/MANUAL.PDF")
    assert document.title == "The Quarry Manual" and document.content_type == "text"
    assert [chunk.heading_path for chunk in document.chunks] == [("page 1",), ("page 3",)]
    assert document.chunks[0].content == "Installing Quarry\nRun pip install quarry (it needs Python 3.11)."
    # Spans and lines index the extracted text, pages one blank line apart (the image page is empty).
    assert_exact_chunks(extracted_text(MANUAL), document)
    assert (document.chunks[1].start_line, document.chunks[1].end_line) == (6, 7)


def test_title_falls_back_to_the_first_line() -> None:
    assert parse_document("a.pdf", make_pdf(MANUAL)).title == "Installing Quarry"


def test_a_long_page_is_split_within_the_bound_keeping_its_page() -> None:
    long_page = [f"Line {number} explains one more detail of replication and failover." for number in range(200)]
    pages: list[list[str] | None] = [["Intro"], long_page]
    document = parse_document("long.pdf", make_pdf(pages))
    assert len(document.chunks) > 3
    assert all(chunk.heading_path == ("page 2",) for chunk in document.chunks[1:])
    assert all(estimate_tokens(chunk.content) <= MAX_CHUNK_TOKENS for chunk in document.chunks)
    assert_exact_chunks(extracted_text(pages), document)


def test_outline_entries_lead_the_page_in_the_heading_path() -> None:
    pages: list[list[str] | None] = [["Cover"], ["Install with pip."], ["Tune the pool."], ["More tuning."]]
    raw = rewritten(make_pdf(pages), outline=[("Getting started", 1, None), ("Operations", 2, None),
                                              ("Connection pools", 2, 1)])
    paths = [chunk.heading_path for chunk in parse_document("guide.pdf", raw).chunks]
    assert paths == [
        ("page 1",),
        ("Getting started", "page 2"),
        ("Operations", "page 3"),  # the first entry starting on a page names it
        ("Operations", "Connection pools", "page 4"),  # the last one carries on
    ]


def test_a_scanned_pdf_is_nothing_to_index() -> None:
    with pytest.raises(NothingToIndex, match=r"no text layer \(scanned PDF\?\)"):
        parse_document("scan.pdf", make_pdf([None, None]))
    assert issubclass(NothingToIndex, ParseError)  # a caller that does not tell them apart still catches it


def test_an_encrypted_pdf_opens_with_the_empty_password_or_is_skipped() -> None:
    raw = make_pdf(MANUAL)
    permissions_only = parse_document("open.pdf", rewritten(raw, user_password=""))
    assert permissions_only.chunks[0].content.startswith("Installing Quarry")
    with pytest.raises(NothingToIndex, match="encrypted PDF \\(it needs a password\\)"):
        parse_document("locked.pdf", rewritten(raw, user_password="secret"))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "not a pdf"])
def test_a_damaged_pdf_fails_with_a_one_line_reason(damage: str) -> None:
    raw = make_pdf(MANUAL)
    broken = {"truncated": raw[: len(raw) // 2], "garbage": b"%PDF-1.4\n%\xff\xfe garbage",
              "not a pdf": bytes(range(256)) * 4}[damage]
    with pytest.raises(ParseError, match=r"^not a readable PDF \(.+\)$") as failure:
        parse_document("broken.pdf", broken)
    assert not isinstance(failure.value, NothingToIndex)
    assert "\n" not in str(failure.value)


def test_a_pdf_over_the_page_cap_is_skipped_unread() -> None:
    with pytest.raises(NothingToIndex, match=f"{MAX_PDF_PAGES + 1} pages, more than the {MAX_PDF_PAGES}"):
        parse_document("huge.pdf", make_pdf([["x"]] * (MAX_PDF_PAGES + 1)))


# -- DOCX -----------------------------------------------------------------------------------

STYLES = (
    '<w:style w:styleId="berschrift1"><w:name w:val="heading 1"/></w:style>'  # a German Word's id
    '<w:style w:styleId="Heading2"><w:name w:val="heading 2"/></w:style>'
    '<w:style w:styleId="Normal"><w:name w:val="Normal"/></w:style>'
)


def test_docx_headings_become_heading_paths() -> None:
    body = (paragraph("Operations Guide", "berschrift1") + paragraph("How Quarry runs in production.")
            + paragraph("Backups", "Heading2") + paragraph("Use pg_basebackup nightly.", "Normal")
            + "<w:tbl><w:tr><w:tc>" + paragraph("tool") + "</w:tc><w:tc>" + paragraph("when")
            + "</w:tc></w:tr></w:tbl>"
            + paragraph("Upgrades", "Heading2") + paragraph("Run quarry migrate first."))
    document = parse_document("ops.docx", make_docx(body, styles=STYLES))
    assert document.title == "Operations Guide"
    by_path = {chunk.heading_path: chunk.content for chunk in document.chunks}
    assert by_path[("Operations Guide",)] == "Operations Guide\n\nHow Quarry runs in production."
    assert by_path[("Operations Guide", "Backups")] == "Backups\n\nUse pg_basebackup nightly.\n\ntool | when"
    assert by_path[("Operations Guide", "Upgrades")] == "Upgrades\n\nRun quarry migrate first."
    text = (b"Operations Guide\n\nHow Quarry runs in production.\n\nBackups\n\nUse pg_basebackup nightly.\n\n"
            b"tool | when\n\nUpgrades\n\nRun quarry migrate first.")
    assert_exact_chunks(text, document)


def test_docx_without_a_styles_part_reads_heading_style_ids() -> None:
    document = parse_document("plain.docx", make_docx(paragraph("Setup", "Heading1") + paragraph("Install it.")))
    assert [chunk.heading_path for chunk in document.chunks] == [("Setup",)]


@pytest.mark.parametrize(("raw", "reason"), [
    (b"PK\x03\x04 not really a zip", "not a readable .docx"),
    (make_docx("<w:p>"), "not a readable .docx \\(word/document.xml"),
    (_zip({"word/styles.xml": b"<w:styles/>"}), "no word/document.xml"),
])
def test_a_broken_docx_fails_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_document("broken.docx", raw)


def test_docx_refuses_a_dtd_and_a_zip_bomb() -> None:
    laughs = b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaa">]><d>&a;</d>'
    with pytest.raises(ParseError, match="declares a DTD"):
        parse_document("laughs.docx", _zip({"word/document.xml": laughs}))
    bomb = _zip({"word/document.xml": b" " * (MAX_DOCX_XML_BYTES + 1)}, zipfile.ZIP_DEFLATED)
    assert len(bomb) < 1_000_000
    with pytest.raises(ParseError, match="inflates to"):
        parse_document("bomb.docx", bomb)


# -- hostile input --------------------------------------------------------------------------

_MANUAL_PDF = make_pdf(MANUAL, title="The Quarry Manual")
_OPS_DOCX = make_docx(paragraph("Backups", "Heading1") + paragraph("Use pg_basebackup nightly."))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["manual.pdf", "ops.docx"]), st.integers(min_value=0), st.binary(min_size=1, max_size=64))
def test_corrupted_files_raise_only_parse_error(name: str, position: int, garbage: bytes) -> None:
    """Bytes overwritten anywhere in a valid file: parsed, or a ParseError, never anything else."""
    raw = _MANUAL_PDF if name.endswith(".pdf") else _OPS_DOCX
    at = position % len(raw)
    damaged = raw[:at] + garbage + raw[at + len(garbage):]
    try:
        document = parse_document(name, damaged)
    except ParseError as error:
        assert str(error) and "\n" not in str(error)
    else:
        assert all(chunk.content.strip() for chunk in document.chunks)


# -- through the real ingest ----------------------------------------------------------------


def test_a_folder_of_pdfs_is_ingested_searchable_by_page(pool: ConnectionPool, local_embedder: Embedder,
                                                        tmp_path: Path) -> None:
    manual = make_pdf(MANUAL, title="The Quarry Manual")
    assert looks_binary(manual)  # the walk exempts .pdf from its binary-content test
    (tmp_path / "manual.pdf").write_bytes(manual)
    (tmp_path / "scan.pdf").write_bytes(make_pdf([None]))
    (tmp_path / "ops.docx").write_bytes(make_docx(paragraph("Backups", "Heading1")
                                                  + paragraph("Use pg_basebackup nightly.")))
    summary = Ingestor(pool, {"text": local_embedder}, max_file_bytes=1_000_000).ingest(
        tmp_path, SourceSpec(slug="pdfs", kind="mixed", attribution="official"))

    assert summary.added == 2
    # A scanned PDF is readable, with nothing to index: skipped with its reason, not failed.
    assert ("scan.pdf", NO_TEXT_REASON) in summary.skipped and not summary.failed
    hits = search(pool, local_embedder, "how do I install quarry with pip", sources=["pdfs"])
    assert hits[0].path == "manual.pdf" and hits[0].heading_path == ["page 1"]
    assert hits[0].title == "The Quarry Manual" and (hits[0].start_line, hits[0].end_line) == (1, 2)
    backups = search(pool, local_embedder, "nightly pg_basebackup", sources=["pdfs"])
    assert backups[0].path == "ops.docx" and backups[0].heading_path == ["Backups"]
    # The stored text is what the chunks' spans index (the extracted text), as for every document.
    with pool.connection() as conn:
        raw, digest, start, end = conn.execute(
            "select d.raw, d.content_hash, c.start_byte, c.end_byte from quarry.documents d"
            " join quarry.chunks c on c.document_id = d.id where c.id = %s", (hits[0].chunk_id,)).fetchone() \
            or (b"", b"", 0, 0)
    assert bytes(raw)[start:end].decode() == hits[0].content
    assert bytes(digest) == hashlib.sha256(manual).digest()  # change detection still hashes the file

