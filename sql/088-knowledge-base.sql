-- The knowledge base behind the `kb` tool profile (alembic 0019; engine.kb). Every write goes
-- through a definer function here that checks the presented API key (quarry.require_admin_caller):
-- the search server's login reads these tables and writes nothing itself. Requests arrive
-- validated against the catalogue by engine.kb (types, required properties, endpoint types);
-- these functions resolve identities and references and write each request in one transaction.
-- Failures raise: no_data_found (NOT_FOUND), unique_violation (CONFLICT), invalid_parameter_value
-- (INVALID), each message starting with the item it is about ("nodes[2]: ...").

create or replace function quarry.kb_merge(base jsonb, patch jsonb) returns jsonb
language plpgsql immutable parallel safe
set search_path = pg_catalog
as $$
declare
    key text;
    value jsonb;
    merged jsonb := base;
begin
    if jsonb_typeof(base) is distinct from 'object' or jsonb_typeof(patch) is distinct from 'object' then
        return patch;
    end if;
    for key, value in select e.key, e.value from jsonb_each(patch) e loop
        merged := jsonb_set(merged, array[key],
                            case when merged ? key then quarry.kb_merge(merged -> key, value) else value end);
    end loop;
    return merged;
end
$$;

comment on function quarry.kb_merge(jsonb, jsonb) is
'patch merged into base: objects merge key by key, recursively; arrays and scalars replace.';

create or replace function quarry.kb_search_text(label text, properties jsonb) returns text
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    select concat_ws(' ', label, (select string_agg(v #>> '{}', ' ')
                                  from jsonb_path_query(properties, 'strict $.**') v
                                  where jsonb_typeof(v) in ('string', 'number', 'boolean')))
$$;

comment on function quarry.kb_search_text(text, jsonb) is
'What kb_search matches a record by: its label and every scalar property value, space separated.';

create or replace function quarry.kb_link_evidence(linked_record uuid, item jsonb, address text) returns void
language plpgsql volatile
set search_path = pg_catalog
as $$
declare
    evidence text;
begin
    for evidence in select jsonb_array_elements_text(coalesce(item -> 'evidence_add', '[]')) loop
        if not exists (select 1 from quarry.kb_evidence e where e.id = evidence) then
            raise exception '%: no evidence %', address, evidence using errcode = 'no_data_found';
        end if;
        insert into quarry.kb_evidence_links (record_id, evidence_id) values (linked_record, evidence)
        on conflict do nothing;
    end loop;
    delete from quarry.kb_evidence_links l
    where l.record_id = linked_record
      and l.evidence_id in (select jsonb_array_elements_text(coalesce(item -> 'evidence_remove', '[]')));
end
$$;

comment on function quarry.kb_link_evidence(uuid, jsonb, text) is
'Apply a write item''s evidence_add / evidence_remove to the record''s links (kb_write''s step; address names '
'the item in errors).';

create or replace function quarry.kb_patched(stored jsonb, item jsonb) returns jsonb
language plpgsql immutable
set search_path = pg_catalog
as $$
declare
    merged jsonb := stored;
    removed jsonb;
begin
    if item ? 'properties' then
        merged := quarry.kb_merge(merged, item -> 'properties');
    end if;
    for removed in select jsonb_array_elements(coalesce(item -> 'remove_properties', '[]')) loop
        merged := merged #- array(select jsonb_array_elements_text(removed));
    end loop;
    return merged;
end
$$;

comment on function quarry.kb_patched(jsonb, jsonb) is
'The properties after a write item: its properties merged in (kb_merge), then its remove_properties paths '
'(RFC 6901 pointers as text arrays) removed.';

create or replace function quarry.kb_rewrite(record_id uuid, item jsonb, merged jsonb, observed timestamptz)
returns void
language sql volatile
set search_path = pg_catalog
as $$
    update quarry.kb_records r
    set properties = merged,
        label = case when item ? 'label' then item ->> 'label' else r.label end,
        search_text = quarry.kb_search_text(case when item ? 'label' then item ->> 'label' else r.label end, merged),
        first_seen = least(r.first_seen, observed),
        last_seen = greatest(r.last_seen, observed),
        written_at = now()
    where r.id = record_id
$$;

comment on function quarry.kb_rewrite(uuid, jsonb, jsonb, timestamptz) is
'Store a stored record''s patched properties (merged), its label when the write item sets one, and the '
'observation time (first_seen and last_seen only widen): kb_write''s update of a node or relation.';

create or replace function quarry.kb_write(api_key text, request jsonb, observed timestamptz) returns jsonb
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    item jsonb;
    address text;
    item_number int := 0;
    written uuid[] := '{}';
    acknowledged jsonb := '[]';
    relations_acknowledged jsonb := '[]';
    stored quarry.kb_records;
    endpoint_id uuid;
    created boolean;
    merged jsonb;
    identity_key text;
    identity_property text;
    endpoint jsonb;
    endpoints uuid[];
    endpoint_type text;
    side text;
begin
    perform quarry.require_admin_caller(api_key, 'writing to the knowledge base');
    for item in select jsonb_array_elements(coalesce(request -> 'nodes', '[]')) loop
        address := format('nodes[%s]', item_number);
        created := false;
        if item ? 'id' then
            select * into stored from quarry.kb_records r where r.id = (item ->> 'id')::uuid for update;
            if not found or stored.kind <> 'node' then
                raise exception '%: no node %', address, item ->> 'id' using errcode = 'no_data_found';
            end if;
        else
            identity_key := jsonb_build_object(item ->> 'identity_property',
                                               item -> 'properties' -> (item ->> 'identity_property'))::text;
            select * into stored from quarry.kb_records r
            where r.kind = 'node' and r.type = item ->> 'type' and r.identity = identity_key for update;
            if not found then
                insert into quarry.kb_records (id, kind, type, identity, label, properties, search_text,
                                               first_seen, last_seen)
                values (gen_random_uuid(), 'node', item ->> 'type', identity_key, item ->> 'label',
                        item -> 'properties', quarry.kb_search_text(item ->> 'label', item -> 'properties'),
                        observed, observed)
                returning * into stored;
                created := true;
            end if;
        end if;
        if not created then
            merged := quarry.kb_patched(stored.properties, item);
            identity_property := (select k from jsonb_object_keys(stored.identity::jsonb) k limit 1);
            if jsonb_build_object(identity_property, merged -> identity_property)::text
               is distinct from stored.identity then
                raise exception '%: property % is the node''s identity and cannot change or be removed',
                    address, identity_property using errcode = 'invalid_parameter_value';
            end if;
            perform quarry.kb_rewrite(stored.id, item, merged, observed);
        end if;
        perform quarry.kb_link_evidence(stored.id, item, address);
        written := written || stored.id;
        acknowledged := acknowledged || jsonb_build_object('index', item_number, 'id', stored.id, 'type', stored.type,
                                                           'created', created);
        item_number := item_number + 1;
    end loop;

    item_number := 0;
    for item in select jsonb_array_elements(coalesce(request -> 'relations', '[]')) loop
        address := format('relations[%s]', item_number);
        created := false;
        if item ? 'id' then
            select * into stored from quarry.kb_records r where r.id = (item ->> 'id')::uuid for update;
            if not found or stored.kind <> 'relation' then
                raise exception '%: no relation %', address, item ->> 'id' using errcode = 'no_data_found';
            end if;
        else
            endpoints := '{}';
            foreach side in array array['source', 'target'] loop
                endpoint := item -> (side || '_ref');
                if endpoint ? 'node_index' then
                    if (endpoint ->> 'node_index')::int >= coalesce(array_length(written, 1), 0) then
                        raise exception '%: %_ref.node_index % names no node of this request', address, side,
                            endpoint ->> 'node_index' using errcode = 'invalid_parameter_value';
                    end if;
                    endpoint_id := written[(endpoint ->> 'node_index')::int + 1];
                else
                    endpoint_id := (endpoint ->> 'id')::uuid;
                end if;
                select r.type into endpoint_type from quarry.kb_records r where r.id = endpoint_id and r.kind = 'node';
                if not found then
                    raise exception '%: %_ref: no node %', address, side, endpoint_id using errcode = 'no_data_found';
                end if;
                if not (item -> (side || '_types')) ? endpoint_type then
                    raise exception '%: a % relation''s % cannot be a % node (it takes %)', address, item ->> 'type',
                        side, endpoint_type, item -> (side || '_types') using errcode = 'invalid_parameter_value';
                end if;
                endpoints := endpoints || endpoint_id;
            end loop;
            select * into stored from quarry.kb_records r
            where r.kind = 'relation' and r.type = item ->> 'type' and r.source_record = endpoints[1]
              and r.target_record = endpoints[2] for update;
            if not found then
                insert into quarry.kb_records (id, kind, type, label, properties, source_record, target_record,
                                               search_text, first_seen, last_seen)
                values (gen_random_uuid(), 'relation', item ->> 'type', item ->> 'label',
                        coalesce(item -> 'properties', '{}'), endpoints[1], endpoints[2],
                        quarry.kb_search_text(item ->> 'label', coalesce(item -> 'properties', '{}')),
                        observed, observed)
                returning * into stored;
                created := true;
            end if;
        end if;
        if not created then
            merged := quarry.kb_patched(stored.properties, item);
            perform quarry.kb_rewrite(stored.id, item, merged, observed);
        end if;
        perform quarry.kb_link_evidence(stored.id, item, address);
        relations_acknowledged := relations_acknowledged || jsonb_build_object(
            'index', item_number, 'id', stored.id, 'type', stored.type, 'created', created,
            'source_id', stored.source_record, 'target_id', stored.target_record);
        item_number := item_number + 1;
    end loop;
    return jsonb_build_object('nodes', acknowledged, 'relations', relations_acknowledged);
end
$$;

comment on function quarry.kb_write(text, jsonb, timestamptz) is
'Write kb nodes and relations in one transaction: create (a node matched by its type and identity property is the '
'stored one), patch by id (objects merge, remove_properties drops paths, identity immutable), link evidence. '
'request: {nodes: [...], relations: [...]} as engine.kb.records builds it. Returns the acknowledgements.';

create or replace function quarry.kb_queue_index(new_job_id uuid) returns uuid
language plpgsql volatile
set search_path = pg_catalog
as $$
declare
    pending uuid;
begin
    perform pg_advisory_xact_lock(hashtext('quarry.kb_queue_index'));
    select j.id into pending from quarry.jobs j where j.kind = 'kb_index' and j.status = 'queued';
    if pending is not null then
        return pending;
    end if;
    insert into quarry.jobs (id, kind, source, arguments) values (new_job_id, 'kb_index', 'kb', '{}');
    return new_job_id;
end
$$;

comment on function quarry.kb_queue_index(uuid) is
'The kb_index job waiting, or a new one under new_job_id: asking twice does not queue the work twice.';

create or replace function quarry.kb_store_evidence(
    api_key text, evidence_id text, content bytea, media_type text, encoding text, origin text, indexable boolean,
    new_job_id uuid
) returns jsonb
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    stored quarry.kb_evidence;
    created boolean := false;
    job uuid;
begin
    perform quarry.require_admin_caller(api_key, 'storing evidence');
    insert into quarry.kb_evidence (id, bytes, media_type, encoding, origin, index_state)
    values (evidence_id, content, media_type, encoding, origin,
            case when indexable then 'pending' else 'not_applicable' end)
    on conflict (id) do nothing
    returning * into stored;
    if found then
        created := true;
    else
        select * into stored from quarry.kb_evidence e where e.id = evidence_id;
    end if;
    if stored.index_state = 'pending' then
        job := quarry.kb_queue_index(new_job_id);
    end if;
    return jsonb_build_object('created', created, 'index_state', stored.index_state, 'job_id', job,
                              'media_type', stored.media_type, 'encoding', stored.encoding,
                              'size', octet_length(stored.bytes));
end
$$;

comment on function quarry.kb_store_evidence(text, text, bytea, text, text, text, boolean, uuid) is
'Store evidence bytes under their id (e_ + sha256; storing them again changes nothing) and, for text, queue the '
'kb_index job that indexes them. Returns created, index_state, job_id (null when nothing waits), size.';

create or replace function quarry.kb_reindex(api_key text, new_job_id uuid) returns uuid
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    perform quarry.require_admin_caller(api_key, 'reindexing the knowledge base');
    update quarry.kb_evidence e set index_state = 'pending', index_error = null
    where e.index_state in ('ready', 'failed');
    update quarry.kb_records r set search_text = quarry.kb_search_text(r.label, r.properties);
    return quarry.kb_queue_index(new_job_id);
end
$$;

comment on function quarry.kb_reindex(text, uuid) is
'Rebuild what is derived from the canonical kb records and evidence: search text now, the evidence index by the '
'kb_index job it queues (returned).';

create or replace function quarry.kb_delete(api_key text, ids text[], cascade boolean) returns jsonb
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    record_ids uuid[] := array(select i::uuid from unnest(ids) i where i !~ '^e_');
    evidence_ids text[] := array(select i from unnest(ids) i where i ~ '^e_');
    missing text;
    blocker record;
    deleted_relations int;
    deleted_nodes int;
    deleted_evidence int;
    cascaded int := 0;
begin
    perform quarry.require_admin_caller(api_key, 'deleting from the knowledge base');
    select i into missing from unnest(ids) i
    where not exists (select 1 from quarry.kb_records r where r.id::text = i)
      and not exists (select 1 from quarry.kb_evidence e where e.id = i)
    limit 1;
    if missing is not null then
        raise exception 'ids: no record or evidence %', missing using errcode = 'no_data_found';
    end if;
    perform 1 from quarry.kb_records r where r.id = any(record_ids) for update;
    select r.id, r.type, coalesce(case when r.source_record = any(record_ids) then r.source_record end,
                                  r.target_record) as node into blocker
    from quarry.kb_records r
    where r.kind = 'relation' and not r.id = any(record_ids)
      and (r.source_record = any(record_ids) or r.target_record = any(record_ids))
    limit 1;
    if found then
        if not cascade then
            raise exception 'DEPENDENCIES_EXIST: node % has relation % (%); delete it too, or pass cascade: true',
                blocker.node, blocker.id, blocker.type using errcode = 'unique_violation';
        end if;
        delete from quarry.kb_records r
        where r.kind = 'relation' and not r.id = any(record_ids)
          and (r.source_record = any(record_ids) or r.target_record = any(record_ids));
        get diagnostics cascaded = row_count;
    end if;
    select l.evidence_id as evidence, l.record_id as linked into blocker
    from quarry.kb_evidence_links l
    where l.evidence_id = any(evidence_ids) and not l.record_id = any(record_ids)
    limit 1;
    if found and not cascade then
        raise exception 'DEPENDENCIES_EXIST: evidence % supports record %; delete that link first, or pass '
            'cascade: true', blocker.evidence, blocker.linked using errcode = 'unique_violation';
    end if;
    delete from quarry.kb_records r where r.id = any(record_ids) and r.kind = 'relation';
    get diagnostics deleted_relations = row_count;
    delete from quarry.kb_records r where r.id = any(record_ids) and r.kind = 'node';
    get diagnostics deleted_nodes = row_count;
    delete from quarry.kb_evidence_links l where l.evidence_id = any(evidence_ids);
    -- The evidence's indexed document goes with it (statistics stay exact): no search finds it after.
    perform quarry.delete_documents(array(
        select d.id from quarry.documents d join quarry.sources s on s.id = d.source_id
        where s.slug = 'kb' and d.path like any (array(select 'evidence/' || i || '.%' from unnest(evidence_ids) i))));
    delete from quarry.kb_evidence e where e.id = any(evidence_ids);
    get diagnostics deleted_evidence = row_count;
    return jsonb_build_object('nodes', deleted_nodes, 'relations', deleted_relations + cascaded,
                              'evidence', deleted_evidence);
end
$$;

comment on function quarry.kb_delete(text, text[], boolean) is
'Delete kb records and evidence (ids: UUIDs and e_ ids) in one transaction. A node with relations, or evidence '
'linked to a record, not in ids is refused (DEPENDENCIES_EXIST) unless cascade, which deletes those relations and '
'links. Evidence takes its indexed document with it. Returns counts deleted.';

create or replace function quarry.kb_mark_indexed(evidence_ids text[], state text, error text) returns void
language sql volatile
set search_path = pg_catalog
as $$
    update quarry.kb_evidence e set index_state = state, index_error = error where e.id = any(evidence_ids)
$$;

comment on function quarry.kb_mark_indexed(text[], text, text) is
'Record how indexing evidence ended (ready, or failed with error): the kb_index job''s last step.';

-- Reads (the search server's login may call these: they only select).

create or replace function quarry.kb_record_rows(ids uuid[]) returns table (
    id uuid, kind text, type text, label text, properties jsonb, source_id uuid, target_id uuid,
    first_seen timestamptz, last_seen timestamptz, evidence text[]
)
language sql stable
set search_path = pg_catalog
as $$
    select r.id, r.kind, r.type, r.label, r.properties, r.source_record, r.target_record, r.first_seen, r.last_seen,
           array(select l.evidence_id from quarry.kb_evidence_links l where l.record_id = r.id order by l.evidence_id)
    from quarry.kb_records r
    where r.id = any(ids)
$$;

comment on function quarry.kb_record_rows(uuid[]) is
'The kb records with these ids (any order; absent ids have no row), each with its evidence ids.';

create or replace function quarry.kb_find_records(
    record_kind text, record_type text, properties_match jsonb, query text, words text[], by_relevance boolean,
    after_id uuid, max_rows int
) returns table (id uuid, kind text, type text, label text, search_text text, rank real)
language sql stable
set search_path = pg_catalog
as $$
    select * from (
        select r.id, r.kind, r.type, r.label, r.search_text,
               case when by_relevance
                    then ts_rank_cd(to_tsvector('simple', r.search_text),
                                    plainto_tsquery('simple', coalesce(query, array_to_string(words, ' '))))
                    else 0 end::real as rank
        from quarry.kb_records r
        where r.kind = record_kind
          and (record_type is null or r.type = record_type)
          and (properties_match is null or r.properties @> properties_match)
          and (query is null or strpos(r.search_text, query) > 0)
          and (words is null
               or lower(r.search_text) like all (array(select '%' || lower(w) || '%' from unnest(words) w)))
          and (after_id is null or r.id > after_id)
    ) found
    -- by id, or best first (rank is 0 for every row unless by_relevance)
    order by found.rank desc, found.id
    limit max_rows
$$;

comment on function quarry.kb_find_records(text, text, jsonb, text, text[], boolean, uuid, int) is
'kb records of a kind (node|relation), optionally of a type and holding properties_match in their properties (JSON '
'containment: each key with that exact value, nested objects alike), whose search text holds query (literal: that '
'exact text, case and all) or every one of words (any order and case); by id after after_id, or by_relevance. '
'At most max_rows rows.';

create or replace function quarry.kb_find_evidence(query text, words text[], after_id text, max_rows int)
returns table (id text, media_type text, size int, origin text, index_state text, created_at timestamptz,
               matched text)
language sql stable
set search_path = pg_catalog
as $$
    select e.id, e.media_type, octet_length(e.bytes), e.origin, e.index_state, e.created_at, m.content
    from quarry.kb_evidence e
    left join lateral (
        select c.content
        from quarry.documents d
        join quarry.sources s on s.id = d.source_id and s.slug = 'kb'
        join quarry.chunks c on c.document_id = d.id
        where d.path like 'evidence/' || e.id || '.%'
          and (query is null or strpos(c.content, query) > 0)
          and (words is null or lower(c.content) like all (array(select '%' || lower(w) || '%' from unnest(words) w)))
        order by c.ordinal
        limit 1
    ) m on true
    where (after_id is null or e.id > after_id)
      and ((query is null and words is null) or m.content is not null)
    order by e.id
    limit max_rows
$$;

comment on function quarry.kb_find_evidence(text, text[], text, int) is
'Evidence by id after after_id; with query (literal) or words, only evidence whose indexed text matches, with the '
'first matching chunk''s text. At most max_rows rows.';

create or replace function quarry.kb_relations_of(node_ids uuid[], direction text, relation_types text[])
returns table (id uuid, type text, label text, properties jsonb, source_id uuid, target_id uuid, other_id uuid)
language sql stable
set search_path = pg_catalog
as $$
    select r.id, r.type, r.label, r.properties, r.source_record, r.target_record,
           case when r.source_record = any(node_ids) then r.target_record else r.source_record end
    from quarry.kb_records r
    where r.kind = 'relation'
      and (relation_types is null or r.type = any(relation_types))
      and ((direction in ('out', 'both') and r.source_record = any(node_ids))
           or (direction in ('in', 'both') and r.target_record = any(node_ids)))
    order by r.id
$$;

comment on function quarry.kb_relations_of(uuid[], text, text[]) is
'The relations leaving (out), entering (in) or touching (both) these nodes, of these types (null: all), '
'each with the endpoint on the other side; by id.';

create or replace function quarry.kb_type_counts() returns table (kind text, type text, ready bigint)
language sql stable
set search_path = pg_catalog
as $$
    select r.kind, r.type, count(*) from quarry.kb_records r group by r.kind, r.type
    union all
    select 'evidence', 'evidence', count(*) from quarry.kb_evidence
$$;

comment on function quarry.kb_type_counts() is 'How many kb records there are of each kind and type, and of evidence.';

create or replace function quarry.kb_evidence_range(evidence_id text, start_byte int, max_bytes int)
returns table (content bytea, size int, media_type text)
language sql stable
set search_path = pg_catalog
as $$
    select substring(e.bytes from start_byte + 1 for max_bytes), octet_length(e.bytes), e.media_type
    from quarry.kb_evidence e
    where e.id = evidence_id
$$;

comment on function quarry.kb_evidence_range(text, int, int) is
'At most max_bytes of the evidence''s exact bytes from byte start_byte (0-based), its size and media type; '
'no row for an unknown id.';

create or replace function quarry.kb_pending_evidence() returns table (
    id text, content bytea, media_type text, encoding text
)
language sql stable
set search_path = pg_catalog
as $$
    select e.id, e.bytes, e.media_type, e.encoding from quarry.kb_evidence e where e.index_state = 'pending'
    order by e.id
$$;

comment on function quarry.kb_pending_evidence() is 'The evidence waiting to be indexed, with its bytes.';

create or replace function quarry.kb_indexable_evidence() returns table (id text)
language sql stable
set search_path = pg_catalog
as $$
    select e.id from quarry.kb_evidence e where e.index_state in ('pending', 'ready')
$$;

comment on function quarry.kb_indexable_evidence() is
'The evidence whose text is (or is about to be) indexed: a mirror file of any other is stale.';

create or replace function quarry.kb_evidence_rows(ids text[]) returns table (
    id text, media_type text, encoding text, size int, origin text, index_state text, index_error text,
    created_at timestamptz, linked_records bigint
)
language sql stable
set search_path = pg_catalog
as $$
    select e.id, e.media_type, e.encoding, octet_length(e.bytes), e.origin, e.index_state, e.index_error,
           e.created_at, (select count(*) from quarry.kb_evidence_links l where l.evidence_id = e.id)
    from quarry.kb_evidence e
    where e.id = any(ids)
$$;

comment on function quarry.kb_evidence_rows(text[]) is
'What is known of these evidence ids (not their bytes: kb_evidence_range reads those); absent ids have no row.';

create or replace function quarry.kb_links_of(linked text, after_id text, max_rows int)
returns table (record_id uuid, evidence_id text, linked_at timestamptz)
language sql stable
set search_path = pg_catalog
as $$
    select l.record_id, l.evidence_id, l.linked_at
    from quarry.kb_evidence_links l
    where case when linked ~ '^e_' then l.evidence_id = linked else l.record_id::text = linked end
      and (after_id is null
           or case when linked ~ '^e_' then l.record_id::text > after_id else l.evidence_id > after_id end)
    order by case when linked ~ '^e_' then l.record_id::text else l.evidence_id end
    limit max_rows
$$;

comment on function quarry.kb_links_of(text, text, int) is
'The evidence links of a record (linked: its UUID; ordered by evidence id) or of evidence (linked: its e_ id; '
'ordered by record id), after after_id in that order. At most max_rows rows.';

create or replace function quarry.kb_health() returns jsonb
language sql stable
set search_path = pg_catalog
as $$
    select jsonb_build_object(
        'nodes', (select count(*) from quarry.kb_records r where r.kind = 'node'),
        'relations', (select count(*) from quarry.kb_records r where r.kind = 'relation'),
        'evidence', (select count(*) from quarry.kb_evidence),
        'evidence_index', (select coalesce(jsonb_object_agg(s.index_state, s.n), '{}'::jsonb)
                           from (select e.index_state, count(*) n from quarry.kb_evidence e group by 1) s),
        'index_jobs', (select coalesce(jsonb_object_agg(s.status, s.n), '{}'::jsonb)
                       from (select j.status, count(*) n from quarry.jobs j
                             where j.kind = 'kb_index' and j.status in ('queued', 'running') group by 1) s),
        'evidence_chunks', (select count(*) from quarry.chunks c join quarry.sources s on s.id = c.source_id
                            where s.slug = 'kb'))
$$;

comment on function quarry.kb_health() is
'Counts of the knowledge base: nodes, relations, evidence by index state, kb_index jobs waiting or running, and '
'the indexed evidence chunks.';
