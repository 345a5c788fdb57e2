-- Writes that keep derived data in step with the corpus.

-- Shared statistics rows (BM25 term and corpus counts in text_terms and text_stats, facet
-- counts per source and value) are updated by every transaction that adds or removes
-- documents, and each such row lock is held until commit. Writers that take this lock
-- before updating any of them do so one transaction at a time, so they never deadlock on
-- them (two ingests, or the two batch writers of one ingest, each holding rows the other
-- needs): ingestion writes everything else of a batch first, postings included, concurrently,
-- and its documents, versions and the postings' count last, under this lock
-- (engine.ingest.batch_writer, quarry.count_new_postings).

create or replace function quarry.lock_corpus_statistics() returns void
language sql volatile
set search_path = pg_catalog
as $$
    -- one arbitrary 64-bit key ("QSTATS"); the two-key advisory locks (ingest per source)
    -- live in a separate key space
    select pg_advisory_xact_lock(x'515354415453'::bigint)
$$;

comment on function quarry.lock_corpus_statistics() is
'Wait for, and hold until commit, the right to update shared corpus statistics (BM25 terms and totals, facet counts); taken first, their writers never deadlock.';

create or replace function quarry.delete_documents(document_ids uuid[]) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    deleted bigint;
begin
    perform quarry.lock_corpus_statistics();
    -- Chunks first, in one statement, so their postings go in one trigger call;
    -- the cascade from documents would delete them document by document.
    delete from quarry.chunks where document_id = any(document_ids);
    delete from quarry.documents where id = any(document_ids);
    get diagnostics deleted = row_count;
    return deleted;
end
$$;

comment on function quarry.delete_documents(uuid[]) is
'Delete documents with their chunks, vectors and BM25 postings (statistics stay exact).';

-- Vector reuse without the vectors leaving the server: ingestion asks which embedding
-- inputs a space already holds (hashes only), then, inside the batch's transaction and
-- before it deletes the documents it replaces, copies those vectors aside; the new chunks
-- take them from there. Spaces served by one embedder share vectors: a group is the list
-- of physical spaces whose vectors are interchangeable (same model object).

create or replace function quarry.stage_reused_vectors(
    model_group int,
    spaces text[],
    input_hashes bytea[]
) returns bigint
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
declare
    staged bigint;
begin
    create temporary table if not exists pg_temp.reused_vectors (
        model_group int, input_hash bytea, embedding halfvec
    ) on commit drop;
    insert into pg_temp.reused_vectors (model_group, input_hash, embedding)
    select distinct on (e.input_hash) stage_reused_vectors.model_group, e.input_hash, e.embedding
    from quarry.embeddings e
    where e.space = any (spaces) and e.input_hash = any (input_hashes)
    order by e.input_hash;
    get diagnostics staged = row_count;
    return staged;
end
$$;

comment on function quarry.stage_reused_vectors(int, text[], bytea[]) is
'Copy aside (for this transaction) one stored vector per input hash found in any of the spaces; returns how many.';

create or replace function quarry.staged_input_hashes(model_group int) returns setof bytea
language plpgsql stable
set search_path = quarry, pg_catalog
as $$
begin
    -- plpgsql, not sql: the temporary table exists only inside an ingest's transaction
    return query select r.input_hash from pg_temp.reused_vectors r
                 where r.model_group = staged_input_hashes.model_group;
end
$$;

comment on function quarry.staged_input_hashes(int) is
'The input hashes quarry.stage_reused_vectors found for a model group in this transaction.';

create or replace function quarry.insert_reused_vectors(
    model_groups int[],
    chunk_ids uuid[],
    spaces text[],
    input_hashes bytea[]
) returns bigint
language plpgsql volatile
set search_path = quarry, public, pg_catalog
as $$
declare
    inserted bigint;
begin
    insert into quarry.embeddings (chunk_id, space, input_hash, embedding)
    select u.chunk_id, u.space, u.input_hash, r.embedding
    from unnest(model_groups, chunk_ids, spaces, input_hashes) as u (model_group, chunk_id, space, input_hash)
    join pg_temp.reused_vectors r on r.model_group = u.model_group and r.input_hash = u.input_hash;
    get diagnostics inserted = row_count;
    return inserted;
end
$$;

comment on function quarry.insert_reused_vectors(int[], uuid[], text[], bytea[]) is
'Store vectors for new chunks from the ones quarry.stage_reused_vectors copied aside; returns the rows written.';

-- Deferred HNSW maintenance for bulk loads (see alembic 0011 and engine/ingest/vector_indexes.py).
-- Inserting a row into an HNSW index costs a graph search and page updates, serially in the
-- writer; building the graph in memory costs a fraction of that per vector, on parallel workers
-- (docs/benchmarks-log.md § Ingest throughput without model time). So a load that adds at
-- least half as many vectors as a small space holds records the index definition here, drops
-- the index concurrently (searches turn into exact scans, correct and still fast at that
-- size) and builds it again when it ends. Any ingest that finishes restores every deferred
-- index, so a killed load is repaired by the next run.

create or replace function quarry.defer_space_index(space_name text) returns text
language plpgsql volatile
set search_path = pg_catalog
as $$
declare
    index_name text := quarry.space_index_name(space_name);
    definition text;
begin
    -- search_path is pg_catalog alone, so the definition names every schema it uses
    definition := pg_get_indexdef(to_regclass(format('quarry.%I', index_name)));
    if definition is null then  -- deferred already (by a killed or a concurrent load), or never built
        return (select d.index_name from quarry.deferred_vector_indexes d where d.space = space_name);
    end if;
    insert into quarry.deferred_vector_indexes (space, index_name, definition)
    values (space_name, index_name, definition)
    on conflict (space) do nothing;
    return index_name;
end
$$;

comment on function quarry.defer_space_index(text) is
'Record the HNSW index of a space as deferred (to be rebuilt after a bulk load) and return its name, for the caller to drop concurrently.';

create or replace function quarry.restore_space_indexes() returns int
language plpgsql volatile
set search_path = pg_catalog
as $$
declare
    deferred record;
    vectors bigint;
    memory bigint;
    restored int := 0;
begin
    -- Deleting locks each row: a concurrent restore waits here, then finds nothing left to build.
    for deferred in
        delete from quarry.deferred_vector_indexes d
        returning d.space, d.index_name, d.definition,
                  (select s.dimension from quarry.embedding_spaces s where s.name = d.space) as dimension
    loop
        continue when exists (select from pg_index i  -- built meanwhile, or never dropped
                              where i.indexrelid = to_regclass(format('quarry.%I', deferred.index_name))
                                and i.indisvalid);
        -- a concurrent drop that stopped half way (lock timeout) leaves an invalid index behind
        execute format('drop index if exists quarry.%I', deferred.index_name);
        select count(*) into vectors from quarry.embeddings e where e.space = deferred.space;
        -- HNSW builds fast only while the graph fits in maintenance_work_mem (2 bytes per
        -- dimension, half precision, plus 1 kB of links per vector); never lower a larger
        -- setting, cap at 1 GB.
        memory := least((2 * deferred.dimension + 1024) * vectors * 5 / 4, 1024 * 1024 * 1024);
        if memory > pg_size_bytes(current_setting('maintenance_work_mem')) then
            perform set_config('maintenance_work_mem', (memory / 1024) || 'kB', true);
        end if;
        execute deferred.definition;
        restored := restored + 1;
    end loop;
    return restored;
end
$$;

comment on function quarry.restore_space_indexes() is
'Build every HNSW index a bulk load deferred (quarry.defer_space_index); returns how many were built.';

-- BM25 postings a migration (or an upgrade from one posting row each, alembic 0022) left as rows
-- move into blocks on every migrate, once they are many (quarry.compact_text_postings).
select quarry.compact_text_postings();
