"""Pinecone-style ``metadata_filter`` objects, as the docs-server contract takes them, as Quarry facet filters.

``{"language": "python"}`` and ``{"language": {"$eq": "python"}}`` keep one value, ``$in`` several,
``$ne`` / ``$nin`` drop values, ``$and`` combines filters; ``$satisfies`` (Quarry's) is a node-semver
range on ``language_target`` / ``sdk_dependency``. Fields are Quarry's facets: the same filters every
search leg applies. Ranges (``$gt``...), ``$or`` and ``$exists`` have no facet equivalent and are
refused (INVALID) rather than ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from engine.corpus.facets import FILTER_KEYS
from engine.retrieval.request import Filters as EngineFilters
from mcp_server.envelope import Problem, ToolFailure
from mcp_server.schemas import Filters

__all__ = ["FILTER_FIELDS", "engine_filters"]

#: Metadata fields a filter may test: the facets, but the source (the namespace names it).
FILTER_FIELDS = tuple(key for key in FILTER_KEYS if key != "source_slug")
_SUPPORTED = "$eq, $in, $ne, $nin, $and (and $satisfies on the version facets)"


def engine_filters(metadata_filter: Mapping[str, Any] | None, namespace: str | None) -> EngineFilters | None:
    """The engine filters for ``metadata_filter`` within ``namespace`` (None: every source)."""
    rules: dict[str, dict[str, Any]] = {}
    if metadata_filter:
        _collect(metadata_filter, rules, "metadata_filter")
    try:
        parsed = Filters.model_validate(rules)
    except ValidationError as error:
        detail = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in detail["loc"][:1])
        raise ToolFailure("INVALID", f"invalid arguments: metadata_filter.{field}: a value is not valid for this "
                          "field (see facets for the values)",
                          problems=[Problem(f"metadata_filter.{field}", "is not a valid value")]) from None
    filters: dict[str, Any] = dict(parsed.as_engine_filters())
    if namespace is not None:
        filters["source_slug"] = {"any_of": [namespace]}
    return filters or None


def _collect(node: Mapping[str, Any], rules: dict[str, dict[str, Any]], path: str) -> None:
    for field, condition in node.items():
        where = f"{path}.{field}" if field.isidentifier() or field.startswith("$") else f"{path}.<field>"
        if field == "$and":
            if not isinstance(condition, list) or not all(isinstance(part, Mapping) for part in condition):
                raise _invalid(where, "must be a list of filter objects")
            for index, part in enumerate(condition):
                _collect(part, rules, f"{where}[{index}]")
            continue
        if field not in FILTER_FIELDS:
            raise _invalid(where, f"is not a filterable field; the fields are {', '.join(FILTER_FIELDS)} "
                           "(operators: " + _SUPPORTED + ")")
        rule = rules.setdefault(field, {})
        operations = condition.items() if isinstance(condition, Mapping) else [("$eq", condition)]
        for operator, value in operations:
            if operator in ("$eq", "$in"):
                rule.setdefault("any_of", []).extend(_values(value, operator, where))
            elif operator in ("$ne", "$nin"):
                rule.setdefault("none_of", []).extend(_values(value, operator, where))
            elif operator == "$satisfies" and isinstance(value, str):
                rule["version_satisfies"] = value
            else:
                raise _invalid(f"{where}.{operator}" if operator.startswith("$") else where,
                               f"is not a supported operator here; use {_SUPPORTED}")


def _values(value: Any, operator: str, where: str) -> list[Any]:
    values = value if operator in ("$in", "$nin") else [value]
    if not isinstance(values, list) or not values or not all(isinstance(item, str | bool) for item in values):
        kind = "a non-empty list of strings or booleans" if operator in ("$in", "$nin") else "a string or boolean"
        raise _invalid(f"{where}.{operator}", f"must be {kind}")
    return values


def _invalid(path: str, rule: str) -> ToolFailure:
    return ToolFailure("INVALID", f"invalid arguments: {path}: {rule}", problems=[Problem(path, rule)])
