"""API keys for the hosted MCP endpoint: create, list, revoke, verify; and per-key rate limits.

A key reads ``qry_<prefix>_<secret>``: the 12-character prefix is public and finds the row;
the secret is 32 random bytes. A key is that much entropy, so it needs no slow KDF: the
database stores HMAC-SHA-256 of the whole key under a per-deployment secret only the owner
role reads (sql/060-api-keys.sql, alembic 0018), and compares digests in constant time. The
search server never reads a hash: it asks ``quarry.verify_api_key`` for a verdict, which
costs the same for a known and an unknown prefix. Revocation is read on every request.

Keys stored by older versions with scrypt are converted on their next successful use: the
verdict ``legacy`` hands over the salt, the server derives scrypt once, and
``quarry.upgrade_legacy_api_key`` stores the HMAC if it matched. Until then such a key's
prefix costs a scrypt run (tens of milliseconds) to try, which the server's pre-auth limiter
bounds per client; re-issuing the key (``quarry keys create`` + ``revoke``) ends it at once.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal
from uuid import UUID

import psycopg
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError, NotFoundError

Scope = Literal["search", "admin"]
SCOPES: tuple[Scope, ...] = ("search", "admin")

#: How stored keys are hashed now (``quarry.api_keys.kdf``).
KEY_DIGEST = "hmac-sha256"
_PREFIX_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True, slots=True)
class CreatedKey:
    """A new key. ``secret`` is the whole key string: shown once, never stored."""

    id: UUID
    name: str
    prefix: str
    scopes: list[str]
    secret: str


@dataclass(frozen=True, slots=True)
class KeySummary:
    id: UUID
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class VerifiedKey:
    """Who is calling: the key that authenticated a request.

    ``credential`` is the presented key itself, kept for the request so that definer functions
    (job actions, vector writes, rate-limit charges) can check it again in the database:
    the server's own login can do none of those without it. Never shown or logged.
    """

    id: UUID
    name: str
    scopes: list[str]
    credential: str = field(default="", repr=False, compare=False)

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or "admin" in self.scopes


@dataclass(frozen=True, slots=True)
class _Verdict:
    verdict: str
    key_id: UUID | None
    key_name: str | None
    key_scopes: list[str] | None
    legacy_salt: bytes | None = None
    legacy_kdf: str | None = None


@dataclass(frozen=True, slots=True)
class RateDecision:
    granted: bool
    tokens_left: float
    retry_after: float


class KeyRejected(Exception):
    """The presented key is malformed, unknown, wrong or revoked; ``reason`` is safe to show the caller."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_REASONS = {"malformed": "malformed API key: expected qry_<prefix>_<secret>", "unknown": "unknown API key",
            "revoked": "this API key was revoked"}


def _scrypt(key: str, salt: bytes, kdf: str) -> bytes:
    """The hash older versions stored: ``scrypt:N:r:p`` of the whole key (only for converting it)."""
    algorithm, n, r, p = kdf.split(":")
    if algorithm != "scrypt":
        raise ValueError(f"unsupported key derivation {algorithm!r}")
    return hashlib.scrypt(key.encode(), salt=salt, n=int(n), r=int(r), p=int(p), dklen=32, maxmem=64 * 1024 * 1024)


def create_key(pool: ConnectionPool, name: str, scopes: list[Scope] | None = None) -> CreatedKey:
    """Mint a key, store its HMAC and return it (the only time the key is visible). Needs the owner role."""
    chosen = sorted(set(scopes or ["search"]))
    if not chosen or any(scope not in SCOPES for scope in chosen):
        raise InvalidRequestError(f"scopes must be among {', '.join(SCOPES)}")
    prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(12))
    key = f"qry_{prefix}_{secrets.token_urlsafe(32)}"
    try:
        with pool.connection() as conn:
            row = conn.execute(
                "insert into quarry.api_keys (name, prefix, salt, hash, kdf, scopes)"
                " values (%s, %s, '\\x'::bytea, quarry.api_key_digest(%s), %s, %s) returning id",
                (name, prefix, key, KEY_DIGEST, chosen),
            ).fetchone()
    except psycopg.errors.UniqueViolation:
        raise InvalidRequestError(f"an active key named {name!r} already exists; revoke it or pick another name") \
            from None
    except psycopg.errors.CheckViolation:
        raise InvalidRequestError("key names are 1-100 characters: letters, digits, space and . _ @ -") from None
    assert row is not None
    return CreatedKey(row[0], name, prefix, list(chosen), key)


def list_keys(pool: ConnectionPool) -> list[KeySummary]:
    with pool.connection() as conn, conn.cursor(row_factory=class_row(KeySummary)) as cursor:
        return cursor.execute(
            "select id, name, prefix, scopes, created_at, last_used_at, revoked_at"
            " from quarry.api_keys order by created_at, name"
        ).fetchall()


def revoke_key(pool: ConnectionPool, name_or_prefix: str) -> None:
    """Revoke the active key with this name or prefix."""
    with pool.connection() as conn:
        row = conn.execute("select quarry.revoke_api_key(%s)", (name_or_prefix,)).fetchone()
    if row is None or row[0] == 0:
        raise NotFoundError(f"no active key is named or prefixed {name_or_prefix!r}")


class KeyVerifier:
    """Asks the database for a verdict on presented keys; thread-safe, one per process."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def verify(self, presented: str) -> VerifiedKey:
        """The key's identity, or ``KeyRejected`` saying why not. Blocking (one database round trip)."""
        with self._pool.connection() as conn, conn.cursor(row_factory=class_row(_Verdict)) as cursor:
            found = cursor.execute("select * from quarry.verify_api_key(%s)", (presented,)).fetchone()
            assert found is not None
            if found.verdict == "legacy" and found.legacy_salt is not None and found.legacy_kdf is not None:
                derived = _scrypt(presented, found.legacy_salt, found.legacy_kdf)
                found = cursor.execute("select *, null::bytea as legacy_salt, null::text as legacy_kdf"
                                       " from quarry.upgrade_legacy_api_key(%s, %s)",
                                       (presented, derived)).fetchone()
                assert found is not None
        if found.verdict != "ok" or found.key_id is None or found.key_name is None or found.key_scopes is None:
            raise KeyRejected(_REASONS.get(found.verdict, "unknown API key"))
        return VerifiedKey(found.key_id, found.key_name, list(found.key_scopes), presented)


def take_rate_tokens(
    pool: ConnectionPool, key: VerifiedKey, cost: float, *, capacity: float, refill_per_second: float
) -> RateDecision:
    """Take ``cost`` tokens from the key's bucket (atomic, shared by all replicas), or say when they will fit.

    The database charges the bucket of the presented key only (``VerifiedKey.credential``).
    """
    if refill_per_second <= 0 or capacity <= 0:
        raise ValueError("capacity and refill_per_second must be positive")
    with pool.connection() as conn, conn.cursor(row_factory=class_row(RateDecision)) as cursor:
        decision = cursor.execute(
            "select * from quarry.take_rate_tokens(%s, %s, %s, %s)",
            (key.credential, cost, capacity, refill_per_second),
        ).fetchone()
    assert decision is not None
    return decision
