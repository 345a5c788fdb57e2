"""Read replicas: reads go to Postgres streaming replicas that keep up; writes stay on the primary.

``ReplicaSet`` holds one connection pool per replica (``READ_DATABASE_URLS``) and a health view
that one background thread per replica refreshes every ``replica_check_interval_ms``. No request
ever waits for a check: a read takes whatever the view says now.

A replica is usable when it answers, is in recovery, and replays at most ``replica_max_lag_ms``
behind the primary. Lag is measured two ways:

* bytes: the primary's flushed WAL position (``pg_current_wal_flush_lsn()``) minus what the
  replica has replayed (``pg_last_wal_replay_lsn()``). A replica cut off from its primary has
  replayed all it received and looks current to itself; only the primary's position shows it stale.
* time, counted only while bytes are behind: the smaller of two upper bounds, the age of the last
  replayed commit (``pg_last_xact_replay_timestamp()``, which also grows while the primary is idle,
  hence the bytes condition) and the time since a check last found the replica caught up (so the
  first write after an idle hour does not read as an hour of lag).

When no replica is usable, reads go to the primary, so a replica never fails a read. A read that
fails on a replica because the replica went away (between two checks) marks it down and runs
again on the primary; so does one a recovery conflict cancelled. Statement timeouts are not
retried: the primary would time out too.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import psycopg
import psycopg_pool
from psycopg_pool import ConnectionPool

from engine.config import Settings
from engine.store.db import connect_options, open_pool

__all__ = ["ReplicaHealth", "ReplicaSet", "ReplicaState", "assess_lag", "check_replicas", "describe_reads",
           "redact_dsn"]

logger = logging.getLogger("quarry.replicas")

T = TypeVar("T")

ReplicaState = Literal["unknown", "ok", "lagging", "down"]

#: How long a read waits for a replica's pooled connection before it runs on the primary instead:
#: a replica that died since its last check costs one read this much, once.
REPLICA_CHECKOUT_TIMEOUT_S = 1.0

_PRIMARY_POSITION = "select pg_current_wal_flush_lsn()::text"
_REPLICA_POSITION = """
    select pg_is_in_recovery(),
           pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())::bigint,
           extract(epoch from clock_timestamp() - pg_last_xact_replay_timestamp())::float8 * 1000,
           case when pg_is_in_recovery() then pg_is_wal_replay_paused() end
"""


def redact_dsn(url: str) -> str:
    """The DSN as ``key=value`` pairs with any password replaced by ``***`` (for status and logs)."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparsable DSN)"
    for secret in ("password", "sslpassword"):
        if secret in parts:
            parts[secret] = "***"
    first = [key for key in ("host", "hostaddr", "port", "dbname", "user") if key in parts]
    ordered = first + sorted(key for key in parts if key not in first)
    return " ".join(psycopg.conninfo.make_conninfo(**{key: str(parts[key])}) for key in ordered)


def assess_lag(*, bytes_behind: int | None, replay_age_ms: float | None, caught_up_age_ms: float | None,
               max_lag_ms: int) -> tuple[ReplicaState, float | None]:
    """The state and time lag of a replica that answered a check (see the module docstring).

    ``bytes_behind`` None means the primary did not answer: nothing to compare with, so the
    replica stays usable (with the primary down it is the only one that can serve reads).
    """
    if bytes_behind is None:
        return "ok", None
    if bytes_behind <= 0:
        return "ok", 0.0
    bounds = [bound for bound in (replay_age_ms, caught_up_age_ms) if bound is not None]
    lag_ms = max(0.0, min(bounds)) if bounds else None
    if lag_ms is None or lag_ms > max_lag_ms:  # behind by an unknown time: not provably fresh
        return "lagging", lag_ms
    return "ok", lag_ms


@dataclass(frozen=True, slots=True)
class ReplicaHealth:
    dsn: str
    state: ReplicaState = "unknown"
    lag_ms: float | None = None
    lag_bytes: int | None = None
    replay_paused: bool | None = None
    error: str | None = None
    checked_at: float | None = None  # time.monotonic() of the check

    def summary(self) -> str:
        """One line for people: ``ok, lag 12 ms, 4096 bytes`` or ``down; unreachable: ...``."""
        lag = "" if self.state == "down" else (
            f", lag {'unknown' if self.lag_ms is None else f'{self.lag_ms:.0f}'} ms, "
            f"{'unknown' if self.lag_bytes is None else self.lag_bytes} bytes")
        return f"{self.state}{lag}{'; ' + self.error if self.error else ''}"

    def as_dict(self) -> dict[str, Any]:
        ago = None if self.checked_at is None else round(time.monotonic() - self.checked_at, 3)
        return {"dsn": self.dsn, "state": self.state,
                "lag_ms": None if self.lag_ms is None else round(self.lag_ms),
                "lag_bytes": self.lag_bytes, "replay_paused": self.replay_paused, "error": self.error,
                "checked_s_ago": ago}


class _Probe:
    """One long-lived autocommit connection for health checks, reopened once when it was found dead."""

    def __init__(self, url: str, settings: Settings) -> None:
        self._url = url
        self._settings = settings
        self._conn: psycopg.Connection[Any] | None = None

    def fetch(self, query: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        while True:
            reused = self._conn is not None and not self._conn.closed
            try:
                if not reused:
                    self._conn = self._connect()
                assert self._conn is not None
                row = self._conn.execute(query, params).fetchone()
                assert row is not None
                return tuple(row)
            except psycopg.OperationalError:
                self.close()
                if not reused:
                    raise
                # A connection from an earlier check, killed by a restart since: try a fresh one.

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._url, autocommit=True, **connect_options(self._url, self._settings))
        conn.execute("select set_config('statement_timeout', %s, false)",
                     (str(self._settings.connect_timeout_s * 1000),))
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Replica:
    """One replica: its health checks, its pool (opened once it first checks usable) and read counts."""

    def __init__(self, url: str, primary_url: str, settings: Settings, role: str | None, *,
                 serve_reads: bool) -> None:
        self.url = url
        self.dsn = redact_dsn(url)
        self.health = ReplicaHealth(self.dsn)
        self.pool: ConnectionPool | None = None
        self.in_flight = 0
        self.reads = 0
        self._settings = settings
        self._role = role
        self._serve_reads = serve_reads
        self._probe = _Probe(url, settings)
        self._primary_probe = _Probe(primary_url, settings)
        self._caught_up_at: float | None = None
        self._primary_answered = True
        self._check_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def usable(self) -> bool:
        return self.health.state == "ok" and self.pool is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._check_forever, name=f"quarry-replica-check {self.dsn}",
                                        daemon=True)
        self._thread.start()

    def _check_forever(self) -> None:
        interval = self._settings.replica_check_interval_ms / 1000
        while not self._closed.is_set():
            try:
                self.check()
            except Exception:  # a bug in a check must not stop the checking
                logger.exception("replica check failed: %s", self.dsn)
            self._wake.wait(interval)
            self._wake.clear()

    def check(self) -> ReplicaHealth:
        """Probe the primary's WAL position, then the replica's; update and return the health view."""
        with self._check_lock:
            if self._closed.is_set():
                return self.health
            self.health = self._assess()
            return self.health

    def _assess(self) -> ReplicaHealth:
        sampled = time.monotonic()
        try:
            primary_lsn: str | None = self._primary_probe.fetch(_PRIMARY_POSITION)[0]
        except psycopg.Error as error:
            if self._primary_answered:  # said once per outage, not every interval
                logger.warning("replica check: the primary did not answer (%s); lag of %s unknown",
                               _first_line(error), self.dsn)
            primary_lsn = None
        self._primary_answered = primary_lsn is not None
        try:
            in_recovery, behind, replay_age_ms, paused = self._probe.fetch(_REPLICA_POSITION, (primary_lsn,))
        except psycopg.Error as error:
            return self._down(f"unreachable: {_first_line(error)}")
        if not in_recovery:
            return self._down("not a replica: pg_is_in_recovery() is false (promoted, or the primary itself)")
        now = time.monotonic()
        if behind is not None and behind <= 0:
            # Everything the primary had flushed when sampled is replayed: no WAL older than that is missing.
            self._caught_up_at = sampled
        caught_up_age_ms = None if self._caught_up_at is None else (now - self._caught_up_at) * 1000
        state, lag_ms = assess_lag(bytes_behind=behind, replay_age_ms=replay_age_ms,
                                   caught_up_age_ms=caught_up_age_ms, max_lag_ms=self._settings.replica_max_lag_ms)
        note = None if primary_lsn is not None else "the primary did not answer: lag unknown"
        if self._serve_reads and self.pool is None:
            try:
                self.pool = open_pool(self.url, self._settings, role=self._role, timeout=self._checkout_timeout(),
                                      name=f"quarry-replica {self.dsn}")
            except (psycopg.Error, psycopg_pool.PoolTimeout) as failure:
                return self._down(f"pool did not open: {_first_line(failure)}")
        health = ReplicaHealth(self.dsn, state, lag_ms, None if behind is None else max(0, behind), paused, note, now)
        if health.state != self.health.state:
            logger.info("replica %s: %s -> %s (lag %s ms, %s bytes)", self.dsn, self.health.state, health.state,
                        health.lag_ms, health.lag_bytes)
        return health

    def _checkout_timeout(self) -> float:
        return min(REPLICA_CHECKOUT_TIMEOUT_S, self._settings.pool_timeout_ms / 1000)

    def _down(self, reason: str) -> ReplicaHealth:
        if self.health.state != "down":
            logger.warning("replica %s is down: %s", self.dsn, reason)
        return ReplicaHealth(self.dsn, "down", error=reason, checked_at=time.monotonic())

    def mark_down(self, error: BaseException) -> None:
        """A read failed here: stop routing to it now, and check it again at once."""
        self.health = self._down(f"a read failed: {_first_line(error)}")
        self._wake.set()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self._settings.connect_timeout_s * 2 + 5)
        with self._check_lock:
            self._probe.close()
            self._primary_probe.close()
            if self.pool is not None:
                self.pool.close()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _failed_on_replica(error: BaseException) -> bool:
    """Whether a read that raised ``error`` on a replica should run again on the primary."""
    if isinstance(error, psycopg.errors.QueryCanceled):
        return False  # the statement timeout: the primary would time out too
    return isinstance(error, psycopg.OperationalError | psycopg_pool.PoolTimeout | psycopg.errors.SerializationFailure)


class ReplicaSet:
    """The read replicas of one primary, their health, and the choice of a pool for each read."""

    def __init__(self, urls: Sequence[str], primary: ConnectionPool, primary_url: str, settings: Settings, *,
                 role: str | None = None) -> None:
        """Starts one health-check thread per replica; until a replica's first check, reads use the primary."""
        if not urls:
            raise ValueError("a replica set needs at least one replica DSN")
        self.primary = primary
        self.settings = settings
        self.primary_reads = 0
        self._replicas = [_Replica(url, primary_url, settings, role, serve_reads=True) for url in urls]
        self._turn = itertools.count()
        self._lock = threading.Lock()
        for replica in self._replicas:
            replica.start()

    def health(self) -> list[ReplicaHealth]:
        return [replica.health for replica in self._replicas]

    def refresh(self) -> list[ReplicaHealth]:
        """Check every replica now (blocking); the background checks do this on their own."""
        return [replica.check() for replica in self._replicas]

    def run_read(self, read: Callable[[ConnectionPool], T]) -> T:
        """``read(pool)`` on a usable replica (round robin, fewest reads running first), else on the primary."""
        replica = self._choose()
        if replica is None:
            return read(self.primary)
        assert replica.pool is not None
        try:
            return read(replica.pool)
        except Exception as error:
            if not _failed_on_replica(error):
                raise
            if not isinstance(error, psycopg.errors.SerializationFailure):  # a recovery conflict: it is up
                replica.mark_down(error)
            logger.warning("a read failed on replica %s (%s); running it on the primary", replica.dsn,
                           _first_line(error))
            with self._lock:
                self.primary_reads += 1
            return read(self.primary)
        finally:
            with self._lock:
                replica.in_flight -= 1

    def _choose(self) -> _Replica | None:
        with self._lock:
            usable = [replica for replica in self._replicas if replica.usable]
            if not usable:
                self.primary_reads += 1
                return None
            start = next(self._turn) % len(usable)
            rotated = usable[start:] + usable[:start]
            chosen = min(rotated, key=lambda replica: replica.in_flight)  # the first of the least busy
            chosen.in_flight += 1
            chosen.reads += 1
            return chosen

    def dsn_of(self, pool: ConnectionPool) -> str | None:
        """The redacted DSN of the replica ``pool`` belongs to (None for any other pool)."""
        return next((replica.dsn for replica in self._replicas if replica.pool is pool), None)

    def describe(self) -> dict[str, Any]:
        """The health view for ``status``: per replica state, lag and reads served; where reads go now."""
        with self._lock:
            replicas = [replica.health.as_dict() | {"reads": replica.reads} for replica in self._replicas]
            usable = sum(replica.usable for replica in self._replicas)
            primary_reads = self.primary_reads
        return {
            "state": "ok" if usable == len(replicas) else "degraded" if usable else "none_usable",
            "reads_served_by": "replicas" if usable else "primary",
            "max_lag_ms": self.settings.replica_max_lag_ms,
            "check_interval_ms": self.settings.replica_check_interval_ms,
            "primary_reads": primary_reads,
            "replicas": replicas,
        }

    def close(self) -> None:
        for replica in self._replicas:
            replica.close()

    def __enter__(self) -> ReplicaSet:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def describe_reads(replicas: ReplicaSet | None) -> dict[str, Any]:
    """``status``'s view of read routing, also without replicas."""
    if replicas is None:
        return {"state": "no_replicas", "reads_served_by": "primary", "replicas": []}
    return replicas.describe()


def check_replicas(urls: Sequence[str], primary_url: str, settings: Settings) -> list[ReplicaHealth]:
    """One check of each replica, without pools or threads (for ``quarry status``)."""
    replicas = [_Replica(url, primary_url, settings, None, serve_reads=False) for url in urls]
    try:
        return [replica.check() for replica in replicas]
    finally:
        for replica in replicas:
            replica.close()
