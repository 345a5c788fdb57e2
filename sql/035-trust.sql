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

create or replace function quarry.trust_weight_list() returns double precision[]
language sql stable parallel safe
set search_path = quarry, pg_catalog
as $$
    select array[coalesce(max(weight) filter (where factor = 'attribution'), 0),
                 coalesce(max(weight) filter (where factor = 'verified'), 0),
                 coalesce(max(weight) filter (where factor = 'freshness'), 0),
                 coalesce(max(weight) filter (where factor = 'deprecation'), 0),
                 coalesce(max(weight) filter (where factor = 'version_match'), 0)]
    from quarry.trust_weights
$$;

comment on function quarry.trust_weight_list() is
'The trust weights in the order quarry.weighted_trust takes them: attribution, verified, freshness, deprecation, version_match.';

-- The pieces below and quarry.weighted_trust carry no `set search_path` and are one
-- expression each, every parameter of the costly ones used once: that is what lets the planner
-- inline them into the caller's statement (search_hits reads the weights once and passes
-- them) instead of paying a function call per factor per hit (docs/BENCHMARKS.md, decisions:
-- search SQL). They name only built-ins and each other, and only the database owner may
-- create objects in the schemas callers search.
-- double precision throughout (numeric power() per hit cost more than the rest together),
-- json rather than jsonb while nesting (jsonb re-encodes every nested object).
create or replace function quarry.attribution_trust(attribution text) returns double precision
language sql immutable parallel safe
as $$
    select case attribution when 'official' then 1.0::float8 when 'maintainer' then 0.8
                            when 'community' then 0.5 else 0.3 end
$$;

comment on function quarry.attribution_trust(text) is
'The attribution trust factor''s value: official 1.0, maintainer 0.8, community 0.5, unknown 0.3.';

create or replace function quarry.verified_trust(verified boolean) returns double precision
language sql immutable parallel safe
as $$
    select case when verified then 1.0::float8 else 0.5 end
$$;

comment on function quarry.verified_trust(boolean) is
'The verified trust factor''s value: 1.0 for a source an admin verified, else 0.5.';

create or replace function quarry.age_days(at timestamptz, changed_at timestamptz) returns double precision
language sql immutable parallel safe
as $$
    select greatest(0, extract(epoch from at - changed_at)::float8) / 86400
$$;

comment on function quarry.age_days(timestamptz, timestamptz) is
'Days from changed_at to at (0 when changed_at is later): the freshness trust factor''s input.';

create or replace function quarry.freshness_trust(source_kind text, age_days double precision)
returns double precision
language sql immutable parallel safe
as $$
    select power(0.5::float8, age_days / case source_kind when 'code_repo' then 540 when 'standalone' then 730
                                                          else 365 end)
$$;

comment on function quarry.freshness_trust(text, double precision) is
'The freshness trust factor''s value: 0.5 ^ (age in days / half-life of the source kind).';

create or replace function quarry.deprecation_trust(deprecated boolean) returns double precision
language sql immutable parallel safe
as $$
    select case when deprecated then 0.0::float8 else 1.0 end
$$;

comment on function quarry.deprecation_trust(boolean) is
'The deprecation trust factor''s value: 0.0 for deprecated content, else 1.0.';

create or replace function quarry.version_match_trust(version_match text) returns double precision
language sql immutable parallel safe
as $$
    select case version_match when 'exact' then 1.0::float8 when 'compatible' then 0.8 when 'mismatch' then 0.0
                              else 0.6 end
$$;

comment on function quarry.version_match_trust(text) is
'The version_match trust factor''s value: exact 1.0, compatible 0.8, unknown 0.6, mismatch 0.0.';

create or replace function quarry.trust_contribution(weights double precision[], factor int, value double precision)
returns double precision
language sql immutable parallel safe
as $$
    select weights[factor] * value / nullif(weights[1] + weights[2] + weights[3] + weights[4] + weights[5], 0)
$$;

comment on function quarry.trust_contribution(double precision[], int, double precision) is
'One factor''s share of the trust score: its weight × value / the sum of the weights (null when they sum to 0).';

create or replace function quarry.trust_factor(raw json, value double precision, weight double precision,
                                               contribution double precision)
returns json
language sql stable parallel safe
as $$
    select json_build_object('raw', raw, 'value', round(value::numeric, 4), 'weight', weight,
                             'contribution', round(coalesce(contribution, 0)::numeric, 4))
$$;

comment on function quarry.trust_factor(json, double precision, double precision, double precision) is
'One trust factor as results show it: raw input, value, weight and contribution.';

create or replace function quarry.weighted_trust(
    attribution text,
    verified boolean,
    deprecated boolean,
    source_kind text,
    changed_at timestamptz,
    version_match text,
    at timestamptz,
    weights double precision[]
) returns json
language sql stable parallel safe
as $$
    select json_build_object(
        'score', round(least(case when deprecated then 0.2 else 1 end, greatest(0, coalesce(
            quarry.trust_contribution(weights, 1, quarry.attribution_trust(attribution))
            + quarry.trust_contribution(weights, 2, quarry.verified_trust(verified))
            + quarry.trust_contribution(weights, 3, quarry.freshness_trust(source_kind, quarry.age_days(at, changed_at)))
            + quarry.trust_contribution(weights, 4, quarry.deprecation_trust(deprecated))
            + quarry.trust_contribution(weights, 5, quarry.version_match_trust(version_match)),
            0)))::numeric, 4),
        'factors', json_build_object(
            'attribution', quarry.trust_factor(
                to_json(attribution), quarry.attribution_trust(attribution), weights[1],
                quarry.trust_contribution(weights, 1, quarry.attribution_trust(attribution))),
            'verified', quarry.trust_factor(
                to_json(verified), quarry.verified_trust(verified), weights[2],
                quarry.trust_contribution(weights, 2, quarry.verified_trust(verified))),
            'freshness', quarry.trust_factor(
                to_json(round(quarry.age_days(at, changed_at)::numeric, 2)),
                quarry.freshness_trust(source_kind, quarry.age_days(at, changed_at)), weights[3],
                quarry.trust_contribution(weights, 3, quarry.freshness_trust(source_kind, quarry.age_days(at, changed_at)))),
            'deprecation', quarry.trust_factor(
                to_json(deprecated), quarry.deprecation_trust(deprecated), weights[4],
                quarry.trust_contribution(weights, 4, quarry.deprecation_trust(deprecated))),
            'version_match', quarry.trust_factor(
                to_json(coalesce(version_match, 'unknown')), quarry.version_match_trust(version_match), weights[5],
                quarry.trust_contribution(weights, 5, quarry.version_match_trust(version_match)))))
$$;

comment on function quarry.weighted_trust(text, boolean, boolean, text, timestamptz, text, timestamptz, double precision[]) is
'quarry.trust_factors with the weights given (from quarry.trust_weight_list), as json, for callers scoring many rows at once.';

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
    select quarry.weighted_trust(attribution, verified, deprecated, source_kind, changed_at, version_match, at,
                                 quarry.trust_weight_list())::jsonb
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
