"""Semantic versions: a sortable key, its range and multirange, and a parsed comparator.

``quarry.semver_key`` is text in the "C" collation, built by ``quarry.version_key``
(sql/005-semver.sql) so that byte order is semver precedence; a btree, a range type and
GiST all work on it unchanged. A composite key (major, minor, patch, identifiers[])
would need a composite-of-arrays to order prerelease identifiers that are sometimes
numbers and sometimes words; one string orders both and reads in ``\\d`` output.

A range type owns constructor functions. ``quarry migrate`` drops every routine in
schema ``quarry`` before re-applying sql/, and Postgres refuses to drop a type's
constructor, so the range and multirange types live in schema ``quarry_types`` and
``quarry.semver_range`` / ``quarry.semver_multirange`` are domains over them (a domain
owns no routines; operators, casts from text and GiST indexes see through it).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute('create domain quarry.semver_key as text collate "C"')
    op.execute("""
        comment on domain quarry.semver_key is
        'A semantic version as text whose byte order is semver precedence (see quarry.version_key).'
    """)
    op.execute("create schema quarry_types")
    op.execute("""
        comment on schema quarry_types is
        'Types that own routines (range constructors), outside schema quarry, whose routines quarry migrate recreates.'
    """)
    op.execute("""
        create type quarry_types.semver_range as range (
            subtype = quarry.semver_key,
            multirange_type_name = quarry_types.semver_multirange
        )
    """)
    op.execute("create domain quarry.semver_range as quarry_types.semver_range")
    op.execute("create domain quarry.semver_multirange as quarry_types.semver_multirange")
    op.execute("""
        comment on domain quarry.semver_range is
        'An interval of semantic versions (bounds are quarry.semver_key values).'
    """)
    op.execute("""
        comment on domain quarry.semver_multirange is
        'The versions a node-semver range covers (quarry.version_range); compare with && and <@, index with GiST.'
    """)
    # One desugared node-semver comparator. operator is one of < <= > >= = or * (any
    # version, then version and key are null); version is canonical (no v, no build).
    op.execute("""
        create type quarry.semver_comparator as (
            operator text,
            version text,
            key quarry.semver_key
        )
    """)
    op.execute("""
        comment on type quarry.semver_comparator is
        'One comparator of a desugared version range: operator (< <= > >= = *), canonical version, its key.'
    """)


def downgrade() -> None:
    op.execute("drop type if exists quarry.semver_comparator cascade")
    op.execute("drop domain if exists quarry.semver_multirange, quarry.semver_range cascade")
    op.execute("drop schema if exists quarry_types cascade")
    op.execute("drop domain if exists quarry.semver_key cascade")
