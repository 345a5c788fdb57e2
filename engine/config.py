"""Quarry's one settings object: environment variables with the ``QUARRY_`` prefix.

``DATABASE_URL`` (also accepted as ``QUARRY_DATABASE_URL``) points at an external
Postgres; without it Quarry boots its embedded Postgres in ``QUARRY_HOME``.

Models: with ``VOYAGE_API_KEY`` set, ``auto`` means Voyage (``voyage-3.5`` for the text
space, ``voyage-code-3`` for code, ``rerank-2.5``); without it, the local MiniLM serves
both spaces and there is no reranker unless ``QUARRY_RERANKER=cross-encoder:/path``.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import platformdirs
import psycopg
from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.vocabulary import ToolProfile


def _default_home() -> Path:
    return Path(platformdirs.user_data_dir("quarry", appauthor=False))


class Settings(BaseSettings):
    """Runtime configuration. Every field maps to ``QUARRY_<FIELD>``."""

    # hide_input_in_errors: a rejected DSN may hold a password, and errors end up in logs.
    model_config = SettingsConfigDict(env_prefix="QUARRY_", extra="ignore", frozen=True, hide_input_in_errors=True)

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("QUARRY_DATABASE_URL", "DATABASE_URL")
    )
    home: Path = Field(default_factory=_default_home)
    model_cache: Path | None = None  # default: <home>/models
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=8, ge=1)
    #: Tool calls one server process runs at once; more are refused at once with BUSY instead of
    #: queueing (bench/load.py: 64 queued clients waited ~1 s each at p50 on 2 cores).
    max_in_flight: int = Field(default=16, ge=1)
    #: Of those, how many run on worker threads at once; the others wait their turn in arrival order.
    #: None: twice the usable cores. More threads than that only contend for the cores, the GIL and
    #: Postgres: 16 clients on 2 cores gave 169-183 calls/s at p95 127-138 ms with 16 threads, 196-200
    #: at p95 107-112 with 4 (bench/load.py, docs/BENCHMARKS.md).
    tool_threads: int | None = Field(default=None, ge=1)
    statement_timeout_ms: int = Field(default=15_000, ge=100)
    #: How long a request waits for a pooled connection (all busy, or the database down) before UNAVAILABLE.
    pool_timeout_ms: int = Field(default=5_000, ge=100)
    #: libpq ``connect_timeout`` for the pool's connections, unless the DSN sets one.
    connect_timeout_s: int = Field(default=5, ge=1)
    max_file_bytes: int = Field(default=2_000_000, ge=1_000)
    #: Package indexes ``quarry ingest pypi:NAME`` / ``npm:NAME`` download from (private mirrors: set these;
    #: credentials in the URL are used and never printed). None: the public ones (``engine.fetch``).
    pypi_index_url: str | None = None
    npm_registry: str | None = None
    #: Whether sources added over MCP may be fetched from loopback or private addresses (off: an
    #: admin key must not turn the worker into a probe of the network behind it).
    fetch_private_hosts: bool = False
    #: Streaming replicas that serve read-only tools (comma-separated DSNs, or a JSON list when a DSN
    #: holds a comma); writes, key metering and jobs stay on the primary (``engine.store.replicas``).
    read_database_urls: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias=AliasChoices("QUARRY_READ_DATABASE_URLS", "READ_DATABASE_URLS")
    )
    #: A replica replaying further behind the primary than this is skipped until it catches up.
    replica_max_lag_ms: int = Field(default=10_000, ge=0)
    #: How often each replica's health and lag are checked (in the background, never by a request).
    replica_check_interval_ms: int = Field(default=2_000, ge=100, le=600_000)
    #: RRF's k when fusion is rrf (QUARRY_RRF_K); None keeps quarry.ranking_defaults()'s.
    rrf_k: int | None = Field(default=None, ge=1)

    # The search server (quarry serve / quarry mcp): its login and what one client may hold open.
    #: The DSN the search server connects with. Unset: DATABASE_URL's server as the ``quarry_server``
    #: login that migrations create (engine.store.db.server_database_url). Either way the server refuses
    #: a login that is, or can become, a superuser.
    server_database_url: SecretStr | None = None
    #: A request's headers must arrive within this many seconds of the connection opening (or of the
    #: previous response): slow-header connections are closed instead of held.
    http_header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    #: An idle keep-alive connection is closed after this many seconds without a new request.
    http_keepalive_timeout_s: float = Field(default=5.0, gt=0, le=300)
    #: Open HTTP connections one server process accepts; beyond it a new one gets 503 and is closed.
    http_max_connections: int = Field(default=1000, ge=1)
    #: Open ``GET /mcp`` event streams, in total and per API key (or per client address without keys).
    mcp_max_streams: int = Field(default=100, ge=0)
    mcp_max_streams_per_key: int = Field(default=4, ge=0)
    #: Failed key checks one client address may make before its requests are refused with
    #: RATE_LIMITED (a burst of this many, regained at this many per minute).
    auth_failure_burst: int = Field(default=20, ge=1)
    auth_failures_per_minute: float = Field(default=10.0, gt=0)

    voyage_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("QUARRY_VOYAGE_API_KEY", "VOYAGE_API_KEY")
    )
    voyage_base_url: str | None = None  # a Voyage-compatible endpoint (proxy, test stand-in)
    #: ``auto``, ``local`` (MiniLM) or a Voyage model name, per space.
    text_model: str = "auto"
    code_model: str = "auto"
    #: ``auto``, ``none``, ``voyage:<model>`` or ``cross-encoder:<directory>``.
    reranker: str = "auto"
    provider_timeout_ms: int = Field(default=5_000, ge=100)  # one query embedding or rerank call
    provider_documents_timeout_ms: int = Field(default=60_000, ge=1_000)  # one ingest batch
    provider_max_retries: int = Field(default=3, ge=0, le=10)
    provider_concurrency: int = Field(default=4, ge=1, le=64)
    breaker_failures: int = Field(default=5, ge=1)
    breaker_cool_down_s: float = Field(default=30.0, ge=0)
    #: When on, searching a source needs a suggest_query_params call for it within the TTL (FLOW_GATE).
    flow_gate: bool = False
    flow_gate_ttl_s: float = Field(default=600.0, gt=0)
    #: The MCP tool profile served (mcp_server.profiles): Quarry's own, or a contract's names and envelopes.
    tools: ToolProfile = "default"
    #: The folder ``kb_ingest_evidence`` may read a ``path`` from (None: paths are refused, PATH_DENIED).
    kb_root: Path | None = None

    @field_validator("read_database_urls", mode="before")
    @classmethod
    def _read_database_urls(cls, value: object) -> object:
        return parse_dsn_list(value) if isinstance(value, str) else value

    @field_validator("read_database_urls")
    @classmethod
    def _valid_dsns(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for index, url in enumerate(urls):
            if not url.strip():
                raise ValueError(f"entry {index + 1} is empty (a stray comma?)")
            try:
                psycopg.conninfo.conninfo_to_dict(url)
            except psycopg.ProgrammingError as error:
                # libpq's message names the problem; the DSN itself may hold a password, so it is not echoed
                raise ValueError(f"entry {index + 1} is not a valid Postgres DSN: {error}") from None
        if len(set(urls)) != len(urls):
            raise ValueError("a replica is listed twice")
        return urls

    @property
    def model_dir(self) -> Path:
        return self.model_cache if self.model_cache is not None else self.home / "models"

    @property
    def fetch_dir(self) -> Path:
        """Where fetchers keep mirrors, downloads and clones (a cache: deleting it costs a refetch)."""
        return self.home / "fetch"

    @property
    def running_tool_calls(self) -> int:
        """Tool calls a server runs at once: ``tool_threads`` (default twice the cores), at most ``max_in_flight``."""
        return min(self.max_in_flight, self.tool_threads or 2 * available_cores())


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def parse_dsn_list(value: str) -> tuple[str, ...]:
    """``READ_DATABASE_URLS``: DSNs separated by commas, or a JSON list of strings (for DSNs with commas)."""
    text = value.strip()
    if not text:
        return ()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"a value starting with '[' must be a JSON list of DSN strings ({error})") from None
        if not isinstance(parsed, list) or not all(isinstance(url, str) for url in parsed):
            raise ValueError("a value starting with '[' must be a JSON list of DSN strings")
        return tuple(url.strip() for url in parsed)
    return tuple(url.strip() for url in text.split(","))


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings()
