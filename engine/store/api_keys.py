"""API keys for the hosted MCP endpoint: create, list, revoke, verify; and per-key rate limits.

A key reads ``qry_<prefix>_<secret>``: the 12-character prefix is public and finds the
row; the secret is 32 random bytes. Only a salted scrypt hash of the whole key is
stored (with the KDF parameters, so the cost can be raised later), and hashes are
compared in constant time. Verifying a key costs one scrypt run per process: a
verified key is remembered by its SHA-256 together with the stored hash it matched,
while revocation is read from the database on every request, so it takes effect at once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

import psycopg
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from engine.errors import InvalidRequestError, NotFoundError

Scope = Literal["search", "admin"]
SCOPES: tuple[Scope, ...] = ("search", "admin")

_KEY_PATTERN = re.compile(r"qry_([a-z0-9]{12})_([A-Za-z0-9_-]{43})")
_PREFIX_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# scrypt at n=2**14, r=8 takes ~16 MiB and tens of milliseconds: negligible once per
# key per process, expensive for anyone grinding a stolen table.
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
_VERIFIED_CACHE_SIZE = 1024


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
    """Who is calling: the key that authenticated a request."""

    id: UUID
    name: str
    scopes: list[str]

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or "admin" in self.scopes


@dataclass(frozen=True, slots=True)
class _StoredKey:
    id: UUID
    name: str
    salt: bytes
    hash: bytes
    kdf: str
    scopes: list[str]
    revoked_at: datetime | None


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


def _kdf_name() -> str:
    return f"scrypt:{_SCRYPT_N}:{_SCRYPT_R}:{_SCRYPT_P}"


def _derive(key: str, salt: bytes, kdf: str) -> bytes:
    algorithm, n, r, p = kdf.split(":")
    if algorithm != "scrypt":
        raise ValueError(f"unsupported key derivation {algorithm!r}")
    return hashlib.scrypt(key.encode(), salt=salt, n=int(n), r=int(r), p=int(p), dklen=32, maxmem=64 * 1024 * 1024)


def create_key(pool: ConnectionPool, name: str, scopes: list[Scope] | None = None) -> CreatedKey:
    """Mint a key, store its salted hash and return it (the only time the key is visible)."""
    chosen = sorted(set(scopes or ["search"]))
    if not chosen or any(scope not in SCOPES for scope in chosen):
        raise InvalidRequestError(f"scopes must be among {', '.join(SCOPES)}")
    prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(12))
    key = f"qry_{prefix}_{secrets.token_urlsafe(32)}"
    salt = secrets.token_bytes(16)
    kdf = _kdf_name()
    try:
        with pool.connection() as conn:
            row = conn.execute(
                "insert into quarry.api_keys (name, prefix, salt, hash, kdf, scopes)"
                " values (%s, %s, %s, %s, %s, %s) returning id",
                (name, prefix, salt, _derive(key, salt, kdf), kdf, chosen),
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
    """Checks presented keys against the database; thread-safe, one per process."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._verified: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def verify(self, presented: str) -> VerifiedKey:
        """The key's identity, or ``KeyRejected`` saying why not. Blocking (database, scrypt)."""
        match = _KEY_PATTERN.fullmatch(presented)
        if match is None:
            raise KeyRejected("malformed API key: expected qry_<prefix>_<secret>")
        with self._pool.connection() as conn:
            with conn.cursor(row_factory=class_row(_StoredKey)) as cursor:
                stored = cursor.execute("select * from quarry.find_api_key(%s)", (match.group(1),)).fetchone()
            if stored is None or not self._matches(presented, stored):
                raise KeyRejected("unknown API key")
            # Checked after the hash, so only the key's holder learns it was revoked.
            if stored.revoked_at is not None:
                raise KeyRejected("this API key was revoked")
            conn.execute("select quarry.note_api_key_use(%s)", (stored.id,))
        return VerifiedKey(stored.id, stored.name, list(stored.scopes))

    def _matches(self, presented: str, stored: _StoredKey) -> bool:
        fingerprint = hashlib.sha256(presented.encode()).digest()
        with self._lock:
            remembered = self._verified.get(fingerprint)
        if remembered is not None and hmac.compare_digest(remembered, stored.hash):
            return True
        if not hmac.compare_digest(_derive(presented, stored.salt, stored.kdf), stored.hash):
            return False
        with self._lock:
            self._verified[fingerprint] = stored.hash
            self._verified.move_to_end(fingerprint)
            while len(self._verified) > _VERIFIED_CACHE_SIZE:
                self._verified.popitem(last=False)
        return True


def take_rate_tokens(
    pool: ConnectionPool, key_id: UUID, cost: float, *, capacity: float, refill_per_second: float
) -> RateDecision:
    """Take ``cost`` tokens from the key's bucket (atomic, shared by all replicas), or say when they will fit."""
    if refill_per_second <= 0 or capacity <= 0:
        raise ValueError("capacity and refill_per_second must be positive")
    with pool.connection() as conn, conn.cursor(row_factory=class_row(RateDecision)) as cursor:
        decision = cursor.execute(
            "select * from quarry.take_rate_tokens(%s, %s, %s, %s)", (key_id, cost, capacity, refill_per_second)
        ).fetchone()
    assert decision is not None
    return decision
