-- Writes that keep derived data in step with the corpus.

create or replace function quarry.delete_documents(document_ids uuid[]) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    deleted bigint;
begin
    -- Postings first, in one statement: the foreign-key cascade would remove them
    -- chunk by chunk, firing the statistics trigger once per chunk.
    delete from quarry.text_postings p
    using quarry.chunks c
    where c.id = p.chunk_id and c.document_id = any(document_ids);
    delete from quarry.documents where id = any(document_ids);
    get diagnostics deleted = row_count;
    return deleted;
end
$$;

comment on function quarry.delete_documents(uuid[]) is
'Delete documents with their chunks, vectors and BM25 postings (statistics stay exact).';
