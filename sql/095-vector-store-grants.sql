-- Who may write vector stores. The search server (quarry_reader) reads them through
-- select (sql/090-grants.sql); its vector_add and vector_delete tools, which the server
-- allows only to callers with the admin scope (or the local user on stdio), write the
-- vectors table itself and create a store only through quarry.ensure_vector_store, a
-- definer function: it never gets DDL rights. Dropping a store and rebuilding its index
-- are for quarry_admin (psql, `quarry vectors load`).
-- Functions are executable by PUBLIC by default, and 090 grants every function to
-- quarry_reader: take that away where it is too much.

grant insert, update, delete on quarry.store_vectors to quarry_reader;

revoke execute on function quarry.ensure_vector_store(text, int, text) from public;
grant execute on function quarry.ensure_vector_store(text, int, text) to quarry_reader, quarry_admin;

revoke execute on function quarry.drop_vector_store(text), quarry.create_vector_store_index(int),
    quarry.drop_vector_store_index(int) from public, quarry_reader;
grant execute on function quarry.drop_vector_store(text), quarry.create_vector_store_index(int),
    quarry.drop_vector_store_index(int) to quarry_admin;
