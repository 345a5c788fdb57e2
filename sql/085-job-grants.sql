-- Who may cancel, re-queue or queue jobs. The search server (quarry_reader) reads jobs through
-- select (sql/090-grants.sql) and writes them only through the three definer functions of
-- sql/080-jobs.sql, each of which asks for an admin key itself: it can stop a job, queue a
-- retry of an existing one or a source's ingest or removal, which a worker with the owner role
-- then runs (`quarry jobs run`); it can never enqueue arbitrary work.
-- Functions are executable by PUBLIC by default: take that away for these. (sql/090-grants.sql
-- grants every other function to the reader, then revokes these again.)

revoke execute on function quarry.request_job_cancel(uuid, text), quarry.enqueue_job_retry(uuid, uuid, text),
    quarry.enqueue_source_job(text, text, jsonb, uuid, text) from public;
grant execute on function quarry.request_job_cancel(uuid, text), quarry.enqueue_job_retry(uuid, uuid, text),
    quarry.enqueue_source_job(text, text, jsonb, uuid, text) to quarry_reader, quarry_admin;

-- Job locks are for the processes that run jobs (the owner role): a reader holding one would
-- make a queued job look taken.
revoke execute on function quarry.try_lock_job(bigint), quarry.unlock_job(bigint),
    quarry.reap_interrupted_jobs(text, text) from public;
grant execute on function quarry.try_lock_job(bigint), quarry.unlock_job(bigint),
    quarry.reap_interrupted_jobs(text, text) to quarry_admin;
