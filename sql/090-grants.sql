-- Roles. quarry_reader (alembic 0006, no login) holds what the search server may do;
-- quarry_server is the login `quarry serve` and `quarry mcp` connect as: a member of
-- quarry_reader only, no superuser, so no SET ROLE or SET SESSION AUTHORIZATION leads
-- anywhere else. quarry_admin runs ingestion and psql administration. Re-applied on every
-- migrate, so new tables and functions are covered.
--
-- The reader reads the corpus, jobs and vector stores and nothing of the keys. It writes
-- nothing directly: key verdicts, rate-limit charges, job actions and vector writes go
-- through definer functions that take the presented API key (sql/060, 075, 080).

grant usage on schema quarry to quarry_reader, quarry_admin;
-- The semver range types (alembic 0004) live here; without usage a version filter fails for the reader.
grant usage on schema quarry_types to quarry_reader, quarry_admin;

grant select on all tables in schema quarry to quarry_reader;
-- Keys, buckets and the deployment's secrets are read and written only by definer functions.
revoke all on quarry.api_keys, quarry.rate_limit_buckets, quarry.deployment_secrets from quarry_reader;
revoke all on quarry.deployment_secrets from public, quarry_admin;
revoke insert, update, delete, truncate on quarry.store_vectors from quarry_reader;
revoke create on schema quarry from public, quarry_reader;

grant select, insert, update, delete, truncate on all tables in schema quarry to quarry_admin;
revoke all on quarry.deployment_secrets from quarry_admin;
grant usage, select on all sequences in schema quarry to quarry_admin;

grant execute on all functions in schema quarry to quarry_reader, quarry_admin;

-- The login of the search server. Its password is the deployment's (alembic 0018), set here
-- on every migrate; `quarry serve` reads it with the owner's connection. A migrating role
-- that may not manage roles leaves it alone: then QUARRY_SERVER_DATABASE_URL names the login.
do $$
declare
    secret text := (select s.server_password from quarry.deployment_secrets s);
begin
    if not exists (select 1 from pg_roles r where r.rolname = 'quarry_server') then
        execute format('create role quarry_server login password %L nosuperuser nocreatedb nocreaterole '
                       'noreplication nobypassrls in role quarry_reader', secret);
    else
        execute format('alter role quarry_server with login password %L nosuperuser nocreatedb nocreaterole '
                       'noreplication nobypassrls', secret);
        if not exists (select 1 from pg_auth_members m
                       where m.roleid = 'quarry_reader'::regrole and m.member = 'quarry_server'::regrole) then
            grant quarry_reader to quarry_server;
        end if;
    end if;
exception when insufficient_privilege then
    raise notice 'quarry: this role may not create or alter the role quarry_server; '
                 'set QUARRY_SERVER_DATABASE_URL to the search server''s own login';
end
$$;
