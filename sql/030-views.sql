-- Views over the corpus for result rows and for admins in psql.

-- Dropped and recreated (not `create or replace`) so columns can change between versions.
drop view if exists quarry.chunk_details;
create view quarry.chunk_details as
select c.id as chunk_id,
       c.document_id,
       s.slug as source_slug,
       s.display_name as source_name,
       s.kind as source_kind,
       s.attribution,
       s.verified,
       s.deprecated or d.deprecated as deprecated,
       d.changed_at,
       d.path,
       d.title,
       d.url,
       c.heading_path,
       c.symbol_path,
       c.start_line,
       c.end_line,
       c.start_byte,
       c.end_byte,
       c.content,
       c.content_type,
       c.language,
       c.is_code
from quarry.chunks c
join quarry.documents d on d.id = c.document_id
join quarry.sources s on s.id = c.source_id;

comment on view quarry.chunk_details is
'One row per chunk with the document and source fields a search result shows.';

drop view if exists quarry.source_stats;
create view quarry.source_stats as
select s.slug,
       s.display_name,
       s.kind,
       s.attribution,
       s.verified,
       s.deprecated,
       s.version,
       s.base_url,
       docs.documents,
       (select count(*) from quarry.chunks c where c.source_id = s.id) as chunks,
       coalesce((select jsonb_object_agg(per_space.space, per_space.vectors)
                 from (select e.space, count(*) as vectors
                       from quarry.embeddings e join quarry.chunks c on c.id = e.chunk_id
                       where c.source_id = s.id group by e.space) per_space), '{}'::jsonb) as embeddings,
       s.last_ingested_at,
       docs.newest_change,
       docs.median_age_days
from quarry.sources s
cross join lateral (
    select count(*) as documents,
           max(d.changed_at) as newest_change,
           round((percentile_cont(0.5) within group (
               order by extract(epoch from now() - d.changed_at)) / 86400)::numeric, 1) as median_age_days
    from quarry.documents d where d.source_id = s.id
) docs;

comment on view quarry.source_stats is
'Per source: trust settings, release version, documents, chunks, vectors per embedding space, last ingest and freshness (newest change, median document age in days).';

drop view if exists quarry.text_index_postings;
create view quarry.text_index_postings as
select b.term_id, u.chunk_id, u.impact, true as in_block
from quarry.text_posting_blocks b
cross join lateral unnest(b.chunk_ids, b.impacts) as u (chunk_id, impact)
union all
select p.term_id, p.chunk_id, p.impact, false
from quarry.text_postings p;

comment on view quarry.text_index_postings is
'Every BM25 posting by term, one row each: those compacted into text_posting_blocks (in_block) and the rows written since (text_postings). Each chunk''s postings are also its quarry.chunk_terms row.';
