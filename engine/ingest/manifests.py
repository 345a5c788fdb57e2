"""Dependency ranges declared by package manifests.

``constraints_in_manifest(path, text)`` reads one manifest into ``sdk_dependency``
constraints (node-semver ranges, see ``engine.ingest.versions``); which files are manifests,
and the directory each governs, is ``engine.ingest.manifest_paths``. Which manifests govern a
file (the nearest of each kind) is resolved in SQL at query time (``quarry.governing_manifests``),
so a changed manifest re-scopes every file under it without re-ingesting them.

=========================  ==============================================================
manifest                   sections read (origin is ``<file>:<section>``)
=========================  ==============================================================
package.json               dependencies, peerDependencies, devDependencies,
                           optionalDependencies, engines (``node`` -> name "node")
pyproject.toml             project.dependencies, project.optional-dependencies,
                           project.requires-python (name "python"), dependency-groups,
                           tool.poetry.dependencies (``python`` -> "python"),
                           tool.poetry.dev-dependencies, tool.poetry.group.dependencies
requirements*.txt,         PEP 508 lines (also any .txt/.in under a ``requirements/`` dir)
Cargo.toml                 dependencies, dev-dependencies, build-dependencies,
                           workspace.dependencies, target.dependencies (any cfg),
                           package.rust-version / workspace.package.rust-version ("rust")
go.mod                     go directive (name "go"), require lines and blocks
=========================  ==============================================================

Mapping choices (PEP 440, Poetry and Cargo ranges: ``engine.ingest.ecosystem_ranges``):

- PEP 508 requirements: markers and extras are dropped; names are normalised per PEP 503.
- go.mod: ``require m v1.2.3`` becomes ``>=1.2.3`` (minimal version selection builds
  with that version or a newer one); ``+incompatible`` is dropped; pseudo-versions
  are semver prereleases and pass through. ``go 1.21`` becomes ``>=1.21.0``.
- npm specs that are not registry ranges (``workspace:``, ``file:``, git, URLs,
  ``owner/repo``, dist-tags like ``latest``) are skipped; ``npm:pkg@range`` keeps the
  range under the dependency's own name.
- A dependency without a version constraint is kept with range ``*``.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from engine.ingest.ecosystem_ranges import cargo_range, pep440_range, poetry_range
from engine.ingest.manifest_paths import manifest_kind
from engine.ingest.npm_ranges import npm_range
from engine.ingest.version_sets import UnrepresentableRange, VersionSet, format_range
from engine.ingest.versions import Skipped, VersionConstraint

__all__ = ["constraints_in_manifest"]


# ---------------------------------------------------------------- one manifest per format

def _attempt(found: list[VersionConstraint], skipped: Skipped | None, origin: str, name: str, raw: str,
             translate: Callable[[], VersionSet]) -> None:
    """Add one constraint, or note why ``translate`` could not express it."""
    try:
        found.append(VersionConstraint("sdk_dependency", name, format_range(translate()), raw, origin))
    except (UnrepresentableRange, InvalidSpecifier, InvalidVersion, ValueError) as error:
        if skipped is not None:
            skipped.append((f"{origin} {name} {raw!r}", str(error) or type(error).__name__))


_NPM_SECTIONS = ("dependencies", "peerDependencies", "devDependencies", "optionalDependencies", "engines")
_NOT_REGISTRY = re.compile(r"^[a-z][a-z0-9+.-]*:|/")  # protocols (file:, workspace:, git+ssh:, https:) and paths


def _npm_spec(spec: str) -> str:
    if spec.startswith("npm:"):
        _, _, spec = spec[4:].rpartition("@")  # "npm:@scope/pkg@^1.2" -> "^1.2"
    elif _NOT_REGISTRY.search(spec):
        raise UnrepresentableRange("not a registry version range")
    return spec


def _npm_registry_range(spec: str) -> VersionSet:
    return npm_range(_npm_spec(spec))


def _package_json(text: str, found: list[VersionConstraint], skipped: Skipped | None) -> None:
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("top level is not an object")
    for section in _NPM_SECTIONS:
        entries = document.get(section)
        if not isinstance(entries, dict):
            continue
        for name, spec in entries.items():
            if isinstance(spec, str):
                spec = spec.strip()
                _attempt(found, skipped, f"package.json:{section}", name, spec,
                         partial(_npm_registry_range, spec))


def _requirement(found: list[VersionConstraint], skipped: Skipped | None, origin: str, line: str) -> None:
    try:
        requirement = Requirement(line)
    except InvalidRequirement as error:
        if skipped is not None:
            skipped.append((f"{origin} {line!r}", str(error)))
        return
    if requirement.url is not None:
        if skipped is not None:
            skipped.append((f"{origin} {line!r}", "direct URL, no version range"))
        return
    _attempt(found, skipped, origin, canonicalize_name(requirement.name), line,
             lambda: pep440_range(requirement.specifier))


def _poetry_dependencies(table: Mapping[str, Any], origin: str, found: list[VersionConstraint],
                         skipped: Skipped | None) -> None:
    for raw_name, spec in table.items():
        name = "python" if raw_name.lower() == "python" else canonicalize_name(raw_name)
        versions = [spec] if isinstance(spec, str | dict) else spec if isinstance(spec, list) else []
        texts = [v if isinstance(v, str) else v.get("version") for v in versions if isinstance(v, str | dict)]
        if not texts or any(not isinstance(t, str) for t in texts):
            if skipped is not None:
                skipped.append((f"{origin} {raw_name}", "no version (path, git or url dependency)"))
            continue
        raw = " || ".join(t for t in texts if isinstance(t, str))  # per-marker alternatives: any of them
        _attempt(found, skipped, origin, name, raw, partial(poetry_range, raw))


def _pyproject(text: str, found: list[VersionConstraint], skipped: Skipped | None) -> None:
    document = tomllib.loads(text)
    project = _table(document, "project")
    if isinstance(project.get("requires-python"), str):
        requires_python: str = project["requires-python"]
        _attempt(found, skipped, "pyproject.toml:project.requires-python", "python", requires_python,
                 lambda: pep440_range(SpecifierSet(requires_python)))
    lists: list[tuple[str, Any]] = [("project.dependencies", project.get("dependencies"))]
    lists += [("project.optional-dependencies", v) for v in _table(project, "optional-dependencies").values()]
    lists += [("dependency-groups", v) for v in _table(document, "dependency-groups").values()]
    for section, entries in lists:
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, str):  # dependency-groups also hold {include-group = ...} tables
                _requirement(found, skipped, f"pyproject.toml:{section}", entry)
    poetry = _table(_table(document, "tool"), "poetry")
    _poetry_dependencies(_table(poetry, "dependencies"), "pyproject.toml:tool.poetry.dependencies", found, skipped)
    _poetry_dependencies(_table(poetry, "dev-dependencies"), "pyproject.toml:tool.poetry.dev-dependencies",
                         found, skipped)
    for group in _table(poetry, "group").values():
        if isinstance(group, dict):
            _poetry_dependencies(_table(group, "dependencies"), "pyproject.toml:tool.poetry.group.dependencies",
                                 found, skipped)


def _requirements_txt(text: str, found: list[VersionConstraint], skipped: Skipped | None) -> None:
    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        line = re.sub(r"\s--?[a-z][\w-]*(=\S*)?.*$", "", line)  # trailing per-requirement options (--hash=...)
        if not line or line.startswith(("-", ".", "/")) or "://" in line:
            continue  # options, includes (-r, -c, -e), local paths and URLs carry no range
        _requirement(found, skipped, "requirements.txt", line)


_CARGO_SECTIONS = ("dependencies", "dev-dependencies", "build-dependencies")


def _cargo_dependencies(table: Mapping[str, Any], origin: str, found: list[VersionConstraint],
                        skipped: Skipped | None) -> None:
    for key, spec in table.items():
        name, version = key, spec
        if isinstance(spec, dict):
            name = spec["package"] if isinstance(spec.get("package"), str) else key
            version = spec.get("version")
        if not isinstance(version, str):
            if skipped is not None:
                skipped.append((f"{origin} {key}", "no version (path, git or workspace dependency)"))
            continue
        _attempt(found, skipped, origin, name, version, partial(cargo_range, version))


def _cargo_toml(text: str, found: list[VersionConstraint], skipped: Skipped | None) -> None:
    document = tomllib.loads(text)
    workspace = _table(document, "workspace")
    for package in (_table(document, "package"), _table(workspace, "package")):
        rust_version = package.get("rust-version")
        if isinstance(rust_version, str):
            _attempt(found, skipped, "Cargo.toml:package.rust-version", "rust", rust_version,
                     partial(npm_range, ">=" + rust_version))
    for section in _CARGO_SECTIONS:
        _cargo_dependencies(_table(document, section), f"Cargo.toml:{section}", found, skipped)
    _cargo_dependencies(_table(workspace, "dependencies"), "Cargo.toml:workspace.dependencies", found, skipped)
    for target in _table(document, "target").values():
        for section in _CARGO_SECTIONS if isinstance(target, dict) else ():
            _cargo_dependencies(_table(target, section), f"Cargo.toml:target.{section}", found, skipped)


_GO_VERSION = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?((?:rc|beta|alpha)\d+)?")


def _go_directive(raw: str) -> VersionSet:
    match = _GO_VERSION.fullmatch(raw)
    if match is None:
        raise UnrepresentableRange(f"not a Go version: {raw!r}")
    major, minor, patch, pre = match.groups()
    prerelease = "-" + re.sub(r"(\D+)(\d+)", r"\1.\2", pre) if pre else ""  # 1.21rc1 -> 1.21.0-rc.1
    return npm_range(f">={major}.{minor or 0}.{patch or 0}{prerelease}")


def _go_mod(text: str, found: list[VersionConstraint], skipped: Skipped | None) -> None:
    block: str | None = None
    for line in text.splitlines():
        words = line.split("//", 1)[0].split()
        if not words:
            continue
        if block is not None:
            if words == [")"]:
                block = None
            elif block == "require" and len(words) >= 2:
                _go_require(words[0], words[1], found, skipped)
            continue
        if len(words) == 2 and words[1] == "(":
            block = words[0]
        elif words[0] == "go" and len(words) == 2:
            _attempt(found, skipped, "go.mod:go", "go", words[1], partial(_go_directive, words[1]))
        elif words[0] == "require" and len(words) >= 3:
            _go_require(words[1], words[2], found, skipped)


def _go_require(module: str, version: str, found: list[VersionConstraint], skipped: Skipped | None) -> None:
    def at_least() -> VersionSet:
        if not version.startswith("v"):
            raise UnrepresentableRange(f"not a module version: {version!r}")
        return npm_range(">=" + version[1:].removesuffix("+incompatible"))

    _attempt(found, skipped, "go.mod:require", module.strip('"`'), version, at_least)


def _table(table: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = table.get(key)
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------- dispatch

_READERS = {
    "package.json": _package_json,
    "pyproject.toml": _pyproject,
    "requirements": _requirements_txt,
    "Cargo.toml": _cargo_toml,
    "go.mod": _go_mod,
}


def constraints_in_manifest(path: str, text: str, *, skipped: Skipped | None = None) -> list[VersionConstraint] | None:
    """``sdk_dependency`` constraints a manifest declares; None when ``path`` is not a manifest.

    Never raises: an unreadable file yields ``[]``, an unreadable entry is left out; with
    ``skipped`` given, each is appended to it as ``(what, reason)``.
    """
    kind = manifest_kind(path)
    if kind is None:
        return None
    found: list[VersionConstraint] = []
    try:
        _READERS[kind](text, found, skipped)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        if skipped is not None:
            skipped.append((path, f"unreadable {kind}: {error}"))
    return list(dict.fromkeys(found))
