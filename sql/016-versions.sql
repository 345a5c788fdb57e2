-- Version-aware filtering: which versions a document targets (its own constraints,
-- its governing manifests, its source's release version) against a requested range.
--
-- Filters carry version rules under the facets language_target and sdk_dependency:
--   {"sdk_dependency": {"any_of": ["pkg"], "version_satisfies": ">=0.8 <0.9"}}
-- quarry.resolve_version_filters() parses each requested range once per search and
-- stores it beside the rule (range, widened, strict), so the per-candidate checks below
-- compare multiranges instead of parsing range syntax.
--
-- A document's degree of match, per rule, best over its constraints, worst over rules:
--   4 exact       every version it targets satisfies the request  (constraint <@ request)
--   3 compatible  some versions it targets satisfy the request     (constraint && request)
--   2 unknown     it states no constraint for this rule
--   1 mismatch    disjoint, but within the request's compatibility line (same major;
--                 same minor for 0.x): a non-breaking mismatch, kept and demoted
--   0 excluded    disjoint across a breaking line, or fails the rule's any_of / none_of

create or replace function quarry.semver_key_numbers(key quarry.semver_key)
returns numeric[]
language plpgsql immutable parallel safe strict
set search_path = pg_catalog
as $$
declare
    numbers numeric[] := '{}';
    position int := 1;
    digits int;
begin
    -- major, minor, patch: each its digit count (one digit, or ':' and three) then its digits
    for part in 1 .. 3 loop
        if substr(key, position, 1) = ':' then
            digits := substr(key, position + 1, 3)::int;
            position := position + 4;
        else
            digits := substr(key, position, 1)::int;
            position := position + 1;
        end if;
        numbers := numbers || substr(key, position, digits)::numeric;
        position := position + digits + 1;
    end loop;
    return numbers;
end
$$;

comment on function quarry.semver_key_numbers(quarry.semver_key) is
'Major, minor and patch of a version key (see quarry.version_key).';

create or replace function quarry.compatibility_line_start(key quarry.semver_key, next_line boolean default false)
returns quarry.semver_key
language sql immutable parallel safe strict
set search_path = quarry, pg_catalog
as $$
    -- breaking changes come with a new major, or a new minor while the major is 0 (^ semantics)
    select case when n[1] > 0 then quarry.semver_key(n[1] + next_line::int, 0, 0, '0')
                else quarry.semver_key(0, n[2] + next_line::int, 0, '0') end
    from quarry.semver_key_numbers(key) n
$$;

comment on function quarry.compatibility_line_start(quarry.semver_key, boolean) is
'The first version (X.0.0-0, or 0.Y.0-0 for 0.x) of the compatibility line a version belongs to, or of the line after it.';

create or replace function quarry.compatibility_lines(versions quarry.semver_multirange)
returns quarry.semver_multirange
language sql immutable parallel safe strict
set search_path = quarry, pg_catalog
as $$
    -- every compatibility line a set of versions touches, whole: content targeting another
    -- version of one of these lines is a non-breaking mismatch
    select coalesce(range_agg(quarry_types.semver_range(
               case when lower_inf(r) then null else quarry.compatibility_line_start(lower(r)) end,
               case when upper_inf(r) then null
                    when not upper_inc(r) and upper(r) = quarry.compatibility_line_start(upper(r)) then upper(r)
                    else quarry.compatibility_line_start(upper(r), next_line => true)
               end, '[)')), '{}')::quarry.semver_multirange
    from unnest(versions) r
$$;

comment on function quarry.compatibility_lines(quarry.semver_multirange) is
'A set of versions widened to the whole compatibility lines it touches (major; minor for 0.x), for permissive version matching.';

create or replace function quarry.governing_manifests(source bigint, document_path text)
returns setof uuid
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- per kind, the manifests of the nearest directory containing the document (several
    -- of one kind there add up: requirements.txt and requirements-dev.txt)
    select enclosing.document_id
    from (select m.document_id,
                 rank() over (partition by m.kind order by length(m.scope) desc) as nearness
          from quarry.manifests m
          where m.source_id = source
            and (m.scope = '' or starts_with(document_path, m.scope || '/'))) enclosing
    where enclosing.nearness = 1
$$;

comment on function quarry.governing_manifests(bigint, text) is
'Manifests governing a document: per manifest kind, those in the nearest enclosing directory.';

create or replace function quarry.document_constraints(document uuid)
returns table (facet text, name text, range_text text, version_range quarry.semver_multirange, origin text)
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    with doc as (
        select d.id, d.source_id, d.path from quarry.documents d where d.id = document
    ),
    stated as (
        -- the document and its governing manifests, resolved once into an array the index is
        -- probed with (a join condition calling governing_manifests re-ran it per constraint
        -- row); a membership test, so a manifest governing itself still yields its rows once
        select vc.facet, vc.name, vc.range_text, vc.version_range, vc.origin
        from quarry.version_constraints vc
        where vc.document_id = any (array(
            select doc.id from doc
            union all
            select quarry.governing_manifests(doc.source_id, doc.path) from doc))
    )
    select * from stated
    union all
    -- a release-versioned source speaks for documents that state no target of their own
    select 'language_target', '', s.version, s.version_range, 'source'
    from doc join quarry.sources s on s.id = doc.source_id
    where s.version_range is not null
      and not exists (select 1 from stated where stated.facet = 'language_target')
$$;

comment on function quarry.document_constraints(uuid) is
'Every version constraint that applies to a document: its own, its governing manifests'' and its source''s release version.';

create or replace function quarry.resolve_version_filters(filters jsonb, version_match text default 'permissive')
returns jsonb
language plpgsql immutable parallel safe
set search_path = quarry, pg_catalog
as $$
declare
    facet text;
    rule jsonb;
    requested quarry.semver_multirange;
    resolved jsonb := filters;
begin
    if version_match not in ('strict', 'permissive') then
        raise exception 'unknown version_match %: expected strict or permissive', version_match
            using errcode = 'invalid_parameter_value';
    end if;
    if filters is null then
        return null;
    end if;
    foreach facet in array array['language_target', 'sdk_dependency'] loop
        rule := filters -> facet;
        continue when rule is null;
        rule := rule || jsonb_build_object('strict', version_match = 'strict');
        if rule ? 'version_satisfies' then
            requested := quarry.version_range(rule ->> 'version_satisfies');
            rule := rule || jsonb_build_object(
                'range', requested::text,
                'widened', quarry.compatibility_lines(requested)::text);
        end if;
        resolved := jsonb_set(resolved, array[facet], rule);
    end loop;
    return resolved;
end
$$;

comment on function quarry.resolve_version_filters(jsonb, text) is
'A filters object with each version rule''s requested range parsed once (range, widened to its compatibility lines) and the strictness attached.';

create or replace function quarry.version_degree(filters jsonb, document uuid)
returns int
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- null when the filters hold no version rule; see the file header for the scale
    with rules as (
        select r.key as facet, r.value as rule,
               (r.value ->> 'range')::quarry.semver_multirange as requested,
               (r.value ->> 'widened')::quarry.semver_multirange as widened,
               array(select jsonb_array_elements_text(r.value -> 'any_of')) as any_of,
               array(select jsonb_array_elements_text(r.value -> 'none_of')) as none_of
        from jsonb_each(filters) r
        where r.key in ('language_target', 'sdk_dependency')
    ),
    constraints as materialized (
        select * from quarry.document_constraints(document)
        where exists (select 1 from rules)
    ),
    per_rule as (
        select case
            when exists (select 1 from constraints c
                         where c.facet = r.facet and c.name = any (r.none_of)) then 0
            else coalesce(
                (select max(case when r.requested is null then 4
                                 when c.version_range <@ r.requested then 4
                                 when c.version_range && r.requested then 3
                                 when c.version_range && r.widened then 1
                                 else 0 end)
                 from constraints c
                 where c.facet = r.facet
                   and (r.rule -> 'any_of' is null or c.name = any (r.any_of))),
                case when r.rule -> 'any_of' is null then 2 else 0 end)
            end as degree
        from rules r
    )
    select min(degree) from per_rule
$$;

comment on function quarry.version_degree(jsonb, uuid) is
'How well a document''s version constraints match the version rules of resolved filters: 4 exact, 3 compatible, 2 unknown, 1 non-breaking mismatch, 0 excluded; null without version rules.';

create or replace function quarry.version_allows(filters jsonb, document uuid)
returns boolean
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- strict keeps only content known to satisfy; permissive drops only exclusions
    select filters is null
        or not (filters ? 'language_target' or filters ? 'sdk_dependency')
        or quarry.version_degree(filters, document) >= case
               when coalesce((filters -> 'language_target' ->> 'strict')::boolean,
                             (filters -> 'sdk_dependency' ->> 'strict')::boolean, false)
               then 3 else 1 end
$$;

comment on function quarry.version_allows(jsonb, uuid) is
'Whether a document passes the version rules of resolved filters (strict: exact or compatible; permissive: anything but a breaking mismatch).';

create or replace function quarry.chunk_passes_rules(
    filters jsonb, facets boolean, versions boolean, locations boolean,
    content_type text, language text, package text, deprecated boolean,
    document_id uuid, symbol_path text, is_code boolean
) returns boolean
language sql stable parallel safe
-- no `set search_path`: one expression, inlined into each caller's per-posting or per-candidate check, where
-- a call would cost one per posting; every name in it is schema-qualified
as $$
    -- facets, versions, locations: which rules the filters have (quarry.chunk_rule_kinds); a check whose
    -- kind the filters lack would pass every chunk, and is not made
    select (not facets or quarry.chunk_allowed(filters, content_type, language, package, deprecated))
       and (not versions or quarry.version_allows(filters, document_id))
       and (not locations or quarry.chunk_location_allows(filters, document_id, symbol_path, is_code, content_type))
$$;

comment on function quarry.chunk_passes_rules(jsonb, boolean, boolean, boolean, text, text, text, boolean, uuid, text, boolean) is
'Whether a chunk passes the chunk-level rules of resolved filters: facets (quarry.chunk_allowed), versions (quarry.version_allows) and locations (quarry.chunk_location_allows), each checked only where quarry.chunk_rule_kinds says the filters have it.';

create or replace function quarry.version_match_label(degree int)
returns text
language sql immutable parallel safe
-- no `set search_path`: one built-in expression, inlined into search_hits (see sql/035-trust.sql)
as $$
    select case degree when 4 then 'exact' when 3 then 'compatible' when 1 then 'mismatch' else 'unknown' end
$$;

comment on function quarry.version_match_label(int) is
'The version_match trust factor for a degree from quarry.version_degree (null: unknown).';

create or replace function quarry.version_hint(filters jsonb, lim int default 20)
returns table (facet text, name text, range_text text, written text, documents bigint)
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- What is indexed for the packages / languages a version rule asks about, so a
    -- strict search that found nothing can say which versions exist instead of
    -- substituting one. Manifest constraints count their manifest, not the files it governs.
    select hint.facet, hint.name, hint.range_text, hint.written, hint.documents
    from (
        select vc.facet, vc.name, vc.range_text, min(vc.raw) as written, count(distinct vc.document_id) as documents
        from jsonb_each(filters) r
        join quarry.version_constraints vc
          on vc.facet = r.key
         and (r.value -> 'any_of' is null
              or vc.name = any (array(select jsonb_array_elements_text(r.value -> 'any_of'))))
        where r.key in ('language_target', 'sdk_dependency')
        group by vc.facet, vc.name, vc.range_text
        union all
        select 'language_target', '', s.version, s.version, count(d.id)
        from quarry.sources s join quarry.documents d on d.source_id = s.id
        where filters ? 'language_target' and s.version is not null
        group by s.version
    ) hint
    order by hint.documents desc, hint.facet, hint.name, hint.range_text
    limit lim
$$;

comment on function quarry.version_hint(jsonb, int) is
'Versions indexed for the packages and languages named by a filters object''s version rules: canonical range, one way it was written, document count.';

create or replace function quarry.try_version_range(range text)
returns quarry.semver_multirange
language plpgsql immutable parallel safe
set search_path = quarry, pg_catalog
as $$
begin
    return quarry.version_range(range);
exception when invalid_parameter_value then
    return null;  -- ingestion skips a constraint it cannot parse rather than failing the batch
end
$$;

comment on function quarry.try_version_range(text) is
'quarry.version_range, or null when the range does not parse (for bulk loads that skip bad constraints).';
