"""Version constraints: what versions each document targets, parsed once at ingest.

A constraint is a (facet, name, range) triple: ``language_target`` (a Compact pragma,
a doc's front-matter version, or its source's release version) or ``sdk_dependency``
(a package and the range a manifest requires). The range is stored as the set of
versions it covers (``quarry.semver_multirange``), so a filter is an ``&&`` / ``<@``
comparison instead of re-parsing range syntax per row.

Manifest constraints are stored once per manifest, not once per governed file: a
manifest governs the files under its directory (``scope``), the nearest manifest of
each kind winning, and that is resolved at query time (``quarry.governing_manifests``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        create table quarry.manifests (
            document_id uuid primary key references quarry.documents (id) on delete cascade,
            source_id bigint not null references quarry.sources (id) on delete cascade,
            kind text not null,   -- package.json, pyproject.toml, requirements.txt, Cargo.toml, go.mod
            scope text not null   -- directory it governs, relative to the source root ('' = root)
        )
    """)
    op.execute("create index manifests_source_idx on quarry.manifests (source_id, kind)")
    op.execute("""
        create table quarry.version_constraints (
            id bigint generated always as identity primary key,
            -- the document that states it: the constrained document itself, or a manifest
            document_id uuid not null references quarry.documents (id) on delete cascade,
            source_id bigint not null references quarry.sources (id) on delete cascade,
            facet text not null check (facet in ('language_target', 'sdk_dependency')),
            name text not null default '',  -- package or language; '' when the constraint names none
            range_text text not null,        -- node-semver syntax, as parsed
            version_range quarry.semver_multirange not null,
            raw text not null,               -- as written in the document
            origin text not null             -- e.g. pragma, front_matter:version, package.json:dependencies
        )
    """)
    op.execute("create index version_constraints_document_idx on quarry.version_constraints (document_id, facet, name)")
    op.execute("create index version_constraints_name_idx on quarry.version_constraints (source_id, facet, name)")
    op.execute("create index version_constraints_range_idx on quarry.version_constraints using gist (version_range)")
    # A release-versioned docs source (e.g. "0.17.x" for the 0.17 docs) targets that
    # range wherever a document says nothing itself; set by ingest or quarry.set_source_version.
    op.execute("alter table quarry.sources add column version_range quarry.semver_multirange")


def downgrade() -> None:
    op.execute("alter table quarry.sources drop column if exists version_range")
    op.execute("drop table if exists quarry.version_constraints, quarry.manifests")
