"""The search server's database login, probed exactly as ``quarry serve`` connects (``Runtime(read_only=True)``).

It must be its own unprivileged role (not a SET ROLE on a superuser session), read nothing of the
keys, and write only through the definer functions that check a presented admin key themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from pydantic import SecretStr

from engine.admin.jobs import JobRun
from engine.config import Settings
from engine.runtime import Runtime
from engine.store import api_keys
from engine.store.db import SERVER_ROLE, PrivilegedLoginError
from engine.store.vector_stores import add_vector, count_vectors

#: The definer functions the server's login may execute: each returns a verdict or checks a key itself.
SERVER_DEFINER_FUNCTIONS = {
    "quarry.verify_api_key(text)",
    "quarry.upgrade_legacy_api_key(text,bytea)",
    "quarry.take_rate_tokens(text,double precision,double precision,double precision)",
    "quarry.request_job_cancel(uuid,text)",
    "quarry.enqueue_job_retry(uuid,uuid,text)",
    "quarry.enqueue_source_job(text,text,jsonb,uuid,text)",
    "quarry.vector_upsert(text,text,vector,jsonb,text,text,text)",
    "quarry.vector_delete(text,text,text,text)",
    "quarry.kb_write(text,jsonb,timestamp with time zone)",
    "quarry.kb_store_evidence(text,text,bytea,text,text,text,boolean,uuid)",
    "quarry.kb_reindex(text,uuid)",
    "quarry.kb_delete(text,text[],boolean)",
}


@pytest.fixture(scope="module")
def server(migrated_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    settings = Settings(database_url=migrated_url, home=tmp_path_factory.mktemp("privileges-home"),
                        pool_min_size=1, pool_max_size=2)
    with Runtime(settings, read_only=True) as runtime:
        yield runtime


def _denied(pool: ConnectionPool, statement: str, params: tuple[object, ...] = ()) -> None:
    with pool.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement, params)


def test_the_server_logs_in_as_its_own_role_and_cannot_become_another(server: Runtime, migrated_url: str) -> None:
    owner = str(psycopg.conninfo.conninfo_to_dict(migrated_url).get("user") or "postgres")
    with server.pool.connection() as conn:
        assert conn.execute("select session_user, current_user").fetchone() == (SERVER_ROLE, SERVER_ROLE)
        row = conn.execute("select rolsuper, rolcreaterole, rolcreatedb from pg_roles where rolname = session_user")
        assert row.fetchone() == (False, False, False)
        conn.execute("reset role")  # what gave superuser back on the old SET ROLE session
        assert conn.execute("select current_user").fetchone() == (SERVER_ROLE,)
    for statement in ("update quarry.trust_weights set weight = weight",
                      "select pg_read_file('/etc/hostname')",
                      "select pg_ls_dir('.')",
                      "copy (select 1) to program 'true'"):
        _denied(server.pool, statement)
    for role in (owner, "quarry_admin"):
        _denied(server.pool, sql.SQL("set session authorization {}").format(sql.Identifier(role)).as_string())
        _denied(server.pool, sql.SQL("set role {}").format(sql.Identifier(role)).as_string())


def test_keys_are_never_readable_only_verdicts_are(server: Runtime, session_pool: ConnectionPool) -> None:
    created = api_keys.create_key(session_pool, f"priv-{uuid.uuid4().hex[:8]}")
    for statement in ("select salt, hash from quarry.api_keys", "select count(*) from quarry.api_keys",
                      "select * from quarry.deployment_secrets", "select quarry.api_key_digest('x')",
                      "select quarry.active_key_scopes('x')", "update quarry.api_keys set revoked_at = now()",
                      "select quarry.revoke_api_key('anything')"):
        _denied(server.pool, statement)
    with server.pool.connection() as conn:
        cursor = conn.execute("select * from quarry.verify_api_key(%s)", (created.secret,))
        row = cursor.fetchone()
        columns = [column.name for column in cursor.description or []]
    assert "hash" not in columns and "salt" not in columns
    assert row is not None and row[0] == "ok" and row[1] == created.id and row[4] is None
    assert api_keys.KeyVerifier(server.pool).verify(created.secret).id == created.id


def test_buckets_and_vectors_are_written_only_through_functions_that_check_the_key(
    server: Runtime, session_pool: ConnectionPool,
) -> None:
    store = f"priv-{uuid.uuid4().hex[:8]}"
    add_vector(session_pool, store, "a", [1.0, 2.0, 3.0])
    search = api_keys.create_key(session_pool, f"priv-s-{uuid.uuid4().hex[:8]}", ["search"])
    admin = api_keys.create_key(session_pool, f"priv-a-{uuid.uuid4().hex[:8]}", ["admin"])
    for statement, params in (
        ("delete from quarry.rate_limit_buckets", ()),
        ("update quarry.rate_limit_buckets set tokens = 1e9", ()),
        ("select * from quarry.take_rate_tokens(%s, 1, 60, 1)", ("qry_aaaaaaaaaaaa_" + "A" * 43,)),
        ("delete from quarry.store_vectors", ()),
        ("truncate quarry.store_vectors", ()),
        ("update quarry.vector_namespaces set vectors = 99", ()),
        ("select quarry.vector_delete(%s, 'a')", (store,)),
        ("select quarry.vector_delete(%s, 'a', '', %s)", (store, search.secret)),
        ("select * from quarry.vector_upsert(%s, 'b', '[1,2,3]')", (store,)),
        ("select * from quarry.ensure_vector_store('priv-new', 3)", ()),
        ("select quarry.drop_vector_store(%s)", (store,)),
        ("create table quarry.priv_probe (a int)", ()),
        ("create table public.priv_probe (a int)", ()),
    ):
        _denied(server.pool, statement, params)
    assert count_vectors(session_pool, store) == 1
    with server.pool.connection() as conn:
        (deleted,) = conn.execute("select quarry.vector_delete(%s, 'a', '', %s)", (store, admin.secret)).fetchone() \
            or (None,)
        assert deleted is True
        granted = conn.execute("select granted from quarry.take_rate_tokens(%s, 1, 60, 1)", (search.secret,))
        assert granted.fetchone() == (True,)


def test_jobs_are_cancelled_or_queued_only_with_an_admin_key(
    server: Runtime, session_pool: ConnectionPool, database_url: str,
) -> None:
    job = JobRun.create(session_pool, "reindex", None, {"parts": ["facets"]})
    job.close()  # queued, nobody holds it
    search = api_keys.create_key(session_pool, f"priv-js-{uuid.uuid4().hex[:8]}", ["search"])
    admin = api_keys.create_key(session_pool, f"priv-ja-{uuid.uuid4().hex[:8]}", ["admin"])
    api_keys.revoke_key(session_pool, (revoked := api_keys.create_key(
        session_pool, f"priv-jr-{uuid.uuid4().hex[:8]}", ["admin"])).name)
    for key in (None, search.secret, revoked.secret, "qry_aaaaaaaaaaaa_" + "A" * 43):
        _denied(server.pool, "select quarry.request_job_cancel(%s, %s)", (job.id, key))
        _denied(server.pool, "select quarry.enqueue_job_retry(%s, gen_random_uuid(), %s)", (job.id, key))
        _denied(server.pool, "select quarry.enqueue_source_job('remove_source', 'x', '{}', gen_random_uuid(), %s)",
                (key,))
    for statement in ("update quarry.jobs set status = 'cancelled'", "select quarry.try_lock_job(1)",
                      "select quarry.reap_interrupted_jobs()", "delete from quarry.jobs"):
        _denied(server.pool, statement)
    with server.pool.connection() as conn:
        assert conn.execute("select quarry.request_job_cancel(%s, %s)", (job.id, admin.secret)).fetchone() \
            == ("cancelled",)


def test_the_knowledge_base_is_written_only_with_an_admin_key(server: Runtime, session_pool: ConnectionPool) -> None:
    search = api_keys.create_key(session_pool, f"priv-kb-{uuid.uuid4().hex[:8]}", ["search"])
    admin = api_keys.create_key(session_pool, f"priv-kba-{uuid.uuid4().hex[:8]}", ["admin"])
    node = {"nodes": [{"type": "concept", "properties": {"name": "privilege"}, "identity_property": "name"}]}
    evidence = "e_" + "0" * 64
    for key in (None, search.secret):
        _denied(server.pool, "select quarry.kb_write(%s, %s, now())", (key, Jsonb(node)))
        _denied(server.pool, "select quarry.kb_store_evidence(%s, %s, 'x', 'text/plain', 'auto', null, false,"
                " gen_random_uuid())", (key, evidence))
        _denied(server.pool, "select quarry.kb_reindex(%s, gen_random_uuid())", (key,))
        _denied(server.pool, "select quarry.kb_delete(%s, array[%s], false)", (key, evidence))
    for statement in ("delete from quarry.kb_records", "update quarry.kb_evidence set index_state = 'ready'",
                      "select quarry.kb_mark_indexed(array['x'], 'ready', null)"):
        _denied(server.pool, statement)
    with server.pool.connection() as conn:
        written = conn.execute("select quarry.kb_write(%s, %s, now())", (admin.secret, Jsonb(node))).fetchone()
        assert written is not None and written[0]["nodes"][0]["type"] == "concept"
        conn.execute("select quarry.kb_delete(%s, array[%s], false)",
                     (admin.secret, written[0]["nodes"][0]["id"]))


def test_the_only_definer_functions_the_server_may_call_check_a_key_or_return_a_verdict(server: Runtime) -> None:
    with server.pool.connection() as conn:
        callable_definers = {row[0].replace(", ", ",") for row in conn.execute(
            "select p.oid::regprocedure::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
            " where n.nspname = 'quarry' and p.prosecdef and p.prorettype <> 'trigger'::regtype"
            " and has_function_privilege(session_user, p.oid, 'EXECUTE')")}
        writable = conn.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = 'quarry' and c.relkind in ('r', 'p', 'v', 'm')"
            " and (has_table_privilege(session_user, c.oid, 'INSERT') or has_table_privilege(session_user, c.oid,"
            " 'UPDATE') or has_table_privilege(session_user, c.oid, 'DELETE')"
            " or has_table_privilege(session_user, c.oid, 'TRUNCATE'))").fetchall()
    assert callable_definers == SERVER_DEFINER_FUNCTIONS
    assert writable == []


def test_a_privileged_server_login_is_refused(migrated_url: str, tmp_path: Path) -> None:
    # The test database's owner is a superuser: as QUARRY_SERVER_DATABASE_URL it must not be used.
    settings = Settings(database_url=migrated_url, server_database_url=SecretStr(migrated_url), home=tmp_path)
    with pytest.raises(PrivilegedLoginError, match="privileged"):
        Runtime(settings, read_only=True)
