-- Facet filters: {"<facet>": {"any_of": [...], "none_of": [...]}, ...}; keys ANDed,
-- any_of values ORed, none_of values excluded. Validated by the caller (closed schema);
-- these functions only evaluate.

create or replace function quarry.facet_allows(filters jsonb, facet text, facet_value text)
returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    select (filters -> facet -> 'any_of' is null
            or facet_value = any (array(select jsonb_array_elements_text(filters -> facet -> 'any_of'))))
       and (filters -> facet -> 'none_of' is null or facet_value is null
            or not facet_value = any (array(select jsonb_array_elements_text(filters -> facet -> 'none_of'))))
$$;

comment on function quarry.facet_allows(jsonb, text, text) is
'Whether a facet value passes the any_of / none_of rule for that facet in a filters object (no rule: true).';

create or replace function quarry.filtered_source_ids(filters jsonb)
returns table (id bigint, deprecated boolean)
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    select s.id, s.deprecated
    from quarry.sources s
    where quarry.facet_allows(filters, 'source_slug', s.slug)
      and quarry.facet_allows(filters, 'kind', s.kind)
      and quarry.facet_allows(filters, 'attribution', s.attribution)
      and quarry.facet_allows(filters, 'verified', s.verified::text)
$$;

comment on function quarry.filtered_source_ids(jsonb) is
'Sources passing the source-level facets of a filters object (source_slug, kind, attribution, verified).';

create or replace function quarry.chunk_allowed(
    filters jsonb, content_type text, language text, package text, deprecated boolean
) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    select filters is null or (
        quarry.facet_allows(filters, 'content_type', content_type)
        and quarry.facet_allows(filters, 'language', language)
        and quarry.facet_allows(filters, 'package', package)
        and quarry.facet_allows(filters, 'deprecated', deprecated::text))
$$;

comment on function quarry.chunk_allowed(jsonb, text, text, text, boolean) is
'Whether a chunk passes the chunk-level facets (content_type, language, package, deprecated of document or source).';

create or replace function quarry.has_chunk_rules(filters jsonb)
returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- source-level facets are settled once per search (quarry.filtered_source_ids); only
    -- the others need a per-chunk check
    select coalesce(filters - array['source_slug', 'kind', 'attribution', 'verified'] <> '{}'::jsonb, false)
$$;

comment on function quarry.has_chunk_rules(jsonb) is
'Whether a filters object has rules a chunk must be checked against (beyond its source''s facets).';
