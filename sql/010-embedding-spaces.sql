-- Embedding spaces: one model + purpose each, with its own partial HNSW index.
-- Re-runnable: applied by `quarry migrate` after alembic, in file-name order.

create or replace function quarry.space_index_name(space_name text) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$ select 'embeddings_hnsw_' || space_name $$;

comment on function quarry.space_index_name(text) is
'Name of the partial HNSW index that serves one embedding space.';

create or replace function quarry.ensure_embedding_space(
    space_name text,
    model_name text,
    vector_dimension int
) returns void
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
declare
    existing quarry.embedding_spaces;
begin
    select * into existing from quarry.embedding_spaces where name = space_name for update;
    if found and (existing.model <> model_name or existing.dimension <> vector_dimension) then
        raise exception 'embedding space % holds % (% dims); requested % (% dims): re-embed the space first',
            space_name, existing.model, existing.dimension, model_name, vector_dimension
            using errcode = 'data_exception';
    end if;
    if not found then
        insert into quarry.embedding_spaces (name, model, dimension)
        values (space_name, model_name, vector_dimension);
    end if;
    -- The index expression casts to the space's dimension so HNSW can index it; the
    -- vector leg of hybrid_search repeats exactly this expression and predicate.
    execute format(
        'create index if not exists %I on quarry.embeddings using hnsw ((embedding::vector(%s)) vector_cosine_ops) '
        'with (m = 16, ef_construction = 64) where space = %L',
        quarry.space_index_name(space_name), vector_dimension, space_name);
end
$$;

comment on function quarry.ensure_embedding_space(text, text, int) is
'Register an embedding space (model, dimension) and create its HNSW index; errors if the space holds another model.';
