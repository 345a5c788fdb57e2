-- Beyond ranked chunks: counting matching documents, reading whole documents, ranking
-- sources for an intent, and the neighbours of hits. Read-only (the search server runs
-- as quarry_reader); the counting and routing functions are volatile only because
-- quarry.nearest_chunks raises the HNSW scan depth for their transaction.

create or replace function quarry.generic_query_lexemes() returns text[]
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- Words that say what kind of answer is wanted, not what it is about ("how many
    -- documents mention X", "list every page"), stemmed as chunks are: a query made
    -- only of these selects nothing, so counting falls back to the filters.
    select array_agg(lexeme)
    from unnest(to_tsvector('english'::regconfig,
        'document documents doc docs page pages file files content contents text article articles topic '
        'item items entry entries record records result results information info thing things stuff '
        'everything anything something many much count number total list show find get give return all every '
        'mention mentions discuss discusses talk cover covers describe describes explain explains refer '
        'contain contains include includes related regarding concerning available exist exists'))
$$;

comment on function quarry.generic_query_lexemes() is
'Stemmed lexemes that describe the wanted answer rather than its subject (document, page, count, mention, ...).';

create or replace function quarry.selective_lexemes(query_text text, max_share double precision default 0.5)
returns text[]
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- A lexeme found in more than max_share of all chunks selects almost everything.
    select coalesce(array_agg(l.lexeme order by l.lexeme), '{}')
    from unnest(quarry.query_lexemes(query_text)) l (lexeme)
    where not l.lexeme = any (quarry.generic_query_lexemes())
      and not exists (
          select 1 from quarry.text_terms t, quarry.text_stats s
          where t.lexeme = l.lexeme and s.chunk_count > 0 and t.chunk_frequency > max_share * s.chunk_count)
$$;

comment on function quarry.selective_lexemes(text, double precision) is
'Query lexemes that narrow the corpus: not generic answer words, and in at most max_share of the chunks.';

create or replace function quarry.count_filtered_documents(filters jsonb default null) returns bigint
language plpgsql stable
set search_path = quarry, pg_catalog
as $$
declare
    source_facets constant text[] := array['source_slug', 'kind', 'attribution', 'verified'];
    document_facets constant text[] := array['deprecated', 'content_type', 'language', 'package'];
    -- the filters beyond the source-level ones, each needing the documents themselves (or their counts)
    document_rules text[] := array(select k from jsonb_object_keys(coalesce(filters, '{}')) k
                                   where not k = any (source_facets));
    counted_rule text := case when cardinality(document_rules) = 1 and document_rules[1] = any (document_facets)
                              then document_rules[1] end;
    resolved jsonb := quarry.resolve_version_filters(filters);
begin
    if cardinality(document_rules) = 0 or counted_rule is not null then
        -- at most one document-level facet: quarry.facet_counts holds the answer per source (a document has
        -- one content type, so those counts add up to its documents; one without a value of the rule's facet
        -- passes a none_of rule only; a deprecated source's documents are all deprecated)
        return (
            with per_source as (
                select a.id, a.deprecated,
                       (select coalesce(sum(fc.documents), 0) from quarry.facet_counts fc
                        where fc.source_id = a.id and fc.facet = 'content_type') as documents,
                       (select coalesce(sum(fc.documents), 0) from quarry.facet_counts fc
                        where fc.source_id = a.id and fc.facet = counted_rule) as valued,
                       (select coalesce(sum(fc.documents), 0) from quarry.facet_counts fc
                        where fc.source_id = a.id and fc.facet = counted_rule
                          and quarry.facet_allows(filters, counted_rule, fc.value)) as allowed
                from quarry.filtered_source_ids(filters) a
            )
            select coalesce(sum(case
                       when counted_rule is null then p.documents
                       when counted_rule = 'deprecated' and p.deprecated then
                           case when quarry.facet_allows(filters, 'deprecated', 'true') then p.documents else 0 end
                       else p.allowed + case when coalesce(quarry.facet_allows(filters, counted_rule, null), false)
                                             then p.documents - p.valued else 0 end
                   end), 0)::bigint
            from per_source p);
    end if;
    -- each check passes every document without its rule, and costs a function call per document: skipped then,
    -- and the facet rules checked once per combination of facet values the documents have
    return (
        with allowed_sources as materialized (
            select * from quarry.filtered_source_ids(filters)
        ),
        facet_value_sets as materialized (
            select v.key
            from quarry.allowed_facet_values(filters, array(select s.id from allowed_sources s)) v(key)
            where filters ?| document_facets
        )
        select count(*)
        from quarry.documents d
        join allowed_sources s on s.id = d.source_id
        where (not filters ?| document_facets
               or jsonb_build_array(d.content_type, d.language, d.package, d.deprecated or s.deprecated)
                  in (select v.key from facet_value_sets v))
          and (not filters ?| array['language_target', 'sdk_dependency']
               or quarry.version_allows(resolved, d.id))
          and (not filters ?| array['path', 'symbol', 'chunk_kind']
               or quarry.document_location_allows(filters, d.id, d.path)));
end
$$;

comment on function quarry.count_filtered_documents(jsonb) is
'Exact number of documents passing a filters object (facets and permissive version rules), whatever their text; read from quarry.facet_counts when at most one filter is a document-level facet.';

create or replace function quarry.count_candidate_documents(
    query_text text,
    query_embedding vector default null,
    filters jsonb default null,
    similarity_floor double precision default 0.5,
    bound int default 1000,
    embedding_space text default 'text'
) returns table (document_id uuid, keyword boolean, similarity real, truncated boolean)
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
#variable_conflict use_column
declare
    resolved jsonb := quarry.resolve_version_filters(filters);
    lexemes text[] := quarry.selective_lexemes(query_text);
    -- their term ids, rarest first; null when there is none, or when one is in no chunk (then no
    -- chunk holds them all)
    wanted_term_ids int[] := (select case when count(*) = cardinality(lexemes)
                                          then array_agg(t.id order by t.chunk_frequency, t.id) end
                              from quarry.text_terms t where t.lexeme = any (lexemes) and t.chunk_frequency > 0);
    rules record := quarry.chunk_rule_kinds(filters);
begin
    if bound < 1 or bound > 1000 then
        raise exception 'bound must be between 1 and 1000, got %', bound using errcode = 'invalid_parameter_value';
    end if;
    return query
    with allowed_sources as materialized (
        select * from quarry.filtered_source_ids(filters)
    ),
    -- keyword leg: documents with a chunk holding every selective term: the rarest term's postings
    -- (in blocks and in rows not yet compacted), the others checked in the chunk's terms; bound + 1
    -- documents tell the caller the bound was hit
    keyword as (
        select distinct c.document_id
        from quarry.text_index_postings r
        join quarry.chunks c on c.id = r.chunk_id
        join allowed_sources s on s.id = c.source_id
        where r.term_id = wanted_term_ids[1]
          and (cardinality(wanted_term_ids) = 1
               or exists (select from quarry.chunk_terms ct
                          where ct.chunk_id = r.chunk_id and ct.term_ids @> wanted_term_ids))
          and quarry.chunk_passes_rules(resolved, rules.facets, rules.versions, rules.locations, c.content_type,
                                        c.language, c.package, c.deprecated or s.deprecated, c.document_id,
                                        c.symbol_path, c.is_code)
        limit bound + 1
    ),
    -- vector leg: the nearest `bound` chunks, kept when close enough to be about the query
    close_chunks as materialized (
        select c.document_id, (1 - n.distance)::real as similarity
        from quarry.nearest_chunks(embedding_space, query_embedding, bound, resolved) n
        join quarry.chunks c on c.id = n.chunk_id
        where query_embedding is not null and 1 - n.distance >= similarity_floor
    ),
    nearest as (
        select v.document_id, max(v.similarity) as similarity from close_chunks v group by v.document_id
    ),
    -- a leg that filled its bound may have stopped before the last match
    hit_bound as (
        select (select count(*) from keyword) > bound or (select count(*) from close_chunks) >= bound as full
    )
    select coalesce(k.document_id, v.document_id), k.document_id is not null, v.similarity, hit_bound.full
    from keyword k
    full join nearest v on v.document_id = k.document_id
    cross join hit_bound
    order by (k.document_id is not null and v.document_id is not null) desc, v.similarity desc nulls last;
end
$$;

comment on function quarry.count_candidate_documents(text, vector, jsonb, double precision, int, text) is
'Documents a query is about: a chunk holds every selective term (up to bound + 1 documents), or is among the bound nearest chunks with cosine similarity >= similarity_floor; filters applied in both legs; truncated when a leg filled its bound.';

create or replace function quarry.source_signals(
    query_text text,
    query_embedding vector default null,
    fts_depth int default 200,
    centroid_sample int default 500,
    embedding_space text default 'text'
) returns table (
    slug text,
    display_name text,
    kind text,
    description text,
    documents bigint,
    description_match real,
    fts_hits int,
    fts_score real,
    centroid_similarity real
)
language plpgsql stable
set search_path = quarry, public, pg_catalog
as $$
#variable_conflict use_column
declare
    terms text[] := quarry.query_lexemes(query_text);
    physical text;
begin
    if fts_depth < 1 or fts_depth > 1000 or centroid_sample < 1 or centroid_sample > 10000 then
        raise exception 'fts_depth must be 1-1000 and centroid_sample 1-10000'
            using errcode = 'invalid_parameter_value';
    end if;
    select e.name into physical from quarry.embedding_spaces e where e.serves = embedding_space;
    return query
    with hits as (
        -- BM25 statistics per source over the query's top chunks
        select c.source_id, count(*)::int as hits, sum(b.score)::real as score
        from quarry.bm25_top(query_text, fts_depth) b
        join quarry.chunks c on c.id = b.chunk_id
        group by c.source_id
    )
    select s.slug, s.display_name, s.kind, s.metadata ->> 'description',
           (select count(*) from quarry.documents d where d.source_id = s.id),
           -- share of the query's lexemes found in the source's name, slug and description
           case when cardinality(terms) = 0 then 0::real else (
               select (count(*)::double precision / cardinality(terms))::real
               from unnest(terms) t (lexeme)
               where t.lexeme = any (quarry.query_lexemes(
                   s.display_name || ' ' || translate(s.slug, '-_.', '   ') || ' '
                   || coalesce(s.metadata ->> 'description', '')))) end,
           coalesce(h.hits, 0), coalesce(h.score, 0::real),
           -- cosine similarity to the mean of (at most centroid_sample of) the source's vectors
           (select (1 - (avg(e.embedding)::vector <=> query_embedding))::real
            from (select c.id from quarry.chunks c where c.source_id = s.id order by c.id
                  limit centroid_sample) sample
            join quarry.embeddings e on e.chunk_id = sample.id and e.space = physical
            where query_embedding is not null)
    from quarry.sources s
    left join hits h on h.source_id = s.id
    order by s.slug;
end
$$;

comment on function quarry.source_signals(text, vector, int, int, text) is
'Per source, how a query relates to it: lexemes matching its name/description, BM25 hits and score among the query''s top fts_depth chunks, and cosine similarity to the centroid of up to centroid_sample of its vectors.';

create or replace function quarry.document_chunks(document_ids uuid[], max_chunks int default 200)
returns table (
    document_id uuid,
    ordinal int,
    content text,
    total_chunks int
)
language sql stable
set search_path = quarry, pg_catalog
as $$
    -- The first max_chunks chunks of each document in order, with how many it has.
    select numbered.document_id, numbered.ordinal, numbered.content, numbered.total_chunks
    from (
        select c.document_id, c.ordinal, c.content,
               row_number() over (partition by c.document_id order by c.ordinal) as position,
               count(*) over (partition by c.document_id)::int as total_chunks
        from quarry.chunks c
        where c.document_id = any (document_ids)
    ) numbered
    where numbered.position <= max_chunks
    order by numbered.document_id, numbered.ordinal
$$;

comment on function quarry.document_chunks(uuid[], int) is
'The first max_chunks chunks of each given document, in document order, with the document''s chunk count.';

create or replace function quarry.chunk_neighbours(chunk_ids uuid[], span int default 1)
returns table (chunk_id uuid, neighbour_offset int, heading_path text[], content text)
language sql stable
set search_path = quarry, pg_catalog
as $$
    -- For each given chunk, the chunks up to `span` before and after it in its document.
    select hit.id, n.ordinal - hit.ordinal, n.heading_path, n.content
    from quarry.chunks hit
    join quarry.chunks n on n.document_id = hit.document_id
                        and n.ordinal between hit.ordinal - span and hit.ordinal + span
                        and n.ordinal <> hit.ordinal
    where hit.id = any (chunk_ids)
    order by hit.id, n.ordinal
$$;

comment on function quarry.chunk_neighbours(uuid[], int) is
'The chunks up to span before and after each given chunk in its document (neighbour_offset -span..span, never 0).';
