-- What 090's blanket grant of every function to quarry_reader must not include: functions
-- that write or create, and the key helpers other definer functions call. The reader
-- writes vectors only through quarry.vector_upsert and quarry.vector_delete, which ask for
-- an admin key themselves; creating, dropping and indexing stores happen inside them or are
-- for quarry_admin (psql, `quarry vectors load`). Applied after 090 (file order).
-- Functions are executable by PUBLIC by default: take that away where it is too much.

revoke execute on function quarry.ensure_vector_store(text, int, text), quarry.drop_vector_store(text),
    quarry.create_vector_store_index(int), quarry.drop_vector_store_index(int) from public, quarry_reader;
grant execute on function quarry.ensure_vector_store(text, int, text), quarry.drop_vector_store(text),
    quarry.create_vector_store_index(int), quarry.drop_vector_store_index(int) to quarry_admin;

revoke execute on function quarry.vector_upsert(text, text, vector, jsonb, text, text, text),
    quarry.vector_delete(text, text, text, text) from public;
grant execute on function quarry.vector_upsert(text, text, vector, jsonb, text, text, text),
    quarry.vector_delete(text, text, text, text) to quarry_reader, quarry_admin;

-- Key helpers: the digest reads the deployment's secret; the others are steps of verdicts.
revoke execute on function quarry.api_key_digest(text), quarry.active_key_scopes(text),
    quarry.require_admin_caller(text, text) from public, quarry_reader, quarry_admin;
revoke execute on function quarry.revoke_api_key(text) from public, quarry_reader;
grant execute on function quarry.revoke_api_key(text) to quarry_admin;

-- 090 granted every function again: the job locks stay with the processes that run jobs.
revoke execute on function quarry.try_lock_job(bigint), quarry.unlock_job(bigint),
    quarry.reap_interrupted_jobs(text, text) from quarry_reader;
