"""A source: one corpus (docs site, code repository, standalone pages) and its attributes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from engine.vocabulary import Attribution, SourceKind

SLUG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class SourceSpec(BaseModel):
    """What ``quarry ingest`` knows about the source it writes to."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    slug: str = Field(pattern=SLUG_PATTERN)
    display_name: str | None = Field(default=None, min_length=1, max_length=200)
    kind: SourceKind | None = None
    attribution: Attribution | None = None
    base_url: str | None = Field(default=None, max_length=2000)
    url_template: str | None = Field(default=None, max_length=2000)
    #: The release a docs source is published for (a version or node-semver range, e.g. "0.17.x").
    version: str | None = Field(default=None, min_length=1, max_length=200)


def document_url(base_url: str | None, url_template: str | None, path: str) -> str | None:
    """Citation URL of a document: the template's ``{path}``/``{path_no_ext}``/``{stem}``, else base + path."""
    path_no_ext = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
    stem = path_no_ext.rsplit("/", 1)[-1]
    if url_template:
        return (
            url_template.replace("{path}", path)
            .replace("{path_no_ext}", path_no_ext)
            .replace("{stem}", stem)
        )
    if base_url:
        return base_url.rstrip("/") + "/" + path
    return None
