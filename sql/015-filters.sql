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

-- Location filters: {"path": {"any_of": ["src/**/*.py"], "none_of": ["**/tests/**"]},
-- "symbol": {"any_of": ["Client.connect"]}}. Unlike facets they are patterns, not values.

create or replace function quarry.glob_regex(glob text) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- gitignore-style: * and ? stay within a path segment, ** crosses segments, and a glob
    -- without a slash names a file at any depth (*.py). Every other character is literal.
    select '^' || case when strpos(glob, '/') = 0 then '(.*/)?' else '' end
           || replace(replace(replace(replace(replace(replace(
                  regexp_replace(glob, '([.+^$(){}|\[\]\\])', '\\\1', 'g'),
                  '**/', chr(1)), '**', chr(2)), '*', '[^/]*'), '?', '[^/]'),
                  chr(1), '(.*/)?'), chr(2), '.*')
           || '$'
$$;

comment on function quarry.glob_regex(text) is
'A path glob as an anchored regular expression: * and ? within a segment, ** across segments, a glob without / matching a file name at any depth.';

create or replace function quarry.path_allows(filters jsonb, path text) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    select (filters -> 'path' -> 'any_of' is null
            or exists (select 1 from jsonb_array_elements_text(filters -> 'path' -> 'any_of') g
                       where path ~ quarry.glob_regex(g)))
       and (filters -> 'path' -> 'none_of' is null
            or not exists (select 1 from jsonb_array_elements_text(filters -> 'path' -> 'none_of') g
                           where path ~ quarry.glob_regex(g)))
$$;

comment on function quarry.path_allows(jsonb, text) is
'Whether a document path passes the path rule of a filters object (globs, see quarry.glob_regex; no rule: true).';

create or replace function quarry.symbol_allows(filters jsonb, symbol_path text) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- a symbol names whole dotted segments: Client.connect matches pkg.client.Client.connect
    -- and (a scope) its nested pkg.client.Client.connect.retry, not Client.connected
    select (filters -> 'symbol' -> 'any_of' is null
            or (symbol_path is not null
                and exists (select 1 from jsonb_array_elements_text(filters -> 'symbol' -> 'any_of') wanted
                            where strpos('.' || symbol_path || '.', '.' || wanted || '.') > 0)))
       and (filters -> 'symbol' -> 'none_of' is null or symbol_path is null
            or not exists (select 1 from jsonb_array_elements_text(filters -> 'symbol' -> 'none_of') unwanted
                           where strpos('.' || symbol_path || '.', '.' || unwanted || '.') > 0))
$$;

comment on function quarry.symbol_allows(jsonb, text) is
'Whether a chunk''s symbol_path passes the symbol rule of a filters object: a rule''s symbol matches whole dotted segments of the path (no rule: true; a chunk without a symbol fails any_of).';

create or replace function quarry.chunk_location_allows(filters jsonb, document_id uuid, symbol_path text)
returns boolean
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    select (not filters ? 'path'
            or quarry.path_allows(filters, (select d.path from quarry.documents d where d.id = document_id)))
       and (not filters ? 'symbol' or quarry.symbol_allows(filters, symbol_path))
$$;

comment on function quarry.chunk_location_allows(jsonb, uuid, text) is
'Whether a chunk passes the path (its document''s) and symbol rules of a filters object.';

create or replace function quarry.document_location_allows(filters jsonb, document_id uuid, path text)
returns boolean
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    select (not filters ? 'path' or quarry.path_allows(filters, path))
       and (not filters ? 'symbol'
            or exists (select 1 from quarry.chunks c
                       where c.document_id = document_location_allows.document_id
                         and quarry.symbol_allows(filters, c.symbol_path)))
$$;

comment on function quarry.document_location_allows(jsonb, uuid, text) is
'Whether a document passes the path rule and has a chunk passing the symbol rule of a filters object.';
