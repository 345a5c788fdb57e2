-- How far to trust a result, and why: a score in [0, 1] from explainable factors.
--
--   trust = sum(weight_f * value_f) / sum(weight_f), weights from quarry.trust_weights
--
--   attribution    official 1.0, maintainer 0.8, community 0.5, unknown 0.3
--   verified       1.0 when an admin verified the source, else 0.5
--   freshness      0.5 ^ (days since the document last changed / half-life of its source
--                  kind): docs_site 365, code_repo 540, standalone 730, mixed 365 days
--   deprecation    0.0 when the document or its source is deprecated, else 1.0; a
--                  deprecated result's trust is also capped at 0.2, whatever the weights
--   version_match  exact 1.0, compatible 0.8, unknown 0.6, mismatch 0.0
--
-- Each factor reports its raw input, value, weight and contribution, so a client (or an
-- admin in psql, through quarry.explain) can say why a result is or isn't trustworthy.

create or replace function quarry.trust_factors(
    attribution text,
    verified boolean,
    deprecated boolean,
    source_kind text,
    changed_at timestamptz,
    version_match text default 'unknown',
    at timestamptz default now()
) returns jsonb
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    with inputs (factor, raw, value) as (
        values
            ('attribution', to_jsonb(attribution),
             case attribution when 'official' then 1.0 when 'maintainer' then 0.8 when 'community' then 0.5
                              else 0.3 end),
            ('verified', to_jsonb(verified), case when verified then 1.0 else 0.5 end),
            ('freshness', to_jsonb(round((greatest(0, extract(epoch from at - changed_at)) / 86400)::numeric, 2)),
             power(0.5, greatest(0, extract(epoch from at - changed_at)) / 86400
                        / case source_kind when 'code_repo' then 540 when 'standalone' then 730 else 365 end)),
            ('deprecation', to_jsonb(deprecated), case when deprecated then 0.0 else 1.0 end),
            ('version_match', to_jsonb(coalesce(version_match, 'unknown')),
             case version_match when 'exact' then 1.0 when 'compatible' then 0.8 when 'mismatch' then 0.0
                                else 0.6 end)
    ),
    weighted as (
        select i.factor, i.raw, i.value::double precision as value, w.weight,
               w.weight * i.value / nullif(sum(w.weight) over (), 0) as contribution
        from inputs i join quarry.trust_weights w on w.factor = i.factor
    )
    select jsonb_build_object(
        'score', round(least(case when deprecated then 0.2 else 1 end,
                             greatest(0, coalesce(sum(contribution), 0)))::numeric, 4),
        'factors', jsonb_object_agg(factor, jsonb_build_object(
            'raw', raw, 'value', round(value::numeric, 4), 'weight', weight,
            'contribution', round(coalesce(contribution, 0)::numeric, 4))))
    from weighted
$$;

comment on function quarry.trust_factors(text, boolean, boolean, text, timestamptz, text, timestamptz) is
'Trust score in [0, 1] and its factors (attribution, verified, freshness, deprecation, version_match: raw, value, weight, contribution), weights from quarry.trust_weights.';

create or replace function quarry.set_trust_weight(factor text, weight double precision)
returns void
language plpgsql volatile
set search_path = quarry, pg_catalog
as $$
begin
    update quarry.trust_weights w set weight = set_trust_weight.weight where w.factor = set_trust_weight.factor;
    if not found then
        raise exception 'unknown trust factor %: expected attribution, verified, freshness, deprecation or version_match',
            factor using errcode = 'invalid_parameter_value';
    end if;
end
$$;

comment on function quarry.set_trust_weight(text, double precision) is
'Set one trust factor''s weight (0-100; weights are normalised by their sum); the next search uses it.';
