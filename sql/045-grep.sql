-- Exact and regular-expression search over stored chunk text, for quarry.grep (engine/retrieval/grep.py).
-- Chunk content is the document's own bytes for text formats (code, Markdown, reST, plain
-- text), so a chunk's start_line plus a line's place in it is the line in the file; for HTML it
-- is the line in the page's extracted text. The embedded server has no pg_trgm, so there is
-- no index to use: the caller scans documents in order, a batch per statement, and stops at
-- its time budget with a cursor.

create or replace function quarry.grep_documents(
    filters jsonb default null,
    after_source text default null,
    after_path text default null,
    batch int default 200
) returns table (document_id uuid, source_slug text, path text)
language sql stable
set search_path = quarry, pg_catalog
as $$
    -- The next documents passing the filters in (source, path) order, the cursor's own
    -- document first (its later lines are still to be read). Version rules are resolved once.
    with rules as materialized (
        select k.*, quarry.resolve_version_filters(filters) as resolved from quarry.chunk_rule_kinds(filters) k
    )
    select d.id, s.slug, d.path
    from rules
    cross join quarry.documents d
    join quarry.sources s on s.id = d.source_id
    join quarry.filtered_source_ids(filters) allowed on allowed.id = s.id
    where (after_source is null or (s.slug, d.path) >= (after_source, after_path))
      and (not rules.facets
           or quarry.chunk_allowed(filters, d.content_type, d.language, d.package, d.deprecated or s.deprecated))
      and (not rules.versions or quarry.version_allows(rules.resolved, d.id))
      and (not rules.locations or quarry.document_location_allows(filters, d.id, d.path))
    order by s.slug, d.path
    limit batch
$$;

comment on function quarry.grep_documents(jsonb, text, text, int) is
'The next batch of documents quarry.grep_lines reads, in (source slug, path) order from a cursor, passing the filters.';

create or replace function quarry.grep_lines(
    pattern text,
    document_ids uuid[],
    regex boolean default false,
    case_sensitive boolean default true,
    filters jsonb default null,
    skip_document uuid default null,
    skip_through_line int default 0,
    context_lines int default 2
) returns table (
    document_id uuid,
    chunk_id uuid,
    line int,
    line_text text,
    match_start int,
    match_end int,
    before text[],
    after text[]
)
language sql stable
set search_path = quarry, pg_catalog
as $$
    with matching_chunks as (
        select c.id, c.document_id, c.start_line, string_to_array(c.content, E'\n') as lines
        from quarry.chunks c
        where c.document_id = any (document_ids)
          -- symbol and kind are a chunk's: a line counts when its own chunk passes them
          and (not (filters ? 'symbol' or filters ? 'chunk_kind')
               or quarry.chunk_location_allows(filters, c.document_id, c.symbol_path, c.is_code, c.content_type))
          and case when regex and case_sensitive then c.content ~ pattern
                   when regex then c.content ~* pattern
                   when case_sensitive then strpos(c.content, pattern) > 0
                   else strpos(lower(c.content), lower(pattern)) > 0 end
    ),
    matching_lines as (
        select distinct on (m.document_id, m.start_line + l.n - 1)
               m.document_id, m.id as chunk_id, (m.start_line + l.n - 1)::int as line, l.text,
               case when regex then regexp_instr(l.text, pattern, 1, 1, 0, case when case_sensitive then '' else 'i' end)
                    when case_sensitive then strpos(l.text, pattern)
                    else strpos(lower(l.text), lower(pattern)) end as start_at,
               m.lines, l.n
        from matching_chunks m
        cross join lateral unnest(m.lines) with ordinality l(text, n)
        where case when regex and case_sensitive then l.text ~ pattern
                   when regex then l.text ~* pattern
                   when case_sensitive then strpos(l.text, pattern) > 0
                   else strpos(lower(l.text), lower(pattern)) > 0 end
          and (m.document_id is distinct from skip_document or m.start_line + l.n - 1 > skip_through_line)
        order by m.document_id, m.start_line + l.n - 1, m.id
    )
    select m.document_id, m.chunk_id, m.line, m.text,
           (m.start_at - 1)::int,
           (case when regex
                 then regexp_instr(m.text, pattern, 1, 1, 1, case when case_sensitive then '' else 'i' end)
                 else m.start_at + length(pattern) end - 1)::int,
           m.lines[greatest(1, m.n - context_lines)::int:(m.n - 1)::int],
           m.lines[(m.n + 1)::int:(m.n + context_lines)::int]
    from matching_lines m
$$;

comment on function quarry.grep_lines(text, uuid[], boolean, boolean, jsonb, uuid, int, int) is
'Lines of the given documents matching a substring (or, with regex, a Postgres regular expression), case-sensitive or not: the line number in the document, its text, the match as 0-based [start, end) character offsets, and up to context_lines lines either side within the chunk. Lines up to skip_through_line of skip_document are left out (a cursor''s position).';
