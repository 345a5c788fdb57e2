-- Embedding spaces: one model + purpose each, with its own partial HNSW index.
-- Re-runnable: applied by `quarry migrate` after alembic, in file-name order.

create or replace function quarry.space_index_name(space_name text) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$ select 'embeddings_hnsw_' || space_name $$;

comment on function quarry.space_index_name(text) is
'Name of the partial HNSW index that serves one embedding space.';

create or replace function quarry.space_index_definition(space_name text, vector_dimension int) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- The index expression casts to the space's dimension so HNSW can index it; the vector leg
    -- (quarry.nearest_chunks) repeats exactly this expression and predicate. The graph holds
    -- half-precision copies (the stored vectors stay single precision): the index is about
    -- half the size to keep in memory and builds and scans a little faster; the recall it loses
    -- at the same ef_search, quarry.hnsw_scan_depth makes up. halfvec also indexes up to 4,000
    -- dimensions where vector stops at 2,000 (docs/BENCHMARKS.md, decisions).
    select format(
        'create index if not exists %I on quarry.embeddings using hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops) '
        -- ef_construction 128, not pgvector's 64: a better-connected graph gives higher recall
        -- at the same ef_search, worth the slower build
        'with (m = 16, ef_construction = 128) where space = %L',
        quarry.space_index_name(space_name), vector_dimension, space_name)
$$;

comment on function quarry.space_index_definition(text, int) is
'The CREATE INDEX statement of the partial HNSW index (half precision, cosine) that serves one embedding space.';

create or replace function quarry.create_space_generation(
    space_name text, model_name text, vector_dimension int, serves text
) returns void
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
begin
    insert into quarry.embedding_spaces (name, model, dimension, serves)
    values (space_name, model_name, vector_dimension, serves);
    execute quarry.space_index_definition(space_name, vector_dimension);
end
$$;

comment on function quarry.create_space_generation(text, text, int, text) is
'Register a physical embedding space (model, dimension) with its partial HNSW index, serving a logical space or (serves null) being filled.';

create or replace function quarry.ensure_embedding_space(
    space_name text,
    model_name text,
    vector_dimension int
) returns text
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
declare
    serving quarry.embedding_spaces;
begin
    perform pg_advisory_xact_lock(hashtext('quarry.embedding_spaces'));
    select * into serving from quarry.embedding_spaces where serves = space_name;
    if found and (serving.model <> model_name or serving.dimension <> vector_dimension) then
        raise exception 'embedding space % holds % (% dims); requested % (% dims): run quarry reembed --space % first',
            space_name, serving.model, serving.dimension, model_name, vector_dimension, space_name
            using errcode = 'data_exception';
    end if;
    if not found then
        perform quarry.create_space_generation(space_name, model_name, vector_dimension, space_name);
        return space_name;
    end if;
    return serving.name;
end
$$;

comment on function quarry.ensure_embedding_space(text, text, int) is
'The physical space serving a logical space (text, code), registered with its HNSW index on first use; errors if it holds another model.';

create or replace function quarry.begin_space_generation(space_name text, model_name text, vector_dimension int)
returns text
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
declare
    pending quarry.embedding_spaces;
    generation int;
begin
    perform pg_advisory_xact_lock(hashtext('quarry.embedding_spaces'));
    if not exists (select 1 from quarry.embedding_spaces where serves = space_name) then
        raise exception 'no embedding space % to re-embed', space_name using errcode = 'no_data_found';
    end if;
    for pending in
        select * from quarry.embedding_spaces
        where serves is null and name ~ ('^' || space_name || '_g[0-9]+$')
    loop
        if pending.model = model_name and pending.dimension = vector_dimension then
            return pending.name;  -- an interrupted re-embed resumes where it stopped
        end if;
        perform quarry.drop_embedding_space(pending.name);  -- filled for a model no longer wanted
    end loop;
    select coalesce(max(substring(name from '_g([0-9]+)$')::int), 1) + 1 into generation
    from quarry.embedding_spaces where name = space_name or name ~ ('^' || space_name || '_g[0-9]+$');
    perform quarry.create_space_generation(space_name || '_g' || generation, model_name, vector_dimension, null);
    return space_name || '_g' || generation;
end
$$;

comment on function quarry.begin_space_generation(text, text, int) is
'The generation a re-embed of a logical space fills (resumed when one for this model exists): name <space>_g<N>, not serving yet.';

create or replace function quarry.switch_space_generation(space_name text, generation text)
returns text
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
declare
    previous text;
begin
    perform pg_advisory_xact_lock(hashtext('quarry.embedding_spaces'));
    select name into previous from quarry.embedding_spaces where serves = space_name for update;
    update quarry.embedding_spaces set serves = null where name = previous;
    update quarry.embedding_spaces set serves = space_name where name = generation and serves is null;
    if not found then
        raise exception 'generation % of space % is not waiting to serve', generation, space_name
            using errcode = 'invalid_parameter_value';
    end if;
    return previous;
end
$$;

comment on function quarry.switch_space_generation(text, text) is
'Atomically make a filled generation serve its logical space; returns the generation it replaced.';

create or replace function quarry.drop_embedding_space(space_name text) returns void
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
begin
    if exists (select 1 from quarry.embedding_spaces where name = space_name and serves is not null) then
        raise exception 'embedding space % serves searches; switch to another generation first', space_name
            using errcode = 'object_in_use';
    end if;
    execute format('drop index if exists quarry.%I', quarry.space_index_name(space_name));
    delete from quarry.embeddings where space = space_name;
    delete from quarry.embedding_spaces where name = space_name and serves is null;
end
$$;

comment on function quarry.drop_embedding_space(text) is
'Remove a physical embedding space that no longer serves searches: its vectors and its HNSW index.';
