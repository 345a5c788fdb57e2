"""Configuration files and CSV: text chunks along top-level sections, and only the head of a data file."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers import is_supported, parse_document
from engine.ingest.parsers.tabular import HEAD_ROWS
from tests.parser_checks import assert_exact_chunks


def _parse(path: str, source: str) -> ParsedDocument:
    raw = source.encode()
    document = parse_document(path, raw)
    assert (document.content_type, document.language) == ("text", None)
    assert not any(chunk.is_code for chunk in document.chunks)
    assert_exact_chunks(raw, document)
    return document


def _service(name: str) -> str:
    environment = "".join(f"      QUARRY_SETTING_{index}: value-{name}-{index}\n" for index in range(20))
    return f"  # The {name} service.\n  {name}:\n    image: quarry/{name}\n    environment:\n{environment}"


COMPOSE = f"""\
# Quarry and its database.
name: quarry
x-defaults: &defaults
  restart: unless-stopped

services:
{_service("db")}{_service("api")}{_service("worker")}
volumes:
  pgdata:
"""


def test_yaml_small_sections_share_chunks_and_a_large_one_splits_between_entries() -> None:
    document = _parse("compose.yaml", COMPOSE)

    assert document.title == "compose.yaml"
    assert document.chunks[0].content.startswith("# Quarry and its database.\nname: quarry")
    assert document.chunks[0].heading_path == ()
    services = [chunk for chunk in document.chunks if chunk.heading_path == ("services",)]
    assert len(services) == 3  # each service is an entry: cuts fall between them, not inside one
    for name in ("db", "api", "worker"):
        assert sum(f"  {name}:\n    image:" in chunk.content for chunk in services) == 1
    assert services[0].content.startswith("services:\n  # The db service.")  # the key joins its first entry
    assert services[1].content.startswith("  # The api service.\n  api:")
    assert document.chunks[-1].content == "volumes:\n  pgdata:"


PYPROJECT = """\
[build-system]
requires = ["hatchling"]

# Tool settings follow.
[tool.ruff]
line-length = 120

[[tool.mypy.overrides]]
module = ["a.*"]
"""


@pytest.mark.parametrize("path", ["pyproject.toml", "setup.cfg", "tox.ini", "pip.conf"])
def test_table_headers_are_sections(path: str) -> None:
    document = _parse(path, PYPROJECT)
    assert [chunk.content for chunk in document.chunks] == [PYPROJECT.rstrip()]  # small: one chunk

    large = PYPROJECT + "".join(f"option_{index} = {index}\n" for index in range(200))
    chunks = _parse(path, large).chunks
    assert chunks[0].heading_path == () and "[tool.ruff]" in chunks[0].content
    assert {chunk.heading_path for chunk in chunks[1:]} == {("tool.mypy.overrides",)}


def test_json_keys_of_the_outermost_object_are_sections() -> None:
    scripts = ",\n".join(f'    "task-{index}": "run step number {index} of the build"' for index in range(60))
    source = f'{{\n  "name": "web",\n  "scripts": {{\n{scripts}\n  }},\n  "private": true\n}}\n'
    document = _parse("web/package.json", source)

    assert {chunk.heading_path for chunk in document.chunks} == {(), ("scripts",)}
    assert document.chunks[0].content.startswith('{\n  "name": "web"')
    assert document.chunks[-1].content.endswith('"private": true\n}')
    minified = _parse("data.json", '{"a": [' + ", ".join(str(index) for index in range(2000)) + "]}")
    assert len(minified.chunks) > 1


def test_only_the_head_of_a_csv_is_chunked() -> None:
    rows = "".join(f"{index},item number {index},{index * 1.5}\n" for index in range(1000))
    source = "id,name,price\n" + rows
    document = _parse("data/items.csv", source)

    last_line = max(chunk.end_line for chunk in document.chunks)
    assert last_line == HEAD_ROWS + 1  # the header and HEAD_ROWS rows
    assert document.chunks[0].content.startswith("id,name,price\n0,item number 0")
    assert all(chunk.heading_path == ("id,name,price",) for chunk in document.chunks[1:])
    assert _parse("tiny.tsv", "a\tb\n1\t2\n").chunks[0].content == "a\tb\n1\t2"


def test_config_and_data_extensions_are_supported() -> None:
    extensions = (".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".json", ".csv", ".tsv")
    assert all(is_supported(f"x/config{extension}") for extension in extensions)
    assert not is_supported("logo.png") and not is_supported("blob.bin")


_CONFIG_FRAGMENTS = st.sampled_from(
    ["", "key: value", "  nested: 1", "- item", "---", "[table]", "[[array]]", "a = 1", "# comment", "; note",
     '{', '}', '  "k": 1,', '"top": {', "]", "Ünïcödé: 中文", "z" * 3000, "x: " + "1, " * 400]
)


@pytest.mark.parametrize("path", ["c.yaml", "c.toml", "c.ini", "c.json", "c.csv"])
@given(lines=st.lists(_CONFIG_FRAGMENTS, max_size=40))
@settings(max_examples=25, deadline=None)
def test_config_chunk_invariants_on_arbitrary_input(path: str, lines: list[str]) -> None:
    _parse(path, "\n".join(lines))
