-- Links and imports between documents (quarry.relations, alembic 0010): resolving an
-- edge's candidate paths to the document that exists now, the edges around one
-- document, and a bounded walk over them.
--
-- Edges are resolved here, at query time, never stored as document ids: a target
-- ingested after the document that names it, re-ingested under a new id, renamed or
-- deleted is answered from the current documents with no write to the edges.

create or replace function quarry.relation_target(
    source_id bigint,
    from_path text,
    candidates text[],
    anchored boolean default true
) returns table (document_id uuid, path text)
language sql stable parallel safe
-- No `set search_path` here, unlike the other functions: every name is qualified, and a
-- SET clause would stop the planner from inlining this into quarry.relation_edges,
-- which resolves thousands of edges per walk.
as $$
    -- anchored: candidates are paths from the source root, the first that exists wins.
    -- Not anchored: each may also sit under a directory enclosing from_path; the root
    -- is tried first, then ever deeper directories (src layouts, nested projects).
    -- One probe of the (source_id, path) index with every full path, best first.
    select d.id, d.path
    from (
        select case when relation_target.anchored then relation_target.candidates else array(
            select r.prefix || c.candidate
            from pg_catalog.unnest(relation_target.candidates) with ordinality as c (candidate, position)
            cross join lateral (
                select '' as prefix, 0 as depth
                union all
                select pg_catalog.array_to_string(p.parts[1:n], '/') || '/', n
                from (select pg_catalog.string_to_array(relation_target.from_path, '/') as parts) p,
                     pg_catalog.generate_series(1, pg_catalog.cardinality(p.parts) - 1) n
            ) r
            order by r.depth, c.position) end as paths
    ) s
    join quarry.documents d on d.source_id = relation_target.source_id and d.path = any(s.paths)
    order by pg_catalog.array_position(s.paths, d.path)
    limit 1
$$;

comment on function quarry.relation_target(bigint, text, text[], boolean) is
'The document an edge names now: the first candidate path that exists in the source (anchored), or under the nearest-to-root enclosing directory of from_path (not anchored); no row when none exists.';

create or replace function quarry.relation_edges(
    document_ids uuid[],
    relation text default null,
    direction text default 'out'
) returns table (
    document_id uuid,  -- which of document_ids
    reached_id uuid,   -- the document at the other end; null for an unresolved or external target
    relation text,     -- links_to | imports | external
    target text,       -- as written in the referring document
    line int,          -- where it is written, in the referring document
    outgoing boolean,  -- true: document_id refers to reached_id; false: reached_id refers to document_id
    edge_key text,     -- what identifies the other end: its id, or relation and target when unresolved
    sort_key text      -- the other end's path, or the target when unresolved
)
language sql stable
set search_path = quarry, pg_catalog
as $$
    select d.id, t.document_id, r.relation, r.target, r.line, true,
           coalesce(t.document_id::text, r.relation || ' ' || r.target), coalesce(t.path, r.target)
    from quarry.documents d
    join quarry.relations r on r.document_id = d.id
    left join lateral quarry.relation_target(r.source_id, d.path, r.candidates, r.anchored) t on true
    where d.id = any(relation_edges.document_ids)
      and relation_edges.direction in ('out', 'both')
      and (relation_edges.relation is null or r.relation = relation_edges.relation)
      and t.document_id is distinct from d.id
    union all
    -- Incoming: the edges whose candidates hold one of the documents' paths, or a suffix
    -- of one (edges that are not anchored), in one GIN index scan; then each is resolved
    -- and kept when it resolves to one of the documents.
    select t.document_id, referrer.id, r.relation, r.target, r.line, false, referrer.id::text, referrer.path
    from quarry.relations r
    join quarry.documents referrer on referrer.id = r.document_id
    cross join lateral quarry.relation_target(r.source_id, referrer.path, r.candidates, r.anchored) t
    where relation_edges.direction in ('in', 'both')
      and r.candidates && (
          select array_agg(array_to_string(p.parts[n:], '/'))
          from quarry.documents d
          cross join lateral (select string_to_array(d.path, '/') as parts) p
          cross join lateral generate_series(1, cardinality(p.parts)) n
          where d.id = any(relation_edges.document_ids))
      and (relation_edges.relation is null or r.relation = relation_edges.relation)
      and t.document_id = any(relation_edges.document_ids)
      and referrer.id <> t.document_id
$$;

comment on function quarry.relation_edges(uuid[], text, text) is
'The edges of some documents, resolved: outgoing (direction out), incoming (in) or both, optionally of one relation (links_to, imports, external).';

create or replace function quarry.neighbors(
    id uuid,
    relation text default null,
    depth int default 1,
    budget int default 100,
    direction text default 'out'
) returns table (
    level int,          -- hops from the start; 0 is the start document itself
    document_id uuid,   -- null for an unresolved or external target (a leaf)
    path text,
    title text,
    via text,           -- relation of the last hop
    target text,        -- the last hop's target as written
    hops jsonb,         -- the path taken: [{"from", "relation", "to", "target", "line"}]
    frontier boolean,   -- its neighbours were not all returned: walk on from it
    truncated boolean,  -- the budget cut the walk (the same on every row)
    reason text         -- why, when truncated
)
language plpgsql stable
set search_path = quarry, pg_catalog
as $$
#variable_conflict use_column
declare
    start_id uuid;
begin
    if neighbors.depth is null or neighbors.depth not between 1 and 3 then
        raise exception 'depth must be between 1 and 3' using errcode = 'invalid_parameter_value';
    end if;
    if neighbors.budget is null or neighbors.budget not between 1 and 1000 then
        raise exception 'budget must be between 1 and 1000' using errcode = 'invalid_parameter_value';
    end if;
    if neighbors.direction is null or neighbors.direction not in ('out', 'in', 'both') then
        raise exception 'direction must be out, in or both' using errcode = 'invalid_parameter_value';
    end if;
    if neighbors.relation is not null and neighbors.relation not in ('links_to', 'imports', 'external') then
        raise exception 'relation must be links_to, imports or external' using errcode = 'invalid_parameter_value';
    end if;
    -- a chunk id means its document
    select coalesce((select d.id from quarry.documents d where d.id = neighbors.id),
                    (select c.document_id from quarry.chunks c where c.id = neighbors.id))
    into start_id;
    if start_id is null then
        raise exception 'no document or chunk with id %', neighbors.id using errcode = 'no_data_found';
    end if;

    return query
    -- Breadth first, one row per level: each level holds what it reached (its own
    -- rows, in order), and carries everything seen so far, so no document is reached
    -- twice and each level's work is bounded by the budget left.
    with recursive walk (level, reached, seen, seen_targets, taken, cut, dropped, dropped_from) as (
        select 0, jsonb_build_array(jsonb_build_object('document_id', start_id, 'hops', '[]'::jsonb)),
               array[start_id], '{}'::text[], 0, false, 0, '{}'::uuid[]
        union all
        select w.level + 1, step.reached, w.seen || step.ids, w.seen_targets || step.targets,
               w.taken + step.kept, step.cut, step.dropped, step.dropped_from
        from walk w
        cross join lateral (
            select coalesce(jsonb_agg(c.node order by c.rank) filter (where c.kept), '[]'::jsonb) as reached,
                   coalesce(array_agg(c.reached_id) filter (where c.kept and c.reached_id is not null),
                            '{}') as ids,
                   coalesce(array_agg(c.edge_key) filter (where c.kept and c.reached_id is null), '{}') as targets,
                   (count(*) filter (where c.kept))::int as kept,
                   bool_or(not c.kept) is true as cut,
                   (count(*) filter (where not c.kept))::int as dropped,
                   coalesce(array_agg(distinct c.via) filter (where not c.kept), '{}') as dropped_from
            from (
                select u.*, u.rank <= neighbors.budget - w.taken as kept
                from (
                    -- resolved documents first: the budget drops unresolved leaves before documents
                    select e.*, row_number() over (order by e.reached_id is null, e.sort_key, e.edge_key) as rank
                    from (
                        select distinct on (e.edge_key)
                               e.reached_id, e.edge_key, e.sort_key, n.via,
                               jsonb_build_object(
                                   'document_id', e.reached_id, 'relation', e.relation, 'target', e.target,
                                   'hops', n.hops || jsonb_build_array(jsonb_build_object(
                                       'from', case when e.outgoing then n.via else e.reached_id end,
                                       'relation', e.relation,
                                       'to', case when e.outgoing then e.reached_id else n.via end,
                                       'target', e.target, 'line', e.line))) as node
                        from (
                            select (x.node ->> 'document_id')::uuid as via, x.node -> 'hops' as hops, x.position
                            from jsonb_array_elements(w.reached) with ordinality as x (node, position)
                            where x.node ->> 'document_id' is not null
                        ) n
                        join quarry.relation_edges(
                            array(select (x.node ->> 'document_id')::uuid
                                  from jsonb_array_elements(w.reached) as x (node)
                                  where x.node ->> 'document_id' is not null),
                            neighbors.relation, neighbors.direction) e on e.document_id = n.via
                        where case when e.reached_id is null then e.edge_key <> all(w.seen_targets)
                                   else e.reached_id <> all(w.seen) end
                        order by e.edge_key, n.position, e.line
                    ) e
                ) u
            ) c
        ) step
        where w.level < neighbors.depth and not w.cut and jsonb_array_length(w.reached) > 0
    ),
    ending as (
        select w.level, w.dropped, w.dropped_from from walk w where w.cut
    )
    select w.level, (x.node ->> 'document_id')::uuid, d.path, d.title, x.node ->> 'relation',
           x.node ->> 'target', x.node -> 'hops',
           coalesce(d.id = any(e.dropped_from)
                    or (w.level = e.level and e.level < neighbors.depth and d.id is not null), false),
           e.level is not null,
           case when e.level is not null then format(
               'budget of %s results reached at depth %s: %s more neighbours there (and any beyond) were not '
               'returned; walk on from the frontier documents', neighbors.budget, e.level, e.dropped) end
    from walk w
    cross join lateral jsonb_array_elements(w.reached) with ordinality as x (node, position)
    left join quarry.documents d on d.id = (x.node ->> 'document_id')::uuid
    left join ending e on true
    order by w.level, x.position;
end
$$;

comment on function quarry.neighbors(uuid, text, int, int, text) is
'Documents reachable from a document (or a chunk''s document) over links and imports, breadth first up to depth 1-3, with the path taken; at most budget results (truncated, reason and frontier say where it stopped).';
