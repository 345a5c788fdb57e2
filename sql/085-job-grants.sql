-- Who may cancel or re-queue jobs. The search server (quarry_reader) reads jobs through
-- select (sql/090-grants.sql) and writes them only through the two definer functions
-- of sql/080-jobs.sql: it can stop a job or queue a retry of an existing one, which a
-- CI machine then runs (`quarry jobs run`); it can never enqueue arbitrary work.
-- Functions are executable by PUBLIC by default: take that away for these two.

revoke execute on function quarry.request_job_cancel(uuid), quarry.enqueue_job_retry(uuid, uuid) from public;
grant execute on function quarry.request_job_cancel(uuid), quarry.enqueue_job_retry(uuid, uuid)
    to quarry_reader, quarry_admin;

revoke execute on function quarry.enqueue_source_job(text, text, jsonb, uuid) from public;
grant execute on function quarry.enqueue_source_job(text, text, jsonb, uuid) to quarry_reader, quarry_admin;
