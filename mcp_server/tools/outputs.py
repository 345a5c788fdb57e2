"""Output schemas: what a tool's ``structuredContent`` holds, small enough to publish with every tool.

A schema names the main fields and their JSON types; it does not close the object (responses also
carry notes and optional fields, documented in docs/TOOLS.md) and lists no ``required``: every
session pays the catalogue in context, and the fields named under ``always`` are present in every
successful result anyway (tests/test_profiles.py checks it). The SDK's client validates each
successful result against the schema. ``"string?"`` is a string or null.
"""

from __future__ import annotations

from typing import Any

__all__ = ["shape"]


def _typed(kind: str) -> dict[str, Any]:
    if kind.endswith("?"):
        return {"type": [kind[:-1], "null"]}
    return {"type": kind}


def shape(always: dict[str, str], sometimes: dict[str, str] | None = None) -> dict[str, Any]:
    """An object schema of fields ``always`` present and ones present ``sometimes``; values are JSON types."""
    properties = {name: _typed(kind) for name, kind in {**always, **(sometimes or {})}.items()}
    return {"type": "object", "properties": properties}
