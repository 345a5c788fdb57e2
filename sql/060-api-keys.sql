-- API keys and per-key rate limits for the hosted MCP endpoint. Hashing happens in
-- Python (scrypt); these functions find, revoke and meter keys.

create or replace function quarry.find_api_key(key_prefix text)
returns table (
    id uuid,
    name text,
    salt bytea,
    hash bytea,
    kdf text,
    scopes text[],
    revoked_at timestamptz
)
language sql stable
set search_path = quarry, pg_catalog
as $$
    select k.id, k.name, k.salt, k.hash, k.kdf, k.scopes, k.revoked_at
    from quarry.api_keys k
    where k.prefix = key_prefix
$$;

comment on function quarry.find_api_key(text) is
'The stored hash, salt, KDF, scopes and revocation time of the key with this public prefix (no row: unknown key).';

create or replace function quarry.note_api_key_use(key_id uuid) returns void
language sql volatile
set search_path = quarry, pg_catalog
as $$
    -- At most one write a minute per key: last_used_at is for admins, not an audit log.
    update quarry.api_keys k
    set last_used_at = now()
    where k.id = note_api_key_use.key_id
      and (k.last_used_at is null or k.last_used_at < now() - interval '1 minute')
$$;

comment on function quarry.note_api_key_use(uuid) is
'Record that a key was used (last_used_at, updated at most once a minute).';

create or replace function quarry.revoke_api_key(name_or_prefix text) returns int
language sql volatile
set search_path = quarry, pg_catalog
as $$
    with revoked as (
        update quarry.api_keys k
        set revoked_at = now()
        where (k.name = name_or_prefix or k.prefix = name_or_prefix) and k.revoked_at is null
        returning 1
    )
    select count(*)::int from revoked
$$;

comment on function quarry.revoke_api_key(text) is
'Revoke the active key with this name or prefix; returns how many keys were revoked (0 or 1).';

create or replace function quarry.bucket_level(
    stored_tokens double precision,
    stored_at timestamptz,
    at_time timestamptz,
    capacity double precision,
    refill_per_second double precision
) returns double precision
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    select least(capacity,
                 stored_tokens + greatest(0, extract(epoch from at_time - stored_at)) * refill_per_second)
$$;

comment on function quarry.bucket_level(double precision, timestamptz, timestamptz, double precision, double precision) is
'Tokens in a bucket at a time: what was stored plus the refill since, capped at capacity.';

create or replace function quarry.take_rate_tokens(
    bucket_key uuid,
    token_cost double precision,
    bucket_capacity double precision,
    refill_per_second double precision
) returns table (granted boolean, tokens_left double precision, retry_after double precision)
language sql volatile
set search_path = quarry, pg_catalog
as $$
    -- One statement: the row lock taken by ON CONFLICT serialises concurrent requests
    -- for the same key across every replica, so no request reads a stale level.
    -- A refused request takes nothing; the refill up to now is banked either way.
    insert into quarry.rate_limit_buckets as b (key_id, tokens, granted, updated_at)
    values (bucket_key,
            case when token_cost <= bucket_capacity then bucket_capacity - token_cost else bucket_capacity end,
            token_cost <= bucket_capacity,
            statement_timestamp())
    on conflict (key_id) do update set
        granted = quarry.bucket_level(b.tokens, b.updated_at, statement_timestamp(),
                                      bucket_capacity, refill_per_second) >= token_cost,
        tokens = quarry.bucket_level(b.tokens, b.updated_at, statement_timestamp(),
                                     bucket_capacity, refill_per_second)
                 - case when quarry.bucket_level(b.tokens, b.updated_at, statement_timestamp(),
                                                 bucket_capacity, refill_per_second) >= token_cost
                        then token_cost else 0 end,
        updated_at = greatest(b.updated_at, statement_timestamp())
    returning b.granted,
              b.tokens,
              case when b.granted then 0::double precision
                   else (token_cost - b.tokens) / refill_per_second end
$$;

comment on function quarry.take_rate_tokens(uuid, double precision, double precision, double precision) is
'Token bucket per API key: take token_cost tokens if available; returns whether granted, tokens left and seconds until the cost would fit.';
