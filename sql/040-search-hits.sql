-- Search results with everything a client shows, in one call.

create or replace function quarry.search_hits(
    query_texts text[],
    query_embeddings vector[] default null,
    search_mode text default 'hybrid',
    match_count int default 10,
    filters jsonb default null,
    embedding_space text default 'text',
    candidate_count int default null,
    rrf_k int default null,
    fusion text default null,
    vector_weight double precision default null,
    code_vector_weight double precision default null,
    code_embeddings vector[] default null,
    code_mode text default 'on',
    version_matching text default 'permissive',
    query_model text default null,
    code_query_model text default null,
    per_document int default null,
    page_size int default null
) returns table (
    chunk_id uuid,
    document_id uuid,
    source_slug text,
    source_name text,
    source_kind text,
    attribution text,
    verified boolean,
    deprecated boolean,
    changed_at timestamptz,
    path text,
    title text,
    url text,
    heading_path text[],
    symbol_path text,
    start_line int,
    end_line int,
    content text,
    content_type text,
    language text,
    is_code boolean,
    fused_score double precision,
    confidence real,
    fts_rank int,
    vector_rank int,
    code_rank int,
    fts_score real,
    vector_similarity real,
    code_similarity real,
    version_match text,
    trust json,
    vector_weight_used real,
    document_share real,
    legs_left_out jsonb,
    query_lexemes text[],
    passed_over int
)
language plpgsql volatile
set search_path = quarry, public, pg_catalog
set plan_cache_mode = force_generic_plan  -- as quarry.hybrid_search: one plan fits every call
as $$
#variable_conflict use_column
declare
    -- read once, so quarry.weighted_trust is inlined into the statement (see sql/035-trust.sql)
    weights double precision[] := quarry.trust_weight_list();
    -- what the keyword leg looked for, so highlighting the hits takes no second round trip
    lexemes text[] := case when search_mode = 'vector' then '{}'::text[] else
        (select coalesce(array_agg(distinct lexeme), '{}') from unnest(query_texts) q,
                unnest(quarry.query_lexemes(q)) lexeme) end;
begin
    -- plpgsql, not SQL: its static query's plan is cached per session.
    -- The per-document cap runs here, on the fused order, so only the rows a caller keeps are joined to
    -- their details, given trust and sent (four times fewer for search's defaults than the rows it reads).
    return query
    with fused as (
        select h.*, c.document_id as hit_document,
               row_number() over (order by h.fused_score desc nulls last, coalesce(h.fts_rank, 2147483647),
                                  coalesce(h.vector_rank, h.code_rank, 2147483647), h.chunk_id) as position
        from quarry.hybrid_search(query_texts, query_embeddings, search_mode, match_count, filters,
                                  embedding_space, candidate_count, rrf_k,
                                  fusion => fusion, vector_weight => vector_weight,
                                  code_vector_weight => code_vector_weight, code_embeddings => code_embeddings,
                                  code_mode => code_mode, version_matching => version_matching,
                                  query_model => query_model, code_query_model => code_query_model) h
        -- left join: hybrid_search's failure-only row (null chunk_id) comes through
        left join quarry.chunks c on c.id = h.chunk_id
    ), placed as (
        select f.*, row_number() over (partition by f.hit_document order by f.position) as nth
        from fused f
    ), kept as (
        select p.*, row_number() over (order by p.position) as kept_rank
        from placed p
        where per_document is null or p.nth <= per_document or p.chunk_id is null
    ), page as (
        select k.* from kept k where page_size is null or k.kept_rank <= page_size
    ), skipped as (
        -- the capped rows read before the page filled, as a caller walking the fused order would count them
        select count(*)::int as passed_over
        from placed p
        where per_document is not null and p.nth > per_document
          and p.position < coalesce((select max(pg.position) from page pg where pg.kept_rank = page_size),
                                    9223372036854775807)
    )
    select d.chunk_id, d.document_id, d.source_slug, d.source_name, d.source_kind, d.attribution,
           d.verified, d.deprecated, d.changed_at, d.path, d.title, d.url,
           d.heading_path, d.symbol_path, d.start_line, d.end_line, d.content, d.content_type, d.language,
           d.is_code, h.fused_score, h.confidence, h.fts_rank, h.vector_rank, h.code_rank, h.fts_score, h.vector_similarity,
           h.code_similarity, quarry.version_match_label(h.version_degree),
           quarry.weighted_trust(d.attribution, d.verified, d.deprecated, d.source_kind, d.changed_at,
                                 quarry.version_match_label(h.version_degree), now(), weights),
           h.vector_weight_used, h.document_share,
           -- the search-wide columns on the first row only: a caller reads them once
           case when h.kept_rank = 1 then h.legs_left_out end, case when h.kept_rank = 1 then lexemes end,
           case when h.kept_rank = 1 then skipped.passed_over end
    from page h
    cross join skipped
    left join quarry.chunk_details d on d.chunk_id = h.chunk_id
    order by h.position;
end
$$;

comment on function quarry.search_hits(text[], vector[], text, int, jsonb, text, int, int, text, double precision, double precision, vector[], text, text, text, text, int, int) is
'hybrid_search joined to chunk, document and source fields: ranked result rows ready to show, with confidence, version_match (exact, compatible, unknown or mismatch), trust (score and factors, see quarry.trust_factors), and, on the first row only (null on the others), legs_left_out (see quarry.hybrid_search; with no hit, a single row whose chunk_id is null), query_lexemes (the distinct lexemes of every query, as quarry.query_lexemes; empty in vector mode) and passed_over. With per_document, at most that many chunks of one document are kept, walking the match_count fused hits in order, and at most page_size rows are returned; passed_over counts the chunks the cap left out before the page filled. Null ranking arguments take quarry.ranking_defaults().';
