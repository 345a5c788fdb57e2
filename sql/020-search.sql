-- Retrieval: per query a BM25 leg and a vector leg, filtered inside each leg before
-- its top-k, then fused across legs and queries (convex by default, or RRF).

create or replace function quarry.nearest_chunks(
    embedding_space text,
    query_embedding vector,
    match_count int,
    filters jsonb default null
) returns table (chunk_id uuid, distance double precision)
language plpgsql volatile  -- it sets the HNSW scan depth for the transaction
rows 50  -- at most match_count rows: callers join them by primary key, not by hashing every chunk
set search_path = quarry, public, pg_catalog
as $$
declare
    physical text;
    space_dimension int;
    rules record := quarry.chunk_rule_kinds(filters);
begin
    -- a logical space (text, code) is answered by the generation serving it
    select name, dimension into physical, space_dimension from quarry.embedding_spaces where serves = embedding_space;
    if space_dimension is null then
        return;
    end if;
    -- Every caller (hybrid_search, counting, explain) gets a scan as deep as it asks for: pgvector
    -- returns at most hnsw.ef_search rows (40 by default), and iterative scans keep a filtered
    -- leg full.
    perform set_config('hnsw.ef_search',
                       quarry.hnsw_scan_depth(match_count, quarry.indexed_vectors(array[embedding_space]))::text, true);
    perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
    -- The ORDER BY repeats the space's index expression (half-precision cast to its dimension,
    -- partial predicate; quarry.space_index_definition) so the planner uses its HNSW index.
    -- The distance returned is the stored (half-precision, alembic 0024) vector's from the
    -- full-precision query, computed for the returned rows only. Without filters the leg is a bare
    -- index scan; a filter is a per-candidate check the iterative scan applies.
    return query execute format($sql$
        with allowed_sources as materialized (  -- evaluated once, not once per candidate
            select * from quarry.filtered_source_ids($3) where $3 is not null
        )
        select e.chunk_id, (e.embedding::vector <=> $1)::double precision
        from quarry.embeddings e
        where e.space = %2$L %3$s
        order by (e.embedding::halfvec(%1$s)) <=> $1::halfvec(%1$s)
        limit $2
    $sql$, space_dimension, physical,
        -- A scalar subquery, not EXISTS: the planner would turn EXISTS into a semi-join
        -- that filters every chunk and sorts every vector (more than ten times slower,
        -- and growing with the corpus); as a per-row check it keeps the HNSW scan.
        case when filters is null then '' else $filter$
            and coalesce((
                select true from quarry.chunks c join allowed_sources s on s.id = c.source_id
                where c.id = e.chunk_id
                  and quarry.chunk_passes_rules($3, $4, $5, $6, c.content_type, c.language, c.package,
                                                c.deprecated or s.deprecated, c.document_id, c.symbol_path, c.is_code)
                limit 1), false)
        $filter$ end)
    using query_embedding, match_count, filters, rules.facets, rules.versions, rules.locations;
end
$$;

comment on function quarry.nearest_chunks(text, vector, int, jsonb) is
'Chunks nearest to a query vector in one embedding space (HNSW, cosine distance), facet and version filters (resolved, see quarry.resolve_version_filters) applied during the scan.';

create or replace function quarry.indexed_vectors(logical_spaces text[]) returns double precision
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- the planner's count (pg_class.reltuples: set by CREATE INDEX, kept by vacuum and analyze),
    -- a catalog read instead of counting a million rows per search
    select coalesce(max(greatest(c.reltuples, 0)), 0)
    from quarry.embedding_spaces s
    join pg_class c on c.oid = to_regclass(format('quarry.%I', quarry.space_index_name(s.name)))
    where s.serves = any (logical_spaces)
$$;

comment on function quarry.indexed_vectors(text[]) is
'Vectors in the largest HNSW index serving these logical spaces (text, code), as the planner last counted them.';

create or replace function quarry.hnsw_scan_depth(depth int, indexed_vectors double precision) returns int
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- HNSW returns at most ef_search rows, so the scan starts a little deeper than the leg
    -- (an iterative scan that has to resume costs more than the extra rows); iterative scans
    -- keep filtered legs full. Recall falls as the graph grows, and faster past 100k vectors, so
    -- the depth grows by three quarters per tenfold from 10k to 100k vectors and by one and a
    -- quarter above: recall@10 of the 50-deep leg against exact search 0.99 or more up to 100k,
    -- 0.972 at 1M, where three quarters throughout (ef_search 150) gave 0.966 and 165 gave 0.969
    -- (docs/BENCHMARKS.md, decisions: HNSW scan depth).
    select least(1000, round((depth + 10) * (1 + 0.75 * tenfolds + 0.5 * greatest(0, tenfolds - 1))))::int
    from (select greatest(0, log(greatest(indexed_vectors, 1) / 10000)) as tenfolds) growth
$$;

comment on function quarry.hnsw_scan_depth(int, double precision) is
'hnsw.ef_search for a vector leg depth rows deep over an index of indexed_vectors: depth + 10, times 1 + 0.75 x log10(vectors / 10k) above 10k vectors, plus 0.5 x log10(vectors / 100k) above 100k, at most 1000.';

create or replace function quarry.ranking_defaults(
    out fusion text,
    out vector_weight double precision,
    out code_vector_weight double precision,
    out rrf_k int,
    out candidate_count int,
    out per_term_depth int,
    out long_query_terms int,
    out long_query_prose_factor double precision,
    out document_evidence_chunks int
)
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- The one place these defaults live: quarry.hybrid_search, quarry.search_hits and
    -- quarry.explain read them, and Python callers leave them out unless they override one.
    -- Vector weights: prose 0.45 and document evidence chosen on every dev task at once, with
    -- the task held out ahead of its best leg (bench/fusion_lab.py), code on CoSQA's dev split;
    -- the keyword leg reads per_term_depth postings per query term
    -- (docs/BENCHMARKS.md, decisions). A query whose terms the corpus knows more than
    -- long_query_terms of (an issue, a stack trace) scales the vector weight by
    -- long_query_terms / known terms, since the embedder reads only its start and the keyword
    -- leg all of it, and its prose chunks by long_query_prose_factor: such a query asks which
    -- code to change, not which page mentions its words (docs/BENCHMARKS.md, decisions).
    -- A chunk's score blends in its document's best evidence per leg, the more so the longer the
    -- document: one of 1 + document_evidence_chunks chunks takes half (see
    -- quarry.document_evidence_share).
    select 'convex'::text, 0.45::double precision, 0.8::double precision, 60, 50, 750, 20, 0.8::double precision, 15
$$;

comment on function quarry.ranking_defaults() is
'The ranking defaults of hybrid search (fusion method, vector weight for prose and code chunks, RRF k, candidates per leg, postings per query term, how a long query shifts fusion, and how much a long document''s best evidence counts): a null argument of quarry.hybrid_search / quarry.search_hits means this value.';

create or replace function quarry.long_query_damping(query text, long_query_terms int) returns double precision
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- the embedder reads only a long query's start, the keyword leg all of it
    select least(1.0, long_query_terms / greatest(count(*), 1)::double precision)
    from quarry.text_terms t
    where t.lexeme = any (quarry.query_lexemes(query)) and t.chunk_frequency > 0
$$;

comment on function quarry.long_query_damping(text, int) is
'The factor on a query''s vector weight: 1, or long_query_terms / the number of its terms the corpus knows when that is larger (an issue, a stack trace).';

create or replace function quarry.document_evidence_share(document_chunks bigint, document_evidence_chunks int)
returns double precision
language sql immutable parallel safe
as $$
    -- A long page or file is judged by more than its best section: its sections may match the
    -- question's words and its meaning apart. One chunk: 0 (ranked as the chunk);
    -- 1 + document_evidence_chunks chunks: one half (docs/BENCHMARKS.md, decisions).
    select case when document_chunks <= 1 then 0.0::double precision
                else (document_chunks - 1)::double precision
                     / (document_chunks - 1 + greatest(document_evidence_chunks, 0)) end
$$;

comment on function quarry.document_evidence_share(bigint, int) is
'The share of a chunk''s fused score taken from its document''s best evidence per leg (best keyword and best vector score among the candidates, fused with the chunk''s weights): (n - 1) / (n - 1 + document_evidence_chunks) for a document of n chunks.';

create or replace function quarry.retrieval_confidence(
    fused_score double precision,
    vector_similarity double precision,
    code_similarity double precision,
    fusion text,
    legs int,
    queries int,
    rrf_k int
) returns real
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- Fused scores are relative (the convex fusion normalises each leg by its best hit, so the
    -- top hit of any query scores near 1 even when nothing relevant exists): confidence blends
    -- the fused score (half) with an absolute signal, the best query-chunk cosine similarity
    -- mapped from [0.2, 0.7] (unrelated text to a close paraphrase, for the local model) to
    -- [0, 1] (half). A hit only the keyword leg found lacks that evidence and stays at or below
    -- 0.5. RRF scores are divided by the best attainable one (first in every leg for every query).
    select round(case
        when fusion = 'rrf' then
            case when legs * queries > 0
                 then least(1.0, fused_score / (legs * queries / (rrf_k + 1.0))) else 0 end
        else 0.5 * least(1.0, greatest(0.0, fused_score))
             + 0.5 * coalesce(least(1.0, greatest(0.0,
                   (greatest(vector_similarity, code_similarity) - 0.2) / (0.7 - 0.2))), 0)
    end::numeric, 4)::real
$$;

comment on function quarry.retrieval_confidence(double precision, double precision, double precision, text, int, int, int) is
'How much the retrieval evidence supports a hit, in [0, 1]: half its fused score, half its best cosine similarity mapped from [0.2, 0.7] to [0, 1] (convex fusion); for RRF, the fused score over the best attainable one.';

create or replace function quarry.hybrid_search(
    query_texts text[],
    query_embeddings vector[] default null,
    search_mode text default 'hybrid',
    match_count int default 10,
    filters jsonb default null,
    embedding_space text default 'text',
    candidate_count int default null,
    rrf_k int default null,
    per_term_depth int default null,
    fusion text default null,
    vector_weight double precision default null,
    code_vector_weight double precision default null,
    code_embeddings vector[] default null,
    code_mode text default 'on',
    version_matching text default 'permissive',
    query_model text default null,
    code_query_model text default null
) returns table (
    chunk_id uuid,
    fused_score double precision,
    confidence real,
    fts_rank int,
    vector_rank int,
    code_rank int,
    fts_score real,
    vector_similarity real,
    code_similarity real,
    version_degree int,
    vector_weight_used real,
    document_share real,
    legs_left_out jsonb
)
language plpgsql volatile
rows 20  -- a page of hits: lets callers join it with nested loops over primary keys
set search_path = quarry, public, pg_catalog
-- The fused statement's plan does not depend on the values: under the default (auto) mode
-- plpgsql kept planning it per call, a noticeable share of a search (docs/BENCHMARKS.md, decisions: search SQL).
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    defaults record := quarry.ranking_defaults();
    use_fts boolean := search_mode in ('hybrid', 'fts');
    use_vector boolean := search_mode in ('hybrid', 'vector') and code_mode <> 'exclusive';
    use_code boolean := search_mode in ('hybrid', 'vector') and code_mode in ('on', 'exclusive');
    depth int;
    resolved_filters jsonb;
    has_version_rules boolean := filters ? 'language_target' or filters ? 'sdk_dependency';
    query_count int;
    legs int;
    -- {"<leg>": {"reason": "error" | "model_mismatch" | "redundant", "detail": "..."}}: the legs left out
    failures jsonb := '{}';
    skip_reason text;
    failed_leg text;
begin
    candidate_count := coalesce(candidate_count, defaults.candidate_count);
    rrf_k := coalesce(rrf_k, defaults.rrf_k);
    per_term_depth := coalesce(per_term_depth, defaults.per_term_depth);
    fusion := coalesce(fusion, defaults.fusion);
    vector_weight := coalesce(vector_weight, defaults.vector_weight);
    code_vector_weight := coalesce(code_vector_weight, defaults.code_vector_weight);
    depth := greatest(candidate_count, match_count);
    if search_mode is null or search_mode not in ('hybrid', 'fts', 'vector') then
        raise exception 'unknown search mode %: expected hybrid, fts or vector', search_mode
            using errcode = 'invalid_parameter_value';
    end if;
    if code_mode is null or code_mode not in ('on', 'off', 'exclusive') then
        raise exception 'unknown code_mode %: expected on, off or exclusive', code_mode
            using errcode = 'invalid_parameter_value';
    end if;
    if fusion not in ('rrf', 'convex') then
        raise exception 'unknown fusion %: expected rrf or convex', fusion using errcode = 'invalid_parameter_value';
    end if;
    if vector_weight < 0 or vector_weight > 1 or code_vector_weight < 0 or code_vector_weight > 1 then
        raise exception 'vector weights must be between 0 and 1' using errcode = 'invalid_parameter_value';
    end if;
    if rrf_k < 1 or candidate_count < 1 or per_term_depth < 1 then
        raise exception 'rrf_k, candidate_count and per_term_depth must be positive'
            using errcode = 'invalid_parameter_value';
    end if;
    if match_count is null or match_count < 1 or match_count > 1000 then
        raise exception 'match_count must be between 1 and 1000, got %', match_count
            using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(cardinality(query_texts), 0) = 0 then
        raise exception 'at least one query is required' using errcode = 'invalid_parameter_value';
    end if;
    query_count := (select count(distinct t) from unnest(query_texts) t);
    if use_vector then
        skip_reason := quarry.query_embeddings_skip_reason(
            query_embeddings, query_texts, embedding_space,
            required => search_mode = 'vector' and code_mode = 'off', query_model => query_model);
        use_vector := skip_reason is null;
        failures := quarry.with_skipped_leg(failures, 'vector', skip_reason);
    end if;
    if use_code then
        skip_reason := quarry.query_embeddings_skip_reason(
            code_embeddings, query_texts, 'code',
            required => search_mode = 'vector' and code_mode = 'exclusive', query_model => code_query_model);
        use_code := skip_reason is null;
        failures := quarry.with_skipped_leg(failures, 'code', skip_reason);
    end if;
    if use_vector and use_code and code_query_model is not distinct from query_model
       and quarry.one_model_serves(embedding_space, 'code') then
        -- every chunk is in the general space, code chunks with the same vector as in the code
        -- space: a code leg would rank those vectors again, normalised among code chunks only,
        -- lifting code into prose questions without adding evidence (docs/BENCHMARKS.md, decisions)
        use_code := false;
        failures := failures || '{"code": {"reason": "redundant"}}';
    end if;
    resolved_filters := quarry.resolve_version_filters(filters, version_matching);

    -- A leg that errors (a lock it cannot get, a broken index) must not take the others
    -- down: the statement is retried without it, and every row's legs_left_out names it.
    -- Nothing is returned twice: the final ORDER BY consumes every leg before the first
    -- row is emitted.
    loop
        begin
            legs := use_fts::int + use_vector::int + use_code::int;
            -- Static SQL, so each pooled session plans it once: as dynamic SQL its planning
            -- cost more than running it. Only the vector legs (whose index expression names
            -- the space's dimension) are dynamic, inside quarry.nearest_chunks.
            return query
            with distinct_queries as (
                -- a repeated query counts once
                select distinct on (q.query_text) q.query_text, q.embedding, q.code_embedding, q.ordinal
                from unnest(query_texts,
                            case when use_vector then query_embeddings end,
                            case when use_code then code_embeddings end)
                     with ordinality as q (query_text, embedding, code_embedding, ordinal)
                order by q.query_text, q.ordinal
            ),
            queries as (
                -- a long query (more known terms than long_query_terms) leans on the keyword leg
                select q.*, quarry.long_query_damping(q.query_text, defaults.long_query_terms) as damping
                from distinct_queries q
            ),
            fts_leg as (
                select q.ordinal, hit.chunk_id, hit.score,
                       row_number() over (partition by q.ordinal order by hit.score desc, hit.chunk_id)::int as rank,
                       hit.score / nullif(max(hit.score) over (partition by q.ordinal), 0) as normalized
                from queries q
                cross join lateral quarry.bm25_top(q.query_text, depth, per_term_depth, resolved_filters) hit
                where use_fts
            ),
            vector_queries as (
                select 'text' as leg, q.ordinal, q.embedding, embedding_space as space
                from queries q where use_vector
                union all
                select 'code', q.ordinal, q.code_embedding, 'code' from queries q where use_code
            ),
            vector_leg as (
                select qe.leg, qe.ordinal, hit.chunk_id, 1 - hit.distance as similarity,
                       row_number() over per_list::int as rank,
                       (max(hit.distance) over whole_list - hit.distance)
                         / nullif(max(hit.distance) over whole_list - min(hit.distance) over whole_list, 0)
                         as normalized
                from vector_queries qe
                cross join lateral quarry.nearest_chunks(qe.space, qe.embedding, depth, resolved_filters) hit
                window per_list as (partition by qe.leg, qe.ordinal order by hit.distance, hit.chunk_id),
                       whole_list as (partition by qe.leg, qe.ordinal)
            ),
            vector_per_query as (
                -- a chunk's vector evidence is its better list: text and code vectors are two
                -- views of one question, not two independent votes
                select v.ordinal, v.chunk_id, max(1.0 / (rrf_k + v.rank)) as rrf,
                       max(coalesce(v.normalized, 1)) as normalized,
                       min(v.rank) filter (where v.leg = 'text') as rank,
                       min(v.rank) filter (where v.leg = 'code') as code_rank,
                       max(v.similarity) filter (where v.leg = 'text') as similarity,
                       max(v.similarity) filter (where v.leg = 'code') as code_similarity
                from vector_leg v group by v.ordinal, v.chunk_id
            ),
            per_query as (
                -- each leg's evidence for a chunk, as the fusion method weighs it
                select coalesce(f.ordinal, v.ordinal) as ordinal, coalesce(f.chunk_id, v.chunk_id) as chunk_id,
                       f.rank as fts_rank, f.score as fts_score,
                       case when f.rank is null then 0
                            when fusion = 'rrf' then 2.0 / (rrf_k + f.rank) else coalesce(f.normalized, 1) end
                         as fts_evidence,
                       v.rank as vector_rank, v.code_rank, v.similarity, v.code_similarity,
                       coalesce(case when fusion = 'rrf' then 2 * v.rrf else v.normalized end, 0) as vector_evidence
                from fts_leg f
                full outer join vector_per_query v on v.chunk_id = f.chunk_id and v.ordinal = f.ordinal
            ),
            with_document as (
                -- the document's best evidence per leg among this query's candidates
                select p.*, c.document_id, c.is_code, k.vector * q.damping as weight, k.degree, k.deprecated,
                       k.document_share, q.damping,
                       max(p.fts_evidence) over per_document as document_fts,
                       max(p.vector_evidence) over per_document as document_vector,
                       -- a page holding code is weighed as code: its words and its code's meaning apart
                       case when bool_or(c.is_code) over per_document then code_vector_weight
                            else vector_weight end * q.damping as document_weight
                from per_query p
                join queries q on q.ordinal = p.ordinal
                -- each row looks its chunk up by key: joined to the distinct candidates instead, the
                -- generic plan compared every row with every candidate (0.15 of the fusion's 1.5 ms at 1M)
                join quarry.chunks c on c.id = p.chunk_id
                join quarry.sources s on s.id = c.source_id
                cross join lateral (
                    -- Code leans on the vector leg: natural-language questions share few words
                    -- with identifiers, so keyword scores on code are weaker evidence. Under a
                    -- version rule, the degree of match scales the score (permissive ranking);
                    -- deprecated content (document or source) is halved: still findable, rarely first.
                    select case when not use_fts then 1.0  -- a single leg is ranked as it is
                                when not (use_vector or use_code) then 0.0
                                when c.is_code then code_vector_weight else vector_weight end as vector,
                           case when has_version_rules
                                then quarry.version_degree(resolved_filters, c.document_id) end as degree,
                           c.deprecated or s.deprecated as deprecated,
                           -- the document's length comes with the chunk row (alembic 0027): looked up for each
                           -- candidate, it took 0.3-0.46 ms of a 6 ms search at 1M chunks
                           case when use_fts and (use_vector or use_code)  -- a single leg is ranked as it is
                                then quarry.document_evidence_share(c.document_chunks, defaults.document_evidence_chunks)
                                else 0 end as document_share
                ) k
                window per_document as (partition by p.ordinal, c.document_id)
            ),
            fused as (
                select e.chunk_id,
                       (sum(((1 - e.document_share) * ((1 - e.weight) * e.fts_evidence + e.weight * e.vector_evidence)
                             + e.document_share * ((1 - e.document_weight) * e.document_fts
                                                   + e.document_weight * e.document_vector))
                            -- a long query asks which code to change, not which page holds its words
                            * case when e.damping < 1 and not e.is_code then defaults.long_query_prose_factor
                                   else 1 end)
                        / case when fusion = 'rrf' then 1 else query_count end
                        * case e.degree when 3 then 0.9 when 2 then 0.8 when 1 then 0.5 else 1 end
                        * case when e.deprecated then 0.5 else 1 end
                       )::double precision as fused_score,
                       min(e.fts_rank)::int as fts_rank,
                       min(e.vector_rank)::int as vector_rank,
                       min(e.code_rank)::int as code_rank,
                       max(e.fts_score)::real as fts_score,
                       max(e.similarity)::real as vector_similarity,
                       max(e.code_similarity)::real as code_similarity,
                       e.degree,
                       avg(e.weight)::real as vector_weight_used,
                       max(e.document_share)::real as document_share
                from with_document e
                group by e.chunk_id, e.degree, e.deprecated
            )
            select fused.chunk_id, fused.fused_score,
                   quarry.retrieval_confidence(fused.fused_score, fused.vector_similarity, fused.code_similarity,
                                               fusion, legs, query_count, rrf_k),
                   fused.fts_rank, fused.vector_rank, fused.code_rank,
                   fused.fts_score, fused.vector_similarity, fused.code_similarity, fused.degree,
                   fused.vector_weight_used, fused.document_share, nullif(failures, '{}')
            from fused
            order by fused.fused_score desc, coalesce(fused.fts_rank, 2147483647),
                     coalesce(fused.vector_rank, fused.code_rank, 2147483647), fused.chunk_id
            limit match_count;
            if not found and failures <> '{}' then
                -- no hit, but a leg sat out: one row without a chunk says which, so an empty
                -- answer is not mistaken for a complete one
                return query select null::uuid, null::double precision, null::real, null::int, null::int,
                                    null::int, null::real, null::real, null::real, null::int, null::real, null::real,
                                    failures;
            end if;
            return;
        exception
            when invalid_parameter_value or query_canceled then
                raise;
            when others then
                failed_leg := quarry.failing_search_leg(
                    query_texts, query_embeddings, code_embeddings, embedding_space, depth, per_term_depth,
                    resolved_filters, use_fts, use_vector, use_code);
                if failed_leg is null
                   or (use_fts::int + use_vector::int + use_code::int) <= 1 then
                    raise;  -- nothing to fall back on: report the real error
                end if;
                -- the database's message goes to the server log, not to clients
                raise log 'quarry: search leg % failed: %', failed_leg, sqlerrm;
                failures := failures || jsonb_build_object(failed_leg, jsonb_build_object('reason', 'error'));
                use_fts := use_fts and failed_leg <> 'fts';
                use_vector := use_vector and failed_leg <> 'vector';
                use_code := use_code and failed_leg <> 'code';
        end;
    end loop;
end
$$;

comment on function quarry.hybrid_search(text[], vector[], text, int, jsonb, text, int, int, int, text, double precision, double precision, vector[], text, text, text, text) is
'Hybrid retrieval in one statement: per query a BM25 leg, a vector leg and (code_mode on/exclusive, given code_embeddings) a code-space vector leg, facet and version filters applied inside each leg before top-k, fused across legs and queries by a convex combination of per-query normalised scores or weighted RRF, each chunk''s score blended with its document''s best evidence per leg by document_share (see quarry.document_evidence_share). Null ranking arguments take quarry.ranking_defaults(). A leg that errors, whose query_model differs from its space''s model, or that would repeat another (the code leg when one model serves both spaces) is left out and named in legs_left_out ({"<leg>": {"reason": "error" | "model_mismatch" | "redundant", "detail"}}); with no hit and a leg left out, one row with a null chunk_id carries legs_left_out.';

create or replace function quarry.one_model_serves(first_space text, second_space text) returns boolean
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    select count(distinct model) = 1 and count(*) = 2
    from quarry.embedding_spaces where serves in (first_space, second_space)
$$;

comment on function quarry.one_model_serves(text, text) is
'Whether the generations serving two logical spaces (text, code) hold vectors of the same model.';

create or replace function quarry.with_skipped_leg(failures jsonb, leg text, skip_reason text) returns jsonb
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- only a model mismatch is a failure to report: absent embeddings or an empty space are not
    select case when skip_reason like 'model_mismatch: %'
                then failures || jsonb_build_object(leg, jsonb_build_object(
                         'reason', 'model_mismatch', 'detail', substr(skip_reason, length('model_mismatch: ') + 1)))
                else failures end
$$;

comment on function quarry.with_skipped_leg(jsonb, text, text) is
'legs_left_out with a leg added when quarry.query_embeddings_skip_reason reported a model mismatch for it.';

create or replace function quarry.query_embeddings_skip_reason(
    embeddings vector[], query_texts text[], space text, required boolean default false,
    query_model text default null
) returns text
language plpgsql stable
set search_path = quarry, public, pg_catalog
as $$
declare
    serving quarry.embedding_spaces;
begin
    if embeddings is null then
        if required then
            raise exception 'vector mode needs query embeddings for space %', space
                using errcode = 'invalid_parameter_value';
        end if;
        return 'absent';
    end if;
    if cardinality(embeddings) <> cardinality(query_texts) then
        raise exception 'got % query embeddings for % queries in space %',
            cardinality(embeddings), cardinality(query_texts), space using errcode = 'invalid_parameter_value';
    end if;
    select * into serving from quarry.embedding_spaces where serves = space;
    if not found then
        return 'empty space';  -- nothing embedded in this space yet
    end if;
    if query_model is not null and query_model <> serving.model then
        -- e.g. a server still configured for the model a re-embed replaced: comparing
        -- vectors of two models would rank noise, so the leg sits out and says why
        return format('model_mismatch: space %s is embedded with %s; queries were embedded with %s',
                      space, serving.model, query_model);
    end if;
    if vector_dims(embeddings[1]) <> serving.dimension then
        raise exception 'query embeddings have % dimensions, space % has %',
            vector_dims(embeddings[1]), space, serving.dimension using errcode = 'invalid_parameter_value';
    end if;
    return null;
end
$$;

comment on function quarry.query_embeddings_skip_reason(vector[], text[], text, boolean, text) is
'Why query embeddings cannot drive a vector leg in a space (null when they can): absent (unless required: then it raises), empty space, or model_mismatch: <detail> when the space holds another model; raises on a count or dimension mismatch.';

create or replace function quarry.failing_search_leg(
    query_texts text[], query_embeddings vector[], code_embeddings vector[], embedding_space text,
    depth int, per_term_depth int, filters jsonb, use_fts boolean, use_vector boolean, use_code boolean
) returns text
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
declare
    query_index int;
begin
    -- Runs each active leg alone, in its own subtransaction, to name the one that errors.
    for query_index in 1 .. cardinality(query_texts) loop
        if use_fts then
            begin
                perform count(*) from quarry.bm25_top(query_texts[query_index], depth, per_term_depth, filters);
            exception when others then
                return 'fts';
            end;
        end if;
        if use_vector then
            begin
                perform count(*) from quarry.nearest_chunks(embedding_space, query_embeddings[query_index], depth, filters);
            exception when others then
                return 'vector';
            end;
        end if;
        if use_code then
            begin
                perform count(*) from quarry.nearest_chunks('code', code_embeddings[query_index], depth, filters);
            exception when others then
                return 'code';
            end;
        end if;
    end loop;
    return null;
end
$$;

comment on function quarry.failing_search_leg(text[], vector[], vector[], text, int, int, jsonb, boolean, boolean, boolean) is
'Which retrieval leg (fts, vector, code) errors for these inputs, found by running each alone; null when none does.';
