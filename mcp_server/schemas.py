"""Closed, strict tool inputs, and how a rejected input becomes an ``INVALID`` or ``LIMIT`` envelope.

Every model forbids unknown fields and coercion (``"5"`` is not an integer, ``1`` is
not ``true``); non-finite numbers, and strings holding NUL or an unpaired surrogate
(Postgres text cannot store them), are rejected. Errors name the argument path and the
rule; they never repeat the rejected value (an unknown field's name is shown only
when it is a plain identifier). Upper-bound violations (too many queries, limit over
the maximum, instructions too long) are ``LIMIT``; everything else is ``INVALID``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Generic, Literal, TypeVar, get_args
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from engine.corpus.facets import CONTENT_TYPES, FILTER_KEYS, VERSION_FACETS
from engine.retrieval.request import (
    DEFAULT_CODE_MODE,
    DEFAULT_LIMIT,
    DEFAULT_MODE,
    DEFAULT_PER_DOCUMENT,
    DEFAULT_VERSION_MATCH,
    CodeMode,
    FacetValue,
    GroupBy,
    VersionMatchMode,
)
from engine.retrieval.request import SearchMode as Mode
from engine.vocabulary import CHUNK_KINDS, Attribution, SourceKind
from mcp_server import limits
from mcp_server.envelope import ErrorCode, Problem, ToolFailure
from mcp_server.token_budget import MAX_TOKENS, MIN_TOKENS

ContentType = Literal["markdown", "rst", "html", "text", "code"]
ChunkKind = Literal["definition", "module", "example", "prose"]
FacetKey = Literal["source_slug", "language", "package", "language_target", "sdk_dependency", "kind",
                   "attribution", "content_type", "verified", "deprecated", "chunk_kind"]

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _not_blank(text: str) -> str:
    if not text.strip():
        raise PydanticCustomError("blank", "must contain a non-space character")
    return text


def _dotted_name(text: str) -> str:
    if any(not part or part != part.strip() or any(c.isspace() for c in part) for part in text.split(".")):
        raise PydanticCustomError("symbol", "must be a dotted name such as Client.connect (no empty part, no spaces)")
    return text


def _check_code_mode(code_mode: str, info: ValidationInfo) -> str:
    # `mode` is declared before `code_mode`, so it is validated (and in info.data) by now.
    if code_mode != "on" and info.data.get("mode") == "fts":
        raise PydanticCustomError(
            "incompatible", "must be 'on' (its default) when mode is 'fts': keyword search uses no embeddings")
    return code_mode


VersionRange = Annotated[str, StringConstraints(min_length=1, max_length=limits.MAX_VERSION_RANGE_CHARS),
                         AfterValidator(_not_blank)]
QueryText = Annotated[str, StringConstraints(min_length=1, max_length=limits.MAX_QUERY_CHARS),
                      AfterValidator(_not_blank)]
FacetText = Annotated[str, StringConstraints(min_length=1, max_length=limits.MAX_FACET_VALUE_CHARS)]
AnyUuid = Annotated[UUID, Field(strict=False)]  # JSON has no UUID type: parse the string form

ValueT = TypeVar("ValueT")


class FacetRule(BaseModel, Generic[ValueT]):
    """``any_of``: keep results whose value is one of these; ``none_of``: drop results whose value is one of these."""

    model_config = _STRICT

    any_of: list[ValueT] | None = Field(default=None, min_length=1, max_length=limits.MAX_FILTER_VALUES)
    none_of: list[ValueT] | None = Field(default=None, min_length=1, max_length=limits.MAX_FILTER_VALUES)

    @model_validator(mode="after")
    def _has_a_rule(self) -> FacetRule[ValueT]:
        if self.any_of is None and self.none_of is None:
            raise PydanticCustomError("empty_rule", "needs any_of, none_of or both")
        return self

    def as_rules(self) -> dict[str, list[FacetValue]]:
        rules: dict[str, list[FacetValue]] = {}
        if self.any_of is not None:
            rules["any_of"] = list(dict.fromkeys(self.any_of))  # type: ignore[arg-type]
        if self.none_of is not None:
            rules["none_of"] = list(dict.fromkeys(self.none_of))  # type: ignore[arg-type]
        return rules


class KindRule(FacetRule[SourceKind]):
    pass


class AttributionRule(FacetRule[Attribution]):
    pass


class ContentTypeRule(FacetRule[ContentType]):
    pass


class ChunkKindRule(FacetRule[ChunkKind]):
    pass


class FlagRule(FacetRule[bool]):
    pass


class ValueRule(FacetRule[FacetText]):
    pass


PathGlob = Annotated[str, StringConstraints(min_length=1, max_length=limits.MAX_FACET_VALUE_CHARS),
                     AfterValidator(_not_blank)]
SymbolName = Annotated[str, StringConstraints(min_length=1, max_length=limits.MAX_FACET_VALUE_CHARS),
                       AfterValidator(_dotted_name)]


class PathRule(FacetRule[PathGlob]):
    pass


class SymbolRule(FacetRule[SymbolName]):
    pass


class VersionRule(BaseModel):
    """A version facet rule: which languages / packages (any_of, none_of) and which versions (version_satisfies)."""

    model_config = _STRICT

    any_of: list[FacetText] | None = Field(default=None, min_length=1, max_length=limits.MAX_FILTER_VALUES)
    none_of: list[FacetText] | None = Field(default=None, min_length=1, max_length=limits.MAX_FILTER_VALUES)
    version_satisfies: VersionRange | None = Field(
        default=None, description="A node-semver range such as '^0.17', '>=0.8 <0.9' or '1.2.x || 2'; content "
        "whose constraint intersects it matches.")

    @model_validator(mode="after")
    def _has_a_rule(self) -> VersionRule:
        if self.any_of is None and self.none_of is None and self.version_satisfies is None:
            raise PydanticCustomError("empty_rule", "needs any_of, none_of, version_satisfies or a combination")
        return self

    def as_rules(self) -> dict[str, list[FacetValue] | str]:
        rules: dict[str, list[FacetValue] | str] = {}
        if self.any_of is not None:
            rules["any_of"] = list(dict.fromkeys(self.any_of))
        if self.none_of is not None:
            rules["none_of"] = list(dict.fromkeys(self.none_of))
        if self.version_satisfies is not None:
            rules["version_satisfies"] = self.version_satisfies
        return rules


class Filters(BaseModel):
    """Facet filters: keys are ANDed; within a key, any_of values are ORed and none_of values excluded."""

    model_config = _STRICT

    source_slug: ValueRule | None = Field(default=None, description="Source slugs (see `facets`).")
    language: ValueRule | None = Field(default=None, description="Programming language of code, e.g. python.")
    package: ValueRule | None = Field(default=None, description="Package a document belongs to.")
    language_target: VersionRule | None = Field(
        default=None, description="Language version the content targets (Compact pragma language_version, a doc's "
        "front-matter version, or its source's release), e.g. {\"version_satisfies\": \"^0.17\"}.")
    sdk_dependency: VersionRule | None = Field(
        default=None, description="Package dependency declared by the manifest governing the content; the package "
        "and the range hold for the same dependency, e.g. {\"any_of\": [\"react\"], \"version_satisfies\": \"^18\"}.")
    kind: KindRule | None = Field(default=None, description="Source kind.")
    attribution: AttributionRule | None = Field(default=None, description="Who publishes the source.")
    content_type: ContentTypeRule | None = Field(default=None, description="Document format.")
    verified: FlagRule | None = Field(default=None, description="Whether an admin verified the source.")
    deprecated: FlagRule | None = Field(default=None, description="Whether the document or source is deprecated.")
    path: PathRule | None = Field(default=None, description="Document path globs: * and ? within a directory, ** "
                                  "across, no / for a file name anywhere, e.g. {\"any_of\": [\"src/**/*.py\"], "
                                  "\"none_of\": [\"**/tests/**\"]}.")
    symbol: SymbolRule | None = Field(default=None, description="Code symbols, matching whole dotted segments of a "
                                      "chunk's symbol_path: Client.connect finds pkg.Client.connect and its nested "
                                      "definitions.")
    chunk_kind: ChunkKindRule | None = Field(
        default=None, description="definition (in a function, class...), module (a source file's code outside "
        "those: imports, constants), example (code in docs), prose.")

    def as_engine_filters(self) -> dict[str, dict[str, list[FacetValue] | str]]:
        return {key: rule.as_rules() for key in FILTER_KEYS if (rule := getattr(self, key)) is not None}


MAX_TOKENS_DESCRIPTION = "Response budget, tokens; default ~8k"


class SearchArgs(BaseModel):
    model_config = _STRICT

    query: QueryText
    mode: Mode = Field(default=DEFAULT_MODE, description="fts: keyword only; vector: semantic only")
    code_mode: CodeMode = Field(default=DEFAULT_CODE_MODE, description="exclusive: code embeddings only")
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=limits.MAX_RESULTS)
    max_tokens: int | None = Field(default=None, ge=MIN_TOKENS, le=MAX_TOKENS, description=MAX_TOKENS_DESCRIPTION)

    @field_validator("code_mode")
    @classmethod
    def _code_mode_needs_vectors(cls, code_mode: str, info: ValidationInfo) -> str:
        return _check_code_mode(code_mode, info)


class AdvancedSearchArgs(BaseModel):
    model_config = _STRICT

    queries: list[QueryText] = Field(min_length=1, max_length=limits.MAX_QUERIES, description="Phrasings, fused")
    mode: Mode = Field(default=DEFAULT_MODE)
    code_mode: CodeMode = Field(default=DEFAULT_CODE_MODE)
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=limits.MAX_RESULTS)
    rerank: bool = Field(default=True)
    rerank_instructions: str | None = Field(default=None, min_length=1, max_length=limits.MAX_RERANK_INSTRUCTIONS)
    filters: Filters | None = Field(default=None)
    version_match: VersionMatchMode = Field(default=DEFAULT_VERSION_MATCH)
    preset: Literal["fast", "detailed", "full"] = Field(default="detailed", description="full adds neighbours")
    per_document: int | None = Field(default=DEFAULT_PER_DOCUMENT, ge=1, le=limits.MAX_RESULTS,
                                     description="null: no cap")
    max_tokens: int | None = Field(default=None, ge=MIN_TOKENS, le=MAX_TOKENS, description=MAX_TOKENS_DESCRIPTION)
    group_by: GroupBy = Field(default="chunk", description="document: a row per file")

    @field_validator("code_mode")
    @classmethod
    def _code_mode_needs_vectors(cls, code_mode: str, info: ValidationInfo) -> str:
        return _check_code_mode(code_mode, info)


class FacetsArgs(BaseModel):
    model_config = _STRICT

    facet: FacetKey | None = Field(default=None, description="One facet; omit for all but chunk_kind.")
    prefix: str | None = Field(default=None, min_length=1, max_length=limits.MAX_PREFIX_CHARS,
                               description="Values starting with this (any case).")
    filters: Filters | None = Field(default=None)
    limit: int = Field(default=50, ge=1, le=limits.MAX_FACET_VALUES, description="Values per facet.")


class GetDocumentArgs(BaseModel):
    model_config = _STRICT

    document_id: AnyUuid
    cursor: str | None = Field(default=None, min_length=1, max_length=limits.MAX_CURSOR_CHARS,
                               description="next_cursor of the previous page.")
    max_tokens: int | None = Field(default=None, ge=MIN_TOKENS, le=MAX_TOKENS, description=MAX_TOKENS_DESCRIPTION)


class GetChunkArgs(BaseModel):
    model_config = _STRICT

    chunk_id: AnyUuid
    before: int = Field(default=0, ge=0, le=limits.MAX_NEIGHBOURS)
    after: int = Field(default=0, ge=0, le=limits.MAX_NEIGHBOURS)


class ReadDocumentBytesArgs(BaseModel):
    model_config = _STRICT

    document_id: AnyUuid
    offset: int = Field(ge=0, le=2**31 - 1)
    length: int = Field(ge=1, le=limits.MAX_BYTE_RANGE)


class NoArgs(BaseModel):
    model_config = _STRICT


ArgsT = TypeVar("ArgsT", bound=BaseModel)

_UPPER_BOUND_ERRORS = frozenset({"string_too_long", "too_long", "less_than_equal", "less_than"})
_TYPE_NAMES = {
    "string_type": "a string", "int_type": "an integer", "bool_type": "a boolean (true or false)",
    "list_type": "an array", "model_type": "an object", "dict_type": "an object", "float_type": "a number",
    "uuid_type": "a UUID string", "model_attributes_type": "an object",
}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_RULE_FIELDS = ("any_of", "none_of")
VERSION_FACET_NAMES = frozenset(VERSION_FACETS)


def parse_arguments(model: type[ArgsT], arguments: Mapping[str, Any] | None) -> ArgsT:
    """Validate raw tool arguments, or raise ``ToolFailure`` naming each bad path and rule."""
    raw = dict(arguments or {})
    problems = [Problem(path, _UNSTORABLE_RULE) for path in _unstorable_paths(raw)]
    code: ErrorCode = "INVALID"
    try:
        parsed = model.model_validate(raw)
    except ValidationError as error:
        details = error.errors(include_url=False)
        if not problems and all(d["type"] in _UPPER_BOUND_ERRORS for d in details):
            code = "LIMIT"
        problems = list(dict.fromkeys([*problems, *(_problem(model, detail) for detail in details)]))
    else:
        if not problems:
            return parsed
    summary = "; ".join(f"{problem.path}: {problem.rule}" for problem in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    raise ToolFailure(code, f"invalid arguments: {summary}{more}", problems=problems[:20]) from None


# Postgres text (and jsonb) cannot hold NUL, and UTF-8 cannot encode an unpaired surrogate: refused up front,
# in every string and object key, instead of failing inside the database.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_UNSTORABLE_RULE = "must not contain NUL characters or unpaired surrogates (\\ud800-\\udfff)"


def _unstorable_paths(arguments: Mapping[str, Any]) -> list[str]:
    """Paths of the strings and keys in ``arguments`` that text cannot store (iterative: any depth is safe)."""
    found: list[str] = []
    pending: list[tuple[str, object]] = [("", arguments)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            if _UNSTORABLE.search(value):
                found.append(path or "(arguments)")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                name = key if isinstance(key, str) and _PLAIN_NAME.fullmatch(key) else "<field>"
                inner = f"{path}.{name}" if path else name
                if isinstance(key, str) and _UNSTORABLE.search(key):
                    found.append(inner)
                pending.append((inner, item))
        elif isinstance(value, list | tuple):
            pending.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
    return sorted(set(found))


def _problem(model: type[BaseModel], detail: ErrorDetails) -> Problem:
    loc = detail["loc"]
    kind = detail["type"]
    context = detail.get("ctx") or {}
    value = detail.get("input")
    if kind == "extra_forbidden":
        return Problem(_path(loc[:-1], loc[-1]), _unknown_field_rule(model, loc))
    if isinstance(value, float) and not math.isfinite(value):
        return Problem(_path(loc), "must be a finite number: NaN and Infinity are not accepted")
    rule: str
    if kind == "missing":
        rule = "is required"
    elif kind in _TYPE_NAMES:
        rule = f"must be {_TYPE_NAMES[kind]}; values of other types are not converted"
    elif kind == "literal_error":
        rule = f"must be one of {context.get('expected', 'the documented values')}"
    elif kind == "string_too_short":
        rule = "must not be empty" if context.get("min_length") == 1 else \
            f"must have at least {context.get('min_length')} characters"
    elif kind == "string_too_long":
        rule = f"must have at most {context.get('max_length')} characters"
    elif kind == "too_short":
        rule = f"must have at least {context.get('min_length')} items"
    elif kind == "too_long":
        rule = f"must have at most {context.get('max_length')} items"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = {"greater_than_equal": ("at least", "ge"), "greater_than": ("greater than", "gt"),
                 "less_than_equal": ("at most", "le"), "less_than": ("less than", "lt")}[kind]
        rule = f"must be {bound[0]} {context.get(bound[1])}"
    elif kind in ("uuid_parsing", "uuid_version"):
        rule = "must be a UUID string such as 0190b7f2-6b6e-7d3a-9c1e-2f4a5b6c7d8e"
    elif kind == "string_unicode":
        rule = _UNSTORABLE_RULE
    elif kind == "finite_number":
        rule = "must be a finite number: NaN and Infinity are not accepted"
    elif kind in ("blank", "empty_rule", "incompatible", "symbol"):
        rule = detail["msg"]  # our own messages, which never include the input
    else:
        rule = f"is not valid ({kind})"
    return Problem(_path(loc), rule)


def _path(loc: tuple[int | str, ...], last: int | str | None = None) -> str:
    parts = [*loc, last] if last is not None else list(loc)
    text = ""
    for index, part in enumerate(parts):
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        shown = part if (last is None or index < len(parts) - 1 or _PLAIN_NAME.fullmatch(part)) else "<field>"
        text += ("." if text else "") + shown
    return text or "(arguments)"


def _unknown_field_rule(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    parent = loc[:-1]
    if parent and parent[-1] == "filters":
        return f"is not a filter key; valid keys are {', '.join(FILTER_KEYS)}"
    if len(parent) >= 2 and parent[-2] == "filters":
        rules = (*_RULE_FIELDS, "version_satisfies") if parent[-1] in VERSION_FACET_NAMES else _RULE_FIELDS
        return f"is not a facet rule; use {' and/or '.join(rules)}"
    return f"is not an argument of this tool; its arguments are {', '.join(model.model_fields)}"


def _check_filters_cover_every_facet() -> None:
    # The schema is how clients learn the keys; it must not drift from the engine's list.
    if (set(Filters.model_fields) != set(FILTER_KEYS) or set(CONTENT_TYPES) != set(get_args(ContentType))
            or set(CHUNK_KINDS) != set(get_args(ChunkKind))):
        raise AssertionError("mcp_server.schemas.Filters is out of step with engine.corpus.facets")


_check_filters_cover_every_facet()


def published_schema(arguments: type[BaseModel], *, full_filters: bool = False) -> dict[str, Any]:
    """A tool's input schema as clients are shown it, without what costs context and says nothing: titles
    (the property names say them), the ``null`` alternative of optional arguments (leave them out), and the
    long per-facet rule definitions of ``filters``.

    Every client pays the catalogue in context on every session, so facet filters are published once in
    full (``full_filters``: ``advanced_search``, with each fixed set's values) and elsewhere as one generic
    rule. Either way the server checks the full model on arrival: the schema informs, the model decides.
    """
    schema: dict[str, Any] = _compact(arguments.model_json_schema())
    definitions = schema.get("$defs")
    if isinstance(definitions, dict) and "Filters" in definitions:
        for name in [name for name in definitions if name.endswith("Rule")]:
            del definitions[name]
        definitions.update(_full_filter_definitions() if full_filters else _lean_filter_definitions())
    return schema


def _rule(items: dict[str, Any] | None = None, *, versions: bool = False) -> dict[str, Any]:
    values: dict[str, Any] = {"type": "array"} if items is None else {"type": "array", "items": items}
    properties: dict[str, Any] = {"any_of": values, "none_of": values}
    if versions:
        properties["version_satisfies"] = {"type": "string"}
    return {"type": "object", "additionalProperties": False, "properties": properties}


_FILTERS_HELP = ("Facets ANDed; any_of ORed, none_of excluded; values: see facets. path: globs (src/**/*.py); "
                 "symbol: dotted names; version_satisfies: node-semver range.")


def _full_filter_definitions() -> dict[str, Any]:
    """Every fixed set's values (chunk_kind's as an enum, the others named in a description: fewer bytes)."""
    named = {"kind": get_args(SourceKind), "attribution": get_args(Attribution), "content_type": get_args(ContentType)}
    properties: dict[str, Any] = {}
    for key in FILTER_KEYS:
        if key == "chunk_kind":
            properties[key] = {"$ref": "#/$defs/ChunkKindRule"}
        elif key in VERSION_FACET_NAMES:
            properties[key] = {"$ref": "#/$defs/VersionRule"}
        elif key in named:
            properties[key] = {"$ref": "#/$defs/Rule", "description": "|".join(named[key])}
        else:
            properties[key] = {"$ref": "#/$defs/Rule"}
    return {"Rule": _rule(), "VersionRule": _rule(versions=True),
            "ChunkKindRule": _rule({"enum": list(get_args(ChunkKind))}),
            "Filters": {"type": "object", "additionalProperties": False, "description": _FILTERS_HELP,
                        "properties": properties}}


def _lean_filter_definitions() -> dict[str, Any]:
    return {"Filters": {"type": "object", "properties": {key: {} for key in FILTER_KEYS}}}


def _compact(node: Any) -> Any:
    """``node`` without titles, the null alternative of optional arguments, or a type its enum implies."""
    if isinstance(node, list):
        return [_compact(item) for item in node]
    if not isinstance(node, dict):
        return node
    compacted: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs"):
            compacted[key] = {name: _compact(schema) for name, schema in value.items()}
        else:
            compacted[key] = _compact(value)
    if "enum" in compacted and compacted.get("type") == "string":
        del compacted["type"]  # the values say it
    alternatives = compacted.get("anyOf")
    if ("default" in compacted and compacted["default"] is None and isinstance(alternatives, list)
            and len(alternatives) == 2 and {"type": "null"} in alternatives):
        (kept,) = [alternative for alternative in alternatives if alternative != {"type": "null"}]
        del compacted["anyOf"], compacted["default"]
        compacted = {**kept, **compacted}  # JSON Schema 2020-12: $ref may have siblings
    return compacted
