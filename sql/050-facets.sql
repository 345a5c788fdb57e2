-- Facet discovery: which values each facet takes, and in how many documents, under
-- the same filters object hybrid_search evaluates (see 015-filters.sql, 016-versions.sql).
--
-- Document-level facet counts per source live in quarry.facet_counts, kept current by
-- the statement-level triggers below as ingestion writes documents; source-level facets
-- come from quarry.sources. An unfiltered (or source-filtered) facets call therefore
-- reads counts, never the corpus; a filter on a document-level facet or a version rule
-- needs the matching documents themselves, and scans them.

create or replace function quarry.count_document_facets() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
declare
    changes jsonb := '[]';
begin
    -- a statement's transition tables exist only for the events that define them
    if tg_op in ('INSERT', 'UPDATE') then
        select changes || coalesce(jsonb_agg(jsonb_build_object(
                   'source_id', n.source_id, 'content_type', n.content_type, 'language', n.language,
                   'package', n.package, 'deprecated', n.deprecated::text, 'delta', 1)), '[]')
        into changes from new_documents n;
    end if;
    if tg_op in ('DELETE', 'UPDATE') then
        select changes || coalesce(jsonb_agg(jsonb_build_object(
                   'source_id', o.source_id, 'content_type', o.content_type, 'language', o.language,
                   'package', o.package, 'deprecated', o.deprecated::text, 'delta', -1)), '[]')
        into changes from old_documents o;
    end if;
    with per_value as (
        select c.source_id, f.facet, f.value, sum(c.delta) as delta
        from jsonb_to_recordset(changes)
             as c (source_id bigint, content_type text, language text, package text, deprecated text, delta int)
        cross join lateral (values ('content_type', c.content_type), ('language', c.language),
                                   ('package', c.package), ('deprecated', c.deprecated)) f (facet, value)
        where f.value is not null
          and exists (select 1 from quarry.sources s where s.id = c.source_id)  -- not a cascade from a dropped source
        group by 1, 2, 3
        having sum(c.delta) <> 0
    ),
    -- update, then insert what is new: an upsert would check documents >= 0 on a negative delta
    -- (rows of one source change only under its ingest lock, so the two steps cannot race)
    updated as (
        update quarry.facet_counts fc set documents = fc.documents + p.delta
        from per_value p
        where fc.source_id = p.source_id and fc.facet = p.facet and fc.value = p.value
        returning fc.source_id, fc.facet, fc.value
    )
    insert into quarry.facet_counts (source_id, facet, value, documents)
    select p.source_id, p.facet, p.value, p.delta
    from per_value p
    where not exists (select 1 from updated u
                      where u.source_id = p.source_id and u.facet = p.facet and u.value = p.value);
    delete from quarry.facet_counts where documents = 0;
    return null;
end
$$;

comment on function quarry.count_document_facets() is
'Trigger: keep quarry.facet_counts (documents per source, facet and value) in step with inserted, updated and deleted documents.';

drop trigger if exists documents_facets_insert on quarry.documents;
create trigger documents_facets_insert after insert on quarry.documents
    referencing new table as new_documents
    for each statement execute function quarry.count_document_facets();
drop trigger if exists documents_facets_delete on quarry.documents;
create trigger documents_facets_delete after delete on quarry.documents
    referencing old table as old_documents
    for each statement execute function quarry.count_document_facets();
drop trigger if exists documents_facets_update on quarry.documents;
create trigger documents_facets_update after update on quarry.documents
    referencing old table as old_documents new table as new_documents
    for each statement execute function quarry.count_document_facets();

create or replace function quarry.facet_values(
    facet text default null,
    filters jsonb default null,
    prefix text default null,
    lim int default 50
) returns table (facet_key text, facet_value text, documents bigint, total_values bigint)
language plpgsql stable
set search_path = quarry, pg_catalog
as $$
declare
    source_facets constant text[] := array['source_slug', 'kind', 'attribution', 'verified'];
    document_facets constant text[] := array['deprecated', 'content_type', 'language', 'package'];
    version_facets constant text[] := array['language_target', 'sdk_dependency'];
    -- a chunk's facet reads the matching documents' chunks: counted when named, not in the every-facet listing
    chunk_facets constant text[] := array['chunk_kind'];
    known constant text[] := source_facets || document_facets || version_facets || chunk_facets;
    wanted text[];
    resolved jsonb;
    needs_scan boolean;
    -- which per-document checks the filters need: a check without its rule passes every document, and each
    -- costs a function call per document (they do not inline), so one without a rule is not called
    facet_rules boolean := coalesce(filters ?| document_facets, false);
    version_rules boolean := coalesce(filters ?| version_facets, false);
    location_rules boolean := coalesce(filters ?| array['path', 'symbol', 'chunk_kind'], false);
begin
    if facet is not null and not facet = any (known) then
        raise exception 'unknown facet %: expected one of %', facet, array_to_string(known, ', ')
            using errcode = 'invalid_parameter_value';
    end if;
    if lim < 1 then
        raise exception 'lim must be at least 1, got %', lim using errcode = 'invalid_parameter_value';
    end if;
    wanted := case when facet is null then source_facets || document_facets || version_facets else array[facet] end;
    resolved := quarry.resolve_version_filters(filters);
    -- counts can be read only when every filter is source-level (or there is none)
    needs_scan := exists (select 1 from jsonb_object_keys(coalesce(filters, '{}')) k where not k = any (source_facets));

    return query
    with allowed_sources as materialized (
        select s.* from quarry.sources s
        join quarry.filtered_source_ids(filters) a on a.id = s.id
    ),
    -- the facet rules, checked once per combination of facet values the documents have rather than per document
    facet_value_sets as materialized (
        select v.key
        from quarry.allowed_facet_values(filters, array(select s.id from allowed_sources s)) v(key)
        where facet_rules
    ),
    matching_documents as materialized (
        select d.id, d.source_id, d.path, s.slug, s.kind, s.attribution, s.verified::text as verified,
               (d.deprecated or s.deprecated)::text as deprecated, d.content_type, d.language, d.package
        from allowed_sources s
        -- the allowed sources' documents, read by source (offset 0 keeps the per-document checks
        -- below out of the scan: they run on these documents only, not on every source's)
        cross join lateral (
            select d.id, d.source_id, d.path, d.deprecated, d.content_type, d.language, d.package
            from quarry.documents d where d.source_id = s.id offset 0
        ) d
        where (needs_scan or 'chunk_kind' = any (wanted))
          and (not facet_rules
               or jsonb_build_array(d.content_type, d.language, d.package, d.deprecated or s.deprecated)
                  in (select v.key from facet_value_sets v))
          and (not version_rules or quarry.version_allows(resolved, d.id))
          and (not location_rules or quarry.document_location_allows(filters, d.id, d.path))
    ),
    document_modules as materialized (  -- once per document, not per chunk
        select m.id, quarry.file_module(m.path) as module
        from matching_documents m
        where 'chunk_kind' = any (wanted)
    ),
    -- Version facets. A document inherits the names its governing manifests state (quarry.governing_manifests:
    -- per kind, the nearest enclosing manifest directory's), which depend only on the deepest manifest directory
    -- above it; so documents are counted per directory, and only those stating names themselves one by one.
    manifest_directories as materialized (
        select distinct m.source_id, m.scope
        from quarry.manifests m join allowed_sources s on s.id = m.source_id
        where wanted && version_facets
    ),
    directory_names as materialized (  -- per directory, the names its documents inherit
        select distinct inherited.source_id, inherited.scope, vc.facet, vc.name
        from (
            select md.source_id, md.scope, m.document_id,
                   rank() over (partition by md.source_id, md.scope, m.kind order by length(m.scope) desc) as nearness
            from manifest_directories md
            join quarry.manifests m on m.source_id = md.source_id
             and (m.scope = '' or m.scope = md.scope or starts_with(md.scope, m.scope || '/'))
        ) inherited
        join quarry.version_constraints vc on vc.document_id = inherited.document_id
        where inherited.nearness = 1 and vc.facet = any (wanted) and vc.name <> ''
    ),
    -- unfiltered: documents under each directory, minus those under the directories right below it; a path
    -- prefix is a byte range, read from the (source_id, path collate "C") index where there is one
    directories_under as materialized (
        select md.source_id, md.scope,
               case when md.scope = '' then
                   (select coalesce(sum(fc.documents), 0) from quarry.facet_counts fc
                    where fc.source_id = md.source_id and fc.facet = 'content_type')
               else
                   (select count(*) from quarry.documents d
                    where d.source_id = md.source_id
                      and d.path collate "C" >= md.scope || '/' and d.path collate "C" < md.scope || '0'
                      and starts_with(d.path, md.scope || '/'))
               end as documents
        from manifest_directories md
        where not needs_scan
    ),
    directory_parents as (  -- the nearest directory holding manifests above each one
        select distinct on (child.source_id, child.scope) child.source_id, child.scope, parent.scope as parent
        from manifest_directories child
        join manifest_directories parent on parent.source_id = child.source_id and parent.scope <> child.scope
         and (parent.scope = '' or starts_with(child.scope, parent.scope || '/'))
        where not needs_scan
        order by child.source_id, child.scope, length(parent.scope) desc
    ),
    nested_documents as (
        select dp.source_id, dp.parent as scope, sum(du.documents) as documents
        from directory_parents dp
        join directories_under du on du.source_id = dp.source_id and du.scope = dp.scope
        group by 1, 2
    ),
    -- filtered: each matching document under its deepest manifest directory
    nearest_directories as materialized (
        select distinct on (m.id) m.id, m.source_id, md.scope
        from matching_documents m
        join manifest_directories md on md.source_id = m.source_id
         and (md.scope = '' or starts_with(m.path, md.scope || '/'))
        where needs_scan
        order by m.id, length(md.scope) desc
    ),
    directory_documents as (  -- documents whose deepest manifest directory each directory is
        select du.source_id, du.scope, du.documents - coalesce(nd.documents, 0) as documents
        from directories_under du
        left join nested_documents nd on nd.source_id = du.source_id and nd.scope = du.scope
        union all
        select n.source_id, n.scope, count(*)
        from nearest_directories n
        group by 1, 2
    ),
    stating_documents as materialized (  -- the documents with version names of their own, and their directory
        select distinct on (stating.id) stating.id, stating.source_id, md.scope
        from (
            select d.id, d.source_id, d.path
            from (select distinct vc.document_id
                  from allowed_sources s join quarry.version_constraints vc on vc.source_id = s.id
                  where not needs_scan and vc.facet = any (wanted) and vc.name <> '') stated
            join quarry.documents d on d.id = stated.document_id
            where wanted && version_facets
            union all
            select m.id, m.source_id, m.path
            from matching_documents m
            where needs_scan and wanted && version_facets
              and exists (select 1 from quarry.version_constraints vc
                          where vc.document_id = m.id and vc.facet = any (wanted) and vc.name <> '')
        ) stating
        left join manifest_directories md on md.source_id = stating.source_id
              and (md.scope = '' or starts_with(stating.path, md.scope || '/'))
        order by stating.id, length(md.scope) desc nulls last
    ),
    stated_names as (  -- the names documents state that their directory does not already give them
        select vc.facet, vc.name, count(distinct sd.id) as documents
        from stating_documents sd
        join quarry.version_constraints vc on vc.document_id = sd.id
        left join directory_names dn on dn.source_id = sd.source_id and dn.scope = sd.scope
                                    and dn.facet = vc.facet and dn.name = vc.name
        where vc.facet = any (wanted) and vc.name <> '' and dn.name is null
        group by vc.facet, vc.name
    ),
    keyed as (
        -- scanned: every wanted facet of every matching document
        select k.key, case k.key
                   when 'source_slug' then m.slug
                   when 'kind' then m.kind
                   when 'attribution' then m.attribution
                   when 'verified' then m.verified
                   when 'deprecated' then m.deprecated
                   when 'content_type' then m.content_type
                   when 'language' then m.language
                   when 'package' then m.package
               end as value,
               1::bigint as documents
        from matching_documents m
        cross join unnest(wanted) k (key)
        where needs_scan and not k.key = any (version_facets || chunk_facets)
        union all
        -- counted: document facets from facet_counts, source facets from per-source totals
        select fc.facet, fc.value, fc.documents
        from quarry.facet_counts fc join allowed_sources s on s.id = fc.source_id
        where not needs_scan and fc.facet = any (wanted) and fc.facet <> 'deprecated'
        union all
        select k.key, case k.key
                   when 'source_slug' then s.slug when 'kind' then s.kind
                   when 'attribution' then s.attribution when 'verified' then s.verified::text
                   when 'deprecated' then 'true' end,
               coalesce((select sum(fc.documents) from quarry.facet_counts fc
                         where fc.source_id = s.id and fc.facet = 'content_type'), 0)
        from allowed_sources s
        cross join unnest(wanted) k (key)
        where not needs_scan and k.key = any (source_facets || array['deprecated'])
          and (k.key <> 'deprecated' or s.deprecated)
        union all
        -- deprecated documents of sources that are not deprecated themselves
        select 'deprecated', fc.value, fc.documents
        from quarry.facet_counts fc join allowed_sources s on s.id = fc.source_id
        where not needs_scan and 'deprecated' = any (wanted) and fc.facet = 'deprecated' and not s.deprecated
        union all
        -- version facets: the names documents inherit, per directory (summed here: a row per directory and name)
        select dn.facet, dn.name, sum(dd.documents)
        from directory_documents dd
        join directory_names dn on dn.source_id = dd.source_id and dn.scope = dd.scope
        group by dn.facet, dn.name
        union all
        select sn.facet, sn.name, sn.documents from stated_names sn
        union all
        -- chunk kinds: documents with a chunk of each kind passing the filters' chunk rules (symbol,
        -- chunk_kind), counted in one pass over their chunks
        -- (a rule is checked only when there is one: a call per chunk costs more than the kind itself)
        select 'chunk_kind', kinds.kind, count(distinct kinds.document_id)
        from (
            select c.document_id, quarry.chunk_kind_in(c.is_code, c.content_type, c.symbol_path, m.module) as kind
            from document_modules m
            join quarry.chunks c on c.document_id = m.id
            where 'chunk_kind' = any (wanted)
              and (not coalesce(filters ? 'symbol', false) or quarry.symbol_allows(filters, c.symbol_path))
        ) kinds
        where not coalesce(filters ? 'chunk_kind', false) or quarry.facet_allows(filters, 'chunk_kind', kinds.kind)
        group by kinds.kind
    ),
    counted as (
        select keyed.key, keyed.value, sum(keyed.documents)::bigint as documents
        from keyed
        where keyed.value is not null
          and (facet_values.prefix is null or starts_with(lower(keyed.value), lower(facet_values.prefix)))
        group by keyed.key, keyed.value
        having sum(keyed.documents) > 0
    ),
    ranked as (
        select c.key, c.value, c.documents,
               row_number() over (partition by c.key order by c.documents desc, c.value) as position,
               count(*) over (partition by c.key) as total
        from counted c
    )
    select r.key, r.value, r.documents, r.total
    from ranked r
    where r.position <= lim
    order by r.key, r.position;
end
$$;

comment on function quarry.facet_values(text, jsonb, text, int) is
'Values of one facet (null: every facet but chunk_kind, which reads the chunks and is counted when named) with document counts, under a filters object and an optional case-insensitive prefix; the top lim per facet plus how many values exist. Unfiltered counts come from quarry.facet_counts, version facets per manifest directory.';

create or replace function quarry.rebuild_facet_counts() returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    rows_written bigint;
begin
    -- the triggers keep counts current; this recomputes them from the documents themselves
    lock table quarry.facet_counts in exclusive mode;
    delete from quarry.facet_counts;
    insert into quarry.facet_counts (source_id, facet, value, documents)
    select d.source_id, f.facet, f.value, count(*)
    from quarry.documents d
    cross join lateral (values ('content_type', d.content_type), ('language', d.language),
                               ('package', d.package), ('deprecated', d.deprecated::text)) f (facet, value)
    where f.value is not null
    group by 1, 2, 3;
    get diagnostics rows_written = row_count;
    return rows_written;
end
$$;

comment on function quarry.rebuild_facet_counts() is
'Recompute quarry.facet_counts from the documents (quarry reindex); returns the number of (source, facet, value) rows.';
