"""Imports in code: the modules and files a source file imports, per language.

``code_imports`` reads a Python, JavaScript/TypeScript, C/C++, Rust, Java or Go file's
imports into ``Reference`` objects whose candidates are the files of the source a module
name may be (tree-sitter for Python and JavaScript, regular expressions for the rest);
``engine.ingest.relations`` gives each language's resolution rules. Separate from
``engine.ingest.links_in_documents``: module names resolve by each language's rules, not
as page paths.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Iterator
from pathlib import PurePosixPath

from tree_sitter import Node, Query, QueryCursor

from engine.ingest.parsers.languages import LanguageSpec, node_text, parser_for
from engine.ingest.references import Lines, Reference, inside, reference

__all__ = ["code_imports"]


def code_imports(path: str, text: str, lines: Lines, spec: LanguageSpec) -> Iterator[Reference]:
    """The imports ``path`` states, read by its language's rules; none for a language without them."""
    if spec.name == "python":
        yield from _python(path, _tree(spec, text), spec)
    elif spec.name in ("javascript", "typescript", "tsx"):
        yield from _javascript(path, _tree(spec, text), spec)
    elif spec.name in ("c", "cpp"):
        yield from _c_includes(path, text, lines)
    elif spec.name == "rust":
        yield from _rust(path, text, lines)
    elif spec.name == "java":
        yield from _java(text, lines)
    elif spec.name == "go":
        yield from _go(text, lines)


def _tree(spec: LanguageSpec, text: str) -> Node:
    return parser_for(spec).parse(text.encode("utf-8")).root_node


_queries: dict[tuple[str, str], Query] = {}


def _matches(spec: LanguageSpec, root: Node, pattern: str) -> list[dict[str, list[Node]]]:
    query = _queries.get((spec.name, pattern))
    if query is None:
        language = parser_for(spec).language
        assert language is not None  # parser_for sets it
        query = _queries[(spec.name, pattern)] = Query(language, pattern)
    return [captures for _, captures in QueryCursor(query).matches(root)]


_PYTHON_IMPORTS = "[(import_statement) (import_from_statement) (future_import_statement)] @import"
_STDLIB = frozenset(sys.stdlib_module_names)


def _python(path: str, root: Node, spec: LanguageSpec) -> Iterator[Reference]:
    for captures in _matches(spec, root, _PYTHON_IMPORTS):
        statement = captures["import"][0]
        line = statement.start_point[0] + 1
        names = [name if name.type == "dotted_name" else name.child_by_field_name("name")
                 for name in statement.children_by_field_name("name")]
        written = [node_text(name) for name in names if name is not None]
        if statement.type == "future_import_statement":
            yield reference("external", "__future__", line)
        elif statement.type == "import_statement":
            for module in written:
                yield _python_module(path, module, [], line)
        else:
            module_name = statement.child_by_field_name("module_name")
            if module_name is not None:
                yield from _python_from(path, "".join(node_text(module_name).split()), written, line)


def _python_from(path: str, module: str, names: list[str], line: int) -> Iterator[Reference]:
    if module.split(".", 1)[0] in _STDLIB:
        yield _python_module(path, module, [], line)  # what the standard library holds is not asked
        return
    # Names with capitals are classes or constants, never modules: one reference for all of them.
    submodules = [name for name in names if name == name.lower()]
    if len(submodules) < len(names) or not names:
        yield _python_module(path, module, [], line)
    for name in submodules:
        yield _python_module(path, module, [name], line)


def _python_module(path: str, module: str, names: list[str], line: int) -> Reference:
    """``module`` (``a.b``, ``..x``) imported by ``path``, optionally ``names`` from it."""
    dots = len(module) - len(module.lstrip("."))
    parts = [part for part in module[dots:].split(".") if part]
    written = module if not names else module + ("" if module.endswith(".") else ".") + names[0]
    if dots == 0:
        if parts and parts[0] in _STDLIB:
            # external, unless the source is the standard library itself (CPython's Lib/)
            return reference("external", module, line, _python_files(parts, []), anchored=False)
        return reference("imports", written, line, _python_files(parts, names), anchored=False)
    package = posixpath.dirname(path)
    for _ in range(dots - 1):
        if not package:
            return reference("imports", written, line)  # climbs above the source: cannot resolve
        package = posixpath.dirname(package)
    base = [package] if package else []
    return reference("imports", written, line, _python_files([*base, *parts], names))


def _python_files(parts: list[str], names: list[str]) -> list[str]:
    module = "/".join(parts)
    found = [f"{module}/{name}.py" if module else f"{name}.py" for name in names]
    found += [f"{module}/{name}/__init__.py" if module else f"{name}/__init__.py" for name in names]
    if module:
        found += [f"{module}.py", f"{module}/__init__.py"]
    return found


_JS_IMPORTS = """
(import_statement source: (string) @source)
(export_statement source: (string) @source)
(call_expression function: [(identifier) (import)] @callee arguments: (arguments . (string) @source))
"""
_TS_IMPORTS = _JS_IMPORTS + "(import_require_clause source: (string) @source)\n"
_SCRIPT_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".d.ts")
_INDEX_FILES = tuple(f"index{ext}" for ext in (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs"))


def _javascript(path: str, root: Node, spec: LanguageSpec) -> Iterator[Reference]:
    pattern = _JS_IMPORTS if spec.name == "javascript" else _TS_IMPORTS
    for captures in _matches(spec, root, pattern):
        callee = captures.get("callee")
        if callee is not None and node_text(callee[0]) not in ("require", "import"):
            continue
        source = captures["source"][0]
        specifier = node_text(source)[1:-1]
        line = source.start_point[0] + 1
        if not specifier:
            continue
        if not specifier.startswith((".", "/")) or specifier.startswith("//"):
            yield reference("external", specifier, line)  # a package, node: builtin or path alias
            continue
        resolved = inside(posixpath.dirname(path), specifier) if specifier.startswith(".") else None
        if resolved is None:
            yield reference("external", specifier, line)
            continue
        yield reference("imports", specifier, line, _script_files(resolved))


def _script_files(resolved: str) -> list[str]:
    found = [resolved] if resolved else []
    extension = PurePosixPath(resolved).suffix.lower()
    if extension in (".js", ".jsx", ".mjs", ".cjs"):
        stem = resolved[: -len(extension)]
        found += [stem + {".js": ".ts", ".jsx": ".tsx", ".mjs": ".mts", ".cjs": ".cts"}[extension], stem + ".tsx"]
    found += [resolved + ext for ext in _SCRIPT_EXTENSIONS]
    prefix = f"{resolved}/" if resolved else ""
    found += [prefix + index for index in _INDEX_FILES]
    return found


_C_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)


def _c_includes(path: str, text: str, lines: Lines) -> Iterator[Reference]:
    for match in _C_INCLUDE.finditer(text):
        quoted, angled = match.groups()
        header = quoted or angled
        line = lines.at(match.start())
        search = [header, f"include/{header}", f"src/{header}"]
        if quoted is not None:
            beside = inside(posixpath.dirname(path), header)
            search = [beside, *search] if beside is not None else search
        yield reference("imports", f'"{header}"' if quoted else f"<{header}>", line,
                        [file for file in map(posixpath.normpath, search) if not file.startswith(("/", "../"))])


_RUST_MOD = re.compile(r"^[ \t]*(?:pub(?:\([^)\n]*\))?[ \t]+)?mod[ \t]+(\w+)[ \t]*;", re.MULTILINE)
_RUST_USE = re.compile(r"^[ \t]*(?:pub(?:\([^)\n]*\))?[ \t]+)?use[ \t]+([^;]+);", re.MULTILINE)


def _rust(path: str, text: str, lines: Lines) -> Iterator[Reference]:
    module_dir = _rust_module_dir(path)
    for match in _RUST_MOD.finditer(text):
        name = match.group(1)
        prefix = f"{module_dir}/" if module_dir else ""
        yield reference("imports", f"mod {name}", lines.at(match.start()), [f"{prefix}{name}.rs",
                                                                             f"{prefix}{name}/mod.rs"])
    for match in _RUST_USE.finditer(text):
        line = lines.at(match.start())
        tree = "".join(re.sub(r"\s+as\s+\w+", "", match.group(1)).split())
        for use_path in _rust_use_paths(tree):
            segments = use_path.split("::")
            base: str | None
            if segments[0] == "crate":
                base = _rust_crate_root(path)
            elif segments[0] == "self":
                base = module_dir
            elif segments[0] == "super":
                base = posixpath.dirname(module_dir)
                while len(segments) > 1 and segments[1] == "super":
                    base, segments = posixpath.dirname(base), segments[1:]
            else:
                yield reference("external", use_path, line)
                continue
            yield reference("imports", use_path, line, _rust_files(base, segments[1:]))


def _rust_use_paths(tree: str) -> list[str]:
    """``a::{b, c::{d, self}}`` -> ``a::b``, ``a::c::d``, ``a::c``; aliases and globs dropped."""
    if "{" not in tree:
        return [tree.removesuffix("::*").removesuffix("::self")]
    head, _, rest = tree.partition("{")
    inner = rest[: rest.rfind("}")]
    items: list[str] = []
    depth = 0
    current = ""
    for character in inner:
        if character == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(character, 0)
        current += character
    items.append(current)
    head = head.removesuffix("::")
    paths: list[str] = []
    for item in items:
        if not item or item == "*":
            continue
        paths += [f"{head}::{sub}" if sub else head for sub in _rust_use_paths(item)] if item != "self" else [head]
    return [path.removesuffix("::self") for path in paths]


def _rust_module_dir(path: str) -> str:
    """Where the child modules of the file's module live."""
    stem = PurePosixPath(path).stem
    directory = posixpath.dirname(path)
    if stem in ("mod", "lib", "main"):
        return directory
    return posixpath.join(directory, stem) if directory else stem


def _rust_crate_root(path: str) -> str:
    parts = posixpath.dirname(path).split("/")
    if "src" in parts:
        return "/".join(parts[: len(parts) - parts[::-1].index("src")])
    return posixpath.dirname(path)


def _rust_files(base: str, segments: list[str]) -> list[str]:
    prefix = f"{base}/" if base else ""
    found: list[str] = []
    for length in range(len(segments), 0, -1):
        module = "/".join(segments[:length])
        found += [f"{prefix}{module}.rs", f"{prefix}{module}/mod.rs"]
    return found


_JAVA_IMPORT = re.compile(r"^[ \t]*import[ \t]+(static[ \t]+)?([\w.]+?)(\.\*)?[ \t]*;", re.MULTILINE)
_JAVA_PLATFORM = ("java.", "javax.", "jdk.", "sun.", "com.sun.")


def _java(text: str, lines: Lines) -> Iterator[Reference]:
    for match in _JAVA_IMPORT.finditer(text):
        is_static, name, wildcard = match.groups()
        line = lines.at(match.start())
        if name.startswith(_JAVA_PLATFORM):
            yield reference("external", name, line)
            continue
        parts = name.split(".")
        if is_static and not wildcard:
            parts = parts[:-1]  # a member of the class
        if wildcard and not is_static:
            yield reference("imports", name + ".*", line)  # a package: a directory, not a file
            continue
        candidates = ["/".join(parts[:length]) + ".java" for length in range(len(parts), 1, -1)]
        yield reference("imports", name, line, candidates, anchored=False)


_GO_IMPORT = re.compile(r'^import[ \t]+(?:[\w.]+[ \t]+)?"([^"\n]+)"', re.MULTILINE)
_GO_IMPORT_BLOCK = re.compile(r"^import[ \t]*\(([^)]*)\)", re.MULTILINE)
_GO_SPEC = re.compile(r'^[ \t]*(?:[\w.]+[ \t]+)?"([^"\n]+)"', re.MULTILINE)


def _go(text: str, lines: Lines) -> Iterator[Reference]:
    found = [(match.group(1), match.start()) for match in _GO_IMPORT.finditer(text)]
    for block in _GO_IMPORT_BLOCK.finditer(text):
        found += [(spec.group(1), block.start(1) + spec.start()) for spec in _GO_SPEC.finditer(block.group(1))]
    for package, offset in found:
        standard = "." not in package.split("/", 1)[0]
        yield reference("external" if standard else "imports", package, lines.at(offset))
