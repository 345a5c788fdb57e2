-- Durable jobs (alembic 0008): liveness, listing, cancellation and retries.
--
-- A process running a job holds the session advisory lock (20810 = 'QJ', job_lock_key(number)).
-- Postgres releases it when the session ends, however the process ended, so "running but
-- its lock is free" means interrupted: no daemon or heartbeat timeout is needed to tell.

create or replace function quarry.job_lock_key(job_number bigint) returns integer
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    select (job_number % 2147483647)::integer
$$;

comment on function quarry.job_lock_key(bigint) is
'Second key of the advisory lock (20810, key) a process holds while it runs the job with this number.';

create or replace function quarry.try_lock_job(job_number bigint) returns boolean
language sql volatile strict
set search_path = quarry, pg_catalog
as $$
    select pg_try_advisory_lock(20810, quarry.job_lock_key(job_number))
$$;

comment on function quarry.try_lock_job(bigint) is
'Take the session lock that marks this job as owned by the calling session; false when another session owns it.';

create or replace function quarry.unlock_job(job_number bigint) returns boolean
language sql volatile strict
set search_path = quarry, pg_catalog
as $$
    select pg_advisory_unlock(20810, quarry.job_lock_key(job_number))
$$;

comment on function quarry.unlock_job(bigint) is
'Release the session lock of a job this session owned (before its connection goes back to a pool).';

create or replace function quarry.job_lock_held(job_number bigint) returns boolean
language sql stable strict
set search_path = quarry, pg_catalog
as $$
    select exists (
        select 1 from pg_locks l
        where l.locktype = 'advisory' and l.granted
          and l.database = (select d.oid from pg_database d where d.datname = current_database())
          and l.classid = 20810 and l.objid = quarry.job_lock_key(job_number)::oid and l.objsubid = 2
    )
$$;

comment on function quarry.job_lock_held(bigint) is
'Whether some session holds this job''s lock, i.e. a live process owns the job.';

create or replace function quarry.job_status(stored_status text, job_number bigint) returns text
language sql stable
set search_path = quarry, pg_catalog
as $$
    select case when stored_status = 'running' and not quarry.job_lock_held(job_number)
                then 'interrupted' else stored_status end
$$;

comment on function quarry.job_status(text, bigint) is
'A job''s status as it is now: a running job whose process is gone reads as interrupted.';

-- Dropped and recreated (not `create or replace`) so columns can change between versions.
drop view if exists quarry.job_overview;
create view quarry.job_overview as
select j.id,
       j.number,
       j.kind,
       j.source,
       quarry.job_status(j.status, j.number) as status,
       j.retry_of,
       j.arguments,
       j.progress,
       j.counts,
       jsonb_array_length(j.failures) as failure_count,
       j.error,
       j.cancel_requested_at is not null as cancel_requested,
       j.created_at,
       j.started_at,
       j.heartbeat_at,
       coalesce(j.finished_at,
                case when quarry.job_status(j.status, j.number) = 'interrupted' then j.heartbeat_at end)
           as finished_at,
       extract(epoch from coalesce(j.finished_at, j.heartbeat_at, now()) - j.started_at)::double precision
           as seconds,
       j.host,
       j.pid
from quarry.jobs j;

comment on view quarry.job_overview is
'Jobs with their live status (interrupted when the process died) and duration; newest first by id.';

create or replace function quarry.list_jobs(
    before_id uuid default null,
    page_size integer default 20,
    for_status text default null,
    for_kind text default null,
    for_source text default null
) returns setof quarry.job_overview
language sql stable
set search_path = quarry, pg_catalog
as $$
    select o.*
    from quarry.job_overview o
    where (list_jobs.before_id is null or o.id < list_jobs.before_id)
      and (list_jobs.for_status is null or o.status = list_jobs.for_status)
      and (list_jobs.for_kind is null or o.kind = list_jobs.for_kind)
      and (list_jobs.for_source is null or o.source = list_jobs.for_source)
    order by o.id desc
    limit greatest(1, least(list_jobs.page_size, 1000))
$$;

comment on function quarry.list_jobs(uuid, integer, text, text, text) is
'A page of jobs, newest first, optionally filtered; pass the last id seen as before_id for the next page.';

create or replace function quarry.reap_interrupted_jobs(
    for_kind text default null,
    for_source text default null
) returns integer
language sql volatile
set search_path = quarry, pg_catalog
as $$
    with reaped as (
        update quarry.jobs j
        set status = 'interrupted',
            finished_at = coalesce(j.heartbeat_at, j.started_at, now()),
            error = coalesce(j.error, 'the process running this job stopped before it finished '
                                      '(killed, crashed or lost its database connection)')
        where j.status = 'running'
          and (reap_interrupted_jobs.for_kind is null or j.kind = reap_interrupted_jobs.for_kind)
          and (reap_interrupted_jobs.for_source is null or j.source = reap_interrupted_jobs.for_source)
          and not quarry.job_lock_held(j.number)
        returning 1
    )
    select count(*)::integer from reaped
$$;

comment on function quarry.reap_interrupted_jobs(text, text) is
'Record as interrupted every running job (of this kind and source, if given) whose process is gone; returns how many.';

-- The job writes the search server may make, as narrow definer functions: stop a job, re-queue
-- an existing one, queue a source's ingest or removal. Each takes the caller's API key and
-- checks its admin scope itself (quarry.require_admin_caller): the server's login alone, or a
-- SQL bug in the server, can do none of them (sql/085-job-grants.sql limits who may call them).

create or replace function quarry.request_job_cancel(job_id uuid, api_key text default null) returns text
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    job quarry.jobs;
begin
    perform quarry.require_admin_caller(api_key, 'cancelling a job');
    select * into job from quarry.jobs j where j.id = request_job_cancel.job_id for update;
    if job.id is null then
        raise exception 'no job with id %', job_id using errcode = 'no_data_found';
    end if;
    if job.status = 'queued' then
        -- nobody runs it yet: cancelled at once (a worker that claimed it sees that and skips it)
        update quarry.jobs j set status = 'cancelled', cancel_requested_at = now(), finished_at = now(),
                                 error = 'cancelled before it started'
        where j.id = job.id;
        return 'cancelled';
    end if;
    if job.status = 'running' then
        if not quarry.job_lock_held(job.number) then
            perform quarry.reap_interrupted_jobs(job.kind, job.source);
            return 'interrupted';
        end if;
        -- the running process checks this flag after every batch and stops cleanly
        update quarry.jobs j set cancel_requested_at = coalesce(j.cancel_requested_at, now())
        where j.id = job.id;
        return 'cancelling';
    end if;
    return job.status;  -- finished already: nothing to cancel
end
$$;

comment on function quarry.request_job_cancel(uuid, text) is
'Cancel a job: a queued one at once, a running one after its current batch (returns cancelling); returns the status. api_key: an admin key, unless the login may write jobs itself.';

create or replace function quarry.enqueue_job_retry(job_id uuid, new_job_id uuid, api_key text default null)
returns uuid
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    job quarry.jobs;
    live_status text;
    pending uuid;
begin
    perform quarry.require_admin_caller(api_key, 'retrying a job');
    select * into job from quarry.jobs j where j.id = enqueue_job_retry.job_id for update;
    if job.id is null then
        raise exception 'no job with id %', job_id using errcode = 'no_data_found';
    end if;
    live_status := quarry.job_status(job.status, job.number);
    if live_status not in ('failed', 'interrupted', 'cancelled') then
        raise exception 'job % is %: only failed, interrupted or cancelled jobs can be retried',
            job_id, live_status using errcode = 'invalid_parameter_value';
    end if;
    if live_status <> job.status then
        perform quarry.reap_interrupted_jobs(job.kind, job.source);
    end if;
    select j.id into pending from quarry.jobs j
    where j.retry_of = job.id and j.status in ('queued', 'running');
    if pending is not null then
        return pending;  -- already waiting or running: enqueueing twice does not run it twice
    end if;
    insert into quarry.jobs (id, kind, source, arguments, retry_of)
    values (new_job_id, job.kind, job.source, job.arguments, job.id);
    return new_job_id;
end
$$;

comment on function quarry.enqueue_job_retry(uuid, uuid, text) is
'Queue a new job (id new_job_id) with the arguments of a failed, interrupted or cancelled one; returns the queued id. api_key: an admin key, unless the login may write jobs itself.';

-- The one way the search server queues new work, for admin keys (checked here and by the tool):
-- an ingest of a remote location (add_source, refresh_source) or a source's removal. The
-- arguments are stamped origin = 'mcp', and the worker that runs the job refuses local paths
-- and private hosts for such jobs (engine.fetch.fetching.locate), so a key cannot make the
-- worker read its own disk or the network behind it.

create or replace function quarry.enqueue_source_job(
    kind text, source text, arguments jsonb, new_job_id uuid, api_key text default null
) returns uuid
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    pending uuid;
begin
    perform quarry.require_admin_caller(api_key, 'queueing a source job');
    if kind not in ('ingest', 'remove_source') then
        raise exception 'jobs of kind % cannot be queued here', kind using errcode = 'invalid_parameter_value';
    end if;
    if source is null or source !~ '^[a-z0-9][a-z0-9._-]{0,62}$' then
        raise exception 'invalid source slug' using errcode = 'invalid_parameter_value';
    end if;
    -- One waiting job per kind and source: asking twice does not queue the work twice.
    perform pg_advisory_xact_lock(hashtext('quarry.enqueue_source_job'), hashtext(source));
    select j.id into pending from quarry.jobs j
    where j.kind = enqueue_source_job.kind and j.source = enqueue_source_job.source and j.status = 'queued';
    if pending is not null then
        return pending;
    end if;
    insert into quarry.jobs (id, kind, source, arguments)
    values (new_job_id, kind, source, arguments || jsonb_build_object('origin', 'mcp'));
    return new_job_id;
end
$$;

comment on function quarry.enqueue_source_job(text, text, jsonb, uuid, text) is
'Queue an ingest or a removal of a source (stamped origin mcp); returns the queued job id, or the one already waiting. api_key: an admin key, unless the login may write jobs itself.';
