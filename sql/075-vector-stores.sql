-- Bring-your-own vector stores (alembic 0009): vectors computed elsewhere, stored per named
-- store (one partition of quarry.store_vectors each, with its dimension and metric) and
-- namespace, searched by HNSW or exactly.
--
-- Every statement that touches one store's rows names its store_id as a literal (dynamic
-- SQL), so the planner prunes to that partition and locks nothing else: a bulk load that
-- rebuilds one store's index never blocks searches of another store.

create or replace function quarry.vector_metric_operator(metric text) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    select case metric when 'cosine' then '<=>' when 'dot' then '<#>' when 'euclidean' then '<->' end
$$;

comment on function quarry.vector_metric_operator(text) is
'The pgvector distance operator of a metric: cosine <=>, dot <#> (negative inner product), euclidean <->.';

create or replace function quarry.vector_store_partition(store_id int) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$ select 'store_vectors_' || store_id $$;

comment on function quarry.vector_store_partition(int) is
'Name of the partition of quarry.store_vectors that holds one store (its HNSW index is <name>_hnsw).';

create or replace function quarry.vector_store_index_type(dimension int) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- HNSW indexes vector up to 2,000 dimensions and halfvec up to 4,000: a wider store's graph
    -- holds half-precision copies (OpenAI's 3,072-dimension embeddings, Voyage's 2,048), and
    -- its values must fit half precision (|x| <= 65504, checked on write). Stores up to 2,000
    -- dimensions keep single-precision graphs.
    select case when dimension <= 2000 then 'vector' else 'halfvec' end
$$;

comment on function quarry.vector_store_index_type(int) is
'The pgvector type a store''s HNSW index holds its vectors as: vector up to 2,000 dimensions, halfvec up to 4,000.';

create or replace function quarry.vector_fits_store_index(embedding vector, store_dimension int) returns boolean
language sql immutable parallel safe strict
set search_path = public, pg_catalog
as $$
    -- 65504: the largest finite halfvec. No value exceeds the vector's norm, so the usual
    -- (normalised) embedding passes without its values being read one by one.
    select quarry.vector_store_index_type(store_dimension) = 'vector'
           or vector_norm(embedding) <= 65504
           or (select max(abs(x)) from unnest(embedding::real[]) x) <= 65504
$$;

comment on function quarry.vector_fits_store_index(vector, int) is
'Whether a vector can enter the HNSW index of a store of store_dimension dimensions: always up to 2,000 dimensions; above, when every value fits half precision (|x| <= 65504).';

create or replace function quarry.require_vector_fits_store(
    store_name text, store_dimension int, embedding vector, which text default null
) returns void
language plpgsql immutable parallel safe
set search_path = quarry, public, pg_catalog
as $$
begin
    if not quarry.vector_fits_store_index(embedding, store_dimension) then
        raise exception '%store % has % dimensions, so its index holds half-precision copies: every value must be between -65504 and 65504',
            coalesce(which || ': ', ''), store_name, store_dimension using errcode = 'invalid_parameter_value';
    end if;
end
$$;

comment on function quarry.require_vector_fits_store(text, int, vector, text) is
'Raise invalid_parameter_value (naming the vector as which, when given) unless quarry.vector_fits_store_index: a write''s check, for quarry.vector_upsert and quarry vectors load.';

-- Vectors per namespace follow the rows through statement-level triggers (one update per
-- statement, however many rows a bulk load merges). The counts are written by definer
-- functions: nobody but the owner writes them directly.
create or replace function quarry.store_vectors_inserted() returns trigger
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    -- in key order: concurrent writers lock the count rows in one order and never deadlock
    insert into quarry.vector_namespaces as c (store_id, namespace, vectors)
    select a.store_id, a.namespace, count(*) from added a group by 1, 2 order by 1, 2
    on conflict (store_id, namespace) do update set vectors = c.vectors + excluded.vectors;
    return null;
end
$$;

comment on function quarry.store_vectors_inserted() is
'Trigger: count inserted vectors into quarry.vector_namespaces, once per statement.';

create or replace function quarry.store_vectors_deleted() returns trigger
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    update quarry.vector_namespaces c set vectors = c.vectors - r.n
    from (select g.store_id, g.namespace, count(*) as n from removed g group by 1, 2) r
    where c.store_id = r.store_id and c.namespace = r.namespace;
    delete from quarry.vector_namespaces c
    where c.vectors = 0 and (c.store_id, c.namespace) in (select r.store_id, r.namespace from removed r);
    return null;
end
$$;

comment on function quarry.store_vectors_deleted() is
'Trigger: uncount deleted vectors from quarry.vector_namespaces (a namespace left empty disappears).';

create or replace function quarry.store_vectors_moved() returns trigger
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    -- Only an update of store_id or namespace (from psql) moves counts; an upsert nets to nothing.
    -- Vectors moved in first, then out: a count never dips below zero on the way.
    insert into quarry.vector_namespaces as c (store_id, namespace, vectors)
    select m.store_id, m.namespace, sum(m.n)
    from (select a.store_id, a.namespace, 1 as n from added a
          union all
          select r.store_id, r.namespace, -1 from removed r) m
    group by 1, 2 having sum(m.n) > 0 order by 1, 2
    on conflict (store_id, namespace) do update set vectors = c.vectors + excluded.vectors;
    update quarry.vector_namespaces c set vectors = c.vectors + m.n
    from (select u.store_id, u.namespace, sum(u.n) as n
          from (select a.store_id, a.namespace, 1 as n from added a
                union all
                select r.store_id, r.namespace, -1 from removed r) u
          group by 1, 2 having sum(u.n) < 0) m
    where c.store_id = m.store_id and c.namespace = m.namespace;
    delete from quarry.vector_namespaces c
    where c.vectors = 0 and (c.store_id, c.namespace) in (select r.store_id, r.namespace from removed r);
    return null;
end
$$;

comment on function quarry.store_vectors_moved() is
'Trigger: move counts in quarry.vector_namespaces when an update changes vectors'' store or namespace.';

create or replace function quarry.store_vectors_truncated() returns trigger
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from quarry.vector_namespaces;
    return null;
end
$$;

comment on function quarry.store_vectors_truncated() is
'Trigger: a truncate of quarry.store_vectors zeroes every namespace count (truncate one store''s partition: use drop_vector_store).';

drop trigger if exists store_vectors_inserted on quarry.store_vectors;
create trigger store_vectors_inserted after insert on quarry.store_vectors
    referencing new table as added for each statement execute function quarry.store_vectors_inserted();
drop trigger if exists store_vectors_deleted on quarry.store_vectors;
create trigger store_vectors_deleted after delete on quarry.store_vectors
    referencing old table as removed for each statement execute function quarry.store_vectors_deleted();
drop trigger if exists store_vectors_moved on quarry.store_vectors;
create trigger store_vectors_moved after update on quarry.store_vectors
    referencing old table as removed new table as added
    for each statement execute function quarry.store_vectors_moved();
drop trigger if exists store_vectors_truncated on quarry.store_vectors;
create trigger store_vectors_truncated after truncate on quarry.store_vectors
    for each statement execute function quarry.store_vectors_truncated();

create or replace function quarry.create_vector_store_index(store_id int) returns void
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    store quarry.vector_stores;
    extension_schema text;
begin
    select * into store from quarry.vector_stores s where s.id = create_vector_store_index.store_id;
    if store.id is null then
        raise exception 'no vector store with id %', store_id using errcode = 'no_data_found';
    end if;
    select n.nspname into extension_schema
    from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'vector';
    -- The expression casts to the store's dimension (and index type) so HNSW can index it;
    -- quarry.vector_search repeats exactly this expression in its ORDER BY.
    execute format(
        'create index if not exists %I on quarry.%I using hnsw ((embedding::%I.%s(%s)) %I.%I) '
        'with (m = 16, ef_construction = 64)',
        quarry.vector_store_partition(store.id) || '_hnsw', quarry.vector_store_partition(store.id),
        extension_schema, quarry.vector_store_index_type(store.dimension), store.dimension, extension_schema,
        quarry.vector_store_index_type(store.dimension)
          || case store.metric when 'cosine' then '_cosine_ops' when 'dot' then '_ip_ops' else '_l2_ops' end);
end
$$;

comment on function quarry.create_vector_store_index(int) is
'Build the HNSW index of one vector store (its dimension-typed expression, its metric''s operator class).';

create or replace function quarry.drop_vector_store_index(store_id int) returns void
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    execute format('drop index if exists quarry.%I', quarry.vector_store_partition(store_id) || '_hnsw');
end
$$;

comment on function quarry.drop_vector_store_index(int) is
'Drop a vector store''s HNSW index (a bulk load rebuilds it afterwards: faster than inserting into it).';

create or replace function quarry.ensure_vector_store(
    store_name text,
    vector_dimension int,
    metric text default null
) returns table (store_id int, store_dimension int, store_metric text, created boolean)
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
    store quarry.vector_stores;
    extension_schema text;
begin
    if metric is not null and metric not in ('cosine', 'dot', 'euclidean') then
        raise exception 'unknown metric %: expected cosine, dot or euclidean', metric
            using errcode = 'invalid_parameter_value';
    end if;
    select * into store from quarry.vector_stores s where s.name = store_name;
    if store.id is null then
        perform pg_advisory_xact_lock(hashtext('quarry.vector_stores'));
        select * into store from quarry.vector_stores s where s.name = store_name;  -- created meanwhile?
    end if;
    if store.id is null then
        if store_name is null or store_name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' then
            raise exception 'a store name is 1-64 letters, digits, _ . : or -, starting with a letter or digit'
                using errcode = 'invalid_parameter_value';
        end if;
        if vector_dimension is null or vector_dimension < 1 or vector_dimension > 4000 then
            raise exception 'a store holds vectors of 1 to 4000 dimensions (the HNSW limit), not %', vector_dimension
                using errcode = 'invalid_parameter_value';
        end if;
        insert into quarry.vector_stores (name, dimension, metric)
        values (store_name, vector_dimension, coalesce(metric, 'cosine'))
        returning * into store;
        select n.nspname into extension_schema
        from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'vector';
        execute format(
            'create table quarry.%I partition of quarry.store_vectors '
            '(constraint %I check (%I.vector_dims(embedding) = %s)) for values in (%s)',
            quarry.vector_store_partition(store.id), quarry.vector_store_partition(store.id) || '_dimension',
            extension_schema, store.dimension, store.id);
        perform quarry.create_vector_store_index(store.id);
        return query select store.id, store.dimension, store.metric, true;
        return;
    end if;
    if vector_dimension is not null and vector_dimension <> store.dimension then
        raise exception 'store % holds %-dimensional vectors; this one has % dimensions',
            store.name, store.dimension, vector_dimension using errcode = 'invalid_parameter_value';
    end if;
    if metric is not null and metric <> store.metric then
        raise exception 'store % uses the % metric, not %; a store''s metric is fixed when it is created',
            store.name, store.metric, metric using errcode = 'invalid_parameter_value';
    end if;
    return query select store.id, store.dimension, store.metric, false;
end
$$;

comment on function quarry.ensure_vector_store(text, int, text) is
'The vector store named store_name, created (partition, dimension check, HNSW index; metric default cosine) on first use; errors on a different dimension or metric.';

create or replace function quarry.drop_vector_store(store_name text) returns boolean
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    store quarry.vector_stores;
begin
    select * into store from quarry.vector_stores s where s.name = store_name for update;
    if store.id is null then
        return false;
    end if;
    execute format('drop table if exists quarry.%I', quarry.vector_store_partition(store.id));
    delete from quarry.vector_stores s where s.id = store.id;
    return true;
end
$$;

comment on function quarry.drop_vector_store(text) is
'Remove a vector store with all its vectors and its index; false when there is no such store.';

create or replace function quarry.vector_upsert(
    store_name text,
    vector_id text,
    embedding vector,
    metadata jsonb default '{}',
    namespace text default '',
    metric text default null,
    api_key text default null
) returns table (status text, dimension int, store_created boolean)
language plpgsql volatile security definer
-- pg_catalog first and pg_temp last: a definer's names resolve to nothing its callers could create
set search_path = pg_catalog, quarry, public, pg_temp
as $$
#variable_conflict use_variable
declare
    store record;
    outcome text;
begin
    perform quarry.require_admin_caller(api_key, 'writing vectors');
    if vector_id is null or length(vector_id) not between 1 and 256 then
        raise exception 'a vector id is 1 to 256 characters' using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(jsonb_typeof(metadata), 'object') <> 'object' then
        raise exception 'metadata must be a JSON object' using errcode = 'invalid_parameter_value';
    end if;
    select * into store from quarry.ensure_vector_store(store_name, vector_dims(embedding), metric);
    if store.store_metric = 'cosine' and vector_norm(embedding) = 0 then
        raise exception 'a zero vector has no direction: store % (cosine) cannot compare it', store_name
            using errcode = 'invalid_parameter_value';
    end if;
    perform quarry.require_vector_fits_store(store_name, store.store_dimension, embedding);
    -- An identical vector and metadata leave the row as it was (updated_at included): 'unchanged'.
    -- A row created by this transaction has created_at = now() (xmax, the usual tell, cannot
    -- be read through a partitioned table).
    execute format($sql$
        insert into quarry.store_vectors as v (store_id, namespace, id, embedding, metadata)
        values (%s, $1, $2, $3, $4)
        on conflict (store_id, namespace, id) do update
            set embedding = excluded.embedding, metadata = excluded.metadata, updated_at = now()
            where (v.embedding, v.metadata) is distinct from (excluded.embedding, excluded.metadata)
        returning case when v.created_at = now() then 'added' else 'updated' end
    $sql$, store.store_id)
    into outcome
    using coalesce(namespace, ''), vector_id, embedding, coalesce(metadata, '{}'::jsonb);
    return query select coalesce(outcome, 'unchanged'), store.store_dimension, store.created;
end
$$;

comment on function quarry.vector_upsert(text, text, vector, jsonb, text, text, text) is
'Add or replace one vector (with metadata) in a store''s namespace, creating the store on first use; returns added, updated or unchanged. api_key: an admin key, unless the login may write jobs itself.';

create or replace function quarry.vector_delete(
    store_name text, vector_id text, namespace text default '', api_key text default null
) returns boolean
language plpgsql volatile security definer
set search_path = pg_catalog, quarry, public, pg_temp
as $$
#variable_conflict use_variable
declare
    found_store int;
    deleted int;
begin
    perform quarry.require_admin_caller(api_key, 'deleting vectors');
    select s.id into found_store from quarry.vector_stores s where s.name = store_name;
    if found_store is null then
        return false;
    end if;
    execute format('delete from quarry.store_vectors v where v.store_id = %s and v.namespace = $1 and v.id = $2',
                   found_store)
    using coalesce(namespace, ''), vector_id;
    get diagnostics deleted = row_count;
    return deleted > 0;
end
$$;

comment on function quarry.vector_delete(text, text, text, text) is
'Delete one vector from a store''s namespace; false when it was not there (or there is no such store). api_key: an admin key, unless the login may write jobs itself.';

create or replace function quarry.vector_count(
    store_name text,
    namespace text default '',
    metadata_filter jsonb default null
) returns bigint
language plpgsql stable
set search_path = quarry, public, pg_catalog
as $$
#variable_conflict use_variable
declare
    found_store int;
    total bigint;
begin
    select s.id into found_store from quarry.vector_stores s where s.name = store_name;
    if found_store is null then
        return 0;
    end if;
    if metadata_filter is null then
        select c.vectors into total from quarry.vector_namespaces c
        where c.store_id = found_store and c.namespace = coalesce(namespace, '');
        return coalesce(total, 0);
    end if;
    execute format('select count(*) from quarry.store_vectors v where v.store_id = %s and v.namespace = $1 '
                   'and v.metadata @> $2', found_store)
    into total
    using coalesce(namespace, ''), metadata_filter;
    return total;
end
$$;

comment on function quarry.vector_count(text, text, jsonb) is
'Vectors in a store''s namespace (kept count; counted when a metadata containment filter is given); 0 for an unknown store.';

create or replace function quarry.vector_search(
    store_name text,
    query_embedding vector,
    match_count int default 10,
    namespace text default '',
    metadata_filter jsonb default null,
    metric text default null,
    exact boolean default null,
    with_embeddings boolean default false
) returns table (id text, score double precision, metadata jsonb, embedding vector,
                 total_searched bigint, exact_search boolean)
language plpgsql volatile
-- this function's set_config calls are undone when it returns
set hnsw.ef_search = 40
set hnsw.iterative_scan = 'relaxed_order'
set search_path = quarry, public, pg_catalog
as $$
#variable_conflict use_variable
declare
    store quarry.vector_stores;
    in_namespace text := coalesce(namespace, '');
    used_metric text;
    total bigint;
    stored_rows double precision;
    ef int := least(1000, greatest(200, 2 * match_count));  -- deep enough for near-exact top matches
    use_exact boolean;
    candidates text;
    ids text[];
    distances double precision[];
    metadatas jsonb[];
    embeddings vector[];
begin
    if match_count is null or match_count < 1 or match_count > 1000 then
        raise exception 'match_count must be between 1 and 1000, got %', match_count
            using errcode = 'invalid_parameter_value';
    end if;
    if metadata_filter is not null and jsonb_typeof(metadata_filter) <> 'object' then
        raise exception 'a metadata filter must be a JSON object' using errcode = 'invalid_parameter_value';
    end if;
    select * into store from quarry.vector_stores s where s.name = store_name;
    if store.id is null then
        return;  -- an unknown store holds nothing, as quarry.vector_count says
    end if;
    if vector_dims(query_embedding) <> store.dimension then
        raise exception 'the query has % dimensions; store % holds %-dimensional vectors',
            vector_dims(query_embedding), store.name, store.dimension using errcode = 'invalid_parameter_value';
    end if;
    used_metric := coalesce(metric, store.metric);
    if quarry.vector_metric_operator(used_metric) is null then
        raise exception 'unknown metric %: expected cosine, dot or euclidean', used_metric
            using errcode = 'invalid_parameter_value';
    end if;
    if used_metric = 'cosine' and vector_norm(query_embedding) = 0 then
        raise exception 'a zero query vector has no cosine similarity' using errcode = 'invalid_parameter_value';
    end if;

    total := quarry.vector_count(store_name, in_namespace, metadata_filter);
    if total = 0 then
        return;
    end if;
    select sum(c.vectors) into stored_rows from quarry.vector_namespaces c where c.store_id = store.id;
    -- Exact when the index cannot serve the metric, when scanning is cheap anyway (2^20
    -- floats: a few milliseconds), or when the filter keeps so few rows that the iterative
    -- index scan would give up (hnsw.max_scan_tuples) before finding match_count of them;
    -- and always when the query itself cannot be compared in the index's half precision.
    use_exact := coalesce(exact,
        used_metric <> store.metric
        or total * store.dimension <= 1048576
        or ef * coalesce(stored_rows, total) / total > current_setting('hnsw.max_scan_tuples')::double precision)
        or not quarry.vector_fits_store_index(query_embedding, store.dimension);

    candidates := format($sql$
        select v.id, v.metadata, case when $4 then v.embedding end as embedding,
               (v.embedding::vector(%1$s)) %2$s $1::vector(%1$s) as distance
        from quarry.store_vectors v
        where v.store_id = %3$s and v.namespace = $2 %4$s
    $sql$, store.dimension, quarry.vector_metric_operator(used_metric), store.id,
        case when metadata_filter is null then '' else 'and v.metadata @> $3' end);

    if not use_exact then
        -- HNSW: ORDER BY repeats the index expression; the iterative scan keeps a filtered
        -- search going until match_count rows pass, and relaxed order is re-sorted here.
        perform set_config('hnsw.ef_search', ef::text, true);
        execute format($sql$
            select array_agg(c.id order by c.distance, c.id), array_agg(c.distance order by c.distance, c.id),
                   array_agg(c.metadata order by c.distance, c.id), array_agg(c.embedding order by c.distance, c.id)
            from (%1$s order by (v.embedding::%4$s(%2$s)) %3$s $1::%4$s(%2$s) limit $5) c
        $sql$, candidates, store.dimension, quarry.vector_metric_operator(used_metric),
            quarry.vector_store_index_type(store.dimension))
        into ids, distances, metadatas, embeddings
        using query_embedding, in_namespace, metadata_filter, with_embeddings, match_count;
        -- an index scan that came back short (a scan budget spent on a filter) is redone exactly
        use_exact := coalesce(cardinality(ids), 0) < least(match_count, total);
    end if;
    if use_exact then
        -- materialized: the ORDER BY must not reach the index, every row is scored
        execute format($sql$
            with scored as materialized (%1$s)
            select array_agg(c.id order by c.distance, c.id), array_agg(c.distance order by c.distance, c.id),
                   array_agg(c.metadata order by c.distance, c.id), array_agg(c.embedding order by c.distance, c.id)
            from (select * from scored s order by s.distance, s.id limit $5) c
        $sql$, candidates)
        into ids, distances, metadatas, embeddings
        using query_embedding, in_namespace, metadata_filter, with_embeddings, match_count;
    end if;

    return query
    select r.id,
           case used_metric when 'cosine' then 1 - r.distance when 'dot' then -r.distance else r.distance end,
           r.metadata, r.embedding, total, use_exact
    from unnest(ids, distances, metadatas, embeddings) with ordinality as r (id, distance, metadata, embedding, rank)
    order by r.rank;
end
$$;

comment on function quarry.vector_search(text, vector, int, text, jsonb, text, boolean, boolean) is
'Nearest vectors of a store''s namespace (metadata containment filter applied during the scan): score is cosine similarity or inner product (highest first) or euclidean distance (lowest first); HNSW, or exact for small sets, another metric than the store''s, or exact => true.';
