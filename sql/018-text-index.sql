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

-- Where the postings live (alembic 0022). quarry.chunk_terms holds each chunk's postings as one
-- row (its term ids and impacts as parallel arrays): exact scores read it, and the statistics
-- count it, so a chunk's postings come and go with its row. The lists by term are in two
-- places: quarry.text_posting_blocks, each term's postings in impact order cut into blocks of
-- about 32, and quarry.text_postings, one row per posting written since the last compaction
-- (quarry.compact_text_postings moves them into blocks). A row costs 60 bytes and two index
-- entries of 36; a posting in a block costs 20 and one in chunk_terms 8: at 1M chunks the
-- postings took 7,093 bytes per chunk as rows alone (docs/BENCHMARKS.md, storage).
--
-- Order within a term's list: impact descending, then chunk id descending. A block is keyed by
-- its first posting (top_impact, top_chunk_id) and holds the postings from there down to the
-- next block's key, exclusive: the block of a posting is the one with the smallest key at or
-- above it, and a list reads as a backward scan of the key index.

-- Adding postings is split in two so that concurrent writers (ingestion writes two batches at
-- once) add theirs in parallel: quarry.insert_chunk_postings writes the postings (the bulk of
-- the work), and quarry.count_new_postings then counts them into the term and corpus
-- statistics, rows every writer shares, under quarry.lock_corpus_statistics
-- (sql/025-corpus-writes.sql). Inserting takes several times as long as counting, so the part
-- held under the lock stays small (docs/benchmarks-log.md § Ingest throughput without model
-- time).

create or replace function quarry.chunk_search_vector(chunk quarry.chunks) returns tsvector
language sql immutable parallel safe
-- no SET clause: inlined into the caller's scan
as $$
    select quarry.chunk_tsvector(chunk.title, chunk.heading_path, chunk.symbol_path, chunk.content)
$$;

comment on function quarry.chunk_search_vector(quarry.chunks) is
'A chunk''s weighted search vector (quarry.chunk_tsvector of its title, headings, symbol path and content): what its BM25 postings are made from; computed, not stored (alembic 0023).';

create or replace function quarry.stage_term_frequencies(
    chunk_ids uuid[],
    b real default 0.4,
    code_b real default 0.9
) returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
begin
    create temporary table if not exists pg_temp.new_term_frequencies (
        chunk_id uuid, lexeme text, term_frequency real, chunk_length real, length_weight real
    ) on commit drop;
    truncate pg_temp.new_term_frequencies;
    insert into pg_temp.new_term_frequencies
    select c.id, f.lexeme, f.term_frequency, sum(f.term_frequency) over (partition by c.id),
           case when c.is_code then code_b else b end
    from quarry.chunks c
    cross join lateral quarry.weighted_term_frequencies(quarry.chunk_search_vector(c)) f  -- tokenized here, once
    where c.id = any(chunk_ids);
end
$$;

comment on function quarry.stage_term_frequencies(uuid[], real, real) is
'Tokenize the given chunks into pg_temp.new_term_frequencies (lexeme, weighted term frequency, chunk length, length normalisation b for prose or code_b for code), replacing what it held: what quarry.write_staged_chunk_terms turns into postings.';

create or replace function quarry.insert_chunk_postings(
    chunk_ids uuid[],
    k1 real default 0.9,
    b real default 0.4,
    code_b real default 0.9
) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
begin
    perform quarry.stage_term_frequencies(chunk_ids, b, code_b);
    return quarry.insert_staged_postings(k1);
end
$$;

comment on function quarry.insert_chunk_postings(uuid[], real, real, real) is
'Add BM25 postings for the given chunks (length normalisation b for prose, code_b for code chunks) without counting them in the term and corpus statistics: quarry.count_new_postings() must follow in the same transaction.';

create or replace function quarry.write_staged_chunk_terms(k1 real default 0.9) returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    average_length double precision;
begin
    -- pg_temp.new_term_frequencies (quarry.stage_term_frequencies) is what quarry.count_new_postings
    -- counts, until this transaction ends.
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

    create temporary table if not exists pg_temp.new_postings (
        term_id int, chunk_id uuid, term_frequency real, chunk_length real, impact real
    ) on commit drop;
    truncate pg_temp.new_postings;
    insert into pg_temp.new_postings
    select t.id, n.chunk_id, n.term_frequency, n.chunk_length,
           n.term_frequency * (k1 + 1)
             / (n.term_frequency
                + k1 * (1 - n.length_weight + n.length_weight * n.chunk_length / greatest(average_length, 1)))
    from pg_temp.new_term_frequencies n
    join quarry.text_terms t on t.lexeme = n.lexeme;

    insert into quarry.chunk_terms (chunk_id, chunk_length, term_ids, impacts)
    select p.chunk_id, max(p.chunk_length), array_agg(p.term_id order by p.term_id),
           array_agg(p.impact order by p.term_id)
    from pg_temp.new_postings p
    group by p.chunk_id;
end
$$;

comment on function quarry.write_staged_chunk_terms(real) is
'Compute the BM25 postings of the term frequencies staged in pg_temp.new_term_frequencies into pg_temp.new_postings (impacts against the corpus''s average length, or the staged chunks'' own in an empty corpus) and write each chunk''s (chunk_terms); the caller writes them by term: as rows (quarry.insert_staged_postings) or blocks (quarry.rebuild_text_index).';

create or replace function quarry.insert_staged_postings(k1 real default 0.9) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    inserted bigint;
begin
    perform quarry.write_staged_chunk_terms(k1);
    -- In impact-index order: consecutive rows land on the same index pages, which costs less
    -- CPU than inserting in chunk order (docs/benchmarks-log.md § Ingest throughput without
    -- model time).
    insert into quarry.text_postings (term_id, chunk_id, term_frequency, chunk_length, impact)
    select * from pg_temp.new_postings order by term_id, impact desc, chunk_id desc;
    get diagnostics inserted = row_count;
    return inserted;
end
$$;

comment on function quarry.insert_staged_postings(real) is
'Write the BM25 postings of the term frequencies staged in pg_temp.new_term_frequencies (rows and chunk_terms), impacts against the corpus''s average length (or the staged chunks'' own in an empty corpus); returns how many. Not counted in the statistics: quarry.count_new_postings() must follow in the same transaction.';

create or replace function quarry.change_term_statistics(
    term_ids int[],
    chunk_frequency_changes bigint[],
    chunk_count_change bigint,
    total_length_change double precision,
    recent_postings_change bigint
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
        total_length = total_length + total_length_change,
        postings = postings + coalesce((select sum(c) from unnest(chunk_frequency_changes) c), 0),
        recent_postings = recent_postings + recent_postings_change;
end
$$;

comment on function quarry.change_term_statistics(int[], bigint[], bigint, double precision, bigint) is
'Add (or, negative, remove) postings to the BM25 statistics: per term its chunk-frequency change, the corpus''s chunk count and total length changes, and the change in postings not yet compacted into blocks; term rows are locked in id order.';

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
    -- new postings are rows of quarry.text_postings until a compaction
    perform quarry.change_term_statistics(term_ids, changes, chunk_change, length_change, counted);
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

-- Removing postings goes through quarry.chunk_terms: deleting a chunk (or, in psql, its
-- chunk_terms row) removes its postings from both lists by term and its counts from the
-- statistics, one statement per delete.
create or replace function quarry.chunk_terms_deleted() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
declare
    term_ids int[];
    changes bigint[];
    chunk_change bigint;
    length_change double precision;
    recent_deleted bigint;
begin
    -- blocks are rewritten by one transaction at a time (quarry.compact_text_postings too)
    perform quarry.lock_corpus_statistics();
    -- Statistics that count no posting: a rebuild emptied both lists and zeroed them before deleting
    -- every chunk_terms row (quarry.rebuild_text_index), so there is nothing left to take out.
    if (select s.postings = 0 from quarry.text_stats s) then
        return null;
    end if;
    delete from quarry.text_postings where chunk_id in (select g.chunk_id from gone g);
    get diagnostics recent_deleted = row_count;

    -- `gone` is the transition table of deleted chunk_terms rows
    with removed as (
        select u.term_id, u.impact, g.chunk_id
        from gone g
        cross join lateral unnest(g.term_ids, g.impacts) as u (term_id, impact)
    ),
    holding as (  -- each block holding a removed posting, with the positions to drop from it
        select b.term_id, b.top_impact, b.top_chunk_id, array_agg(b.position order by b.position) as positions
        from removed r
        cross join lateral (
            select b.term_id, b.top_impact, b.top_chunk_id, array_position(b.chunk_ids, r.chunk_id) as position
            from quarry.text_posting_blocks b
            where b.term_id = r.term_id and (b.top_impact, b.top_chunk_id) >= (r.impact, r.chunk_id)
            order by b.top_impact, b.top_chunk_id
            limit 1
        ) b
        where b.position is not null  -- else the posting was a row, deleted above
        group by 1, 2, 3
    ),
    kept as (
        select h.term_id, h.top_impact, h.top_chunk_id, k.chunk_ids, k.impacts
        from holding h
        join quarry.text_posting_blocks b using (term_id, top_impact, top_chunk_id)
        cross join lateral (
            -- one posting out (deleting a few chunks): two array slices, no per-posting work
            select b.chunk_ids[:h.positions[1] - 1] || b.chunk_ids[h.positions[1] + 1:] as chunk_ids,
                   b.impacts[:h.positions[1] - 1] || b.impacts[h.positions[1] + 1:] as impacts
            where cardinality(h.positions) = 1
            union all
            select array_agg(u.chunk_id order by u.position), array_agg(u.impact order by u.position)
            from unnest(b.chunk_ids, b.impacts) with ordinality as u (chunk_id, impact, position)
            where u.position <> all (h.positions)
            having cardinality(h.positions) > 1
        ) k
    ),
    emptied as (
        delete from quarry.text_posting_blocks b
        using kept k
        where coalesce(cardinality(k.chunk_ids), 0) = 0
          and (b.term_id, b.top_impact, b.top_chunk_id) = (k.term_id, k.top_impact, k.top_chunk_id)
    )
    -- a block that lost its first posting is keyed by its new first one, still above the next block
    update quarry.text_posting_blocks b
    set top_impact = k.impacts[1], top_chunk_id = k.chunk_ids[1], chunk_ids = k.chunk_ids, impacts = k.impacts
    from kept k
    where cardinality(k.chunk_ids) > 0
      and (b.term_id, b.top_impact, b.top_chunk_id) = (k.term_id, k.top_impact, k.top_chunk_id);

    select array_agg(d.term_id), array_agg(-d.n) into term_ids, changes
    from (select u.term_id, count(*) as n from gone g cross join lateral unnest(g.term_ids) as u (term_id)
          group by u.term_id) d;
    select -count(*), -coalesce(sum(g.chunk_length), 0) into chunk_change, length_change from gone g;
    perform quarry.change_term_statistics(term_ids, changes, chunk_change, length_change, -recent_deleted);
    return null;
end
$$;

comment on function quarry.chunk_terms_deleted() is
'Trigger: remove the BM25 postings of deleted chunk_terms rows from text_postings and text_posting_blocks, and their counts from text_terms and text_stats.';

create or replace function quarry.chunk_terms_truncated() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
begin
    truncate quarry.text_postings, quarry.text_posting_blocks;
    update quarry.text_terms set chunk_frequency = 0 where chunk_frequency <> 0;
    update quarry.text_stats set chunk_count = 0, total_length = 0, postings = 0, recent_postings = 0;
    return null;
end
$$;

comment on function quarry.chunk_terms_truncated() is
'Trigger: a truncate of chunk_terms empties both lists by term and zeroes the BM25 statistics.';

drop trigger if exists chunk_terms_deleted on quarry.chunk_terms;
create trigger chunk_terms_deleted after delete on quarry.chunk_terms
    referencing old table as gone for each statement execute function quarry.chunk_terms_deleted();
drop trigger if exists chunk_terms_truncated on quarry.chunk_terms;
create trigger chunk_terms_truncated after truncate on quarry.chunk_terms
    for each statement execute function quarry.chunk_terms_truncated();

create or replace function quarry.chunks_deleted() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
begin
    delete from quarry.chunk_terms where chunk_id in (select id from gone);
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
    truncate quarry.chunk_terms;
    update quarry.text_stats set postings_deferred = false where postings_deferred;  -- no chunk left to index
    return null;
end
$$;

comment on function quarry.chunks_truncated() is
'Trigger: a truncate of chunks (e.g. cascading from sources) empties the BM25 postings too, and no chunk awaits them.';

drop trigger if exists chunks_truncated on quarry.chunks;
create trigger chunks_truncated after truncate on quarry.chunks
    for each statement execute function quarry.chunks_truncated();
drop trigger if exists chunks_deleted on quarry.chunks;
create trigger chunks_deleted after delete on quarry.chunks
    referencing old table as gone for each statement execute function quarry.chunks_deleted();

create or replace function quarry.pool_postings() returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
begin
    create temporary table if not exists pg_temp.pooled_postings (
        term_id int, block_impact real, block_chunk_id uuid, chunk_id uuid, impact real
    ) on commit drop;
    truncate pg_temp.pooled_postings;
end
$$;

comment on function quarry.pool_postings() is
'Create (or empty) pg_temp.pooled_postings, the postings quarry.write_posting_blocks writes: each with the key of the block it replaces, null for a term''s new list.';

create or replace function quarry.write_posting_blocks() returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    -- Postings per block. Removing a posting writes its whole block again: at 100k chunks,
    -- removing 1,000 chunks' postings took 6.7 s with blocks of 128 and 3.1-3.6 s with 32 (their
    -- rows alone: 1.5-1.9 s), compacting 50,000 postings 12.6 s and 6.9 s, for 192 more bytes
    -- per chunk (7,541 against 7,349) and the same search time (docs/BENCHMARKS.md, storage).
    block_size constant int := 32;
    written bigint;
begin
    insert into quarry.text_posting_blocks (term_id, top_impact, top_chunk_id, chunk_ids, impacts)
    select pool.term_id, pool.impacts[piece.first], pool.chunk_ids[piece.first],
           pool.chunk_ids[piece.first:piece.last], pool.impacts[piece.first:piece.last]
    from (
        -- one sort by pool and list order feeds both arrays
        select p.term_id, count(*)::int as size,
               array_agg(p.chunk_id order by p.impact desc, p.chunk_id desc) as chunk_ids,
               array_agg(p.impact order by p.impact desc, p.chunk_id desc) as impacts
        from pg_temp.pooled_postings p
        group by p.term_id, p.block_impact, p.block_chunk_id
    ) pool
    -- a pool of more than twice block_size postings is cut into near-equal blocks of about block_size
    cross join lateral (
        select case when pool.size > 2 * block_size then ceil(pool.size / block_size::numeric)::int else 1 end as count
    ) pieces
    -- in bigint: at 1M chunks a common term's list (n pieces x its size) passes 2^31
    cross join lateral (
        select (1 + n * pool.size / pieces.count)::int as first, ((n + 1) * pool.size / pieces.count)::int as last
        from generate_series(0::bigint, pieces.count - 1) as n
    ) piece;
    get diagnostics written = row_count;
    truncate pg_temp.pooled_postings;
    return written;
end
$$;

comment on function quarry.write_posting_blocks() is
'Write the postings of pg_temp.pooled_postings as blocks in impact order, one pool per block replaced (or per term''s new list), cut into blocks of about 32 when a pool holds more than 64; returns the blocks written.';

create or replace function quarry.compact_text_postings(min_postings bigint default 50000,
                                                        min_share double precision default 0.05)
returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    moved_count bigint;
begin
    perform quarry.lock_corpus_statistics();
    -- Merging rewrites every block that receives a posting, so it waits until the rows are
    -- many, and a share of the corpus: its cost is then spread over many postings per block.
    if (select s.recent_postings < greatest(min_postings, min_share * s.postings) from quarry.text_stats s) then
        return 0;
    end if;
    perform set_config('statement_timeout', '0', true);
    -- Each moved posting joins the block that would hold it; one above every block of its term
    -- joins the term's first block, and a term without blocks gets new ones. Each receiving
    -- block is then written again with its old and new postings.
    perform quarry.pool_postings();
    -- in one statement: rows a concurrent writer commits meanwhile stay for the next compaction
    if not exists (select from quarry.text_posting_blocks) then  -- the first: no block to look up
        with moved as (delete from quarry.text_postings returning term_id, chunk_id, impact)
        insert into pg_temp.pooled_postings select m.term_id, null, null, m.chunk_id, m.impact from moved m;
        get diagnostics moved_count = row_count;
        perform quarry.write_posting_blocks();
        update quarry.text_stats set recent_postings = recent_postings - moved_count;
        return moved_count;
    end if;
    with moved as (delete from quarry.text_postings returning term_id, chunk_id, impact)
    insert into pg_temp.pooled_postings
    select m.term_id, coalesce(holding.top_impact, first_block.top_impact),
           coalesce(holding.top_chunk_id, first_block.top_chunk_id), m.chunk_id, m.impact
    from moved m
    left join lateral (
        select b.top_impact, b.top_chunk_id from quarry.text_posting_blocks b
        where b.term_id = m.term_id and (b.top_impact, b.top_chunk_id) >= (m.impact, m.chunk_id)
        order by b.top_impact, b.top_chunk_id
        limit 1
    ) holding on true
    left join lateral (
        select b.top_impact, b.top_chunk_id from quarry.text_posting_blocks b
        where b.term_id = m.term_id
        order by b.top_impact desc, b.top_chunk_id desc
        limit 1
    ) first_block on holding.top_impact is null;
    get diagnostics moved_count = row_count;
    with receiving as materialized (
        select distinct p.term_id, p.block_impact, p.block_chunk_id
        from pg_temp.pooled_postings p where p.block_impact is not null
    ),
    rewritten as (
        delete from quarry.text_posting_blocks b
        using receiving r
        where (b.term_id, b.top_impact, b.top_chunk_id) = (r.term_id, r.block_impact, r.block_chunk_id)
        returning b.term_id, b.top_impact, b.top_chunk_id, b.chunk_ids, b.impacts
    )
    insert into pg_temp.pooled_postings
    select w.term_id, w.top_impact, w.top_chunk_id, u.chunk_id, u.impact
    from rewritten w
    cross join lateral unnest(w.chunk_ids, w.impacts) as u (chunk_id, impact);

    perform quarry.write_posting_blocks();
    update quarry.text_stats set recent_postings = recent_postings - moved_count;
    return moved_count;
end
$$;

comment on function quarry.compact_text_postings(bigint, double precision) is
'Move the BM25 postings written since the last compaction (rows of text_postings) into text_posting_blocks, once there are at least min_postings of them and min_share of all postings; returns how many moved.';

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

create or replace function quarry.term_block_postings(term int)
returns table (chunk_id uuid, impact real)
language sql stable parallel safe
-- inlined into the caller (one SELECT, no SET clause), so its LIMIT stops the scan of blocks
as $$
    -- the set-returning calls run after the ordering, each block's postings in array order
    select unnest(b.chunk_ids), unnest(b.impacts)
    from quarry.text_posting_blocks b
    where b.term_id = term
    order by b.top_impact desc, b.top_chunk_id desc
$$;

comment on function quarry.term_block_postings(int) is
'A term''s BM25 postings compacted into blocks, in list order: impact, then chunk id, descending.';

create or replace function quarry.bm25_top(
    query_text text,
    match_count int default 50,
    per_term_depth int default 750,
    filters jsonb default null,
    max_query_terms int default 128,
    scoped_chunk_limit int default 50000
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
    chunk_rules as materialized (select * from quarry.chunk_rule_kinds(filters)),
    -- A filter every chunk passes (it allows every source and has no chunk rule: a single source's corpus
    -- searched by its name) is read as none: the per-posting checks would only confirm it.
    passes_every_chunk as materialized (
        select filters is null
            or (not (r.facets or r.versions or r.locations)
                and not exists (select from quarry.sources s where s.id not in (select a.id from allowed_sources a)))
            as yes
        from chunk_rules r
    ),
    -- A filter that leaves sources out, when theirs are at most scoped_chunk_limit chunks: the chunks that
    -- pass it, listed once (quarry.filter_scope), each posting then checked against them instead of looking
    -- up its chunk, since a list read until per_term_depth postings pass can be read to its end. A source
    -- filter over 15 repositories: 584 -> 58 ms p50 (docs/benchmarks-log.md § Keyword searches within a
    -- few sources).
    scope as materialized (
        select quarry.filter_scope(filters, scoped_chunk_limit) as chunk_ids
        where not (select yes from passes_every_chunk)
    ),
    scoped_chunks as materialized (select unnest(scope.chunk_ids) as id from scope),
    terms as materialized (
        -- double precision throughout: numeric ln per posting cost more than the index scans.
        -- A long query (an issue, a stack trace) keeps its max_query_terms rarest terms: its
        -- common words add cost and little evidence, and each term reads up to per_term_depth
        -- postings.
        select t.id, quarry.bm25_idf(s.chunk_count, t.chunk_frequency) as idf,
               t.chunk_frequency > per_term_depth as cut,
               exists (select from quarry.text_postings r where r.term_id = t.id) as has_rows
        from quarry.text_terms t, quarry.text_stats s
        where t.lexeme = any (quarry.query_lexemes(query_text)) and t.chunk_frequency > 0
        order by t.chunk_frequency, t.id
        limit max_query_terms
    ),
    unfiltered as (
        -- Without filters (most searches), or one every chunk passes, each term's postings as they are
        -- read. Its own branch:
        -- the statement is planned once for every call (generic), so `filters is null` is not folded
        -- away, and a per-posting check and the lists as unions of blocks and rows took 3.35 ms p50
        -- at 1M chunks against 2.43 for this (docs/benchmarks-log.md § bm25_top without filters).
        -- A term read to its end (not cut) already gives each candidate its whole part.
        select p.chunk_id, coalesce(sum(terms.idf * p.impact) filter (where not terms.cut), 0) as uncut_part,
               sum(terms.idf * p.impact) as total
        from terms
        cross join lateral (
            (select u.chunk_id, u.impact from quarry.term_block_postings(terms.id) u
             where not terms.has_rows
             limit per_term_depth)
            union all
            -- a term with rows written since the last compaction keeps the top per_term_depth of both
            (select m.chunk_id, m.impact
             from ((select u.chunk_id, u.impact from quarry.term_block_postings(terms.id) u limit per_term_depth)
                   union all
                   (select r.chunk_id, r.impact from quarry.text_postings r
                    where r.term_id = terms.id
                    order by r.impact desc, r.chunk_id desc
                    limit per_term_depth)) m
             where terms.has_rows
             order by m.impact desc, m.chunk_id desc
             limit per_term_depth)
        ) p
        where (select yes from passes_every_chunk)
        group by p.chunk_id
        order by total desc, p.chunk_id
        limit match_count
    ),
    listed as not materialized (  -- read once per term: each use below takes its own terms
        -- Under filters, each term's top postings in its blocks, as far as they let them through: a
        -- per-posting check (scalar subquery; quarry.chunk_passes_rules is inlined into it), where a
        -- function holding the lookup would cost a call per posting (2.7x slower under a source filter);
        -- as EXISTS the planner would join every chunk to the filter before reading the impact-ordered
        -- postings.
        select terms.id as term_id, terms.idf, terms.cut, terms.has_rows, p.chunk_id, p.impact
        from terms
        cross join chunk_rules
        cross join lateral (
            select u.chunk_id, u.impact
            from quarry.term_block_postings(terms.id) u
            where case when (select scope.chunk_ids is not null from scope)
                       then u.chunk_id in (select sc.id from scoped_chunks sc)
                  else coalesce((
                      select true from quarry.chunks c join allowed_sources s on s.id = c.source_id
                      where c.id = u.chunk_id
                        and quarry.chunk_passes_rules(filters, chunk_rules.facets, chunk_rules.versions,
                                                      chunk_rules.locations, c.content_type, c.language, c.package,
                                                      c.deprecated or s.deprecated, c.document_id, c.symbol_path,
                                                      c.is_code)
                      limit 1), false) end
            limit per_term_depth
        ) p
        union all
        -- and in its rows written since the last compaction (the same check)
        select terms.id, terms.idf, terms.cut, true, r.chunk_id, r.impact
        from terms
        cross join chunk_rules
        cross join lateral (
            select r.chunk_id, r.impact
            from quarry.text_postings r
            where r.term_id = terms.id
              and case when (select scope.chunk_ids is not null from scope)
                       then r.chunk_id in (select sc.id from scoped_chunks sc)
                  else coalesce((
                         select true from quarry.chunks c join allowed_sources s on s.id = c.source_id
                         where c.id = r.chunk_id
                           and quarry.chunk_passes_rules(filters, chunk_rules.facets, chunk_rules.versions,
                                                         chunk_rules.locations, c.content_type, c.language, c.package,
                                                         c.deprecated or s.deprecated, c.document_id, c.symbol_path,
                                                         c.is_code)
                         limit 1), false) end
            order by r.impact desc, r.chunk_id desc
            limit per_term_depth
        ) r
        where terms.has_rows
    ),
    contributions as (
        select l.chunk_id, l.idf * l.impact as part, l.cut from listed l where not l.has_rows
        union all
        -- a term with both keeps the top per_term_depth of the two
        select m.chunk_id, m.idf * m.impact, m.cut
        from (select l.*, row_number() over (partition by l.term_id order by l.impact desc, l.chunk_id desc) as rank
              from listed l where l.has_rows) m
        where m.rank <= per_term_depth
    ),
    filtered as (
        select c.chunk_id, coalesce(sum(c.part) filter (where not c.cut), 0) as uncut_part
        from contributions c
        where not (select yes from passes_every_chunk)
        group by c.chunk_id
        order by sum(c.part) desc, c.chunk_id
        limit match_count
    ),
    candidates as materialized (  -- one of the two branches runs: the other's condition is false once
        select u.chunk_id, u.uncut_part from unfiltered u
        union all
        select f.chunk_id, f.uncut_part from filtered f
    ),
    cut_terms as materialized (
        select array_agg(terms.id) as ids, array_agg(terms.idf) as idfs from terms where terms.cut
    )
    select c.chunk_id, (c.uncut_part + coalesce(cut.part, 0))::real as score
    from candidates c
    cross join cut_terms
    -- the cut terms' impacts in each candidate's terms: one primary-key probe per candidate,
    -- where re-reading the cut terms' lists cost as much as the first pass
    left join lateral (
        select sum(q.idf * ct.impacts[array_position(ct.term_ids, q.id)]) as part
        from quarry.chunk_terms ct
        cross join unnest(cut_terms.ids, cut_terms.idfs) as q (id, idf)
        where ct.chunk_id = c.chunk_id
    ) cut on true
    order by 2 desc, c.chunk_id
$$;

comment on function quarry.bm25_top(text, int, int, jsonb, int, int) is
'Top chunks by BM25 for a query (its max_query_terms rarest terms): candidates from the top per_term_depth impact-ordered postings of each term, scored exactly; facet and version filters (resolved, see quarry.resolve_version_filters) applied before the top-k: where a filter leaves sources out whose chunks are at most scoped_chunk_limit, the chunks passing it are listed once and each posting is checked against that list, otherwise each posting looks its chunk up.';

create or replace function quarry.lock_text_index(rebuilding boolean) returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
begin
    -- Held to commit, and taken before quarry.lock_corpus_statistics by every transaction that writes
    -- postings or rebuilds them (batches, the end of an ingest, a reindex): taken the other way round, one
    -- could hold the statistics lock while it waits for a rebuild that waits for it.
    if rebuilding then
        lock table quarry.chunk_terms, quarry.text_postings, quarry.text_posting_blocks in exclusive mode;
    else
        lock table quarry.chunk_terms, quarry.text_postings, quarry.text_posting_blocks in row exclusive mode;
    end if;
end
$$;

comment on function quarry.lock_text_index(boolean) is
'Take the BM25 postings tables (chunk_terms, text_postings, text_posting_blocks) until commit, exclusively when rebuilding them, else to write postings: before any lock on the corpus statistics (quarry.lock_corpus_statistics).';

create or replace function quarry.rebuild_text_index(k1 real default 0.9, b real default 0.4,
                                                     code_b real default 0.9,
                                                     reuse_row_frequencies boolean default false)
returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    indexed bigint;
begin
    -- From the canonical chunks, in one indexing pass that computes every impact with today's
    -- average length. Writers of postings wait (the exclusive mode); readers do not.
    perform quarry.lock_text_index(rebuilding => true);
    -- Before the chunks are read, and (as every statistics writer) after the tables: a batch that left
    -- its postings to a rebuild (quarry.defer_chunk_postings) commits either before, and its chunks
    -- are indexed here, or after, and marks the index deferred again.
    perform quarry.lock_corpus_statistics();
    -- With reuse_row_frequencies, a chunk whose postings are still rows (not compacted: those of an
    -- ingest that wrote most of the corpus, tokenized minutes ago) keeps their term frequencies instead
    -- of being tokenized again; a chunk without postings (a first ingest's) is tokenized.
    -- A chunk's postings are all rows or all in blocks; those in blocks keep only impacts.
    create temporary table pg_temp.row_term_frequencies on commit drop as
    select p.chunk_id, t.lexeme, p.term_frequency, p.chunk_length
    from quarry.text_postings p
    join quarry.text_terms t on t.id = p.term_id
    where reuse_row_frequencies;
    -- Emptied by DELETE, not TRUNCATE: a truncate shuts every reader out until commit, so each keyword
    -- search would wait for the whole rebuild (minutes at 1M chunks), while deleted rows stay theirs to
    -- read until it commits. The statistics go first: the chunk_terms delete trigger then has nothing
    -- to take out of the lists, row by row.
    update quarry.text_stats set chunk_count = 0, total_length = 0, postings = 0, recent_postings = 0;
    update quarry.text_terms set chunk_frequency = 0 where chunk_frequency <> 0;
    delete from quarry.text_postings;
    delete from quarry.text_posting_blocks;
    delete from quarry.chunk_terms;
    perform quarry.stage_term_frequencies(
        array(select c.id from quarry.chunks c
              where not exists (select from pg_temp.row_term_frequencies r where r.chunk_id = c.id)), b, code_b);
    insert into pg_temp.new_term_frequencies
    select r.chunk_id, r.lexeme, r.term_frequency, r.chunk_length, case when c.is_code then code_b else b end
    from pg_temp.row_term_frequencies r
    join quarry.chunks c on c.id = r.chunk_id;
    drop table pg_temp.row_term_frequencies;
    perform quarry.write_staged_chunk_terms(k1);
    -- every list straight into blocks: no posting is a row after a rebuild
    perform quarry.pool_postings();
    insert into pg_temp.pooled_postings
    select p.term_id, null, null, p.chunk_id, p.impact from pg_temp.new_postings p;
    get diagnostics indexed = row_count;
    perform quarry.count_new_postings();
    update quarry.text_stats set recent_postings = 0, postings_deferred = false;
    perform quarry.write_posting_blocks();
    return indexed;
end
$$;

comment on function quarry.rebuild_text_index(real, real, real, boolean) is
'Rebuild every BM25 posting (all in blocks), term frequency and corpus statistic from the chunks, each tokenized again; with reuse_row_frequencies, chunks whose postings are still rows keep their term frequencies (the end of an ingest that wrote most of the corpus; a first ingest''s chunks have none and are tokenized). Clears text_stats.postings_deferred: every chunk is indexed.';

create or replace function quarry.defer_chunk_postings() returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
begin
    -- the locks in the order a batch writing postings takes them: a rebuild and a batch wait for each
    -- other, never in a cycle
    perform quarry.lock_text_index(rebuilding => false);
    perform quarry.lock_corpus_statistics();  -- held to commit: see quarry.rebuild_text_index
    update quarry.text_stats set postings_deferred = true where not postings_deferred;
end
$$;

comment on function quarry.defer_chunk_postings() is
'Mark, in the transaction writing chunks without BM25 postings (a first ingest leaves them to the rebuild that closes it), that committed chunks may lack them: text_stats.postings_deferred, cleared by quarry.rebuild_text_index.';
