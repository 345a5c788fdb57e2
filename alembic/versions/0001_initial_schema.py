"""Initial schema: sources, documents, chunks with a weighted tsvector, embeddings per space.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("create extension if not exists vector")
    # What `quarry migrate` last applied (alembic head + SQL files), so first-use
    # checks cost one query.
    op.execute("""
        create table quarry.schema_state (
            singleton boolean primary key default true check (singleton),
            fingerprint text not null,
            migrated_at timestamptz not null default now()
        )
    """)

    # Text-search helpers live here, not in sql/: the stored tsvector column is
    # generated from them, so changing them needs a migration plus a reindex.
    op.execute(r"""
        create function quarry.identifier_words(body text) returns text
        language sql immutable parallel safe strict
        set search_path = pg_catalog
        as $$
            -- Extra words for code identifiers, so "parseUserId", "parse_user_id" and
            -- "engine.search.run" all match "parse user id" / "search run": camelCase
            -- and dotted or :: paths are split; plain words yield nothing.
            select coalesce(string_agg(
                regexp_replace(
                    regexp_replace(
                        regexp_replace(m[1], '(\.|::|->|/)', ' ', 'g'),
                        '([a-z0-9])([A-Z])', '\1 \2', 'g'),
                    '([A-Z]+)([A-Z][a-z])', '\1 \2', 'g'),
                ' '), '')
            from regexp_matches(
                body,
                '([A-Za-z_][A-Za-z0-9_]*[a-z0-9][A-Z][A-Za-z0-9_]*(?:(?:\.|::|->|/)[A-Za-z_][A-Za-z0-9_]*)*'
                '|[A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::|->)[A-Za-z_][A-Za-z0-9_]*)+)',
                'g') as m
        $$
    """)
    op.execute("""
        comment on function quarry.identifier_words(text) is
        'Words hidden inside code identifiers (camelCase, dotted and :: paths), space-separated.'
    """)
    op.execute("""
        create function quarry.chunk_tsvector(
            title text, heading_path text[], symbol_path text, body text
        ) returns tsvector
        language sql immutable parallel safe
        set search_path = pg_catalog
        as $$
            select
                setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A')
                || setweight(to_tsvector('english'::regconfig,
                       coalesce(symbol_path, '') || ' ' || coalesce(quarry.identifier_words(symbol_path), '')), 'A')
                || setweight(to_tsvector('english'::regconfig, array_to_string(heading_path, ' ')), 'B')
                || setweight(to_tsvector('english'::regconfig, coalesce(body, '')), 'D')
                || setweight(to_tsvector('english'::regconfig, coalesce(quarry.identifier_words(body), '')), 'D')
        $$
    """)
    op.execute("""
        comment on function quarry.chunk_tsvector(text, text[], text, text) is
        'Weighted search vector of a chunk: title and symbol A, headings B, body and split identifiers D.'
    """)

    op.execute("""
        create table quarry.sources (
            id bigint generated always as identity primary key,
            slug text not null unique check (slug ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
            display_name text not null,
            kind text not null default 'mixed'
                check (kind in ('docs_site', 'code_repo', 'standalone', 'mixed')),
            attribution text not null default 'unknown'
                check (attribution in ('official', 'maintainer', 'community', 'unknown')),
            verified boolean not null default false,
            deprecated boolean not null default false,
            base_url text,
            url_template text,
            root_path text,
            version text,
            metadata jsonb not null default '{}'::jsonb,
            created_at timestamptz not null default now(),
            updated_at timestamptz not null default now(),
            last_ingested_at timestamptz
        )
    """)
    op.execute("""
        create table quarry.documents (
            id uuid primary key default gen_random_uuid(),
            source_id bigint not null references quarry.sources (id) on delete cascade,
            path text not null,
            title text not null,
            url text,
            content_hash bytea not null,
            raw bytea not null,
            content_type text not null,
            language text,
            package text,
            parser_version int not null,
            deprecated boolean not null default false,
            metadata jsonb not null default '{}'::jsonb,
            first_seen_at timestamptz not null default now(),
            changed_at timestamptz not null default now(),
            checked_at timestamptz not null default now(),
            unique (source_id, path)
        )
    """)
    op.execute("create index documents_content_hash_idx on quarry.documents (source_id, content_hash)")
    op.execute("""
        create table quarry.chunks (
            id uuid primary key default gen_random_uuid(),
            document_id uuid not null references quarry.documents (id) on delete cascade,
            source_id bigint not null references quarry.sources (id) on delete cascade,
            ordinal int not null,
            content text not null,
            title text not null,
            heading_path text[] not null default '{}',
            symbol_path text,
            is_code boolean not null default false,
            content_type text not null,
            language text,
            package text,
            deprecated boolean not null default false,  -- mirrors the document's flag, for filtering
            start_line int not null,
            end_line int not null,
            start_byte int not null,
            end_byte int not null,
            token_estimate int not null,
            search_vector tsvector generated always as
                (quarry.chunk_tsvector(title, heading_path, symbol_path, content)) stored,
            unique (document_id, ordinal)
        )
    """)
    op.execute("create index chunks_search_vector_idx on quarry.chunks using gin (search_vector)")
    op.execute("create index chunks_source_idx on quarry.chunks (source_id)")
    # Ids are UUIDs, public and opaque to clients; ingestion makes them time-ordered
    # (version 7) so new rows append to the primary-key index instead of scattering.

    # A space is one model + purpose. Vectors of several dimensions share one table;
    # each space gets its own partial HNSW index over a dimension-typed expression,
    # created by quarry.ensure_embedding_space() when the space is first registered.
    op.execute("""
        create table quarry.embedding_spaces (
            name text primary key check (name ~ '^[a-z][a-z0-9_]{0,30}$'),
            model text not null,
            dimension int not null check (dimension between 1 and 16000),
            created_at timestamptz not null default now()
        )
    """)
    op.execute("""
        create table quarry.embeddings (
            chunk_id uuid not null references quarry.chunks (id) on delete cascade,
            space text not null references quarry.embedding_spaces (name) on delete cascade,
            input_hash bytea not null,
            embedding vector not null,
            primary key (chunk_id, space)
        )
    """)
    # Lets ingestion reuse a vector for text it has embedded before (renames, moves,
    # unchanged sections of an edited page) instead of paying the model again.
    op.execute("create index embeddings_input_hash_idx on quarry.embeddings (space, input_hash)")


def downgrade() -> None:
    op.execute("drop table if exists quarry.embeddings, quarry.embedding_spaces, quarry.chunks, "
               "quarry.documents, quarry.sources, quarry.schema_state cascade")
    op.execute("drop function if exists quarry.chunk_tsvector(text, text[], text, text)")
    op.execute("drop function if exists quarry.identifier_words(text)")
