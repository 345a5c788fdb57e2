-- Semantic versions and node-semver ranges (npm's `semver` 7.x, default options).
--
-- quarry.version_key(version)        sortable key: byte order ("C") is semver precedence
-- quarry.semver_cmp(a, b)            -1 / 0 / 1, like semver.compare
-- quarry.version_range(range)        the versions a range covers, as a multirange of keys
-- quarry.version_satisfies(c, r)     semver.intersects(c, r), exactly
-- quarry.version_contains(r, v)      semver.satisfies(v, r), exactly
-- quarry.version_comparators(range)  the range desugared into node-semver comparator sets
--
-- Key layout: each number is its digit count then its digits ("1" -> "11", "10" -> "210";
-- ten digits or more: ':' and a three-digit count), so shorter numbers sort first.
-- major.minor.patch, then '~' for a release or '-' and the prerelease identifiers for a
-- prerelease ('-' < '~': a prerelease sorts before its release). A numeric identifier is
-- '.' and its number, an alphanumeric one '/' and its text and '!' ('.' < '/': numbers
-- sort before words; '!' is below every identifier character, so "a" < "a-b" < "ab"; a
-- shorter identifier list is a prefix, so it sorts first). Build metadata is dropped.
--   1.2.3 -> 11.12.13~    1.2.3-alpha.1 -> 11.12.13-/alpha!.11    1.2.3-0 -> 11.12.13-.10
--
-- Where && on version_range and semver.intersects disagree: intersects compares
-- comparators pair by pair, as intervals, except that a lone version with a prerelease
-- (=1.2.3-beta) only meets comparators that name a prerelease of 1.2.3, comparators
-- <0.0.0... meet nothing but '*' and lone versions, and "1.2.3-beta" vs "*" is true one
-- way round and false the other. version_satisfies follows node exactly; version_range is
-- the plain interval union, so intersects(c, r) implies version_range(c) && version_range(r):
-- && on an indexed multirange is a sound prefilter, version_satisfies the exact recheck.

create or replace function quarry.semver_key(
    major numeric, minor numeric, patch numeric, prerelease text default null
) returns quarry.semver_key
language plpgsql immutable parallel safe
set search_path = pg_catalog
as $$
declare
    key text := '';
    digits text;
begin
    if greatest(major, minor, patch) > 9007199254740991 then
        -- beyond node-semver's Number.MAX_SAFE_INTEGER: callers raise, naming their text
        return null;
    end if;
    foreach digits in array array[major::text, minor::text, patch::text] loop
        key := key || case when length(digits) < 10 then length(digits)::text
                           else ':' || lpad(length(digits)::text, 3, '0') end
                   || digits || '.';
    end loop;
    key := left(key, -1);
    if prerelease is null then
        return key || '~';
    end if;
    key := key || '-';
    foreach digits in array string_to_array(prerelease, '.') loop
        if digits ~ '^[0-9]+$' then
            key := key || '.' || case when length(digits) < 10 then length(digits)::text
                                      else ':' || lpad(length(digits)::text, 3, '0') end || digits;
        else
            key := key || '/' || digits || '!';
        end if;
    end loop;
    return key;
end
$$;

comment on function quarry.semver_key(numeric, numeric, numeric, text) is
'The sortable key of major.minor.patch[-prerelease] (parts already validated; null above 9007199254740991); see sql/005-semver.sql for the layout.';

create or replace function quarry.semver_release_key(key quarry.semver_key)
returns quarry.semver_key
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- the first '-' of a key is the prerelease marker: numbers never contain one
    select case when right(key, 1) = '~' then key else split_part(key, '-', 1) || '~' end
$$;

comment on function quarry.semver_release_key(quarry.semver_key) is
'The key of a version''s release (1.2.3 for 1.2.3-beta.1; a release''s own key unchanged).';

create or replace function quarry.semver_parse_partial(
    partial text,
    range text default null,
    out major text,
    out minor text,
    out patch text,
    out prerelease text,
    out written_with_v boolean
)
language plpgsql immutable parallel safe
set search_path = pg_catalog
as $$
declare
    body text := regexp_replace(partial, '^v', '');
    core text := split_part(body, '+', 1);
    problem text;
begin
    -- v? major [.minor [.patch [-prerelease] [+build]]], x X * as wildcards. Validated by a
    -- capture-free match and split with string functions: Postgres regex captures are far slower.
    if partial !~ ('^v?(?:0|[1-9][0-9]*|[xX*])(?:\.(?:0|[1-9][0-9]*|[xX*])(?:\.(?:0|[1-9][0-9]*|[xX*])'
                   '(?:-(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?'
                   '(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)?)?$') then
        problem := 'is not a version';
    elsif length(partial) > 256 then
        problem := 'is longer than 256 characters';
    else
        written_with_v := body <> partial;
        if strpos(core, '-') > 0 then
            prerelease := substr(core, strpos(core, '-') + 1);
            core := left(core, strpos(core, '-') - 1);
        end if;
        major := nullif(translate(split_part(core, '.', 1), 'X*', 'xx'), '');
        minor := nullif(translate(split_part(core, '.', 2), 'X*', 'xx'), '');
        patch := nullif(translate(split_part(core, '.', 3), 'X*', 'xx'), '');
        if (major = 'x' and minor <> 'x') or (minor = 'x' and patch <> 'x') then
            problem := 'has a number after a wildcard';
        elsif greatest(length(major), length(minor), length(patch)) >= 16
              and greatest(nullif(major, 'x')::numeric, nullif(minor, 'x')::numeric,
                           nullif(patch, 'x')::numeric) > 9007199254740991 then
            -- node-semver's limit, Number.MAX_SAFE_INTEGER
            problem := 'has a number above 9007199254740991';
        elsif 'x' in (major, minor, patch) and body <> core then
            problem := 'has a prerelease or build on a wildcard';
        end if;
    end if;
    if problem is not null and range is null then
        raise exception 'invalid version "%": %', partial,
            replace(problem, 'is not a version', 'expected major.minor.patch[-prerelease][+build]')
            using errcode = 'invalid_parameter_value';
    elsif problem is not null then
        raise exception 'invalid version range "%": "%" %', range, partial, problem
            using errcode = 'invalid_parameter_value';
    end if;
end
$$;

comment on function quarry.semver_parse_partial(text, text) is
'Split a possibly partial version (1, 1.2, 1.x, v1.2.3-beta+build) into parts, wildcards as x; errors name the range it came from.';

create or replace function quarry.version_key(version text)
returns quarry.semver_key
language plpgsql immutable parallel safe strict
set search_path = pg_catalog
as $$
declare
    trimmed text := btrim(version, E' \t\n\r\f\v');
    parts record;
begin
    -- a leading '=' is accepted, as in a range's =1.2.3
    select * into parts from quarry.semver_parse_partial(regexp_replace(trimmed, '^=', ''));
    if parts.patch is null or 'x' in (parts.major, parts.minor, parts.patch) then
        raise exception 'invalid version "%": expected major.minor.patch without wildcards', version
            using errcode = 'invalid_parameter_value';
    end if;
    return quarry.semver_key(parts.major::numeric, parts.minor::numeric, parts.patch::numeric, parts.prerelease);
end
$$;

comment on function quarry.version_key(text) is
'Sortable key of a semantic version (v and = prefixes allowed, build ignored): ordering keys in collation "C" is semver precedence.';

create or replace function quarry.semver_cmp(a text, b text)
returns int
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    select case when k.a < k.b then -1 when k.a > k.b then 1 else 0 end
    from (select quarry.version_key(a) as a, quarry.version_key(b) as b) k
$$;

comment on function quarry.semver_cmp(text, text) is
'Compare two semantic versions by precedence: -1, 0 or 1 (semver.compare; build metadata ignored).';

create or replace function quarry.make_semver_comparator(
    operator text,
    major numeric,
    minor numeric,
    patch numeric,
    prerelease text default null,
    written_with_v boolean default false
) returns quarry.semver_comparator
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- node-semver rewrites ">=0.0.0" to "*" by matching the text, so ">=v0.0.0" stays
    select case
        when operator = '>=' and (major, minor, patch) = (0, 0, 0) and prerelease is null
             and not written_with_v
            then row('*', null, null)::quarry.semver_comparator
        else row(operator,
                 major || '.' || minor || '.' || patch || coalesce('-' || prerelease, ''),
                 quarry.semver_key(major, minor, patch, prerelease))::quarry.semver_comparator
    end
$$;

comment on function quarry.make_semver_comparator(text, numeric, numeric, numeric, text, boolean) is
'A comparator from an operator and version parts (>=0.0.0 written without v becomes *, as node-semver does).';

create or replace function quarry.semver_desugar_comparator(word text, range text)
returns quarry.semver_comparator[]
language plpgsql immutable parallel safe strict
set search_path = pg_catalog
as $$
declare
    operator text := case when left(word, 2) in ('<=', '>=', '~>') then left(word, 2)
                          when left(word, 1) in ('<', '>', '=', '~', '^') then left(word, 1) end;
    parts record;
    major numeric;
    minor numeric;
    patch numeric;
    any_major boolean;
    any_minor boolean;
    any_patch boolean;
    any_version constant quarry.semver_comparator := row('*', null, null);
begin
    select * into parts
    from quarry.semver_parse_partial(substr(word, coalesce(length(operator), 0) + 1), range);
    any_major := parts.major = 'x';
    any_minor := any_major or coalesce(parts.minor, 'x') = 'x';
    any_patch := any_minor or coalesce(parts.patch, 'x') = 'x';
    major := case when not any_major then parts.major::numeric end;
    minor := case when not any_minor then parts.minor::numeric end;
    patch := case when not any_patch then parts.patch::numeric end;

    if operator = '^' then
        -- ^1.2.3 := >=1.2.3 <2.0.0-0; the first non-zero part may not change
        if any_major then
            return array[any_version];
        elsif any_minor then
            return array[quarry.make_semver_comparator('>=', major, 0, 0),
                         quarry.make_semver_comparator('<', major + 1, 0, 0, '0')];
        elsif any_patch then
            return array[quarry.make_semver_comparator('>=', major, minor, 0),
                         case when major = 0 then quarry.make_semver_comparator('<', 0, minor + 1, 0, '0')
                              else quarry.make_semver_comparator('<', major + 1, 0, 0, '0') end];
        end if;
        return array[quarry.make_semver_comparator('>=', major, minor, patch, parts.prerelease),
                     case when major = 0 and minor = 0 then quarry.make_semver_comparator('<', 0, 0, patch + 1, '0')
                          when major = 0 then quarry.make_semver_comparator('<', 0, minor + 1, 0, '0')
                          else quarry.make_semver_comparator('<', major + 1, 0, 0, '0') end];
    elsif operator in ('~', '~>') then
        -- ~1.2.3 := >=1.2.3 <1.3.0-0; ~1 := >=1.0.0 <2.0.0-0
        if any_major then
            return array[any_version];
        elsif any_minor then
            return array[quarry.make_semver_comparator('>=', major, 0, 0),
                         quarry.make_semver_comparator('<', major + 1, 0, 0, '0')];
        end if;
        return array[quarry.make_semver_comparator('>=', major, minor, coalesce(patch, 0),
                                                   case when not any_patch then parts.prerelease end),
                     quarry.make_semver_comparator('<', major, minor + 1, 0, '0')];
    elsif not any_patch then
        -- a full version: a plain comparator (no operator or = means exactly this version)
        return array[quarry.make_semver_comparator(
            case when coalesce(operator, '=') = '=' then '=' else operator end,
            major, minor, patch, parts.prerelease, parts.written_with_v)];
    elsif any_major then
        -- >* and <* allow nothing (node's null set <0.0.0-0); *, =*, >=*, <=* allow anything
        return array[case when operator in ('<', '>') then quarry.make_semver_comparator('<', 0, 0, 0, '0')
                          else any_version end];
    elsif coalesce(operator, '=') = '=' then
        -- 1.2 := >=1.2.0 <1.3.0-0; 1 := >=1.0.0 <2.0.0-0
        if any_minor then
            return array[quarry.make_semver_comparator('>=', major, 0, 0),
                         quarry.make_semver_comparator('<', major + 1, 0, 0, '0')];
        end if;
        return array[quarry.make_semver_comparator('>=', major, minor, 0),
                     quarry.make_semver_comparator('<', major, minor + 1, 0, '0')];
    end if;
    -- a partial version after < <= > >=: >1.2 := >=1.3.0, <=1.2 := <1.3.0-0, <1.2 := <1.2.0-0
    minor := coalesce(minor, 0);
    if operator in ('>', '<=') then
        if any_minor then
            major := major + 1;
        else
            minor := minor + 1;
        end if;
        operator := case operator when '>' then '>=' else '<' end;
    end if;
    return array[quarry.make_semver_comparator(operator, major, minor, 0,
                                               case when operator = '<' then '0' end)];
end
$$;

comment on function quarry.semver_desugar_comparator(text, text) is
'One word of a range (comparator, ^ caret, ~ tilde, x-range or partial) as node-semver comparators; errors name the range.';

create or replace function quarry.semver_desugar_hyphen(low text, high text, range text)
returns quarry.semver_comparator[]
language plpgsql immutable parallel safe strict
set search_path = pg_catalog
as $$
declare
    low_parts record;
    high_parts record;
    found quarry.semver_comparator[] := '{}';
begin
    -- 1.2 - 2.3.4 := >=1.2.0 <=2.3.4; 1.2.3 - 2.3 := >=1.2.3 <2.4.0-0
    select * into low_parts from quarry.semver_parse_partial(low, range);
    select * into high_parts from quarry.semver_parse_partial(high, range);
    if low_parts.major <> 'x' then
        found := found || quarry.make_semver_comparator(
            '>=', low_parts.major::numeric,
            case when coalesce(low_parts.minor, 'x') = 'x' then 0 else low_parts.minor::numeric end,
            case when coalesce(low_parts.patch, 'x') = 'x' then 0 else low_parts.patch::numeric end,
            low_parts.prerelease, low_parts.written_with_v and coalesce(low_parts.patch, 'x') <> 'x');
    end if;
    if high_parts.major = 'x' then
        null;
    elsif coalesce(high_parts.minor, 'x') = 'x' then
        found := found || quarry.make_semver_comparator('<', high_parts.major::numeric + 1, 0, 0, '0');
    elsif coalesce(high_parts.patch, 'x') = 'x' then
        found := found || quarry.make_semver_comparator(
            '<', high_parts.major::numeric, high_parts.minor::numeric + 1, 0, '0');
    else
        found := found || quarry.make_semver_comparator(
            '<=', high_parts.major::numeric, high_parts.minor::numeric, high_parts.patch::numeric,
            high_parts.prerelease);
    end if;
    return case when found = '{}' then array[row('*', null, null)::quarry.semver_comparator] else found end;
end
$$;

comment on function quarry.semver_desugar_hyphen(text, text, text) is
'A hyphen range (low - high, either side partial) as node-semver comparators; errors name the range.';

create or replace function quarry.semver_desugar(range text)
returns table (alternative int, "position" int, comparator quarry.semver_comparator)
language plpgsql immutable parallel safe strict
set search_path = pg_catalog
as $$
declare
    normalized text := regexp_replace(btrim(range, E' \t\n\r\f\v'), E'[ \t\n\r\f\v]+', ' ', 'g');
    alternatives text[];
    alternative_number int;
    words text[];
    word_number int;
    word text;
    hyphen text[];
    found quarry.semver_comparator[];
begin
    alternatives := case when normalized = '' then array['']
                         else regexp_split_to_array(normalized, ' ?\|\| ?') end;
    for alternative_number in 1 .. cardinality(alternatives) loop
        found := '{}';
        hyphen := case when alternatives[alternative_number] ~ '^[^ ]+ - [^ ]+$'
                       then string_to_array(alternatives[alternative_number], ' - ') end;
        if alternatives[alternative_number] = '' then
            if cardinality(alternatives) > 1 then
                raise exception 'invalid version range "%": empty alternative around ||', range
                    using errcode = 'invalid_parameter_value';
            end if;
            found := array[row('*', null, null)::quarry.semver_comparator];
        elsif hyphen is not null then
            found := quarry.semver_desugar_hyphen(hyphen[1], hyphen[2], range);
            if exists (select from unnest(found) c where c.operator <> '*' and c.key is null) then
                raise exception 'invalid version range "%": "%" implies a number above 9007199254740991',
                    range, hyphen[2] using errcode = 'invalid_parameter_value';
            end if;
        else
            -- space-separated comparators, all of which must hold; "> 1.2" is ">1.2"
            words := string_to_array(alternatives[alternative_number], ' ');
            word_number := 1;
            while word_number <= cardinality(words) loop
                word := words[word_number];
                if word ~ '^(<=|>=|<|>|=|~>|~|\^)$' then
                    if word_number = cardinality(words) then
                        raise exception 'invalid version range "%": "%" has no version after it', range, word
                            using errcode = 'invalid_parameter_value';
                    end if;
                    word_number := word_number + 1;
                    word := word || words[word_number];
                end if;
                found := found || quarry.semver_desugar_comparator(word, range);
                if exists (select from unnest(found) c where c.operator <> '*' and c.key is null) then
                    -- a bound one past a number, e.g. <=9007199254740991 := <9007199254740992.0.0-0
                    raise exception 'invalid version range "%": "%" implies a number above 9007199254740991',
                        range, word using errcode = 'invalid_parameter_value';
                end if;
                word_number := word_number + 1;
            end loop;
        end if;
        return query select alternative_number, i, found[i] from generate_subscripts(found, 1) as i;
    end loop;
end
$$;

comment on function quarry.semver_desugar(text) is
'A node-semver range split at || and desugared word by word into comparators, before node-semver''s set rules.';

create or replace function quarry.version_comparators(range text)
returns table (alternative int, "position" int, comparator quarry.semver_comparator)
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- node-semver's Range constructor rules, applied to the desugared comparators
    with desugared as (
        select d.alternative, d.position, (d.comparator).operator, (d.comparator).version, d.comparator
        from quarry.semver_desugar(range) d
    ),
    -- a set holding the null set (<0.0.0-0) is just the null set
    nulled as (
        select d.* from desugared d
        where (d.operator = '<' and d.version = '0.0.0-0')
           or not exists (select from desugared n
                          where n.alternative = d.alternative and n.operator = '<' and n.version = '0.0.0-0')
    ),
    -- each comparator once per set
    distinct_comparators as (
        select distinct on (n.alternative, n.operator, n.version) n.*
        from nulled n
        order by n.alternative, n.operator, n.version, n.position
    ),
    -- '*' only when it is alone in its set
    comparator_sets as (
        select c.* from distinct_comparators c
        where c.operator <> '*'
           or not exists (select from distinct_comparators o
                          where o.alternative = c.alternative and o.operator <> '*')
    ),
    sets as (
        select s.alternative,
               bool_and(s.operator = '<' and s.version = '0.0.0-0') as is_null_set,
               bool_and(s.operator = '*') as is_any
        from comparator_sets s
        group by s.alternative
    ),
    -- across ||: null sets go unless all are; if more than one set is left and one is
    -- '*', the range is just '*'
    kept_sets as (
        select s.alternative from sets s
        where case
            when (select count(*) from sets) = 1 then true
            when not exists (select from sets o where not o.is_null_set)
                then s.alternative = (select min(o.alternative) from sets o)
            when (select count(*) from sets o where not o.is_null_set) > 1
                 and exists (select from sets o where o.is_any)
                then s.alternative = (select min(o.alternative) from sets o where o.is_any)
            else not s.is_null_set
        end
    )
    select c.alternative, (row_number() over (partition by c.alternative order by c.position))::int, c.comparator
    from comparator_sets c
    join kept_sets k on k.alternative = c.alternative
    order by c.alternative, c.position
$$;

comment on function quarry.version_comparators(text) is
'A node-semver range as the comparator sets node-semver tests (alternatives ORed, comparators in one ANDed); for debugging and the version_* functions.';

create or replace function quarry.semver_comparator_range(comparator quarry.semver_comparator)
returns quarry.semver_range
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    select case comparator.operator
        when '*' then quarry_types.semver_range(null, null, '()')
        when '=' then quarry_types.semver_range(comparator.key, comparator.key, '[]')
        when '>' then quarry_types.semver_range(comparator.key, null, '()')
        when '>=' then quarry_types.semver_range(comparator.key, null, '[)')
        when '<' then quarry_types.semver_range(null, comparator.key, '()')
        when '<=' then quarry_types.semver_range(null, comparator.key, '(]')
    end::quarry.semver_range
$$;

comment on function quarry.semver_comparator_range(quarry.semver_comparator) is
'The keys a comparator admits, as an interval (prerelease exclusion not applied).';

create or replace function quarry.version_range(range text)
returns quarry.semver_multirange
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    select coalesce(range_agg(s.versions), '{}')::quarry.semver_multirange
    from (
        select range_intersect_agg(quarry.semver_comparator_range(c.comparator)) as versions
        from quarry.version_comparators(range) c
        group by c.alternative
    ) s
$$;

comment on function quarry.version_range(text) is
'The versions a node-semver range covers, as a multirange of version keys: store per constraint, compare with && / <@ under a GiST index. && is implied by version_satisfies, not equal to it.';

create or replace function quarry.semver_comparator_matches(
    comparator quarry.semver_comparator, version_key quarry.semver_key
) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    select case comparator.operator
        when '*' then true
        when '=' then version_key = comparator.key
        when '<' then version_key < comparator.key
        when '<=' then version_key <= comparator.key
        when '>' then version_key > comparator.key
        when '>=' then version_key >= comparator.key
    end
$$;

comment on function quarry.semver_comparator_matches(quarry.semver_comparator, quarry.semver_key) is
'Whether a version (by key) passes one comparator''s operator test (Comparator.test).';

create or replace function quarry.semver_comparator_admits(
    comparator quarry.semver_comparator, version_key quarry.semver_key
) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- node-semver's range test: a prerelease passes only if the comparator itself names a
    -- prerelease of the same major.minor.patch
    select quarry.semver_comparator_matches(comparator, version_key)
       and (right(version_key, 1) = '~'
            or (comparator.operator <> '*' and right(comparator.key, 1) <> '~'
                and quarry.semver_release_key(comparator.key) = quarry.semver_release_key(version_key)))
$$;

comment on function quarry.semver_comparator_admits(quarry.semver_comparator, quarry.semver_key) is
'Whether a version passes a one-comparator range (new Range(comparator).test(version)), prerelease rule included.';

create or replace function quarry.semver_comparators_intersect(
    this quarry.semver_comparator, other quarry.semver_comparator
) returns boolean
language sql immutable parallel safe
set search_path = pg_catalog
as $$
    -- Comparator.intersects, case by case and in node-semver's order
    select case
        when this.operator = '*' then true
        when this.operator = '=' then quarry.semver_comparator_admits(other, this.key)
        when other.operator = '*' then true
        when other.operator = '=' then quarry.semver_comparator_admits(this, other.key)
        -- "nothing can possibly be lower": <0.0.0 and <0.0.0-anything meet no bound
        when (this.operator = '<' and quarry.semver_release_key(this.key) = '10.10.10~')
          or (other.operator = '<' and quarry.semver_release_key(other.key) = '10.10.10~') then false
        when left(this.operator, 1) = left(other.operator, 1) then true
        when this.key = other.key then this.operator in ('>=', '<=') and other.operator in ('>=', '<=')
        when this.key < other.key then this.operator like '>%' and other.operator like '<%'
        else this.operator like '<%' and other.operator like '>%'
    end
$$;

comment on function quarry.semver_comparators_intersect(quarry.semver_comparator, quarry.semver_comparator) is
'node-semver''s Comparator.intersects (this against other; not symmetric when a prerelease meets *).';

create or replace function quarry.version_satisfies("constraint" text, range text)
returns boolean
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- Range.intersects: some set of each side is satisfiable and all their pairs meet
    with constraint_sets as materialized (select * from quarry.version_comparators("constraint")),
    range_sets as materialized (select * from quarry.version_comparators(range)),
    satisfiable_constraint_sets as (
        select distinct c.alternative from constraint_sets c
        where not exists (
            select from constraint_sets a join constraint_sets b
              on a.alternative = b.alternative and a.position < b.position
            where a.alternative = c.alternative
              and not quarry.semver_comparators_intersect(b.comparator, a.comparator))
    ),
    satisfiable_range_sets as (
        select distinct r.alternative from range_sets r
        where not exists (
            select from range_sets a join range_sets b
              on a.alternative = b.alternative and a.position < b.position
            where a.alternative = r.alternative
              and not quarry.semver_comparators_intersect(b.comparator, a.comparator))
    )
    select exists (
        select from satisfiable_constraint_sets cs cross join satisfiable_range_sets rs
        where not exists (
            select from constraint_sets c join range_sets r
              on c.alternative = cs.alternative and r.alternative = rs.alternative
            where not quarry.semver_comparators_intersect(c.comparator, r.comparator))
    )
$$;

comment on function quarry.version_satisfies(text, text) is
'Whether a version constraint and a requested range share a version, exactly as semver.intersects(constraint, range) (semver 7.x, default options).';

create or replace function quarry.version_contains(range text, version text)
returns boolean
language sql immutable parallel safe strict
set search_path = pg_catalog
as $$
    -- Range.test: every comparator of some set passes, and a prerelease needs a comparator
    -- in that set naming a prerelease of the same major.minor.patch
    with candidate as (select quarry.version_key(version) as key)
    select exists (
        select from quarry.version_comparators(range) c cross join candidate v
        group by c.alternative, v.key
        having bool_and(quarry.semver_comparator_matches(c.comparator, v.key))
           and (right(v.key, 1) = '~'
                or bool_or((c.comparator).operator <> '*' and right((c.comparator).key, 1) <> '~'
                           and quarry.semver_release_key((c.comparator).key) = quarry.semver_release_key(v.key)))
    )
$$;

comment on function quarry.version_contains(text, text) is
'Whether a version satisfies a node-semver range, exactly as semver.satisfies(version, range) (prereleases only where the range names one of the same major.minor.patch).';
