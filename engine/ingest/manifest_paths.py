"""Which files are dependency manifests, and the directory each governs: path rules only.

Apart from the readers in ``engine.ingest.manifests``, which import ``packaging`` and the range
grammars (~50 ms to import): every ingest asks these questions of every file, and most read no manifest.
"""

from __future__ import annotations

from pathlib import PurePosixPath

__all__ = ["manifest_directory", "manifest_kind"]


def manifest_kind(path: str) -> str | None:
    """``package.json``, ``pyproject.toml``, ``requirements``, ``Cargo.toml``, ``go.mod``, or None."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if not parts:
        return None
    name = parts[-1]
    if name in ("package.json", "pyproject.toml", "Cargo.toml", "go.mod"):
        return name
    lower = name.lower()
    if lower.startswith("requirements") and lower.endswith(".txt"):
        return "requirements"
    if len(parts) >= 2 and parts[-2].lower() == "requirements" and lower.endswith((".txt", ".in")):
        return "requirements"
    return None


def manifest_directory(path: str) -> str:
    """The directory a manifest governs: its own, or the parent of a ``requirements/`` folder."""
    parent = PurePosixPath(path.replace("\\", "/")).parent
    if manifest_kind(path) == "requirements" and parent.name.lower() == "requirements":
        parent = parent.parent
    return "" if str(parent) == "." else str(parent)
