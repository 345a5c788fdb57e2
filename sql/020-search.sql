-- Retrieval: per query a BM25 leg and a vector leg, filtered inside each leg before
-- its top-k, then fused across legs and queries (convex by default, or RRF).

create or replace function quarry.nearest_chunks(
    embedding_space text,
    query_embedding vector,
    match_count int,
    filters jsonb default null
) returns table (chunk_id uuid, distance double precision)
language plpgsql stable
set search_path = quarry, public, pg_catalog
as $$
declare
    space_dimension int;
begin
    select dimension into space_dimension from quarry.embedding_spaces where name = embedding_space;
    if space_dimension is null then
        return;
    end if;
    -- The ORDER BY repeats the space's index expression (dimension-typed cast, partial
    -- predicate) so the planner uses its HNSW index. Without filters the leg is a bare
    -- index scan; a filter is a per-candidate check the iterative scan applies.
    return query execute format($sql$
        with allowed_sources as materialized (  -- evaluated once, not once per candidate
            select * from quarry.filtered_source_ids($3) where $3 is not null
        )
        select e.chunk_id, ((e.embedding::vector(%1$s)) <=> $1::vector(%1$s))::double precision
        from quarry.embeddings e
        where e.space = %2$L %3$s
        order by (e.embedding::vector(%1$s)) <=> $1::vector(%1$s)
        limit $2
    $sql$, space_dimension, embedding_space,
        case when filters is null then '' else $filter$
            and exists (
                select 1 from quarry.chunks c join allowed_sources s on s.id = c.source_id
                where c.id = e.chunk_id
                  and quarry.chunk_allowed($3, c.content_type, c.language, c.package, c.deprecated or s.deprecated))
        $filter$ end)
    using query_embedding, match_count, filters;
end
$$;

comment on function quarry.nearest_chunks(text, vector, int, jsonb) is
'Chunks nearest to a query vector in one embedding space (HNSW, cosine distance), facet filters applied during the scan.';

create or replace function quarry.hybrid_search(
    query_texts text[],
    query_embeddings vector[] default null,
    search_mode text default 'hybrid',
    match_count int default 10,
    filters jsonb default null,
    embedding_space text default 'text',
    candidate_count int default 50,
    rrf_k int default 60,
    per_term_depth int default 1000,
    fusion text default 'convex',
    vector_weight double precision default 0.45,
    code_vector_weight double precision default 0.8
) returns table (
    chunk_id uuid,
    fused_score double precision,
    fts_rank int,
    vector_rank int,
    fts_score real,
    vector_similarity real
)
language plpgsql volatile
rows 20  -- a page of hits: lets callers join it with nested loops over primary keys
set search_path = quarry, public, pg_catalog
as $$
#variable_conflict use_column
declare
    space_dimension int;
    use_fts boolean := search_mode in ('hybrid', 'fts');
    use_vector boolean := search_mode in ('hybrid', 'vector');
    depth int := greatest(candidate_count, match_count);
begin
    if search_mode not in ('hybrid', 'fts', 'vector') then
        raise exception 'unknown search mode %: expected hybrid, fts or vector', search_mode
            using errcode = 'invalid_parameter_value';
    end if;
    if fusion not in ('rrf', 'convex') then
        raise exception 'unknown fusion %: expected rrf or convex', fusion using errcode = 'invalid_parameter_value';
    end if;
    if vector_weight is null or vector_weight < 0 or vector_weight > 1
       or code_vector_weight is null or code_vector_weight < 0 or code_vector_weight > 1 then
        raise exception 'vector weights must be between 0 and 1' using errcode = 'invalid_parameter_value';
    end if;
    if match_count < 1 or match_count > 1000 then
        raise exception 'match_count must be between 1 and 1000, got %', match_count
            using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(cardinality(query_texts), 0) = 0 then
        raise exception 'at least one query is required' using errcode = 'invalid_parameter_value';
    end if;
    if use_vector then
        if query_embeddings is null then
            if search_mode = 'vector' then
                raise exception 'vector mode needs query embeddings' using errcode = 'invalid_parameter_value';
            end if;
            use_vector := false;
        else
            if cardinality(query_embeddings) <> cardinality(query_texts) then
                raise exception 'got % query embeddings for % queries',
                    cardinality(query_embeddings), cardinality(query_texts)
                    using errcode = 'invalid_parameter_value';
            end if;
            select dimension into space_dimension from quarry.embedding_spaces where name = embedding_space;
            if space_dimension is null then
                use_vector := false;  -- nothing embedded in this space yet
            elsif vector_dims(query_embeddings[1]) <> space_dimension then
                raise exception 'query embeddings have % dimensions, space % has %',
                    vector_dims(query_embeddings[1]), embedding_space, space_dimension
                    using errcode = 'invalid_parameter_value';
            end if;
        end if;
    end if;

    -- HNSW returns at most ef_search rows; iterative scans keep filtered legs full.
    perform set_config('hnsw.ef_search', greatest(40, depth)::text, true);
    perform set_config('hnsw.iterative_scan', 'relaxed_order', true);

    -- Static SQL, so each pooled session plans it once: as dynamic SQL its planning
    -- cost more than running it. Only the vector leg (whose index expression names the
    -- space's dimension) is dynamic, inside quarry.nearest_chunks.
    return query
    with queries as (
        -- a repeated query counts once
        select distinct on (q.query_text) q.query_text, q.embedding, q.ordinal
        from unnest(query_texts, case when use_vector then query_embeddings end)
             with ordinality as q (query_text, embedding, ordinal)
        order by q.query_text, q.ordinal
    ),
    fts_leg as (
        select hit.chunk_id, hit.score,
               row_number() over (partition by q.ordinal order by hit.score desc, hit.chunk_id)::int as rank,
               hit.score / nullif(max(hit.score) over (partition by q.ordinal), 0) as normalized
        from queries q
        cross join lateral quarry.bm25_top(q.query_text, depth, per_term_depth, filters) hit
        where use_fts
    ),
    vector_leg as (
        select hit.chunk_id, 1 - hit.distance as similarity,
               row_number() over (partition by qe.ordinal order by hit.distance, hit.chunk_id)::int as rank,
               (max(hit.distance) over (partition by qe.ordinal) - hit.distance)
                 / nullif(max(hit.distance) over (partition by qe.ordinal)
                          - min(hit.distance) over (partition by qe.ordinal), 0) as normalized
        from queries qe
        cross join lateral quarry.nearest_chunks(embedding_space, qe.embedding, depth, filters) hit
        where use_vector and qe.embedding is not null
    ),
    fts_best as (
        select f.chunk_id, sum(1.0 / (rrf_k + f.rank)) as rrf, sum(coalesce(f.normalized, 1)) as normalized,
               min(f.rank) as rank, max(f.score) as score
        from fts_leg f group by f.chunk_id
    ),
    vector_best as (
        select v.chunk_id, sum(1.0 / (rrf_k + v.rank)) as rrf, sum(coalesce(v.normalized, 1)) as normalized,
               min(v.rank) as rank, max(v.similarity) as similarity
        from vector_leg v group by v.chunk_id
    ),
    fused as (
        select coalesce(f.chunk_id, v.chunk_id) as chunk_id,
               (case when fusion = 'rrf'
                     then 2 * (1 - w.vector) * coalesce(f.rrf, 0) + 2 * w.vector * coalesce(v.rrf, 0)
                     else ((1 - w.vector) * coalesce(f.normalized, 0) + w.vector * coalesce(v.normalized, 0))
                          / (select count(*) from queries)
                end)::double precision as fused_score,
               f.rank::int as fts_rank,
               v.rank::int as vector_rank,
               f.score::real as fts_score,
               v.similarity::real as vector_similarity
        from fts_best f
        full outer join vector_best v on v.chunk_id = f.chunk_id
        -- Code leans on the vector leg: natural-language questions share few words
        -- with identifiers, so keyword scores on code are weaker evidence.
        cross join lateral (
            select case when not use_fts then 1.0  -- a single leg is ranked as it is
                        when not use_vector then 0.0
                        when c.is_code then code_vector_weight else vector_weight end as vector
            from quarry.chunks c where c.id = coalesce(f.chunk_id, v.chunk_id)
        ) w
    )
    select fused.chunk_id, fused.fused_score, fused.fts_rank, fused.vector_rank,
           fused.fts_score, fused.vector_similarity
    from fused
    order by fused.fused_score desc, coalesce(fused.fts_rank, 2147483647),
             coalesce(fused.vector_rank, 2147483647), fused.chunk_id
    limit match_count;
end
$$;

comment on function quarry.hybrid_search(text[], vector[], text, int, jsonb, text, int, int, int, text, double precision, double precision) is
'Hybrid retrieval in one statement: per query a BM25 and a vector leg, facet filters applied inside each leg before top-k, fused across legs and queries by weighted RRF or a convex combination of per-query normalised scores; best per-leg ranks returned.';
