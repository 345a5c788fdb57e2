-- Facet discovery: which values each facet takes, and in how many documents, under
-- the same filters object hybrid_search evaluates (see 015-filters.sql).

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
    known constant text[] := array['source_slug', 'kind', 'attribution', 'verified', 'deprecated',
                                   'content_type', 'language', 'package'];
begin
    if facet is not null and not facet = any (known) then
        raise exception 'unknown facet %: expected one of %', facet, array_to_string(known, ', ')
            using errcode = 'invalid_parameter_value';
    end if;
    if lim < 1 then
        raise exception 'lim must be at least 1, got %', lim using errcode = 'invalid_parameter_value';
    end if;
    -- Counted per document, from the document's own fields: chunks mirror them, so a
    -- value counted here is one a filter on it matches inside hybrid_search.
    return query
    with matching as (
        select s.slug, s.kind, s.attribution, s.verified::text as verified,
               (d.deprecated or s.deprecated)::text as deprecated,
               d.content_type, d.language, d.package
        from quarry.documents d
        join quarry.filtered_source_ids(facet_values.filters) allowed on allowed.id = d.source_id
        join quarry.sources s on s.id = d.source_id
        where quarry.chunk_allowed(facet_values.filters, d.content_type, d.language, d.package,
                                   d.deprecated or s.deprecated)
    ),
    keyed as (
        select k.key,
               case k.key
                   when 'source_slug' then m.slug
                   when 'kind' then m.kind
                   when 'attribution' then m.attribution
                   when 'verified' then m.verified
                   when 'deprecated' then m.deprecated
                   when 'content_type' then m.content_type
                   when 'language' then m.language
                   when 'package' then m.package
               end as value
        from matching m
        cross join unnest(case when facet_values.facet is null then known
                               else array[facet_values.facet] end) as k (key)
    ),
    counted as (
        select keyed.key, keyed.value, count(*) as documents
        from keyed
        where keyed.value is not null
          and (facet_values.prefix is null or starts_with(lower(keyed.value), lower(facet_values.prefix)))
        group by keyed.key, keyed.value
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
'Values of one facet (null: every facet) with document counts, under a filters object and an optional case-insensitive prefix; the top lim per facet plus how many values exist.';
