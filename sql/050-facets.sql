-- Facet discovery: which values each facet takes, and in how many documents, under
-- the same filters object hybrid_search evaluates (see 015-filters.sql, 016-versions.sql).
--
-- Document-level facet counts per source live in quarry.facet_counts and, per combination of
-- document facet values, quarry.facet_combinations, kept current by the statement-level triggers
-- below as ingestion writes documents; source-level facets come from quarry.sources; version
-- facets from quarry.version_facet_combinations and their totals, recounted per source when its
-- writes marked it stale. A facets call filtering on source- and document-level facets (or not at
-- all) therefore reads counts, never the corpus; a version, path, symbol or chunk_kind rule needs
-- the matching documents themselves, and scans them.

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
    -- the same changes per combination of values (quarry.facet_combinations), the same way
    with per_combination as (
        select c.source_id, c.content_type, c.language, c.package, c.deprecated::boolean as deprecated,
               sum(c.delta) as delta
        from jsonb_to_recordset(changes)
             as c (source_id bigint, content_type text, language text, package text, deprecated text, delta int)
        where exists (select 1 from quarry.sources s where s.id = c.source_id)
        group by 1, 2, 3, 4, 5
        having sum(c.delta) <> 0
    ),
    updated as (
        update quarry.facet_combinations fc set documents = fc.documents + p.delta
        from per_combination p
        where fc.source_id = p.source_id and fc.content_type = p.content_type
          and fc.language is not distinct from p.language and fc.package is not distinct from p.package
          and fc.deprecated = p.deprecated
        returning fc.source_id, fc.content_type, fc.language, fc.package, fc.deprecated
    )
    insert into quarry.facet_combinations (source_id, content_type, language, package, deprecated, documents)
    select p.source_id, p.content_type, p.language, p.package, p.deprecated, p.delta
    from per_combination p
    where not exists (select 1 from updated u
                      where u.source_id = p.source_id and u.content_type = p.content_type
                        and u.language is not distinct from p.language
                        and u.package is not distinct from p.package and u.deprecated = p.deprecated);
    delete from quarry.facet_combinations where documents = 0;
    return null;
end
$$;

comment on function quarry.count_document_facets() is
'Trigger: keep quarry.facet_counts (documents per source, facet and value) and quarry.facet_combinations (per source and combination of content type, language, package and deprecated) in step with inserted, updated and deleted documents.';

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

-- Version facet counts (quarry.version_facet_combinations, alembic 0021) depend on documents' paths, manifests and
-- version constraints together: a manifest changed in one directory changes what every document below it
-- inherits. So writes do not adjust them; they mark the source stale (in the writing transaction, so a
-- reader's snapshot never pairs new rows with old counts), quarry.facet_values computes a stale source's
-- version facets live, and quarry.refresh_version_facet_counts recounts it.

create or replace function quarry.mark_version_facets_stale() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
begin
    -- a document's content does not change what it inherits, its path (or source) does; its facet
    -- values change which combination counts it (quarry.version_facet_combinations)
    if tg_op = 'UPDATE' and tg_table_name = 'documents' then  -- nested: only documents have these columns
        if not exists (select 1 from old_rows o join new_rows n on n.id = o.id
                       where (n.path, n.source_id, n.content_type, n.language, n.package, n.deprecated)
                             is distinct from (o.path, o.source_id, o.content_type, o.language, o.package,
                                               o.deprecated)) then
            return null;
        end if;
    end if;
    -- on conflict, update rather than do nothing: the row lock makes a refresh that would clear the
    -- mark wait for (or skip) this transaction, whose writes it cannot see yet
    if tg_op in ('INSERT', 'UPDATE') then
        insert into quarry.version_facets_stale (source_id)
        select distinct n.source_id from new_rows n
        where exists (select 1 from quarry.sources s where s.id = n.source_id)
        on conflict (source_id) do update set source_id = excluded.source_id;
    end if;
    if tg_op in ('DELETE', 'UPDATE') then
        insert into quarry.version_facets_stale (source_id)
        select distinct o.source_id from old_rows o
        where exists (select 1 from quarry.sources s where s.id = o.source_id)  -- not a cascade from a dropped source
        on conflict (source_id) do update set source_id = excluded.source_id;
    end if;
    return null;
end
$$;

comment on function quarry.mark_version_facets_stale() is
'Trigger: mark the sources of inserted, updated or deleted documents, manifests and version constraints in quarry.version_facets_stale.';

do $$
declare
    watched constant text[] := array['documents', 'manifests', 'version_constraints'];
    tbl text;
begin
    foreach tbl in array watched loop
        execute format('drop trigger if exists %I on quarry.%I', tbl || '_version_facets_insert', tbl);
        execute format('create trigger %I after insert on quarry.%I referencing new table as new_rows '
                       'for each statement execute function quarry.mark_version_facets_stale()',
                       tbl || '_version_facets_insert', tbl);
        execute format('drop trigger if exists %I on quarry.%I', tbl || '_version_facets_delete', tbl);
        execute format('create trigger %I after delete on quarry.%I referencing old table as old_rows '
                       'for each statement execute function quarry.mark_version_facets_stale()',
                       tbl || '_version_facets_delete', tbl);
        execute format('drop trigger if exists %I on quarry.%I', tbl || '_version_facets_update', tbl);
        execute format('create trigger %I after update on quarry.%I '
                       'referencing old table as old_rows new table as new_rows '
                       'for each statement execute function quarry.mark_version_facets_stale()',
                       tbl || '_version_facets_update', tbl);
    end loop;
end
$$;

create or replace function quarry.directory_version_names(source_ids bigint[])
returns table (source_id bigint, scope text, facet text, name text)
language sql stable
set search_path = quarry, pg_catalog
as $$
    -- A document inherits the names its governing manifests state (quarry.governing_manifests: per kind,
    -- the nearest enclosing manifest directory's), which depend only on the deepest manifest directory
    -- above it: so per directory, not per document.
    select distinct inherited.source_id, inherited.scope, vc.facet, vc.name
    from (
        select md.source_id, md.scope, m.document_id,
               rank() over (partition by md.source_id, md.scope, m.kind order by length(m.scope) desc) as nearness
        from (select distinct m.source_id, m.scope from quarry.manifests m
              where m.source_id = any (source_ids)) md
        join quarry.manifests m on m.source_id = md.source_id
         and (m.scope = '' or m.scope = md.scope or starts_with(md.scope, m.scope || '/'))
    ) inherited
    join quarry.version_constraints vc on vc.document_id = inherited.document_id
    where inherited.nearness = 1 and vc.name <> ''
$$;

comment on function quarry.directory_version_names(bigint[]) is
'Per manifest directory of the given sources, the version names (facet, name) every document whose deepest manifest directory it is inherits.';

create or replace function quarry.computed_version_facet_counts(source_ids bigint[])
returns table (source_id bigint, facet text, name text, documents bigint)
language sql stable
set search_path = quarry, pg_catalog
as $$
    with manifest_directories as materialized (
        select distinct m.source_id, m.scope from quarry.manifests m where m.source_id = any (source_ids)
    ),
    directory_names as materialized (
        select * from quarry.directory_version_names(source_ids)
    ),
    -- documents under each directory, minus those under the directories right below it; a path prefix
    -- is a byte range, read from the (source_id, path collate "C") index
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
    ),
    directory_parents as (  -- the nearest directory holding manifests above each one
        select distinct on (child.source_id, child.scope) child.source_id, child.scope, parent.scope as parent
        from manifest_directories child
        join manifest_directories parent on parent.source_id = child.source_id and parent.scope <> child.scope
         and (parent.scope = '' or starts_with(child.scope, parent.scope || '/'))
        order by child.source_id, child.scope, length(parent.scope) desc
    ),
    nested_documents as (
        select dp.source_id, dp.parent as scope, sum(du.documents) as documents
        from directory_parents dp
        join directories_under du on du.source_id = dp.source_id and du.scope = dp.scope
        group by 1, 2
    ),
    -- materialized: the planner, guessing one row per directory, re-ran nested_documents per directory name
    directory_documents as materialized (  -- documents whose deepest manifest directory each directory is
        select du.source_id, du.scope, du.documents - coalesce(nd.documents, 0) as documents
        from directories_under du
        left join nested_documents nd on nd.source_id = du.source_id and nd.scope = du.scope
    ),
    stating_documents as materialized (  -- the documents with version names of their own, and their directory
        select distinct on (d.id) d.id, d.source_id, md.scope
        from (select distinct vc.document_id from quarry.version_constraints vc
              where vc.source_id = any (source_ids) and vc.name <> '') stated
        join quarry.documents d on d.id = stated.document_id
        left join manifest_directories md on md.source_id = d.source_id
              and (md.scope = '' or starts_with(d.path, md.scope || '/'))
        order by d.id, length(md.scope) desc nulls last
    ),
    counted as (
        select dd.source_id, dn.facet, dn.name, dd.documents
        from directory_documents dd
        join directory_names dn on dn.source_id = dd.source_id and dn.scope = dd.scope
        union all
        -- the names documents state that their directory does not already give them
        select sd.source_id, vc.facet, vc.name, count(distinct sd.id)
        from stating_documents sd
        join quarry.version_constraints vc on vc.document_id = sd.id
        left join directory_names dn on dn.source_id = sd.source_id and dn.scope = sd.scope
                                    and dn.facet = vc.facet and dn.name = vc.name
        where vc.name <> '' and dn.name is null
        group by 1, 2, 3
    )
    select c.source_id, c.facet, c.name, sum(c.documents)::bigint
    from counted c
    group by 1, 2, 3
    having sum(c.documents) > 0
$$;

comment on function quarry.computed_version_facet_counts(bigint[]) is
'Documents per (source, version facet, name) in the given sources, computed from the corpus per manifest directory: a document counts for the names it states and those its governing manifests state (what facets reads for a stale source).';

create or replace function quarry.computed_version_facet_combinations(source_ids bigint[])
returns table (source_id bigint, combination text[], facet text, name text, documents bigint)
language sql stable
set search_path = quarry, pg_catalog
as $$
    -- Document by document (what a refresh does for the sources it recounts, not what a reader does):
    -- each document's names are its deepest manifest directory's and its own, counted once each.
    with manifest_directories as materialized (
        select distinct m.source_id, m.scope from quarry.manifests m where m.source_id = any (source_ids)
    ),
    directory_names as materialized (
        select * from quarry.directory_version_names(source_ids)
    ),
    placed as materialized (  -- each document under its deepest manifest directory (null: none)
        select distinct on (d.id) d.id, d.source_id, d.content_type, d.language, d.package, d.deprecated,
               md.scope
        from quarry.documents d
        left join manifest_directories md on md.source_id = d.source_id
              and (md.scope = '' or starts_with(d.path, md.scope || '/'))
        where d.source_id = any (source_ids)
        order by d.id, length(md.scope) desc nulls last
    ),
    document_names as (
        select p.id, p.source_id, dn.facet, dn.name
        from placed p join directory_names dn on dn.source_id = p.source_id and dn.scope = p.scope
        union  -- a name the document states and inherits counts once
        select p.id, p.source_id, vc.facet, vc.name
        from placed p join quarry.version_constraints vc on vc.document_id = p.id
        where vc.name <> ''
    )
    select n.source_id, array[p.content_type, p.language, p.package, p.deprecated::text], n.facet, n.name,
           count(*)
    from document_names n join placed p on p.id = n.id
    group by 1, 2, 3, 4
$$;

comment on function quarry.computed_version_facet_combinations(bigint[]) is
'Documents per (source, combination: array[content type, language, package, deprecated], version facet, name) in the given sources, computed document by document (what quarry.version_facet_combinations keeps).';

create or replace function quarry.total_version_facets() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
declare
    changes jsonb;
begin
    -- totals span sources, whose writers otherwise run concurrently: one at a time (the lock is taken
    -- first by the refresh and by document writes, so it never waits here while holding these rows)
    perform quarry.lock_corpus_statistics();
    -- a statement's transition table exists only for the event that defines it
    if tg_op = 'INSERT' then
        select jsonb_agg(jsonb_build_object('combination', n.combination, 'facet', n.facet, 'name', n.name,
                                            'delta', n.documents))
        into changes from new_rows n;
    else
        select jsonb_agg(jsonb_build_object('combination', o.combination, 'facet', o.facet, 'name', o.name,
                                            'delta', -o.documents))
        into changes from old_rows o;
    end if;
    -- the totals have no check on documents (a drifted one must not fail a write), so each difference
    -- is upserted
    insert into quarry.version_facet_combination_totals as t (combination, facet, name, documents)
    select c.combination, c.facet, c.name, sum(c.delta)
    from jsonb_to_recordset(coalesce(changes, '[]')) as c (combination text[], facet text, name text, delta bigint)
    group by 1, 2, 3 having sum(c.delta) <> 0
    order by 2, 3, 1
    on conflict (facet, name, combination) do update set documents = t.documents + excluded.documents;
    delete from quarry.version_facet_combination_totals where documents <= 0;
    insert into quarry.version_facet_totals as t (facet, name, documents)
    select c.facet, c.name, sum(c.delta)
    from jsonb_to_recordset(coalesce(changes, '[]')) as c (facet text, name text, delta bigint)
    group by 1, 2 having sum(c.delta) <> 0
    order by 1, 2
    on conflict (facet, name) do update set documents = t.documents + excluded.documents;
    delete from quarry.version_facet_totals where documents <= 0;
    return null;
end
$$;

comment on function quarry.total_version_facets() is
'Trigger: keep quarry.version_facet_totals (documents per version facet and name, over every source) and quarry.version_facet_combination_totals (per combination too) in step with quarry.version_facet_combinations.';

-- transition tables are named per event, so one trigger per event
drop trigger if exists version_facet_combinations_insert on quarry.version_facet_combinations;
create trigger version_facet_combinations_insert after insert on quarry.version_facet_combinations
    referencing new table as new_rows
    for each statement execute function quarry.total_version_facets();
drop trigger if exists version_facet_combinations_delete on quarry.version_facet_combinations;
create trigger version_facet_combinations_delete after delete on quarry.version_facet_combinations
    referencing old table as old_rows
    for each statement execute function quarry.total_version_facets();

create or replace function quarry.version_facet_combinations_truncated() returns trigger
language plpgsql
set search_path = quarry, pg_catalog
as $$
begin
    truncate quarry.version_facet_totals, quarry.version_facet_combination_totals;
    return null;
end
$$;

comment on function quarry.version_facet_combinations_truncated() is
'Trigger: a truncate of quarry.version_facet_combinations (e.g. cascading from sources) empties the totals too.';

drop trigger if exists version_facet_combinations_truncated on quarry.version_facet_combinations;
create trigger version_facet_combinations_truncated after truncate on quarry.version_facet_combinations
    for each statement execute function quarry.version_facet_combinations_truncated();

create or replace function quarry.refresh_version_facet_counts(source_ids bigint[] default null) returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    refreshed bigint[];
    rows_written bigint;
begin
    if not exists (select 1 from quarry.version_facets_stale st
                   where source_ids is null or st.source_id = any (source_ids)) then
        return 0;  -- the common end of an ingest that changed no version facet: no lock taken
    end if;
    -- the totals this changes are shared by every source's writers (quarry.total_version_facets)
    perform quarry.lock_corpus_statistics();
    -- a mark another transaction holds (it is writing that source) is skipped: the counts computed here
    -- could not see its writes; the source stays stale until a refresh after it commits
    with claimed as (
        delete from quarry.version_facets_stale st
        where st.source_id in (select s.source_id from quarry.version_facets_stale s
                               where source_ids is null or s.source_id = any (source_ids)
                               for update skip locked)
        returning st.source_id
    )
    select coalesce(array_agg(c.source_id), '{}') into refreshed from claimed c;
    delete from quarry.version_facet_combinations vfc where vfc.source_id = any (refreshed);
    insert into quarry.version_facet_combinations (source_id, combination, facet, name, documents)
    select c.source_id, c.combination, c.facet, c.name, c.documents
    from quarry.computed_version_facet_combinations(refreshed) c;
    get diagnostics rows_written = row_count;
    -- the same summed over each source's combinations, what a filter on source facets reads
    delete from quarry.version_facet_source_totals t where t.source_id = any (refreshed);
    insert into quarry.version_facet_source_totals (source_id, facet, name, documents)
    select vfc.source_id, vfc.facet, vfc.name, sum(vfc.documents)
    from quarry.version_facet_combinations vfc where vfc.source_id = any (refreshed)
    group by 1, 2, 3;
    return rows_written;
end
$$;

comment on function quarry.refresh_version_facet_counts(bigint[]) is
'Recount quarry.version_facet_combinations and quarry.version_facet_source_totals for the stale sources among source_ids (null: every stale source) and clear their marks; returns the rows of the first written.';

create or replace function quarry.facet_values(
    facet text default null,
    filters jsonb default null,
    prefix text default null,
    lim int default 50
) returns table (facet_key text, facet_value text, documents bigint, total_values bigint)
language plpgsql stable
set search_path = quarry, pg_catalog
-- One plan for every call: each branch is gated by a flag the executor checks once, and a custom
-- plan per call (the default here) cost ~4 ms of planning, more than reading the counts
set plan_cache_mode = force_generic_plan
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
    -- no filter and no stale source: version facets are read from the totals over every source
    version_totals boolean;
    -- only source- and document-level facet rules (and no chunk facet wanted): counted from the
    -- combinations of document facet values the rules allow, not from the matching documents
    by_combination boolean;
    -- by combination over every source, nothing stale and no source deprecated (which would make its
    -- documents' combinations differ from their own): version facets from the totals per combination
    combination_totals boolean;
    -- which per-document checks the filters need: a check without its rule passes every document, and each
    -- costs a function call per document (they do not inline), so one without a rule is not called
    rules record := quarry.chunk_rule_kinds(filters);
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
    -- a rule beyond the source level: counted from the documents, or (by_combination) their combinations
    needs_scan := exists (select 1 from jsonb_object_keys(coalesce(filters, '{}')) k where not k = any (source_facets));
    version_totals := coalesce(filters, '{}') = '{}' and not exists (select 1 from quarry.version_facets_stale);
    by_combination := needs_scan and not rules.versions and not rules.locations and not 'chunk_kind' = any (wanted);
    combination_totals := by_combination and not filters ?| source_facets
        and not exists (select 1 from quarry.version_facets_stale)
        and not exists (select 1 from quarry.sources s where s.deprecated);

    return query
    with allowed_sources as materialized (
        select s.* from quarry.sources s
        join quarry.filtered_source_ids(filters) a on a.id = s.id
    ),
    -- sources whose version facet counts are stale: counted from their documents, the others from the counts
    stale_sources as materialized (
        select s.id from allowed_sources s
        where ((not needs_scan and not version_totals) or by_combination) and wanted && version_facets
          and exists (select 1 from quarry.version_facets_stale st where st.source_id = s.id)
    ),
    -- the facet rules, checked once per combination of facet values the documents have rather than per document
    facet_value_sets as materialized (
        select v.key
        from quarry.allowed_facet_values(filters, array(select s.id from allowed_sources s)) v(key)
        where rules.facets and (not by_combination or exists (select 1 from stale_sources))  -- checked once
    ),
    -- By combination: the distinct values of the allowed sources' combinations of document facet values as
    -- the rules see them (deprecated counts the source's mark too), the rules checked once per distinct values
    -- (grouped as columns, not arrays: hashing thousands of arrays cost more than the rest of the call)
    allowed_values as materialized (
        select array[v.content_type, v.language, v.package, v.deprecated::text] as seen
        from (select distinct c.content_type, c.language, c.package, c.deprecated or s.deprecated as deprecated
              from allowed_sources s join quarry.facet_combinations c on c.source_id = s.id
              where by_combination offset 0) v  -- offset: the check stays out here
        where quarry.chunk_allowed(filters, v.content_type, v.language, v.package, v.deprecated)
    ),
    -- and the combinations the rules allow, per source (as stored, and as the rules see them)
    allowed_combinations as materialized (
        select c.source_id, array[c.content_type, c.language, c.package, c.deprecated::text] as combination,
               a.seen, s.slug, s.kind, s.attribution, s.verified::text as verified, c.documents,
               exists (select 1 from stale_sources st where st.id = s.id) as stale
        from allowed_sources s
        join quarry.facet_combinations c on c.source_id = s.id
        cross join lateral (
            select array[c.content_type, c.language, c.package, (c.deprecated or s.deprecated)::text] as seen
        ) a
        where by_combination and a.seen in (select v.seen from allowed_values v)
    ),
    counted_combinations as materialized (  -- those whose version facets are kept (not stale)
        select ac.source_id, ac.combination from allowed_combinations ac
        where by_combination and not combination_totals and wanted && version_facets and not ac.stale
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
          -- counted by combination: only the stale sources' documents are read (for their version facets)
          and (not by_combination or exists (select 1 from stale_sources st where st.id = s.id))
          and (not rules.facets
               or jsonb_build_array(d.content_type, d.language, d.package, d.deprecated or s.deprecated)
                  in (select v.key from facet_value_sets v))
          and (not rules.versions or quarry.version_allows(resolved, d.id))
          and (not rules.locations or quarry.document_location_allows(filters, d.id, d.path))
    ),
    document_modules as materialized (  -- once per document, not per chunk
        select m.id, quarry.file_module(m.path) as module
        from matching_documents m
        where 'chunk_kind' = any (wanted)
    ),
    -- Version facets. Unfiltered, or filtered on source and document facets only, they are read from the
    -- counts (quarry.version_facet_totals; per source, quarry.version_facet_source_totals; per source and
    -- combination, quarry.version_facet_combinations), or computed
    -- live for a source whose counts are stale (quarry.version_facets_stale); under any other rule, each
    -- matching document is counted under its deepest manifest directory, whose inherited names it has,
    -- and documents stating names themselves one by one.
    source_documents as materialized (  -- each allowed source's documents (a document has one content type)
        select fc.source_id, sum(fc.documents) as documents
        from quarry.facet_counts fc
        where not needs_scan and wanted && (source_facets || array['deprecated'])
          and fc.facet = 'content_type' and fc.source_id = any (array(select s.id from allowed_sources s))
        group by fc.source_id
    ),
    scanned_sources as materialized (  -- the sources whose matching documents' version facets are read
        select s.id from allowed_sources s
        where needs_scan and wanted && version_facets
          and (not by_combination or exists (select 1 from stale_sources st where st.id = s.id))
    ),
    manifest_directories as materialized (
        select distinct m.source_id, m.scope
        from quarry.manifests m join scanned_sources s on s.id = m.source_id
    ),
    directory_names as materialized (  -- per directory, the names its documents inherit
        select dn.source_id, dn.scope, dn.facet, dn.name
        from quarry.directory_version_names(array(select s.id from scanned_sources s)) dn
        where needs_scan and wanted && version_facets  -- checked once: otherwise not called at all
          and dn.facet = any (wanted)
    ),
    nearest_directories as materialized (  -- each matching document under its deepest manifest directory
        select distinct on (m.id) m.id, m.source_id, md.scope
        from matching_documents m
        join manifest_directories md on md.source_id = m.source_id
         and (md.scope = '' or starts_with(m.path, md.scope || '/'))
        where needs_scan
        order by m.id, length(md.scope) desc
    ),
    directory_documents as (
        select n.source_id, n.scope, count(*) as documents
        from nearest_directories n
        group by 1, 2
    ),
    stating_documents as materialized (  -- the matching documents with version names of their own, and their directory
        select distinct on (m.id) m.id, m.source_id, md.scope
        from matching_documents m
        left join manifest_directories md on md.source_id = m.source_id
              and (md.scope = '' or starts_with(m.path, md.scope || '/'))
        where needs_scan and wanted && version_facets
          and exists (select 1 from quarry.version_constraints vc
                      where vc.document_id = m.id and vc.facet = any (wanted) and vc.name <> '')
        order by m.id, length(md.scope) desc nulls last
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
        where needs_scan and not by_combination and not k.key = any (version_facets || chunk_facets)
        union all
        -- by combination: source facets summed per source, document facets per distinct values
        select k.key, case k.key
                   when 'source_slug' then per_source.slug
                   when 'kind' then per_source.kind
                   when 'attribution' then per_source.attribution
                   when 'verified' then per_source.verified
               end,
               per_source.documents
        from (select ac.slug, ac.kind, ac.attribution, ac.verified, sum(ac.documents) as documents
              from allowed_combinations ac group by 1, 2, 3, 4) per_source
        cross join unnest(wanted) k (key)
        where by_combination and k.key = any (source_facets)
        union all
        select k.key, case k.key
                   when 'content_type' then per_value.seen[1]
                   when 'language' then per_value.seen[2]
                   when 'package' then per_value.seen[3]
                   when 'deprecated' then per_value.seen[4]
               end,
               per_value.documents
        from (select ac.seen, sum(ac.documents) as documents from allowed_combinations ac group by 1) per_value
        cross join unnest(wanted) k (key)
        where by_combination and k.key = any (document_facets)
        union all
        -- version facets by combination: the totals of the allowed combinations, or the counts kept per
        -- source and combination (the stale sources are scanned)
        -- (the facet is kept after summing, behind offset 0: filtered before, its generic-plan estimate was
        -- a hundredth of the rows, and the planner sorted ten thousand names rather than hash them, 20 ms)
        select summed.facet, summed.name, summed.documents
        from (select t.facet, t.name, sum(t.documents) as documents
              from quarry.version_facet_combination_totals t
              where combination_totals and wanted && version_facets
                -- (no source is deprecated here, so the values the rules saw are the stored combinations)
                and t.combination in (select v.seen from allowed_values v)
              group by t.facet, t.name offset 0) summed
        where summed.facet = any (wanted)
        union all
        select summed.facet, summed.name, summed.documents
        from (select vfc.facet, vfc.name, sum(vfc.documents) as documents
              from quarry.version_facet_combinations vfc
              join counted_combinations cc on cc.source_id = vfc.source_id and cc.combination = vfc.combination
              -- the conditions counted_combinations has, checked once here: the table is not read at all
              -- when they fail (the join read it before finding that side empty: 3 ms in an EXPLAIN at 1M chunks)
              where by_combination and not combination_totals and wanted && version_facets
              group by vfc.facet, vfc.name offset 0) summed  -- as above: the facet kept after summing
        where summed.facet = any (wanted)
        union all
        -- counted: document facets from facet_counts, source facets from per-source totals (the counts
        -- of each source's rows are summed as they are read: hundreds of sources hold tens of thousands)
        select fc.facet, fc.value, sum(fc.documents)
        from quarry.facet_counts fc
        where not needs_scan and fc.facet = any (wanted) and fc.facet <> 'deprecated'
          and fc.source_id = any (array(select s.id from allowed_sources s))
        group by fc.facet, fc.value
        union all
        select k.key, case k.key
                   when 'source_slug' then s.slug when 'kind' then s.kind
                   when 'attribution' then s.attribution when 'verified' then s.verified::text
                   when 'deprecated' then 'true' end,
               coalesce(sd.documents, 0)
        from allowed_sources s
        left join source_documents sd on sd.source_id = s.id
        cross join unnest(wanted) k (key)
        where not needs_scan and k.key = any (source_facets || array['deprecated'])
          and (k.key <> 'deprecated' or s.deprecated)
        union all
        -- deprecated documents of sources that are not deprecated themselves
        select 'deprecated', fc.value, fc.documents
        from quarry.facet_counts fc join allowed_sources s on s.id = fc.source_id
        where not needs_scan and 'deprecated' = any (wanted) and fc.facet = 'deprecated' and not s.deprecated
        union all
        -- version facets, counted: over every source, the totals; otherwise kept per source (summed over
        -- its combinations: a quarter of the rows), computed for the stale ones
        select t.facet, t.name, t.documents
        from quarry.version_facet_totals t
        where version_totals and t.facet = any (wanted)
        union all
        select summed.facet, summed.name, summed.documents
        from (select vst.facet, vst.name, sum(vst.documents) as documents
              from quarry.version_facet_source_totals vst
              where not needs_scan and not version_totals and wanted && version_facets
                and vst.source_id = any (array(select s.id from allowed_sources s
                                               where not exists (select 1 from stale_sources st where st.id = s.id)))
              group by vst.facet, vst.name offset 0) summed  -- as above: the facet kept after summing
        where summed.facet = any (wanted)
        union all
        select computed.facet, computed.name, computed.documents
        from quarry.computed_version_facet_counts(array(select st.id from stale_sources st)) computed
        -- a one-time check: the function is not called at all (a few ms) when no source is stale
        where not needs_scan and exists (select 1 from stale_sources) and computed.facet = any (wanted)
        union all
        -- version facets, scanned: the names documents inherit, per directory (summed here: a row per directory
        -- and name), and those they state themselves
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
'Values of one facet (null: every facet but chunk_kind, which reads the chunks and is counted when named) with document counts, under a filters object and an optional case-insensitive prefix; the top lim per facet plus how many values exist. Counts come from quarry.facet_counts, quarry.facet_combinations and the version facet counts unless a rule needs the documents (version, path, symbol, chunk_kind).';

create or replace function quarry.rebuild_facet_counts() returns bigint
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
declare
    rows_written bigint;
begin
    -- the triggers keep counts current; this recomputes them from the documents themselves
    -- (the statistics lock first, as document writers take it before the triggers write these counts)
    perform quarry.lock_corpus_statistics();
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
    delete from quarry.facet_combinations;
    insert into quarry.facet_combinations (source_id, content_type, language, package, deprecated, documents)
    select d.source_id, d.content_type, d.language, d.package, d.deprecated, count(*)
    from quarry.documents d group by 1, 2, 3, 4, 5;
    insert into quarry.version_facets_stale (source_id) select s.id from quarry.sources s on conflict do nothing;
    perform quarry.refresh_version_facet_counts();
    -- the triggers keep totals by difference: a total that drifted stays off until recounted
    delete from quarry.version_facet_combination_totals;
    insert into quarry.version_facet_combination_totals (combination, facet, name, documents)
    select vfc.combination, vfc.facet, vfc.name, sum(vfc.documents)
    from quarry.version_facet_combinations vfc group by 1, 2, 3;
    delete from quarry.version_facet_totals;
    insert into quarry.version_facet_totals (facet, name, documents)
    select vfc.facet, vfc.name, sum(vfc.documents) from quarry.version_facet_combinations vfc group by 1, 2;
    return rows_written;
end
$$;

comment on function quarry.rebuild_facet_counts() is
'Recompute quarry.facet_counts, quarry.facet_combinations, quarry.version_facet_combinations and their totals from the corpus (quarry reindex); returns the number of (source, facet, value) rows of the first.';

-- counts a migration (or a write outside an ingest) left stale are recounted on every migrate
select quarry.refresh_version_facet_counts();
