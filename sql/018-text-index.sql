-- BM25 text index: lexeme postings with precomputed impacts (see alembic 0003).
--
-- impact(t, c) = tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(c) / avg_len))
-- score(q, c)  = sum over query terms t of idf(t) * impact(t, c)
-- idf(t)       = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))
--
-- k1 = 0.9, b = 0.4: the BEIR defaults of Anserini's BM25 baselines (short passages
-- saturate early and vary less in length than whole web pages). Code chunks normalise length
-- harder, b = 0.9: a long function repeats its identifiers and keywords, and 0.4 let it
-- outrank the short one a question is about. 0.9 was chosen on CoSQA's dev split (1.0 would
-- make impact fall in proportion to length); prose keeps 0.4, where a higher b lost on SciFact
-- (docs/BENCHMARKS.md, decisions).
-- Both kinds normalise against the corpus-wide average length: per-kind averages help the
-- keyword leg but cost hybrid search a little on prose and code ingested together
-- (docs/benchmarks-log.md § Prose and code in one corpus: one average length or one per kind).
-- tf is weighted by where the term occurs (title and symbol A, headings B, body D),
-- a BM25F-style boost. Impacts use the average length when the chunk was indexed;
-- `quarry.rebuild_text_index()` recomputes them all after large corpus changes.

create or replace function quarry.weighted_term_frequencies(vector tsvector)
returns table (lexeme text, term_frequency real)
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- Each occurrence counts 1, plus 2 more in a title or symbol (A), 1 more in a
    -- heading (B), 0.5 more for C. array_positions keeps it in C, not a subquery.
    select u.lexeme,
           (cardinality(u.positions)
            + 2 * cardinality(array_positions(u.weights, 'A'))
            + cardinality(array_positions(u.weights, 'B'))
            + 0.5 * cardinality(array_positions(u.weights, 'C')))::real
    from unnest(vector) as u (lexeme, positions, weights)
$$;

comment on function quarry.weighted_term_frequencies(tsvector) is
'Per lexeme of a search vector, its occurrence count weighted by field (A 3, B 2, C 1.5, D 1).';

-- Adding postings is split in two so that concurrent writers (ingestion writes two batches at
-- once) add theirs in parallel: quarry.insert_chunk_postings writes the postings (the bulk of
-- the work: their heap and two B-trees), and quarry.count_new_postings then counts them into
-- the term and corpus statistics, rows every writer shares, under
-- quarry.lock_corpus_statistics (sql/025-corpus-writes.sql). Inserting takes several times
-- as long as counting, so the part held under the lock stays small
-- (docs/benchmarks-log.md § Ingest throughput without model time).

create or replace function quarry.insert_chunk_postings(
    chunk_ids uuid[],
    k1 real default 0.9,
    b real default 0.4,
    code_b real default 0.9
) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    average_length double precision;
    inserted bigint;
begin
    -- what quarry.count_new_postings counts, until this transaction ends
    create temporary table if not exists pg_temp.new_term_frequencies (
        chunk_id uuid, lexeme text, term_frequency real, chunk_length real, length_weight real
    ) on commit drop;
    truncate pg_temp.new_term_frequencies;
    insert into pg_temp.new_term_frequencies
    select c.id, f.lexeme, f.term_frequency, sum(f.term_frequency) over (partition by c.id),
           case when c.is_code then code_b else b end
    from quarry.chunks c
    cross join lateral quarry.weighted_term_frequencies(c.search_vector) f
    where c.id = any(chunk_ids);

    -- In lexeme order: two writers adding the same new lexemes wait for each other in one
    -- order, never in a cycle. DO NOTHING locks no existing row.
    insert into quarry.text_terms (lexeme)
    select distinct lexeme from pg_temp.new_term_frequencies order by lexeme
    on conflict (lexeme) do nothing;

    -- Read without the statistics lock: a concurrent writer's chunks may be missing from the
    -- average, which is an estimate until quarry.rebuild_text_index recomputes every impact.
    select case when s.chunk_count > 0 then s.total_length / s.chunk_count end
    into average_length from quarry.text_stats s;
    if average_length is null then  -- first batch: its own average
        select avg(l) into average_length
        from (select distinct chunk_id, chunk_length as l from pg_temp.new_term_frequencies) per_chunk;
    end if;

    -- In impact-index order: consecutive rows land on the same index pages, which costs less
    -- CPU than inserting in chunk order (docs/benchmarks-log.md § Ingest throughput without
    -- model time).
    -- The insert trigger leaves them to quarry.count_new_postings (transaction-local flag).
    perform set_config('quarry.postings_counted_later', 'on', true);
    insert into quarry.text_postings (term_id, chunk_id, term_frequency, chunk_length, impact)
    select t.id, n.chunk_id, n.term_frequency, n.chunk_length,
           n.term_frequency * (k1 + 1)
             / (n.term_frequency
                + k1 * (1 - n.length_weight + n.length_weight * n.chunk_length / greatest(average_length, 1)))
    from pg_temp.new_term_frequencies n
    join quarry.text_terms t on t.lexeme = n.lexeme
    order by 1, 5 desc;
    get diagnostics inserted = row_count;
    perform set_config('quarry.postings_counted_later', 'off', true);
    return inserted;
end
$$;

comment on function quarry.insert_chunk_postings(uuid[], real, real, real) is
'Add BM25 postings for the given chunks (length normalisation b for prose, code_b for code chunks) without counting them in the term and corpus statistics: quarry.count_new_postings() must follow in the same transaction.';

create or replace function quarry.change_term_statistics(
    term_ids int[],
    chunk_frequency_changes bigint[],
    chunk_count_change bigint,
    total_length_change double precision
) returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
begin
    -- Term rows locked in id order: concurrent writers then never deadlock on them.
    perform 1 from quarry.text_terms where id = any (term_ids) order by id for update;
    update quarry.text_terms t
    set chunk_frequency = t.chunk_frequency + d.change
    from unnest(term_ids, chunk_frequency_changes) as d (term_id, change)
    where t.id = d.term_id;
    update quarry.text_stats
    set chunk_count = chunk_count + chunk_count_change,
        total_length = total_length + total_length_change;
end
$$;

comment on function quarry.change_term_statistics(int[], bigint[], bigint, double precision) is
'Add (or, negative, remove) postings to the BM25 statistics: per term its chunk-frequency change, and the corpus''s chunk count and total length changes; term rows are locked in id order.';

create or replace function quarry.count_new_postings() returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    term_ids int[];
    changes bigint[];
    chunk_change bigint;
    length_change double precision;
    counted bigint;
begin
    perform quarry.lock_corpus_statistics();
    create temporary table if not exists pg_temp.new_term_frequencies (
        chunk_id uuid, lexeme text, term_frequency real, chunk_length real, length_weight real
    ) on commit drop;
    select array_agg(t.id), array_agg(d.n), coalesce(sum(d.n), 0) into term_ids, changes, counted
    from (select n.lexeme, count(*) as n from pg_temp.new_term_frequencies n group by n.lexeme) d
    join quarry.text_terms t on t.lexeme = d.lexeme;
    select count(*), coalesce(sum(c.l), 0) into chunk_change, length_change
    from (select distinct n.chunk_id, n.chunk_length as l from pg_temp.new_term_frequencies n) c;
    perform quarry.change_term_statistics(term_ids, changes, chunk_change, length_change);
    truncate pg_temp.new_term_frequencies;  -- counted once
    return counted;
end
$$;

comment on function quarry.count_new_postings() is
'Count the postings quarry.insert_chunk_postings added in this transaction into text_terms and text_stats, under quarry.lock_corpus_statistics(); returns how many.';

create or replace function quarry.index_chunk_terms(
    chunk_ids uuid[],
    k1 real default 0.9,
    b real default 0.4,
    code_b real default 0.9
) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    inserted bigint;
begin
    inserted := quarry.insert_chunk_postings(chunk_ids, k1, b, code_b);
    perform quarry.count_new_postings();
    return inserted;
end
$$;

comment on function quarry.index_chunk_terms(uuid[], real, real, real) is
'Add BM25 postings for the given chunks and count them in the term and corpus statistics (the same transaction as the chunks).';

-- Term and corpus statistics follow the postings through statement-level triggers,
-- so deletes from psql (or cascades) keep IDF and average length right.
create or replace function quarry.text_postings_changed() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
declare
    direction int := case when tg_op = 'INSERT' then 1 else -1 end;
    term_ids int[];
    changes bigint[];
    chunk_change bigint;
    length_change double precision;
begin
    if tg_op = 'INSERT' and current_setting('quarry.postings_counted_later', true) = 'on' then
        return null;  -- quarry.insert_chunk_postings: quarry.count_new_postings counts them
    end if;
    -- `changed` is the transition table of either trigger below (same name in both).
    select array_agg(d.term_id), array_agg(direction * d.n) into term_ids, changes
    from (select term_id, count(*) as n from changed group by term_id) d;
    select direction * count(*), direction * coalesce(sum(c.l), 0) into chunk_change, length_change
    from (select distinct chunk_id, chunk_length as l from changed) c;
    perform quarry.change_term_statistics(term_ids, changes, chunk_change, length_change);
    return null;
end
$$;

comment on function quarry.text_postings_changed() is
'Trigger: keep text_terms.chunk_frequency and text_stats in step with inserted or deleted postings (quarry.insert_chunk_postings leaves its inserts to quarry.count_new_postings).';

create or replace function quarry.chunks_deleted() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
begin
    delete from quarry.text_postings where chunk_id in (select id from gone);
    return null;
end
$$;

comment on function quarry.chunks_deleted() is
'Trigger: remove the BM25 postings of deleted chunks (one statement per delete, not one per row).';

create or replace function quarry.chunks_truncated() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
begin
    truncate quarry.text_postings;
    return null;
end
$$;

comment on function quarry.chunks_truncated() is
'Trigger: a truncate of chunks (e.g. cascading from sources) empties the BM25 postings too.';

drop trigger if exists chunks_truncated on quarry.chunks;
create trigger chunks_truncated after truncate on quarry.chunks
    for each statement execute function quarry.chunks_truncated();
drop trigger if exists chunks_deleted on quarry.chunks;
create trigger chunks_deleted after delete on quarry.chunks
    referencing old table as gone for each statement execute function quarry.chunks_deleted();

create or replace function quarry.text_postings_truncated() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
begin
    update quarry.text_terms set chunk_frequency = 0 where chunk_frequency <> 0;
    update quarry.text_stats set chunk_count = 0, total_length = 0;
    return null;
end
$$;

comment on function quarry.text_postings_truncated() is
'Trigger: zero the BM25 statistics when the postings are truncated (e.g. truncate of sources cascading).';

drop trigger if exists text_postings_truncated on quarry.text_postings;
create trigger text_postings_truncated after truncate on quarry.text_postings
    for each statement execute function quarry.text_postings_truncated();
drop trigger if exists text_postings_inserted on quarry.text_postings;
create trigger text_postings_inserted after insert on quarry.text_postings
    referencing new table as changed for each statement execute function quarry.text_postings_changed();
drop trigger if exists text_postings_deleted on quarry.text_postings;
create trigger text_postings_deleted after delete on quarry.text_postings
    referencing old table as changed for each statement execute function quarry.text_postings_changed();

create or replace function quarry.bm25_idf(chunk_count bigint, chunk_frequency int) returns double precision
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    select ln(1.0::float8 + (chunk_count - chunk_frequency + 0.5::float8) / (chunk_frequency + 0.5::float8))
$$;

comment on function quarry.bm25_idf(bigint, int) is
'BM25 inverse document frequency of a term found in chunk_frequency of chunk_count chunks.';

create or replace function quarry.query_lexemes(query_text text) returns text[]
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    select coalesce(array_agg(distinct lexeme), '{}')
    from unnest(
        to_tsvector('english'::regconfig, query_text)
        || to_tsvector('english'::regconfig, coalesce(quarry.identifier_words(query_text), ''))
    )
$$;

comment on function quarry.query_lexemes(text) is
'Distinct stemmed, non-stopword lexemes of a query, code identifiers split (as chunks are indexed).';

create or replace function quarry.bm25_top(
    query_text text,
    match_count int default 50,
    per_term_depth int default 750,
    filters jsonb default null,
    max_query_terms int default 128
) returns table (chunk_id uuid, score real)
language sql stable parallel safe
-- at most match_count rows: without it the planner assumes 1,000 and joins a caller's tables
-- (quarry.search_text's chunk_details) by hashing every chunk
rows 50
set search_path = quarry, pg_catalog
as $$
    -- Candidates come from the top `per_term_depth` postings of each query term (impact
    -- order); the returned chunks then get their exact BM25 score. Summing only the postings
    -- read would undercount a chunk found through a rare term that also holds a common term
    -- below that term's cut, and most prose queries have a term whose list is cut.
    -- With exact candidates the cut only decides which chunks are considered, but a chunk left
    -- out of the 50-deep list fusion reads loses its whole keyword evidence, so the default
    -- cut of 750 is the shallowest that kept hybrid quality at the default depth (candidates
    -- 50) (docs/BENCHMARKS.md, decisions; docs/benchmarks-log.md § cosqa (test, 500 queries,
    -- 6267 docs) and § Half-precision HNSW graph, scan depth growing with the index).
    with allowed_sources as materialized (  -- evaluated once, not once per posting
        select * from quarry.filtered_source_ids(filters) where filters is not null
    ),
    chunk_rules as materialized (select quarry.has_chunk_rules(filters) as present),
    terms as materialized (
        -- double precision throughout: numeric ln per posting cost more than the index scans.
        -- A long query (an issue, a stack trace) keeps its max_query_terms rarest terms: its
        -- common words add cost and little evidence, and each term reads up to per_term_depth
        -- postings.
        select t.id, quarry.bm25_idf(s.chunk_count, t.chunk_frequency) as idf,
               t.chunk_frequency > per_term_depth as cut
        from quarry.text_terms t, quarry.text_stats s
        where t.lexeme = any (quarry.query_lexemes(query_text)) and t.chunk_frequency > 0
        order by t.chunk_frequency, t.id
        limit max_query_terms
    ),
    contributions as (
        select p.chunk_id, terms.idf * p.impact as part, terms.cut
        from terms
        cross join chunk_rules
        cross join lateral (
            select p.chunk_id, p.impact
            from quarry.text_postings p
            where p.term_id = terms.id
              -- a per-posting check (scalar subquery): as EXISTS the planner would join
              -- every chunk to the filter before reading the impact-ordered postings
              and (filters is null or coalesce((
                  select true from quarry.chunks c join allowed_sources s on s.id = c.source_id
                  where c.id = p.chunk_id
                    and (not chunk_rules.present
                         or (quarry.chunk_allowed(filters, c.content_type, c.language, c.package,
                                                  c.deprecated or s.deprecated)
                             and quarry.version_allows(filters, c.document_id)
                             and quarry.chunk_location_allows(filters, c.document_id, c.symbol_path, c.is_code,
                                                                 c.content_type)))
                  limit 1), false))
            order by p.impact desc
            limit per_term_depth
        ) p
    ),
    candidates as materialized (
        -- a term read to its end (not cut) already gave each candidate its whole part
        select c.chunk_id, coalesce(sum(c.part) filter (where not c.cut), 0) as uncut_part
        from contributions c
        group by c.chunk_id
        order by sum(c.part) desc, c.chunk_id
        limit match_count
    ),
    cut_terms as materialized (
        select array_agg(terms.id) as ids, array_agg(terms.idf) as idfs from terms where terms.cut
    )
    select c.chunk_id, (c.uncut_part + coalesce(cut.part, 0))::real as score
    from candidates c
    cross join cut_terms
    -- the cut terms' postings of each candidate: one probe of the chunk index (alembic 0012)
    -- per candidate, where re-reading the cut terms' lists cost as much as the first pass
    left join lateral (
        select sum(cut_terms.idfs[array_position(cut_terms.ids, p.term_id)] * p.impact) as part
        from quarry.text_postings p
        where p.chunk_id = c.chunk_id and p.term_id = any (cut_terms.ids)
    ) cut on true
    order by 2 desc, c.chunk_id
$$;

comment on function quarry.bm25_top(text, int, int, jsonb, int) is
'Top chunks by BM25 for a query (its max_query_terms rarest terms): candidates from the top per_term_depth impact-ordered postings of each term, scored exactly; facet and version filters (resolved, see quarry.resolve_version_filters) applied before the top-k.';

create or replace function quarry.rebuild_text_index(k1 real default 0.9, b real default 0.4,
                                                     code_b real default 0.9)
returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    indexed bigint;
begin
    -- From the canonical chunks: the truncate trigger zeroes the statistics, so the
    -- single indexing pass below computes every impact with today's average length.
    lock table quarry.text_postings in exclusive mode;
    truncate quarry.text_postings;
    -- Loading into an unindexed table and building the two indexes once is much faster than
    -- maintaining them row by row. The definitions repeat alembic 0003's and 0012's (the
    -- chunk index), which own them.
    drop index quarry.text_postings_impact_idx;
    drop index quarry.text_postings_chunk_idx;
    indexed := quarry.index_chunk_terms(array(select id from quarry.chunks), k1, b, code_b);
    create index text_postings_impact_idx on quarry.text_postings (term_id, impact desc) include (chunk_id);
    create index text_postings_chunk_idx on quarry.text_postings (chunk_id, term_id) include (impact);
    return indexed;
end
$$;

comment on function quarry.rebuild_text_index(real, real, real) is
'Rebuild every BM25 posting, term frequency and corpus statistic from the chunks (ingestion runs it after a first ingest).';
