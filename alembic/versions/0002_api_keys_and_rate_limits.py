"""API keys (salted hashes) and per-key token buckets for the hosted MCP endpoint.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A key is ``qry_<prefix>_<secret>``. The prefix is public (it finds the row and
    # names the key in `quarry keys list`); only a salted hash of the whole key is
    # stored, with the KDF and its parameters, so the cost can be raised later.
    op.execute("""
        create table quarry.api_keys (
            id uuid primary key default gen_random_uuid(),
            name text not null check (name ~ '^[A-Za-z0-9][A-Za-z0-9 ._@-]{0,99}$'),
            prefix text not null unique check (prefix ~ '^[a-z0-9]{12}$'),
            salt bytea not null,
            hash bytea not null,
            kdf text not null,
            scopes text[] not null
                check (cardinality(scopes) > 0 and scopes <@ array['search', 'admin']::text[]),
            created_at timestamptz not null default now(),
            last_used_at timestamptz,
            revoked_at timestamptz
        )
    """)
    # Names are how admins revoke keys, so they are unique among keys still in use.
    op.execute("create unique index api_keys_active_name_idx on quarry.api_keys (name) where revoked_at is null")

    # One token bucket per key, shared by every server replica. Unlogged: it is
    # rewritten on every request, and losing it in a crash only refills the buckets.
    op.execute("""
        create unlogged table quarry.rate_limit_buckets (
            key_id uuid primary key references quarry.api_keys (id) on delete cascade,
            tokens double precision not null,
            granted boolean not null,
            updated_at timestamptz not null
        )
    """)


def downgrade() -> None:
    op.execute("drop table if exists quarry.rate_limit_buckets, quarry.api_keys cascade")
