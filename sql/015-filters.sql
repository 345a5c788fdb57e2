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
    -- a rule is checked only where the filters have one: each check is a function call per source
    -- (not inlined), 6.6 ms over 200 sources for four checks that all pass
    select s.id, s.deprecated
    from quarry.sources s
    where (not coalesce(filters ? 'source_slug', false) or quarry.facet_allows(filters, 'source_slug', s.slug))
      and (not coalesce(filters ? 'kind', false) or quarry.facet_allows(filters, 'kind', s.kind))
      and (not coalesce(filters ? 'attribution', false) or quarry.facet_allows(filters, 'attribution', s.attribution))
      and (not coalesce(filters ? 'verified', false) or quarry.facet_allows(filters, 'verified', s.verified::text))
$$;

comment on function quarry.filtered_source_ids(jsonb) is
'Sources passing the source-level facets of a filters object (source_slug, kind, attribution, verified).';

create or replace function quarry.chunk_allowed(
    filters jsonb, content_type text, language text, package text, deprecated boolean
) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- a facet without a rule passes, and its check would cost a call: checked only where the filters have one
    select filters is null or (
        (not filters ? 'content_type' or quarry.facet_allows(filters, 'content_type', content_type))
        and (not filters ? 'language' or quarry.facet_allows(filters, 'language', language))
        and (not filters ? 'package' or quarry.facet_allows(filters, 'package', package))
        and (not filters ? 'deprecated' or quarry.facet_allows(filters, 'deprecated', deprecated::text)))
$$;

comment on function quarry.chunk_allowed(jsonb, text, text, text, boolean) is
'Whether a chunk passes the chunk-level facets (content_type, language, package, deprecated of document or source).';

create or replace function quarry.allowed_facet_values(filters jsonb, source_ids bigint[]) returns setof jsonb
language sql stable
set search_path = pg_catalog
as $$
    -- Once per combination of facet values the sources' documents have, not once per document: a
    -- caller keeps the documents whose jsonb_build_array(content_type, language, package,
    -- deprecated of document or source) is among these keys.
    -- The combinations come from quarry.facet_combinations (kept with the documents by the trigger that
    -- counts facets), not from the documents: 153 ms over 100k documents against a few hundred rows.
    select value_set.key
    from (
        select value_set.*,  -- the key built once per distinct values, not per source's row
               jsonb_build_array(value_set.content_type, value_set.language, value_set.package,
                                 value_set.deprecated) as key
        from (
            select distinct c.content_type, c.language, c.package, c.deprecated or s.deprecated as deprecated
            from quarry.sources s join quarry.facet_combinations c on c.source_id = s.id
            where s.id = any (source_ids)
        ) value_set
        offset 0  -- keeps the check below out of the scan
    ) value_set
    where quarry.chunk_allowed(filters, value_set.content_type, value_set.language, value_set.package,
                               value_set.deprecated)
$$;

comment on function quarry.allowed_facet_values(jsonb, bigint[]) is
'The combinations of document facet values (jsonb_build_array(content_type, language, package, deprecated)) in the given sources that pass the chunk-level facets of a filters object (quarry.chunk_allowed), each checked once.';

create or replace function quarry.chunk_rule_kinds(filters jsonb, out facets boolean, out versions boolean,
                                                   out locations boolean)
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- Source-level facets are settled once per search (quarry.filtered_source_ids). Each per-chunk check
    -- passes every chunk when the filters have none of its rules, yet costs a function call per posting,
    -- candidate or document: callers skip the checks whose kind is false.
    select coalesce(filters ?| array['deprecated', 'content_type', 'language', 'package'], false),
           coalesce(filters ?| array['language_target', 'sdk_dependency'], false),
           coalesce(filters ?| array['path', 'symbol', 'chunk_kind'], false)
$$;

comment on function quarry.chunk_rule_kinds(jsonb) is
'Which per-chunk checks a filters object needs: facets (quarry.chunk_allowed), versions (quarry.version_allows), locations (quarry.chunk_location_allows).';

create or replace function quarry.filter_scope(filters jsonb, chunk_limit int) returns uuid[]
language plpgsql stable parallel safe  -- plpgsql: the rule check it calls is created in a later file
set search_path = quarry, pg_catalog
as $$
begin
    -- A filter that leaves sources out (one library of many) lets few of a long postings list through, and
    -- checking each posting by looking up its chunk costs about 5 us. Listed once, each source's chunks by
    -- index and each chunk's rules checked once, the keyword leg checks against this list instead (hashed):
    -- docs/benchmarks-log.md § Keyword searches within a few sources. The vector leg checks a few hundred
    -- HNSW candidates, fewer than building the list costs: measured there, it did not pay.
    return (
        with allowed_sources as materialized (
            select * from quarry.filtered_source_ids(filters) where filters is not null
        ),
        leaves_sources_out as materialized (
            select filters is not null
                   and exists (select from quarry.sources s where s.id not in (select a.id from allowed_sources a))
                   as yes
        ),
        source_chunks as materialized (
            select c.id, c.content_type, c.language, c.package, c.deprecated or s.deprecated as deprecated,
                   c.document_id, c.symbol_path, c.is_code
            from allowed_sources s
            -- each source's chunks by index: as a join, a merge join read the index from its start
            cross join lateral (select * from quarry.chunks c where c.source_id = s.id) c
            where (select yes from leaves_sources_out)
            limit chunk_limit + 1
        )
        select case when (select yes from leaves_sources_out) and (select count(*) from source_chunks) <= chunk_limit
                    then coalesce(array_agg(sc.id), '{}') end
        from source_chunks sc
        cross join quarry.chunk_rule_kinds(filters) rules
        where quarry.chunk_passes_rules(filters, rules.facets, rules.versions, rules.locations, sc.content_type,
                                        sc.language, sc.package, sc.deprecated, sc.document_id, sc.symbol_path,
                                        sc.is_code)
    );
end
$$;

comment on function quarry.filter_scope(jsonb, int) is
'The chunks passing a (resolved) filters object that leaves sources out, when those sources hold at most chunk_limit chunks; null when the filter leaves no source out or they hold more. Searches check candidates against it instead of looking each one''s chunk up.';

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

-- Chunk kinds: {"chunk_kind": {"any_of": ["definition"]}}. Every chunk has exactly one kind, from its own
-- columns and its document's path: prose (not code), example (code in a document that is not a source file:
-- a fenced or <pre> block, code pasted in text), definition (a source file's code inside a named definition:
-- function, class, method, SQL function, make rule) and module (a source file's code outside any definition:
-- imports, constants, top-level statements). The code parsers give the code outside definitions the
-- file's own dotted path (engine.ingest.parsers.code.module_path), which is how the last two differ.

create or replace function quarry.file_module(path text) returns text
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- engine.ingest.parsers.code.module_path: the path dotted, its extension dropped (and the .d of
    -- a TypeScript declaration file), a package's __init__.py and a Rust mod.rs named by their folder
    select replace(case when path ~ '/(__init__\.pyi?|mod\.rs)$'
                        then regexp_replace(path, '/(__init__\.pyi?|mod\.rs)$', '')
                        else regexp_replace(path, '([^/])(\.d\.[mc]?ts|\.[^./]*)$', '\1') end,
                   '/', '.')
$$;

comment on function quarry.file_module(text) is
'The dotted module path the code parsers give a file''s code outside definitions (engine.ingest.parsers.code.module_path).';

create or replace function quarry.chunk_kind_in(is_code boolean, content_type text, symbol_path text, file_module text)
returns text
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- module: the symbol is the file's module, compared by whole trailing segments, since a Java
    -- file's module is its package and class, which its folders spell from some root on
    -- (src/main/java/com/x/Client.java is com.x.Client, and so is the body of that class)
    select case when not is_code then 'prose'
                when content_type is distinct from 'code' then 'example'
                when symbol_path is null
                     or right('.' || file_module, length(symbol_path) + 1) = '.' || symbol_path then 'module'
                else 'definition' end
$$;

comment on function quarry.chunk_kind_in(boolean, text, text, text) is
'quarry.chunk_kind with its document''s module (quarry.file_module) already known: for reading many chunks of one document.';

create or replace function quarry.chunk_kind(is_code boolean, content_type text, symbol_path text, path text)
returns text
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    select quarry.chunk_kind_in(is_code, content_type, symbol_path, quarry.file_module(path))
$$;

comment on function quarry.chunk_kind(boolean, text, text, text) is
'A chunk''s kind from its is_code, content_type and symbol_path and its document''s path: definition, module (a source file''s code outside definitions), example (code in documentation) or prose.';

create or replace function quarry.chunk_location_allows(
    filters jsonb, document_id uuid, symbol_path text, is_code boolean, content_type text
) returns boolean
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- the document is read only for a rule that needs its path (a path glob, or a kind)
    select (filters is null or not (filters ? 'path' or filters ? 'chunk_kind')
            or (select quarry.path_allows(filters, d.path)
                       and quarry.facet_allows(filters, 'chunk_kind', quarry.chunk_kind(
                           chunk_location_allows.is_code, chunk_location_allows.content_type,
                           chunk_location_allows.symbol_path, d.path))
                from quarry.documents d where d.id = chunk_location_allows.document_id))
       and (filters is null or not filters ? 'symbol' or quarry.symbol_allows(filters, symbol_path))
$$;

comment on function quarry.chunk_location_allows(jsonb, uuid, text, boolean, text) is
'Whether a chunk passes the path (its document''s), symbol and chunk_kind rules of a filters object.';

create or replace function quarry.document_location_allows(filters jsonb, document_id uuid, path text)
returns boolean
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    -- null filters allow every document, one without chunks (an empty file) too
    select (filters is null or not filters ? 'path' or quarry.path_allows(filters, path))
       and (filters is null or not (filters ? 'symbol' or filters ? 'chunk_kind')
            or exists (select 1 from quarry.chunks c
                       where c.document_id = document_location_allows.document_id
                         and quarry.symbol_allows(filters, c.symbol_path)
                         and quarry.facet_allows(filters, 'chunk_kind',
                                                 quarry.chunk_kind(c.is_code, c.content_type, c.symbol_path,
                                                                   document_location_allows.path))))
$$;

comment on function quarry.document_location_allows(jsonb, uuid, text) is
'Whether a document passes the path rule and has a chunk passing the symbol and chunk_kind rules of a filters object.';
