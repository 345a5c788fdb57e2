"""Which tree-sitter grammar reads each programming language, and which nodes are symbols.

A ``LanguageSpec`` names the node types that define symbols: *functions* (own chunk;
anything nested stays inside), *containers* (classes, impls, namespaces: their
header and fields form one chunk, their member definitions chunk separately) and
*types* (structs, enums, interfaces: kept whole). *Wrappers* (decorators, ``export``,
``template<>``) lend their span to the definition inside them; *transparent* nodes
(``#ifdef``, ``extern "C"``, parse errors) hold definitions that belong to the
enclosing scope; *attached* nodes (comments, attributes) directly above a definition
belong to its chunk.

Grammars load once per process and parsers once per thread (a tree-sitter parser
must not be shared between threads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

import tree_sitter_c
import tree_sitter_cpp
import tree_sitter_go
import tree_sitter_java
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_rust
import tree_sitter_typescript
from tree_sitter import Language, Node, Parser

__all__ = [
    "LANGUAGE_BY_EXTENSION",
    "Definition",
    "LanguageSpec",
    "SymbolKind",
    "node_text",
    "parser_for",
]


class SymbolKind(Enum):
    FUNCTION = "function"
    CONTAINER = "container"
    TYPE = "type"


@dataclass(frozen=True, slots=True)
class Definition:
    """A symbol defined by a node: what kind, its name, and (containers) its members."""

    kind: SymbolKind
    name: str  # "" for an anonymous container (C++ ``namespace {}``): adds no path segment
    members: Sequence[Node] = ()


@dataclass(frozen=True, slots=True)
class LanguageSpec:
    """The node types of one grammar that define symbols; see the module docstring."""

    name: str  # ParsedDocument.language
    grammar: Callable[[], object]
    functions: frozenset[str] = frozenset()
    containers: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    wrappers: frozenset[str] = frozenset()
    transparent: frozenset[str] = frozenset({"ERROR"})
    attached: frozenset[str] = frozenset({"comment"})
    # Declarations that define a symbol when their value is a function or a class
    # (JavaScript ``const f = () => {}``, class fields holding arrow functions).
    assignments: frozenset[str] = frozenset()

    def members(self, nodes: Sequence[Node]) -> Iterator[Node]:
        """``nodes`` in order, with transparent nodes replaced by their own members."""
        for node in nodes:
            if node.type in self.transparent:
                yield from self.members(node.named_children)
            else:
                yield node

    def definition(self, node: Node) -> Definition | None:
        """The symbol ``node`` defines, or None if it defines none."""
        inner = node
        while inner.type in self.wrappers:
            unwrapped = _wrapped(inner)
            if unwrapped is None:
                return None
            inner = unwrapped
        kind = inner.type
        if kind in self.functions:
            if inner.child_by_field_name("body") is None:  # a prototype or abstract method
                return None
            name = _definition_name(inner) or _default_export_name(node)
            return Definition(SymbolKind.FUNCTION, name) if name else None
        if kind in self.containers:
            body = inner.child_by_field_name("body")
            if body is None:  # a forward declaration: ``class Foo;``, ``mod foo;``
                return None
            name = _definition_name(inner) or _default_export_name(node) or ""
            return Definition(SymbolKind.CONTAINER, name, body.named_children)
        if kind in self.types:
            name = _definition_name(inner)
            return Definition(SymbolKind.TYPE, name) if name else None
        if kind in self.assignments:
            return _assigned_definition(inner)
        return None


_TYPE_NAME_NODES = frozenset({"type_identifier", "scoped_type_identifier", "primitive_type"})
_DECLARATOR_NAME_NODES = frozenset(
    {
        "identifier",
        "field_identifier",
        "qualified_identifier",
        "destructor_name",
        "operator_name",
        "type_identifier",
        "template_function",
        "primitive_type",
    }
)
_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_CLASS_VALUES = frozenset({"class", "class_expression"})


def node_text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", errors="replace")


def _clean_name(text: str) -> str:
    return "".join(text.split()).replace("::", ".").strip("'\"`")


def _first_of(node: Node, types: frozenset[str]) -> Node | None:
    """``node`` or its first descendant (pre-order) whose type is in ``types``."""
    if node.type in types:
        return node
    for child in node.named_children:
        found = _first_of(child, types)
        if found is not None:
            return found
    return None


def _wrapped(node: Node) -> Node | None:
    if node.type == "decorated_definition":
        return node.child_by_field_name("definition")
    declaration = node.child_by_field_name("declaration")  # export_statement
    if declaration is not None:
        return declaration
    # export default <value>, template<...> <definition>, declare <definition>,
    # and the expression statement TypeScript wraps ``namespace X {}`` in.
    named = [child for child in node.named_children if child.type not in ("comment", "decorator")]
    return named[-1] if named else None


def _definition_name(node: Node) -> str:
    name_node = node.child_by_field_name("name")
    if name_node is not None:
        name = _clean_name(node_text(name_node))
        receiver = node.child_by_field_name("receiver")  # Go: func (s *Server) Handle()
        if receiver is not None:
            receiver_type = _first_of(receiver, _TYPE_NAME_NODES)
            if receiver_type is not None:
                return f"{_clean_name(node_text(receiver_type))}.{name}"
        return name
    if node.type == "impl_item":  # Rust: impl [Trait for] Type
        impl_type = node.child_by_field_name("type")
        found = _first_of(impl_type, _TYPE_NAME_NODES) if impl_type is not None else None
        return _clean_name(node_text(found))
    if node.type == "type_declaration":  # Go: type X struct {...}; a group has no one name
        specs = [child for child in node.named_children if child.type == "type_spec"]
        return _definition_name(specs[0]) if len(specs) == 1 else ""
    return _declarator_name(node)


def _declarator_name(node: Node) -> str:
    """C/C++: the name at the bottom of a declarator chain (``char *(*f)(int)`` -> f)."""
    current = node.child_by_field_name("declarator")
    while current is not None:
        if current.type in _DECLARATOR_NAME_NODES:
            return _clean_name(node_text(current))
        inner = current.child_by_field_name("declarator")
        if inner is None and current.named_child_count:
            inner = current.named_children[0]  # parenthesized_declarator has no field
        current = inner
    return ""


def _default_export_name(node: Node) -> str:
    if node.type == "export_statement" and any(child.type == "default" for child in node.children):
        return "default"
    return ""


def _assigned_definition(node: Node) -> Definition | None:
    if node.type in ("lexical_declaration", "variable_declaration"):
        declarators = [child for child in node.named_children if child.type == "variable_declarator"]
        if len(declarators) != 1:
            return None
        target = declarators[0]
    else:  # class fields: field_definition (JS), public_field_definition (TS)
        target = node
    value = target.child_by_field_name("value")
    name_node = target.child_by_field_name("name") or target.child_by_field_name("property")
    if value is None or name_node is None:
        return None
    name = _clean_name(node_text(name_node))
    if value.type in _FUNCTION_VALUES:
        return Definition(SymbolKind.FUNCTION, name)
    if value.type in _CLASS_VALUES:
        body = value.child_by_field_name("body")
        if body is not None:
            return Definition(SymbolKind.CONTAINER, name, body.named_children)
    return None


_PYTHON = LanguageSpec(
    name="python",
    grammar=tree_sitter_python.language,
    functions=frozenset({"function_definition"}),
    containers=frozenset({"class_definition"}),
    wrappers=frozenset({"decorated_definition"}),
)
_JAVASCRIPT = LanguageSpec(
    name="javascript",
    grammar=tree_sitter_javascript.language,
    # function_expression and class only occur as members when exported by default
    functions=frozenset(
        {
            "function_declaration",
            "generator_function_declaration",
            "method_definition",
            "function_expression",
        }
    ),
    containers=frozenset({"class_declaration", "class"}),
    wrappers=frozenset({"export_statement"}),
    assignments=frozenset({"lexical_declaration", "variable_declaration", "field_definition"}),
)
_TYPESCRIPT_NODES = {
    "functions": _JAVASCRIPT.functions,
    "containers": _JAVASCRIPT.containers | {"abstract_class_declaration", "internal_module", "module"},
    "types": frozenset({"interface_declaration", "type_alias_declaration", "enum_declaration"}),
    "wrappers": _JAVASCRIPT.wrappers | {"ambient_declaration", "expression_statement"},
    "attached": frozenset({"comment", "decorator"}),
    "assignments": _JAVASCRIPT.assignments | {"public_field_definition"},
}
_TYPESCRIPT = LanguageSpec(name="typescript", grammar=tree_sitter_typescript.language_typescript, **_TYPESCRIPT_NODES)
_TSX = LanguageSpec(name="tsx", grammar=tree_sitter_typescript.language_tsx, **_TYPESCRIPT_NODES)
_RUST = LanguageSpec(
    name="rust",
    grammar=tree_sitter_rust.language,
    functions=frozenset({"function_item"}),
    containers=frozenset({"impl_item", "trait_item", "mod_item"}),
    types=frozenset({"struct_item", "enum_item", "union_item", "type_item", "macro_definition"}),
    attached=frozenset({"line_comment", "block_comment", "attribute_item"}),
)
_GO = LanguageSpec(
    name="go",
    grammar=tree_sitter_go.language,
    functions=frozenset({"function_declaration", "method_declaration"}),
    types=frozenset({"type_declaration"}),
)
_JAVA = LanguageSpec(
    name="java",
    grammar=tree_sitter_java.language,
    functions=frozenset({"method_declaration", "constructor_declaration", "compact_constructor_declaration"}),
    containers=frozenset({"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"}),
    types=frozenset({"annotation_type_declaration"}),
    transparent=frozenset({"ERROR", "enum_body_declarations"}),
    attached=frozenset({"line_comment", "block_comment"}),
)
# Conditional compilation, and extern "C" { ... } (a linkage_specification whose body
# is a declaration_list), which headers wrap around everything under __cplusplus.
_C_TRANSPARENT = frozenset(
    {
        *("ERROR", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"),
        *("linkage_specification", "declaration_list"),
    }
)
_C = LanguageSpec(
    name="c",
    grammar=tree_sitter_c.language,
    functions=frozenset({"function_definition"}),
    containers=frozenset({"struct_specifier", "union_specifier"}),
    types=frozenset({"enum_specifier", "type_definition"}),
    transparent=_C_TRANSPARENT,
)
_CPP = LanguageSpec(
    name="cpp",
    grammar=tree_sitter_cpp.language,
    functions=frozenset({"function_definition"}),
    containers=frozenset({"struct_specifier", "union_specifier", "class_specifier", "namespace_definition"}),
    types=frozenset({"enum_specifier", "type_definition", "alias_declaration"}),
    wrappers=frozenset({"template_declaration"}),
    transparent=_C_TRANSPARENT,
)

LANGUAGE_BY_EXTENSION: dict[str, LanguageSpec] = {
    ".py": _PYTHON,
    ".pyi": _PYTHON,
    ".js": _JAVASCRIPT,
    ".mjs": _JAVASCRIPT,
    ".cjs": _JAVASCRIPT,
    ".jsx": _JAVASCRIPT,
    ".ts": _TYPESCRIPT,
    ".mts": _TYPESCRIPT,
    ".cts": _TYPESCRIPT,
    ".tsx": _TSX,
    ".rs": _RUST,
    ".go": _GO,
    ".java": _JAVA,
    ".c": _C,
    ".h": _C,
    ".cc": _CPP,
    ".cpp": _CPP,
    ".cxx": _CPP,
    ".hpp": _CPP,
    ".hh": _CPP,
    ".hxx": _CPP,
}

_grammars: dict[str, Language] = {}
_grammars_lock = threading.Lock()
_thread_parsers = threading.local()


def _grammar(spec: LanguageSpec) -> Language:
    grammar = _grammars.get(spec.name)
    if grammar is None:
        with _grammars_lock:
            grammar = _grammars.get(spec.name)
            if grammar is None:
                grammar = Language(spec.grammar())
                _grammars[spec.name] = grammar
    return grammar


def parser_for(spec: LanguageSpec) -> Parser:
    """This thread's parser for ``spec``'s grammar, created on first use."""
    parsers: dict[str, Parser] | None = getattr(_thread_parsers, "by_language", None)
    if parsers is None:
        parsers = {}
        _thread_parsers.by_language = parsers
    parser = parsers.get(spec.name)
    if parser is None:
        parser = Parser(_grammar(spec))
        parsers[spec.name] = parser
    return parser
