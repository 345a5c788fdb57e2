"""The per-deployment secrets behind least privilege: the API-key HMAC key and the server role's password.

API keys are high-entropy random tokens, so they are verified with HMAC-SHA-256 under a key
only the owner role can read (sql/060-api-keys.sql) instead of scrypt: equal, microsecond cost
whether or not a prefix exists. The key is stored as its two HMAC pads, so SQL needs no
extension to compute it. ``quarry serve`` logs in as ``quarry_server`` (created by
sql/090-grants.sql with the password kept here), a role that is no superuser and can become
only ``quarry_reader``. Keys stored with scrypt are converted on their next successful use.

Revision ID: 0018_least_privilege
Revises: 0017_source_jobs
Create Date: 2026-12-09
"""

import secrets

from alembic import op

revision = "0018_least_privilege"
down_revision = "0017_source_jobs"
branch_labels = None
depends_on = None


def _pad(key: bytes, byte: int) -> bytes:
    return bytes(b ^ byte for b in key.ljust(64, b"\x00"))


def upgrade() -> None:
    op.execute("""
        create table quarry.deployment_secrets (
            singleton boolean primary key default true check (singleton),
            hmac_inner bytea not null check (length(hmac_inner) = 64),
            hmac_outer bytea not null check (length(hmac_outer) = 64),
            server_password text not null check (length(server_password) >= 32),
            created_at timestamptz not null default now()
        )
    """)
    op.execute("revoke all on quarry.deployment_secrets from public")
    key = secrets.token_bytes(32)
    bind = op.get_bind()
    bind.exec_driver_sql(
        "insert into quarry.deployment_secrets (hmac_inner, hmac_outer, server_password) values (%s, %s, %s)",
        (_pad(key, 0x36), _pad(key, 0x5C), secrets.token_urlsafe(32)),
    )


def downgrade() -> None:
    # Keys converted to HMAC since cannot be verified without this secret: they must be re-issued.
    op.execute("delete from quarry.api_keys where kdf = 'hmac-sha256'")
    op.execute("drop table if exists quarry.deployment_secrets")
