-- Writes that keep derived data in step with the corpus.

create or replace function quarry.delete_documents(document_ids uuid[]) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    deleted bigint;
begin
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
