"""Source code: symbol paths per language, attached comments, module chunks, bounds, spans."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ingest.model import Chunk, ParsedDocument
from engine.ingest.parsers import parse_document
from engine.ingest.parsers.code import CODE_EXTENSIONS, module_path
from tests.parser_checks import assert_exact_chunks


def _parse(path: str, source: str) -> ParsedDocument:
    raw = source.encode()
    document = parse_document(path, raw)
    assert document.content_type == "code"
    assert all(chunk.is_code for chunk in document.chunks)
    assert_exact_chunks(raw, document)
    return document


def _paths(document: ParsedDocument) -> list[str | None]:
    return [chunk.symbol_path for chunk in document.chunks]


def _chunk_of(document: ParsedDocument, symbol_path: str) -> Chunk:
    return next(chunk for chunk in document.chunks if chunk.symbol_path == symbol_path)


PYTHON = '''\
"""Hybrid search."""
import os

LIMIT = 10


# Runs both retrievers.
@dataclass(frozen=True)
class HybridSearch(Base):
    """Fuses results."""

    weight: float = 0.5

    def run(self, query: str) -> list[str]:
        def helper() -> None:
            pass
        return [query]

    @staticmethod
    async def _fuse() -> None:
        pass


def top_level() -> int:
    return 1
'''


def test_python_symbol_paths_decorators_and_module_chunks() -> None:
    document = _parse("engine/search.py", PYTHON)
    assert document.language == "python"
    assert document.title == "search.py"
    assert _paths(document) == [
        "engine.search",
        "engine.search.HybridSearch",
        "engine.search.HybridSearch.run",
        "engine.search.HybridSearch._fuse",
        "engine.search.top_level",
    ]
    assert "LIMIT = 10" in _chunk_of(document, "engine.search").content
    header = _chunk_of(document, "engine.search.HybridSearch")
    assert header.content.startswith("# Runs both retrievers.\n@dataclass(frozen=True)\nclass HybridSearch")
    assert "weight: float" in header.content and "def run" not in header.content
    run = _chunk_of(document, "engine.search.HybridSearch.run")
    assert run.content.startswith("    def run(") and "def helper" in run.content
    assert _chunk_of(document, "engine.search.HybridSearch._fuse").content.startswith("    @staticmethod")


def test_python_package_init_and_stub_paths() -> None:
    assert _paths(_parse("engine/ingest/__init__.py", "def f():\n    pass\n")) == ["engine.ingest.f"]
    assert _paths(_parse("typings/x.pyi", "def f() -> int: ...\n")) == ["typings.x.f"]


def test_javascript_symbol_paths() -> None:
    source = """\
import fs from 'fs';
// Renders the page.
export class Page extends Base {
  count = 0;
  render(props) { return props; }
  onClick = () => { this.count++; };
}
export const helper = (x) => x * 2;
function legacy() { return 1; }
export default function () { return 2; }
"""
    document = _parse("web/page.jsx", source)
    assert document.language == "javascript"
    assert _paths(document) == [
        "web.page",
        "web.page.Page",
        "web.page.Page.render",
        "web.page.Page.onClick",
        "web.page.helper",
        "web.page.legacy",
        "web.page.default",
    ]
    assert _chunk_of(document, "web.page.Page").content.startswith("// Renders the page.\nexport class Page")


def test_typescript_symbol_paths() -> None:
    source = """\
/** A store. */
@Injectable()
export abstract class Store<T> {
  private items: T[] = [];
  @Log() add(item: T): void { this.items.push(item); }
  abstract size(): number;
}
export interface Options { limit: number }
type Id = string;
enum Color { Red, Green }
namespace Util {
  export function clamp(x: number): number { return x; }
}
"""
    document = _parse("src/store.ts", source)
    assert document.language == "typescript"
    assert _paths(document) == [
        "src.store.Store",
        "src.store.Store.add",
        "src.store.Store",
        "src.store.Options",
        "src.store.Id",
        "src.store.Color",
        "src.store.Util",
        "src.store.Util.clamp",
    ]
    assert _chunk_of(document, "src.store.Store").content.startswith("/** A store. */\n@Injectable()")
    assert _parse("src/types/index.d.ts", "declare function f(): void;\n").chunks[0].symbol_path == ("src.types.index")


def test_tsx_symbol_paths() -> None:
    source = "export function App(): JSX.Element {\n  return <div className='app'>hi</div>;\n}\n"
    document = _parse("ui/App.tsx", source)
    assert document.language == "tsx"
    assert _paths(document) == ["ui.App.App"]


def test_rust_symbol_paths() -> None:
    source = """\
use std::fmt;

/// A point.
#[derive(Debug)]
pub struct Point { x: i32 }

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result { write!(f, "p") }
}

impl<T> Wrapper<T> {
    pub fn new() -> Self { todo!() }
}

pub trait Shape {
    fn area(&self) -> f64;
    fn describe(&self) -> String { String::new() }
}

mod inner {
    pub fn helper() {}
}
"""
    document = _parse("src/geometry/mod.rs", source)
    assert document.language == "rust"
    assert _paths(document) == [
        "src.geometry",
        "src.geometry.Point",
        "src.geometry.Point",
        "src.geometry.Point.fmt",
        "src.geometry.Wrapper",
        "src.geometry.Wrapper.new",
        "src.geometry.Shape",
        "src.geometry.Shape.describe",
        "src.geometry.inner",
        "src.geometry.inner.helper",
    ]
    assert _chunk_of(document, "src.geometry.Point").content.startswith("/// A point.\n#[derive(Debug)]")
    assert "fn area" in document.chunks[6].content


def test_go_symbol_paths() -> None:
    source = """\
package server

import "net/http"

// Server serves.
type Server struct {
\taddr string
}

// Handle handles.
func (s *Server) Handle(w http.ResponseWriter) {}

func (b Box[T]) Get() T { return b.v }

func New() *Server { return &Server{} }
"""
    document = _parse("internal/server/server.go", source)
    assert document.language == "go"
    assert _paths(document) == [
        "internal.server.server",
        "internal.server.server.Server",
        "internal.server.server.Server.Handle",
        "internal.server.server.Box.Get",
        "internal.server.server.New",
    ]
    assert _chunk_of(document, "internal.server.server.Server.Handle").content.startswith("// Handle handles.")


def test_java_symbol_paths_use_the_package_and_skip_the_repeated_class() -> None:
    source = """\
package com.example.search;

import java.util.List;

/** Runs searches. */
@Service
public class HybridSearch {
    private final int limit = 10;

    public HybridSearch() {}

    /** Runs one query. */
    public List<String> run(String query) { return List.of(query); }

    static class Cache {
        void clear() {}
    }
}

enum Mode { FAST, SLOW; int cost() { return 1; } }
"""
    document = _parse("src/main/java/com/example/search/HybridSearch.java", source)
    assert document.language == "java"
    assert _paths(document) == [
        "com.example.search.HybridSearch",
        "com.example.search.HybridSearch",
        "com.example.search.HybridSearch.HybridSearch",
        "com.example.search.HybridSearch.run",
        "com.example.search.HybridSearch.Cache",
        "com.example.search.HybridSearch.Cache.clear",
        "com.example.search.HybridSearch.Mode",
        "com.example.search.HybridSearch.Mode.cost",
    ]
    assert _chunk_of(document, "com.example.search.HybridSearch.run").content.startswith("    /** Runs one query. */")
    # Without a package declaration the directories are the module path.
    assert _paths(_parse("util/Tool.java", "class Tool { void go() {} }\n")) == ["util.Tool", "util.Tool.go"]


def test_c_symbol_paths() -> None:
    source = """\
#ifndef UTIL_H
#define UTIL_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Counts things. */
static size_t count(const char *s) { return 0; }

char *(*resolver(int kind))(void) { return 0; }

struct point { int x; int y; };

typedef struct { int w; } size_box;

enum color { RED, GREEN };
#ifdef __cplusplus
}
#endif
#endif
"""
    document = _parse("lib/util.h", source)
    assert document.language == "c"
    assert _paths(document) == [
        "lib.util",
        "lib.util.count",
        "lib.util.resolver",
        "lib.util.point",
        "lib.util.size_box",
        "lib.util.color",
        "lib.util",  # the closing #ifdef __cplusplus } #endif
    ]
    assert _chunk_of(document, "lib.util.count").content.startswith("/* Counts things. */")


def test_cpp_symbol_paths() -> None:
    source = """\
#include <vector>

namespace quarry {

class Index {
 public:
  Index() {}
  ~Index() {}
  int size() const { return 0; }
  void add(int v);
 private:
  std::vector<int> items_;
};

}  // namespace quarry

void quarry::Index::add(int v) { items_.push_back(v); }

template <typename T>
T largest(T a, T b) { return a > b ? a : b; }

extern "C" {
int c_entry(void) { return 0; }
}
"""
    document = _parse("src/index.cpp", source)
    assert document.language == "cpp"
    assert _paths(document) == [
        "src.index",
        "src.index.quarry",
        "src.index.quarry.Index",
        "src.index.quarry.Index.Index",
        "src.index.quarry.Index.~Index",
        "src.index.quarry.Index.size",
        "src.index.quarry.Index",
        "src.index.quarry.Index.add",
        "src.index.largest",
        "src.index",
        "src.index.c_entry",
    ]
    assert _chunk_of(document, "src.index.largest").content.startswith("template <typename T>")


def test_large_symbol_is_split_with_one_symbol_path() -> None:
    body = "\n".join(f"    total += compute_value({index}, weight={index * 2})" for index in range(200))
    source = f"def big(total):\n{body}\n    return total\n\n\ndef small():\n    return 1\n"
    document = _parse("pkg/big.py", source)
    big = [chunk for chunk in document.chunks if chunk.symbol_path == "pkg.big.big"]
    assert len(big) > 3
    assert big[0].content.startswith("def big(total):")
    assert big[-1].content.endswith("return total")
    assert _paths(document)[-1] == "pkg.big.small"


def test_syntax_errors_keep_the_symbols_found() -> None:
    source = "def good():\n    return 1\n\ndef broken(:\n    pass\n\nclass Fine:\n    def ok(self):\n        pass\n"
    paths = _paths(_parse("pkg/bad.py", source))
    assert "pkg.bad.good" in paths and "pkg.bad.Fine.ok" in paths


def test_multibyte_source_offsets() -> None:
    source = '# Ünïcödé header — 中文\n\ndef grüße(name: str) -> str:\n    return f"Grüß dich, {name} 🎉"\n'
    document = _parse("pkg/greet.py", source)
    assert _paths(document) == ["pkg.greet", "pkg.greet.grüße"]


def test_module_path_rules() -> None:
    assert module_path("engine/search.py") == "engine.search"
    assert module_path("./engine/__init__.py") == "engine"
    assert module_path("__init__.py") == "__init__"
    assert module_path("src/lib/mod.rs") == "src.lib"
    assert module_path("web/index.d.ts") == "web.index"
    assert module_path("a\\b\\c.go") == "a.b.c"


_CODE_FRAGMENTS = st.sampled_from(
    [
        "",
        "def f(x):",
        "    return x",
        "class C:",
        "    @property",
        "    def m(self): pass",
        "# comment",
        "fn main() { }",
        "impl A { fn b() {} }",
        "function g() { return 1 }",
        "}",
        "{",
        "int x(void) { return 0; }",
        "func (s *S) M() {}",
        "public class X { void y() {} }",
        "    value = 'Ünïcödé — 中文 🎉'",
        "x = " + "1 + " * 400 + "1",
        "z" * 3000,
    ]
)


@pytest.mark.parametrize("extension", [".py", ".js", ".ts", ".tsx", ".rs", ".go", ".java", ".c", ".cpp"])
@given(lines=st.lists(_CODE_FRAGMENTS, max_size=40))
@settings(max_examples=25, deadline=None)
def test_code_chunk_invariants_on_arbitrary_input(extension: str, lines: list[str]) -> None:
    raw = "\n".join(lines).encode()
    assert_exact_chunks(raw, parse_document(f"pkg/mod{extension}", raw))


def test_every_code_extension_has_a_grammar() -> None:
    for extension in CODE_EXTENSIONS:
        document = parse_document(f"x/y{extension}", b"int x = 1;\n")
        assert document.language
