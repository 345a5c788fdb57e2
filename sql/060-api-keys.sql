-- API keys and per-key rate limits for the hosted MCP endpoint.
--
-- A key (qry_<prefix>_<secret>, 256 random bits) is stored as HMAC-SHA-256 under the
-- deployment's key (quarry.deployment_secrets, alembic 0018), which only the owner role
-- reads. The search server never sees a hash: it hands the presented key to definer
-- functions that return a verdict. Verifying costs the same (two SHA-256 and a fixed
-- 32-byte comparison) whether or not the prefix exists. Keys stored by older versions
-- with scrypt are converted by quarry.upgrade_legacy_api_key on their next successful use.

create or replace function quarry.api_key_digest(presented text) returns bytea
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$
    -- HMAC(K, m) = H((K xor opad) || H((K xor ipad) || m)); the pads are stored precomputed
    select sha256(s.hmac_outer || sha256(s.hmac_inner || convert_to(presented, 'UTF8')))
    from quarry.deployment_secrets s
$$;

comment on function quarry.api_key_digest(text) is
'HMAC-SHA-256 of a presented API key under the deployment''s secret key: what quarry.api_keys.hash holds (owner only).';

create or replace function quarry.digests_equal(a bytea, b bytea) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- Every byte is compared whatever the first difference: no early exit to time.
    select length(a) = length(b)
           and (select bit_or(get_byte(a, i) # get_byte(b, i)) = 0 from generate_series(0, length(a) - 1) i)
$$;

comment on function quarry.digests_equal(bytea, bytea) is
'Constant-time equality of two digests of the same length (false for different lengths).';

create or replace function quarry.verify_api_key(presented text)
returns table (verdict text, key_id uuid, key_name text, key_scopes text[], legacy_salt bytea, legacy_kdf text)
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    digest bytea := quarry.api_key_digest(presented);
    stored quarry.api_keys;
    matches boolean;
begin
    if presented is null or presented !~ '^qry_[a-z0-9]{12}_[A-Za-z0-9_-]{43}$' then
        return query select 'malformed'::text, null::uuid, null::text, null::text[], null::bytea, null::text;
        return;
    end if;
    select * into stored from quarry.api_keys k where k.prefix = substr(presented, 5, 12);
    if stored.id is not null and stored.kdf like 'scrypt:%' then
        -- Only the key's own holder can finish this (quarry.upgrade_legacy_api_key): the salt alone
        -- verifies nothing. The hash stays here.
        return query select 'legacy'::text, null::uuid, null::text, null::text[], stored.salt, stored.kdf;
        return;
    end if;
    -- An unknown prefix is compared against a digest of the same length: the same work either way.
    matches := quarry.digests_equal(digest, coalesce(stored.hash, sha256(digest)))
               and stored.id is not null and stored.kdf = 'hmac-sha256';
    if not matches then
        return query select 'unknown'::text, null::uuid, null::text, null::text[], null::bytea, null::text;
        return;
    end if;
    -- Told only to the key's holder: checked after the digest.
    if stored.revoked_at is not null then
        return query select 'revoked'::text, null::uuid, null::text, null::text[], null::bytea, null::text;
        return;
    end if;
    -- At most one write a minute per key: last_used_at is for admins, not an audit log.
    update quarry.api_keys k set last_used_at = now()
    where k.id = stored.id and (k.last_used_at is null or k.last_used_at < now() - interval '1 minute');
    return query select 'ok'::text, stored.id, stored.name, stored.scopes, null::bytea, null::text;
end
$$;

comment on function quarry.verify_api_key(text) is
'Verdict on a presented API key: ok (with its id, name and scopes), malformed, unknown, revoked, or legacy (an scrypt key: salt and KDF to derive with, then quarry.upgrade_legacy_api_key). Never returns a hash.';

create or replace function quarry.upgrade_legacy_api_key(presented text, derived bytea)
returns table (verdict text, key_id uuid, key_name text, key_scopes text[])
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    stored quarry.api_keys;
begin
    select * into stored from quarry.api_keys k
    where k.prefix = substr(presented, 5, 12) and k.kdf like 'scrypt:%' for update;
    if stored.id is null or derived is null or not quarry.digests_equal(derived, stored.hash) then
        return query select 'unknown'::text, null::uuid, null::text, null::text[];
        return;
    end if;
    -- The holder proved the key: from now on it is verified by HMAC, and scrypt's hash is gone.
    update quarry.api_keys k
    set hash = quarry.api_key_digest(presented), salt = '\x'::bytea, kdf = 'hmac-sha256'
    where k.id = stored.id;
    if stored.revoked_at is not null then
        return query select 'revoked'::text, null::uuid, null::text, null::text[];
        return;
    end if;
    update quarry.api_keys k set last_used_at = now() where k.id = stored.id;
    return query select 'ok'::text, stored.id, stored.name, stored.scopes;
end
$$;

comment on function quarry.upgrade_legacy_api_key(text, bytea) is
'For a key stored with scrypt: when derived (scrypt of the presented key with its salt) matches, store the key''s HMAC instead and return the verdict (ok, revoked or unknown).';

create or replace function quarry.active_key_scopes(presented text) returns text[]
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$
    select k.scopes from quarry.api_keys k
    where k.prefix = substr(presented, 5, 12) and k.kdf = 'hmac-sha256' and k.revoked_at is null
      and quarry.digests_equal(quarry.api_key_digest(presented), k.hash)
$$;

comment on function quarry.active_key_scopes(text) is
'The scopes of the presented key when it is valid and not revoked; null otherwise (for other definer functions only).';

create or replace function quarry.require_admin_caller(presented text, action text) returns void
language plpgsql stable security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    -- A login that could write the jobs table itself (the owner, quarry_admin's members) needs no key;
    -- the search server's login must show an admin key, which a SQL bug in the server does not have.
    if has_table_privilege(session_user, 'quarry.jobs', 'UPDATE') then
        return;
    end if;
    if not coalesce('admin' = any(quarry.active_key_scopes(presented)), false) then
        raise exception '% needs an API key with the admin scope', action using errcode = 'insufficient_privilege';
    end if;
end
$$;

comment on function quarry.require_admin_caller(text, text) is
'Raise insufficient_privilege unless the session''s login may write jobs itself or presented is an active admin key.';

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
    presented text,
    token_cost double precision,
    bucket_capacity double precision,
    refill_per_second double precision
) returns table (granted boolean, tokens_left double precision, retry_after double precision)
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    bucket_key uuid;
begin
    -- Only the key's holder charges its bucket: the server's login cannot drain or refill another's.
    select k.id into bucket_key from quarry.api_keys k
    where k.prefix = substr(presented, 5, 12) and k.kdf = 'hmac-sha256' and k.revoked_at is null
      and quarry.digests_equal(quarry.api_key_digest(presented), k.hash);
    if bucket_key is null then
        raise exception 'rate limits are charged to a valid API key' using errcode = 'insufficient_privilege';
    end if;
    if token_cost is null or token_cost < 0 or bucket_capacity is null or bucket_capacity <= 0
       or refill_per_second is null or refill_per_second <= 0 then
        raise exception 'token cost, capacity and refill must be positive' using errcode = 'invalid_parameter_value';
    end if;
    -- One statement: the row lock taken by ON CONFLICT serialises concurrent requests
    -- for the same key across every replica, so no request reads a stale level.
    -- A refused request takes nothing; the refill up to now is banked either way.
    return query
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
                   else (token_cost - b.tokens) / refill_per_second end;
end
$$;

comment on function quarry.take_rate_tokens(text, double precision, double precision, double precision) is
'Token bucket of the presented (valid) API key: take token_cost tokens if available; returns whether granted, tokens left and seconds until the cost would fit.';
