"""Shell scripts, ``#!`` scripts, Dockerfiles and Makefiles: code chunks along functions, stages and rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ingest.model import ParsedDocument
from engine.ingest.parsers import is_supported, parse_document
from engine.ingest.parsers.scripts import shebang_interpreter
from tests.parser_checks import assert_exact_chunks

DEPLOY = """\
#!/usr/bin/env bash
# Deploys the service.
set -euo pipefail

# Waits until Postgres answers.
wait_for_db() {
  until pg_isready -q; do
    sleep 1
  done
}

function migrate {
  quarry migrate
}

log() { echo "$*" >&2; }

wait_for_db
migrate
"""


def _parse(path: str, source: str, language: str) -> ParsedDocument:
    raw = source.encode()
    document = parse_document(path, raw)
    assert (document.content_type, document.language) == ("code", language)
    assert all(chunk.is_code for chunk in document.chunks)
    assert_exact_chunks(raw, document)
    return document


def _paths(document: ParsedDocument) -> list[str | None]:
    return [chunk.symbol_path for chunk in document.chunks]


def test_shell_functions_are_symbols_with_their_comments() -> None:
    document = _parse("scripts/deploy.sh", DEPLOY, "shell")

    assert _paths(document) == [
        "scripts.deploy",
        "scripts.deploy.wait_for_db",
        "scripts.deploy.migrate",
        "scripts.deploy.log",
        "scripts.deploy",
    ]
    assert document.chunks[0].content.startswith("#!/usr/bin/env bash")  # the shebang stays with the module
    assert document.chunks[1].content.startswith("# Waits until Postgres answers.\nwait_for_db() {")
    assert document.chunks[1].content.endswith("  done\n}")
    assert document.chunks[-1].content == "wait_for_db\nmigrate"


def test_extensionless_scripts_are_read_by_the_interpreter_they_name() -> None:
    shell = _parse(".ci/run", DEPLOY, "shell")
    assert ".ci.run.wait_for_db" in _paths(shell)

    python = _parse("bin/tool", "#!/usr/bin/env python3\nimport sys\n\n\ndef main() -> int:\n    return 0\n", "python")
    assert _paths(python) == ["bin.tool", "bin.tool.main"]

    node = _parse("bin/serve", "#!/usr/bin/env -S node --no-warnings\nfunction serve() { return 1 }\n", "javascript")
    assert "bin.serve.serve" in _paths(node)

    perl = _parse("bin/report", "#!/usr/bin/perl -w\nprint 'hello';\n", "perl")
    assert _paths(perl) == ["bin.report"]

    readme = parse_document("README", b"Quarry\n\nA retrieval engine.\n")  # no shebang: plain text
    assert readme.content_type == "text"


@pytest.mark.parametrize(
    ("line", "interpreter"),
    [(b"#!/bin/sh", "sh"), (b"#!/usr/bin/env python3.12", "python"), (b"#!/usr/bin/env LANG=C -S bash -e", "bash"),
     (b"#! /usr/local/bin/node", "node"), (b"#!", None), (b"not a script", None)],
)
def test_shebang_interpreter(line: bytes, interpreter: str | None) -> None:
    assert shebang_interpreter(line + b"\necho\n") == interpreter


DOCKERFILE = """\
ARG PYTHON=3.12

# Builds the wheel.
FROM python:${PYTHON}-slim AS builder
WORKDIR /src
COPY . .
RUN pip wheel --no-deps -w /dist .

FROM --platform=linux/amd64 python:${PYTHON}-slim
COPY --from=builder /dist /dist
RUN pip install /dist/*.whl \\
    && rm -rf /dist
CMD ["quarry", "serve"]
"""


def test_dockerfile_stages_are_symbols() -> None:
    for path in ("Dockerfile", "docker/Dockerfile.dev", "app.dockerfile", "Containerfile"):
        assert is_supported(path), path
    document = _parse("Dockerfile", DOCKERFILE, "dockerfile")

    assert _paths(document) == ["Dockerfile", "Dockerfile.builder", "Dockerfile.python:${PYTHON}-slim"]
    assert document.chunks[1].content.startswith("# Builds the wheel.\nFROM python")
    assert document.chunks[2].content.endswith('CMD ["quarry", "serve"]')
    assert parse_document("docker/Dockerfile.dev", DOCKERFILE.encode()).language == "dockerfile"
    assert parse_document("docs/Dockerfile.md", b"# Writing a Dockerfile\n").content_type == "markdown"


MAKEFILE = """\
PYTHON ?= python3
VENV := .venv
.PHONY: test lint

# Runs the fast tests.
test: $(VENV)
\t$(PYTHON) -m pytest -q \\
\t  tests/test_walk.py

\t@echo done

lint:: ; ruff check .

$(VENV):
\t$(PYTHON) -m venv $@
export PATH := $(VENV)/bin:$(PATH)
"""


def test_make_rules_are_symbols_and_variables_module_chunks() -> None:
    for path in ("Makefile", "makefile", "GNUmakefile", "build/rules.mk", "Makefile.am"):
        assert is_supported(path), path
    document = _parse("Makefile", MAKEFILE, "makefile")

    assert _paths(document) == ["Makefile", "Makefile.test", "Makefile.lint", "Makefile.$(VENV)", "Makefile"]
    assert document.chunks[0].content == "PYTHON ?= python3\nVENV := .venv\n.PHONY: test lint"
    assert document.chunks[1].content.startswith("# Runs the fast tests.\ntest:")
    assert document.chunks[1].content.endswith("@echo done")  # a blank line inside a recipe does not end it
    assert document.chunks[-1].content == "export PATH := $(VENV)/bin:$(PATH)"


_SCRIPT_FRAGMENTS = st.sampled_from(
    ["", "#!/bin/sh", "f() {", "}", "function g {", "  echo hi", "h() { echo; }", "# comment", "FROM x AS y",
     "RUN a \\", "target: dep", "\trecipe", "X := 1", ".PHONY: a", "Ünïcödé 中文", "z" * 3000, "(", ")"]
)


@pytest.mark.parametrize("path", ["run.sh", "Dockerfile", "Makefile", "bin/run"])
@given(lines=st.lists(_SCRIPT_FRAGMENTS, max_size=40))
@settings(max_examples=25, deadline=None)
def test_script_chunk_invariants_on_arbitrary_input(path: str, lines: list[str]) -> None:
    raw = "\n".join(lines).encode()
    document = parse_document(path, raw)
    assert document.content_type in ("code", "text")
    assert_exact_chunks(raw, document)
