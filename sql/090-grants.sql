-- Roles (created in alembic 0006): the search server runs as quarry_reader, which reads
-- the corpus and writes only API-key usage and rate-limit buckets; quarry_admin runs
-- ingestion and psql administration. Re-applied on every migrate, so new tables and
-- functions are covered.

grant usage on schema quarry to quarry_reader, quarry_admin;
-- The semver range types (alembic 0004) live here; without usage a version filter fails for the reader.
grant usage on schema quarry_types to quarry_reader, quarry_admin;

grant select on all tables in schema quarry to quarry_reader;
grant update (last_used_at) on quarry.api_keys to quarry_reader;
grant select, insert, update, delete on quarry.rate_limit_buckets to quarry_reader;

grant select, insert, update, delete, truncate on all tables in schema quarry to quarry_admin;
grant usage, select on all sequences in schema quarry to quarry_admin;

grant execute on all functions in schema quarry to quarry_reader, quarry_admin;
