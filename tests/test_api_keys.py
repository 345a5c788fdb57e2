"""API keys are stored as HMAC-SHA-256 under the deployment's secret; scrypt keys convert on their next use."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid

import pytest
from psycopg_pool import ConnectionPool

from engine.store import api_keys


def _deployment_key(pool: ConnectionPool) -> bytes:
    with pool.connection() as conn:
        row = conn.execute("select hmac_inner from quarry.deployment_secrets").fetchone()
    assert row is not None
    return bytes(b ^ 0x36 for b in row[0])[:32]  # the stored inner pad is the 32-byte key xor 0x36, zero-padded


def _stored(pool: ConnectionPool, key_id: uuid.UUID) -> tuple[bytes, bytes, str]:
    with pool.connection() as conn:
        row = conn.execute("select salt, hash, kdf from quarry.api_keys where id = %s", (key_id,)).fetchone()
    assert row is not None
    return bytes(row[0]), bytes(row[1]), str(row[2])


def _legacy_key(pool: ConnectionPool, *, revoked: bool = False) -> tuple[uuid.UUID, str]:
    """A key as older versions stored it: scrypt of the whole key with a random salt."""
    prefix = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))
    key = f"qry_{prefix}_{secrets.token_urlsafe(32)}"
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(key.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32, maxmem=64 * 1024 * 1024)
    with pool.connection() as conn:
        row = conn.execute(
            "insert into quarry.api_keys (name, prefix, salt, hash, kdf, scopes, revoked_at)"
            " values (%s, %s, %s, %s, 'scrypt:16384:8:1', array['search'], case when %s then now() end)"
            " returning id", (f"legacy-{prefix}", prefix, salt, digest, revoked)).fetchone()
    assert row is not None
    return row[0], key


def test_a_new_key_is_stored_as_its_hmac_under_the_deployment_secret(session_pool: ConnectionPool) -> None:
    created = api_keys.create_key(session_pool, f"hmac-{uuid.uuid4().hex[:8]}", ["admin"])
    salt, stored, kdf = _stored(session_pool, created.id)
    assert kdf == api_keys.KEY_DIGEST and salt == b""
    assert stored == hmac.new(_deployment_key(session_pool), created.secret.encode(), hashlib.sha256).digest()
    verified = api_keys.KeyVerifier(session_pool).verify(created.secret)
    assert (verified.id, verified.scopes, verified.credential) == (created.id, ["admin"], created.secret)
    assert created.secret not in repr(verified)


@pytest.mark.parametrize("tamper", [
    lambda key: key[:-1] + ("B" if key[-1] != "B" else "C"),  # right prefix, wrong secret
    lambda key: key[:4] + "zzzzzzzzzzzz" + key[16:],  # unknown prefix
])
def test_wrong_keys_get_the_same_answer(session_pool: ConnectionPool, tamper: object) -> None:
    created = api_keys.create_key(session_pool, f"wrong-{uuid.uuid4().hex[:8]}")
    assert callable(tamper)
    with pytest.raises(api_keys.KeyRejected, match=r"^unknown API key$"):
        api_keys.KeyVerifier(session_pool).verify(tamper(created.secret))


def test_a_scrypt_key_is_converted_on_its_next_successful_use(session_pool: ConnectionPool) -> None:
    key_id, key = _legacy_key(session_pool)
    verifier = api_keys.KeyVerifier(session_pool)
    with pytest.raises(api_keys.KeyRejected, match="unknown"):
        verifier.verify(key[:-2] + ("AA" if not key.endswith("AA") else "BB"))
    assert _stored(session_pool, key_id)[2].startswith("scrypt:")  # a wrong secret converts nothing
    assert verifier.verify(key).id == key_id
    salt, stored, kdf = _stored(session_pool, key_id)
    assert kdf == api_keys.KEY_DIGEST and salt == b""
    assert stored == hmac.new(_deployment_key(session_pool), key.encode(), hashlib.sha256).digest()
    assert verifier.verify(key).id == key_id  # and keeps working, now by HMAC


def test_a_revoked_scrypt_key_stays_revoked_after_conversion(session_pool: ConnectionPool) -> None:
    key_id, key = _legacy_key(session_pool, revoked=True)
    with pytest.raises(api_keys.KeyRejected, match="revoked"):
        api_keys.KeyVerifier(session_pool).verify(key)
    assert _stored(session_pool, key_id)[2] == api_keys.KEY_DIGEST
    with pytest.raises(api_keys.KeyRejected, match="revoked"):
        api_keys.KeyVerifier(session_pool).verify(key)
