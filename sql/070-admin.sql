-- Administering the corpus from psql. Every change here shows in the next search:
-- search reads these columns directly (filters, trust, version rules), nothing is cached.

create or replace function quarry.upsert_source(
    slug text,
    display_name text default null,
    kind text default null,
    attribution text default null,
    base_url text default null,
    url_template text default null,
    version text default null
) returns quarry.sources
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    source_id bigint;
    saved quarry.sources;
begin
    insert into quarry.sources as s (slug, display_name, kind, attribution, base_url, url_template)
    values (upsert_source.slug, coalesce(upsert_source.display_name, upsert_source.slug),
            coalesce(upsert_source.kind, 'mixed'), coalesce(upsert_source.attribution, 'unknown'),
            upsert_source.base_url, upsert_source.url_template)
    on conflict on constraint sources_slug_key do update set
        display_name = coalesce(upsert_source.display_name, s.display_name),
        kind = coalesce(upsert_source.kind, s.kind),
        attribution = coalesce(upsert_source.attribution, s.attribution),
        base_url = coalesce(upsert_source.base_url, s.base_url),
        url_template = coalesce(upsert_source.url_template, s.url_template),
        updated_at = now()
    returning s.id into source_id;
    if upsert_source.version is not null then
        perform quarry.set_source_version(upsert_source.slug, upsert_source.version);
    end if;
    select * into saved from quarry.sources s where s.id = source_id;
    return saved;
end
$$;

comment on function quarry.upsert_source(text, text, text, text, text, text, text) is
'Add a source or update the given fields of an existing one (null leaves a field as it is); returns the saved row.';

create or replace function quarry.source_id(slug text) returns bigint
language plpgsql stable
set search_path = quarry, pg_catalog
as $$
declare
    found_id bigint;
begin
    select s.id into found_id from quarry.sources s where s.slug = source_id.slug;
    if found_id is null then
        raise exception 'no source with slug %', slug using errcode = 'no_data_found',
            hint = 'select slug from quarry.source_stats';
    end if;
    return found_id;
end
$$;

comment on function quarry.source_id(text) is
'The id of the source with this slug; raises no_data_found naming the slug when there is none.';

create or replace function quarry.remove_source(slug text) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    found_id bigint := quarry.source_id(remove_source.slug);
    removed bigint;
begin
    -- Documents first, through delete_documents, so BM25 statistics and facet counts stay exact;
    -- the source row's cascade takes the rest. One transaction: a failure leaves the source whole.
    removed := quarry.delete_documents(array(select d.id from quarry.documents d where d.source_id = found_id));
    delete from quarry.sources s where s.id = found_id;
    return removed;
end
$$;

comment on function quarry.remove_source(text) is
'Delete a source with its documents, chunks, vectors and postings, atomically; returns how many documents went.';

create or replace function quarry.set_source_version(slug text, version text) returns void
language sql volatile
set search_path = quarry, pg_catalog
as $$
    -- parsed once here, so version filters compare ranges, not syntax
    update quarry.sources s
    set version = set_source_version.version,
        version_range = case when set_source_version.version is null then null
                             else quarry.version_range(set_source_version.version) end,
        updated_at = now()
    where s.id = quarry.source_id(set_source_version.slug)
$$;

comment on function quarry.set_source_version(text, text) is
'Set the release a docs source is published for (a version or node-semver range, e.g. ''0.17.x''; null clears it): the language_target of every document that states none.';

create or replace function quarry.set_verified(slug text, verified boolean default true) returns void
language sql volatile
set search_path = quarry, pg_catalog
as $$
    update quarry.sources s set verified = set_verified.verified, updated_at = now()
    where s.id = quarry.source_id(set_verified.slug)
$$;

comment on function quarry.set_verified(text, boolean) is
'Mark a source verified by an admin (or not): the verified trust factor and facet.';

create or replace function quarry.deprecate_source(slug text, deprecated boolean default true) returns void
language sql volatile
set search_path = quarry, pg_catalog
as $$
    update quarry.sources s set deprecated = deprecate_source.deprecated, updated_at = now()
    where s.id = quarry.source_id(deprecate_source.slug)
$$;

comment on function quarry.deprecate_source(text, boolean) is
'Deprecate (or undeprecate) a whole source: its results keep appearing but with trust capped at 0.2, and filters on deprecated see them.';

create or replace function quarry.deprecate_document(slug text, path text, deprecated boolean default true)
returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    document uuid;
begin
    select d.id into document from quarry.documents d
    where d.source_id = quarry.source_id(deprecate_document.slug) and d.path = deprecate_document.path;
    if document is null then
        raise exception 'source % has no document %', slug, path using errcode = 'no_data_found';
    end if;
    update quarry.documents d set deprecated = deprecate_document.deprecated where d.id = document;
    -- chunks mirror the flag so search legs filter without a join
    update quarry.chunks c set deprecated = deprecate_document.deprecated where c.document_id = document;
end
$$;

comment on function quarry.deprecate_document(text, text, boolean) is
'Deprecate (or undeprecate) one document of a source by its path: trust capped at 0.2 and the deprecation factor set.';

create or replace function quarry.search_text(query text, lim int default 10)
returns table (rank bigint, source text, path text, title text, location text, score real, trust numeric,
               snippet text, chunk_id uuid)
language sql stable
set search_path = quarry, pg_catalog
as $$
    -- Keyword (BM25) search for psql, where no query embedding is at hand; the MCP
    -- search adds the vector legs and reranking.
    select row_number() over (order by hit.score desc, hit.chunk_id), d.source_slug, d.path, d.title,
           coalesce(d.symbol_path, array_to_string(d.heading_path, ' > ')), hit.score,
           (quarry.trust_factors(d.attribution, d.verified, d.deprecated, d.source_kind, d.changed_at)
             ->> 'score')::numeric,
           -- collapsing a whole chunk's whitespace cost more than its search; 1,000 characters give the 120
           left(regexp_replace(left(d.content, 1000), '\s+', ' ', 'g'), 120), d.chunk_id
    from quarry.bm25_top(query, lim) hit
    join quarry.chunk_details d on d.chunk_id = hit.chunk_id
    order by hit.score desc, hit.chunk_id
$$;

comment on function quarry.search_text(text, int) is
'Keyword (BM25) search usable from psql: ranked chunks with source, path, location, score, trust and a snippet.';

create or replace function quarry.explain(chunk uuid, query text, query_embedding vector default null)
returns table (step text, detail jsonb)
language plpgsql volatile  -- only as quarry.nearest_chunks sets the HNSW scan depth
set search_path = quarry, public, pg_catalog
as $$
declare
    hit record;
    leg_depth constant int := 1000;
    fts record;
    vec record;
    vector_weight double precision;
    damping double precision;
    prose_factor double precision;
    document_weight double precision;
    document_share double precision;
begin
    select * into hit from quarry.chunk_details d where d.chunk_id = chunk;
    if hit is null then
        raise exception 'no chunk %', chunk using errcode = 'no_data_found';
    end if;
    step := 'chunk';
    detail := jsonb_build_object('source', hit.source_slug, 'path', hit.path, 'title', hit.title,
                                 'location', coalesce(hit.symbol_path, array_to_string(hit.heading_path, ' > ')),
                                 'lines', hit.start_line || '-' || hit.end_line, 'is_code', hit.is_code);
    return next;

    select ranked.rank, ranked.score, ranked.best, ranked.matched into fts
    from (select b.chunk_id, row_number() over (order by b.score desc, b.chunk_id) as rank, b.score,
                 max(b.score) over () as best, count(*) over () as matched
          from quarry.bm25_top(query, leg_depth) b) ranked
    where ranked.chunk_id = chunk;
    step := 'fts';
    detail := jsonb_build_object(
        'lexemes', to_jsonb(quarry.query_lexemes(query)),
        'rank', fts.rank, 'bm25', fts.score,
        'normalized', case when fts.best > 0 then round((fts.score / fts.best)::numeric, 4) end,
        'note', case when fts.rank is null
                     then format('not in the top %s keyword matches', leg_depth) end);
    return next;

    step := 'vector';
    if query_embedding is null then
        detail := jsonb_build_object('note', 'psql has no query embedding: pass query_embedding (or use the MCP '
                                             'search, which reports vector_rank per result)');
    else
        select ranked.rank, ranked.similarity into vec
        from (select n.chunk_id, row_number() over (order by n.distance, n.chunk_id) as rank,
                     1 - n.distance as similarity
              from quarry.nearest_chunks('text', query_embedding, leg_depth) n) ranked
        where ranked.chunk_id = chunk;
        detail := jsonb_build_object('rank', vec.rank, 'similarity', round(vec.similarity::numeric, 4),
                                     'note', case when vec.rank is null
                                                  then format('not in the %s nearest chunks', leg_depth) end);
    end if;
    return next;

    select case when hit.is_code then d.code_vector_weight else d.vector_weight end,
           quarry.long_query_damping(query, d.long_query_terms),
           d.long_query_prose_factor,
           case when exists (select 1 from quarry.chunks c where c.document_id = hit.document_id and c.is_code)
                then d.code_vector_weight else d.vector_weight end,
           quarry.document_evidence_share(
               (select c.document_chunks from quarry.chunks c where c.id = chunk), d.document_evidence_chunks)
      into vector_weight, damping, prose_factor, document_weight, document_share
    from quarry.ranking_defaults() d;
    step := 'fusion';
    detail := jsonb_build_object(
        'method', 'convex, per query: (1 - share) * chunk + share * document, each (1 - w) * fts normalized'
                  || ' + w * vector normalized; the document''s is its best fts and best vector score among'
                  || ' the candidates, weighed as code when one of them is code (here: when it holds code)',
        'vector_weight', round((vector_weight * damping)::numeric, 4),
        'document_vector_weight', round((document_weight * damping)::numeric, 4),
        'why', case when hit.is_code then 'code chunk: natural-language queries share few words with code'
                    else 'prose chunk' end,
        'long_query_damping', round(damping::numeric, 4),
        'long_query_prose_factor', case when damping < 1 and not hit.is_code then prose_factor else 1 end,
        'document_share', round(document_share::numeric, 4),
        'deprecated_factor', case when hit.deprecated then 0.5 else 1 end,
        'note', case when damping < 1
                     then 'a long query: the embedder reads only its start, so the vector weight is scaled down'
                          || case when hit.is_code then '' else ' and prose chunks rank lower' end end);
    return next;

    step := 'trust';
    detail := quarry.trust_factors(hit.attribution, hit.verified, hit.deprecated, hit.source_kind, hit.changed_at);
    return next;
end
$$;

comment on function quarry.explain(uuid, text, vector) is
'Why a chunk ranks where it does for a query: its keyword leg rank and BM25 score, its vector leg rank (given a query embedding), the fusion as hybrid search applies it to this chunk (vector weight after long-query damping, the prose factor of long queries, the share taken from its document''s evidence) and its trust factors.';
