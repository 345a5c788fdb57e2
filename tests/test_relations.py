"""Links and imports: extraction per format, and edges verified on real trees.

Real trees, read where they are installed: Quarry's own README, docs and ``engine``
package; the ``pathspec`` package Quarry depends on; the standard library's ``json``
package; npm's ``semver`` (installed for the
semver oracle); the PostgreSQL manual's HTML pages and the Python tutorial's
reStructuredText sources, when their Debian doc packages are installed. Ingestion
here embeds nothing (relations need no vectors), so whole trees take a second or two.
"""

from __future__ import annotations

import json as json_module
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pathspec
import pytest
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.corpus.links import NeighborWalk, neighbors
from engine.errors import NotFoundError
from engine.ingest.pipeline import Ingestor
from engine.ingest.references import Reference
from engine.ingest.relations import references_in_document
from engine.ingest.sources import SourceSpec
from mcp_server.auth import AccessPolicy
from mcp_server.http_app import build_http_app
from tests.mcp_harness import McpSession, StaticBackend, http_transport, mcp_session, serving
from tests.node_semver import SemverOracle

REPO = Path(__file__).resolve().parents[1]
POSTGRES_MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")
PYTHON_SOURCES = Path("/usr/share/doc/python3.11-doc/html/_sources")
SEMVER = REPO / "tests" / "semver_oracle" / "node_modules" / "semver"
INDEX_PAGES = ["indexes.html", "indexes-intro.html", "indexes-types.html", "indexes-multicolumn.html",
               "indexes-ordering.html", "indexes-bitmap-scans.html", "indexes-unique.html",
               "indexes-expressional.html", "indexes-partial.html", "indexes-index-only-scans.html",
               "indexes-opclass.html", "indexes-collations.html", "indexes-examine.html"]


def _edges(path: str, text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(ref.relation, ref.target, ref.candidates) for ref in references_in_document(path, text)]


def _first(path: str, text: str) -> Reference:
    found = references_in_document(path, text)
    assert len(found) == 1, found
    return found[0]


# -- extraction ------------------------------------------------------------------


def test_markdown_links_resolve_against_the_document_and_skip_code() -> None:
    text = (
        "# Guide\n\nSee [setup](../guide/a.md#section), [the API](/api/ \"API\") and ![logo](logo.png).\n"
        "A [ref link][r] and [x](https://example.com/x?y=1).\n\n[r]: <other page.md>\n[^1]: a footnote\n"
        "```md\n[not a link](nowhere.md)\n```\n"
        "Inline `[code](nope.md)` and <https://auto.link/> and <a href='raw.html'>raw</a>.\n"
        "[self](#top) [me](intro.md#x) [dir](sub/) [bare](../install)\n"
    )
    assert _edges("docs/intro.md", text) == [
        ("links_to", "../guide/a.md#section", ("guide/a.md",)),
        ("links_to", "/api/", ("api/index.md", "api/README.md", "api/index.html", "api/index.rst",
                               "api/readme.md", "api/index.mdx", "api/README.rst")),
        ("external", "https://example.com/x?y=1", ()),
        ("links_to", "other page.md", ("docs/other page.md",)),
        ("external", "https://auto.link/", ()),
        ("links_to", "raw.html", ("docs/raw.html", "docs/raw.md", "docs/raw.rst")),
        ("links_to", "sub/", tuple(f"docs/sub/{page}" for page in (
            "index.md", "README.md", "index.html", "index.rst", "readme.md", "index.mdx", "README.rst"))),
        ("links_to", "../install", ("install", "install.md", "install.mdx", "install.rst", "install.html",
                                    "install/index.md", "install/README.md", "install/index.html",
                                    "install/index.rst", "install/readme.md", "install/index.mdx",
                                    "install/README.rst")),
    ]
    assert [ref.line for ref in references_in_document("docs/intro.md", text)] == [3, 3, 4, 6, 11, 11, 12, 12]


def test_links_above_the_source_root_are_external() -> None:
    assert _edges("a.md", "[up](../../x.md) [mail](mailto:me@example.com) [js](javascript:void(0))") == [
        ("external", "../../x.md", ()), ("external", "mailto:me@example.com", ())]


def test_html_anchors_only() -> None:
    text = ('<link rel="next" href="next.html"/><a class="x" href="b/c.html#S1">c</a>'
            "<A HREF=d.htm>d</A><a href=\"?q=1&amp;r=2\">same</a><a href='e.html?x=1&amp;y'>e</a>")
    assert _edges("manual/a.html", text) == [
        ("links_to", "b/c.html#S1", ("manual/b/c.html", "manual/b/c.md", "manual/b/c.rst")),
        ("links_to", "d.htm", ("manual/d.htm", "manual/d.md", "manual/d.rst")),
        ("links_to", "e.html?x=1&y", ("manual/e.html", "manual/e.md", "manual/e.rst")),
    ]


def test_rst_documents_toctrees_includes_and_hyperlinks() -> None:
    text = (
        "Title\n=====\n\nSee :doc:`the API <../api/index>` and :doc:`/howto/sockets` and :ref:`a-label`.\n\n"
        ".. toctree::\n   :maxdepth: 2\n\n   intro\n   Usage <usage.rst>\n   self\n   glob*\n\n"
        "After the tree.\n\n.. include:: ../shared/note.rst\n\n"
        "A `link <https://python.org>`_ and `local <other.html>`__.\n\n.. _python: https://www.python.org/\n"
    )
    edges = references_in_document("docs/guide/index.rst", text)
    assert [(ref.relation, ref.target, ref.candidates[:1], ref.anchored) for ref in edges] == [
        ("links_to", "../api/index", ("docs/api/index.rst",), True),
        ("links_to", "/howto/sockets", ("howto/sockets.rst",), False),
        ("links_to", "intro", ("docs/guide/intro.rst",), True),
        ("links_to", "usage.rst", ("docs/guide/usage.rst",), True),
        ("links_to", "../shared/note.rst", ("docs/shared/note.rst",), True),
        ("external", "https://python.org", (), True),
        ("links_to", "other.html", ("docs/guide/other.html",), True),
        ("external", "https://www.python.org/", (), True),
    ]
    assert [ref.line for ref in edges] == [4, 4, 9, 10, 16, 18, 18, 20]


def test_python_imports() -> None:
    text = (
        "from __future__ import annotations\nimport os.path, numpy as np\nimport engine.errors\n"
        "from . import walk, Parser\nfrom .. import db\nfrom .parsers.code import parse_code, CODE_EXTENSIONS\n"
        "from ...x import y\n\ndef f():\n    import json\n    s = 'import fake'\n"
    )
    edges = references_in_document("engine/ingest/pipeline.py", text)
    assert [(ref.relation, ref.target, ref.candidates, ref.anchored) for ref in edges] == [
        ("external", "__future__", (), True),
        ("external", "os.path", ("os/path.py", "os/path/__init__.py"), False),
        ("imports", "numpy", ("numpy.py", "numpy/__init__.py"), False),
        ("imports", "engine.errors", ("engine/errors.py", "engine/errors/__init__.py"), False),
        ("imports", ".", ("engine/ingest.py", "engine/ingest/__init__.py"), True),
        ("imports", ".walk", ("engine/ingest/walk.py", "engine/ingest/walk/__init__.py", "engine/ingest.py",
                              "engine/ingest/__init__.py"), True),
        ("imports", "..db", ("engine/db.py", "engine/db/__init__.py", "engine.py", "engine/__init__.py"), True),
        ("imports", ".parsers.code", ("engine/ingest/parsers/code.py", "engine/ingest/parsers/code/__init__.py"),
         True),
        ("imports", ".parsers.code.parse_code", (
            "engine/ingest/parsers/code/parse_code.py", "engine/ingest/parsers/code/parse_code/__init__.py",
            "engine/ingest/parsers/code.py", "engine/ingest/parsers/code/__init__.py"), True),
        ("imports", "...x.y", ("x/y.py", "x/y/__init__.py", "x.py", "x/__init__.py"), True),
        ("external", "json", ("json.py", "json/__init__.py"), False),
    ]


def test_script_imports_resolve_typescript_conventions() -> None:
    text = (
        "import x from './a';\nimport type { T } from '../lib/b.js';\nexport * from './c/';\n"
        "import e = require('./e');\nconst f = require('react');\nconst g = await import('./g.json');\n"
        "import 'node:fs';\nfoo('./not-an-import');\n"
    )
    edges = references_in_document("src/app/main.ts", text)
    assert [(ref.relation, ref.target) for ref in edges] == [
        ("imports", "./a"), ("imports", "../lib/b.js"), ("imports", "./c/"), ("imports", "./e"),
        ("external", "react"), ("imports", "./g.json"), ("external", "node:fs")]
    assert edges[0].candidates[:4] == ("src/app/a", "src/app/a.ts", "src/app/a.tsx", "src/app/a.js")
    assert "src/app/a/index.ts" in edges[0].candidates
    assert edges[1].candidates[:3] == ("src/lib/b.js", "src/lib/b.ts", "src/lib/b.tsx")
    assert edges[2].candidates[0] == "src/app/c" and "src/app/c/index.js" in edges[2].candidates


def test_c_rust_java_go_imports() -> None:
    c = _edges("src/net/sock.c", '#include <stdio.h>\n#include "sock.h"\n# include "../util/buf.h"\n')
    assert c == [("imports", "<stdio.h>", ("stdio.h", "include/stdio.h", "src/stdio.h")),
                 ("imports", '"sock.h"', ("src/net/sock.h", "sock.h", "include/sock.h", "src/sock.h")),
                 ("imports", '"../util/buf.h"', ("src/util/buf.h", "util/buf.h"))]
    rust = references_in_document(
        "crates/core/src/net/tcp.rs",
        "mod frame;\npub(crate) mod codec;\nuse std::io;\nuse crate::net::{addr::Addr, self};\n"
        "use super::Error as E;\nuse self::codec::Codec;\n")
    assert [(ref.relation, ref.target, ref.candidates[:2]) for ref in rust] == [
        ("imports", "mod frame", ("crates/core/src/net/tcp/frame.rs", "crates/core/src/net/tcp/frame/mod.rs")),
        ("imports", "mod codec", ("crates/core/src/net/tcp/codec.rs", "crates/core/src/net/tcp/codec/mod.rs")),
        ("external", "std::io", ()),
        ("imports", "crate::net::addr::Addr", ("crates/core/src/net/addr/Addr.rs",
                                               "crates/core/src/net/addr/Addr/mod.rs")),
        ("imports", "crate::net", ("crates/core/src/net.rs", "crates/core/src/net/mod.rs")),
        ("imports", "super::Error", ("crates/core/src/net/Error.rs", "crates/core/src/net/Error/mod.rs")),
        ("imports", "self::codec::Codec", ("crates/core/src/net/tcp/codec/Codec.rs",
                                           "crates/core/src/net/tcp/codec/Codec/mod.rs")),
    ]
    assert "crates/core/src/net/addr.rs" in rust[3].candidates
    java = references_in_document("src/main/java/com/x/App.java",
                                  "package com.x;\nimport java.util.List;\nimport com.x.util.Strings;\n"
                                  "import static com.x.util.Strings.trim;\nimport com.y.*;\n")
    assert [(ref.relation, ref.target, ref.candidates, ref.anchored) for ref in java] == [
        ("external", "java.util.List", (), True),
        ("imports", "com.x.util.Strings", ("com/x/util/Strings.java", "com/x/util.java", "com/x.java"), False),
        ("imports", "com.y.*", (), True),
    ]
    go = _edges("cmd/main.go", 'package main\n\nimport "fmt"\nimport (\n\tlog "log/slog"\n'
                               '\t"github.com/acme/tool/internal/db"\n)\n')
    assert go == [("external", "fmt", ()), ("external", "log/slog", ()),
                  ("imports", "github.com/acme/tool/internal/db", ())]


def test_plain_text_and_unknown_files_have_no_references() -> None:
    assert references_in_document("notes.txt", "see [x](y.md) and https://example.com") == []
    assert references_in_document("Makefile", "include other.mk") == []


# -- real trees ------------------------------------------------------------------


def _ingest(pool: ConnectionPool, root: Path, slug: str) -> None:
    # Relations need no vectors: ingest without embedding.
    summary = Ingestor(pool, {}, max_file_bytes=1_000_000).ingest(root, SourceSpec(slug=slug))
    assert not summary.failed, summary.failed


def _document(pool: ConnectionPool, slug: str, path: str) -> UUID:
    with pool.connection() as conn:
        row = conn.execute("select d.id from quarry.documents d join quarry.sources s on s.id = d.source_id "
                           "where s.slug = %s and d.path = %s", (slug, path)).fetchone()
    assert row is not None, path
    return UUID(str(row[0]))


def _reached(walk: NeighborWalk) -> dict[str, Any]:
    """Path (or target, when unresolved) -> the neighbour."""
    return {node.path if node.path is not None else node.target: node for node in walk.neighbors}


def _copy(pairs: list[tuple[Path, Path]]) -> None:
    for source, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


@pytest.fixture()
def quarry_tree(pool: ConnectionPool, tmp_path: Path) -> ConnectionPool:
    """Quarry's own README, docs and engine package, as one source."""
    root = tmp_path / "quarry"
    shutil.copytree(REPO / "engine", root / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copyfile(REPO / "README.md", root / "README.md")
    _ingest(pool, root, "quarry")
    return pool


def test_quarry_code_imports_and_readme_links(quarry_tree: ConnectionPool) -> None:
    pool = quarry_tree
    pipeline = _document(pool, "quarry", "engine/ingest/pipeline.py")
    walk = neighbors(pool, pipeline, relation="imports")
    reached = _reached(walk)
    # `from engine.errors import BusyError`: absolute, resolved from the source root
    errors = reached["engine/errors.py"]
    assert errors.document_id == _document(pool, "quarry", "engine/errors.py") and errors.level == 1
    assert errors.hops[0].source == pipeline and errors.hops[0].relation == "imports"
    assert errors.hops[0].target == "engine.errors" and errors.hops[0].target_document == errors.document_id
    assert {"engine/ingest/vector_indexes.py", "engine/ingest/walk.py", "engine/admin/jobs.py"} <= reached.keys()
    # a third-party package stays an unresolved edge; the standard library is external
    assert reached["psycopg"].document_id is None and reached["psycopg"].relation == "imports"
    assert all(node.document_id is not None for node in walk.neighbors if (node.target or "").startswith("engine."))
    external = _reached(neighbors(pool, pipeline, relation="external"))
    assert {"logging", "time", "collections.abc"} <= external.keys()
    assert all(node.document_id is None for node in external.values())
    # what imports engine/errors.py: incoming edges
    importers = _reached(neighbors(pool, errors.document_id, direction="in")) if errors.document_id else {}
    assert {"engine/ingest/pipeline.py", "engine/corpus/documents.py", "engine/corpus/links.py"} <= importers.keys()
    assert importers["engine/corpus/documents.py"].hops[0].target_document == errors.document_id
    # README -> docs/BENCHMARKS.md
    readme = _reached(neighbors(pool, _document(pool, "quarry", "README.md"), relation="links_to"))
    assert readme["docs/BENCHMARKS.md"].hops[0].target == "docs/BENCHMARKS.md"


def test_pathspec_relative_and_absolute_imports(pool: ConnectionPool, tmp_path: Path) -> None:
    package = Path(pathspec.__file__).parent
    root = tmp_path / "site"
    shutil.copytree(package, root / "pathspec", ignore=shutil.ignore_patterns("__pycache__"))
    _ingest(pool, root, "pathspec")
    init = _reached(neighbors(pool, _document(pool, "pathspec", "pathspec/__init__.py")))
    # from .pathspec import PathSpec / from .pattern import Pattern / from . import patterns
    assert init["pathspec/pathspec.py"].target == ".pathspec"
    assert init["pathspec/pattern.py"].target == ".pattern"
    assert init["pathspec/patterns/__init__.py"].target == ".patterns"
    # from pathspec import util: absolute, a module imported from a package
    module = _reached(neighbors(pool, _document(pool, "pathspec", "pathspec/pathspec.py")))
    assert module["pathspec/util.py"].target == "pathspec.util"


def test_the_standard_library_resolves_inside_its_own_source(pool: ConnectionPool, tmp_path: Path) -> None:
    package = Path(json_module.__file__).parent
    root = tmp_path / "Lib"
    shutil.copytree(package, root / "json", ignore=shutil.ignore_patterns("__pycache__"))
    _ingest(pool, root, "cpython")
    init = _reached(neighbors(pool, _document(pool, "cpython", "json/__init__.py")))
    assert init["json/decoder.py"].target == ".decoder" and init["json/encoder.py"].target == ".encoder"
    assert init["codecs"].document_id is None and init["codecs"].relation == "external"
    # `import json` is the standard library: external, and resolved here because this source holds it
    tool = _reached(neighbors(pool, _document(pool, "cpython", "json/tool.py"), relation="external"))
    assert tool["json/__init__.py"].target == "json" and tool["argparse"].document_id is None


def test_semver_requires_resolve_with_extensions(pool: ConnectionPool, semver_oracle: SemverOracle,
                                                 tmp_path: Path) -> None:
    root = tmp_path / "semver"
    shutil.copytree(SEMVER, root)
    _ingest(pool, root, "semver")
    range_js = _document(pool, "semver", "classes/range.js")
    reached = _reached(neighbors(pool, range_js))
    assert reached["classes/comparator.js"].target == "./comparator"
    assert reached["internal/re.js"].target == "../internal/re"
    # functions/satisfies.js requires '../classes/range', which requires './comparator'
    satisfies = _document(pool, "semver", "functions/satisfies.js")
    deep = _reached(neighbors(pool, satisfies, depth=2))
    assert deep["classes/range.js"].level == 1
    comparator = deep["classes/comparator.js"]
    assert comparator.level == 2 and [hop.target for hop in comparator.hops] == ["../classes/range", "./comparator"]
    assert comparator.hops[0].source == satisfies and comparator.hops[1].target_document == comparator.document_id


@pytest.mark.skipif(not (POSTGRES_MANUAL / "indexes-partial.html").is_file(),
                    reason="the PostgreSQL manual (Debian package postgresql-doc-15) is not installed")
def test_postgres_manual_links(pool: ConnectionPool, tmp_path: Path) -> None:
    root = tmp_path / "pg"
    _copy([(POSTGRES_MANUAL / page, root / page) for page in INDEX_PAGES])
    _ingest(pool, root, "postgres")
    partial = _document(pool, "postgres", "indexes-partial.html")
    walk = neighbors(pool, partial, relation="links_to")
    reached = _reached(walk)
    # the page's navigation (Prev / Up) and its body link to the multicolumn page, all resolved
    assert reached["indexes-expressional.html"].hops[0].target == "indexes-expressional.html"
    assert reached["indexes.html"].document_id == _document(pool, "postgres", "indexes.html")
    assert reached["indexes-multicolumn.html"].hops[0].line > 2
    # pages outside the copied chapter are unresolved edges, not errors
    assert reached["ddl-partitioning.html"].document_id is None
    assert not walk.truncated and walk.reason is None and walk.frontier == []
    # every page of the chapter links to its chapter page
    incoming = _reached(neighbors(pool, _document(pool, "postgres", "indexes.html"), direction="in"))
    assert set(INDEX_PAGES) - {"indexes.html"} <= incoming.keys()


@pytest.mark.skipif(not (POSTGRES_MANUAL / "indexes-partial.html").is_file(),
                    reason="the PostgreSQL manual (Debian package postgresql-doc-15) is not installed")
def test_the_budget_cuts_the_walk_and_names_the_frontier(pool: ConnectionPool, tmp_path: Path) -> None:
    root = tmp_path / "pg"
    _copy([(POSTGRES_MANUAL / page, root / page) for page in INDEX_PAGES])
    _ingest(pool, root, "postgres")
    chapter = _document(pool, "postgres", "indexes.html")
    whole = neighbors(pool, chapter, relation="links_to", depth=2, budget=1000)
    assert not whole.truncated
    cut = neighbors(pool, chapter, relation="links_to", depth=2, budget=5)
    assert cut.truncated and len(cut.neighbors) == 5
    assert cut.reason is not None and "budget of 5 results reached at depth 1" in cut.reason
    # resolved documents come before unresolved targets, in path order
    resolved = [node.path for node in whole.neighbors if node.level == 1 and node.document_id is not None]
    assert [node.path for node in cut.neighbors] == resolved[:5]
    # depth 1 was cut: the start has neighbours left, and what it returned was not walked on from
    assert cut.frontier == [chapter, *(node.document_id for node in cut.neighbors)]
    # cut at depth 2: the documents of depth 1 whose neighbours were dropped are the frontier
    first_level = sum(1 for node in whole.neighbors if node.level == 1)
    deeper = neighbors(pool, chapter, relation="links_to", depth=2, budget=first_level + 1)
    assert deeper.truncated and "at depth 2" in (deeper.reason or "")
    assert deeper.frontier and set(deeper.frontier) <= {node.document_id for node in deeper.neighbors
                                                        if node.level == 1}


@pytest.mark.skipif(not (PYTHON_SOURCES / "tutorial" / "index.rst.txt").is_file(),
                    reason="the Python documentation sources (Debian package python3.11-doc) are not installed")
def test_python_tutorial_toctree(pool: ConnectionPool, tmp_path: Path) -> None:
    root = tmp_path / "python"
    _copy([(page, root / "tutorial" / page.name.removesuffix(".txt"))
           for page in sorted((PYTHON_SOURCES / "tutorial").glob("*.rst.txt"))])
    _ingest(pool, root, "python-docs")
    reached = _reached(neighbors(pool, _document(pool, "python-docs", "tutorial/index.rst")))
    assert {"tutorial/appetite.rst", "tutorial/controlflow.rst", "tutorial/classes.rst"} <= reached.keys()
    assert reached["tutorial/appetite.rst"].target == "appetite.rst"


# -- resolution at query time --------------------------------------------------------


def test_targets_resolve_when_they_arrive_and_follow_renames(pool: ConnectionPool, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "index.md").write_text("# Home\n\nRead [the guide](guide/setup.md#install).\n")
    _ingest(pool, root, "later")
    home = _document(pool, "later", "index.md")
    assert _reached(neighbors(pool, home))["guide/setup.md#install"].document_id is None
    (root / "guide").mkdir()
    (root / "guide" / "setup.md").write_text("# Setup\n\nBack [home](../index.md).\n")
    _ingest(pool, root, "later")  # index.md is unchanged and not re-read: its edge resolves anyway
    setup = _document(pool, "later", "guide/setup.md")
    assert _reached(neighbors(pool, home))["guide/setup.md"].document_id == setup
    both = _reached(neighbors(pool, setup, direction="both"))
    assert both["index.md"].document_id == home
    (root / "guide" / "setup.md").rename(root / "guide" / "install.md")
    _ingest(pool, root, "later")
    assert _reached(neighbors(pool, home))["guide/setup.md#install"].document_id is None


def test_a_chunk_means_its_document_and_unknown_ids_are_not_found(quarry_tree: ConnectionPool) -> None:
    pool = quarry_tree
    errors = _document(pool, "quarry", "engine/errors.py")
    with pool.connection() as conn:
        row = conn.execute("select c.id from quarry.chunks c join quarry.documents d on d.id = c.document_id "
                           "where d.path = 'engine/ingest/pipeline.py' order by c.ordinal desc limit 1").fetchone()
    assert row is not None
    walk = neighbors(pool, row[0])
    assert walk.start.path == "engine/ingest/pipeline.py" and walk.start.level == 0
    assert errors in {node.document_id for node in walk.neighbors}
    with pytest.raises(NotFoundError):
        neighbors(pool, UUID(int=7))


# -- through the MCP client ------------------------------------------------------------


@pytest.fixture()
def mcp(quarry_tree: ConnectionPool, database_url: str) -> Iterator[McpSession]:
    backend = StaticBackend(Settings(database_url=database_url), quarry_tree)  # neighbors embeds nothing
    with serving(build_http_app(backend, AccessPolicy.for_bind("127.0.0.1", no_auth=True))) as url, \
            mcp_session(http_transport(url + "/mcp")) as session:
        yield session


def test_neighbors_through_the_mcp_client(mcp: McpSession, quarry_tree: ConnectionPool) -> None:
    assert "neighbors" in {tool.name for tool in mcp.list_tools()}
    pipeline = _document(quarry_tree, "quarry", "engine/ingest/pipeline.py")
    body = mcp.ok("neighbors", {"id": str(pipeline), "relation": "imports", "budget": 50})
    assert body["start"]["path"] == "engine/ingest/pipeline.py" and body["truncated"] is False
    errors = next(result for result in body["results"] if result["path"] == "engine/errors.py")
    assert errors["resolved"] is True and errors["depth"] == 1
    assert errors["hops"] == [{"from": str(pipeline), "relation": "imports", "to": errors["document_id"],
                               "target": "engine.errors", "line": errors["hops"][0]["line"]}]
    third_party = next(result for result in body["results"] if result["target"] == "psycopg")
    assert third_party["document_id"] is None and third_party["resolved"] is False

    cut = mcp.ok("neighbors", {"id": str(pipeline), "depth": 2, "budget": 3})
    assert cut["truncated"] is True and cut["result_count"] == 3
    assert cut["frontier"] == [str(pipeline), *(result["document_id"] for result in cut["results"])]
    assert cut["reason"].startswith("budget of 3 results reached at depth 1")

    bad = mcp.call("neighbors", {"id": str(pipeline), "depth": 4, "direction": "sideways", "extra": 1})
    assert bad.is_error and bad.error["code"] == "INVALID"
    assert {problem["path"] for problem in bad.error["problems"]} == {"depth", "direction", "extra"}
    missing = mcp.call("neighbors", {"id": str(UUID(int=7))})
    assert missing.is_error and missing.error["code"] == "NOT_FOUND"
