"""A session in PostgreSQL, for agents on many processes and machines (docs/scale.md).

Beyond the spec. ``PostgresSession`` keeps the ``SQLiteSession`` contract (docs/sessions.md):
``messages()`` in the order appended, ``append`` committed before it returns, ``clear()``
of one session id, every method callable from any thread. It adds what many machines
need: one holder per session id (decision 17), an advisory lock held by the session's own
connection, so the hold ends when the holder's process dies and a holder that lost its
connection can no longer write.

psycopg 3 is imported when the first ``PostgresSession`` is made, so ``yiemagent`` imports
without the ``postgres`` extra; making one without it raises ``ImportError`` naming it.

The tables (created on first use, under a transaction-level advisory lock so that
processes starting together do not race on ``CREATE TABLE``)::

    yiemagent_schema   (version)                    -- one row: 2
    yiemagent_sessions (session_id PK, lock_key)    -- the advisory lock key of each id
    yiemagent_messages (id, session_id, body, mark) -- one row per message, id in insert order

Rows are ``SQLiteSession``'s: the compact form and the writer's mark (docs/sessions.md "Rows
and their mark"). Tables of schema 1 get the ``mark`` column when a session opens them.
"""

from __future__ import annotations

import logging
import math
import os
import select
import socket
import threading
from typing import TYPE_CHECKING, Any, Optional, cast

from ._json import message_to_row
from .sessions import ConnectedSession, check_session_id, messages_from_rows, reads_checked
from ..errors import MessageFormatError, SessionInUseError
from ..types import AgentMessage

if TYPE_CHECKING:
    import psycopg

__all__ = ["LOCK_CLASS", "PostgresSession"]

logger = logging.getLogger("yiemagent.sessions")

_SCHEMA_VERSION = 3  # 2: the mark column; 3: a content of one text block written as its text (docs/sessions.md "Rows and their mark"); 1 and 2 are upgraded when a session opens them
LOCK_CLASS = 0x59454D41  # "YEMA": the first key of every advisory lock yiemagent takes (pg_locks.classid)
_SETUP_KEY = 0  # (LOCK_CLASS, 0) serialises schema setup; session keys start at 1
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS yiemagent_schema (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS yiemagent_sessions ("
    " session_id TEXT PRIMARY KEY,"
    " lock_key INTEGER GENERATED ALWAYS AS IDENTITY UNIQUE)",
    "CREATE TABLE IF NOT EXISTS yiemagent_messages ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " session_id TEXT NOT NULL,"
    " body TEXT NOT NULL,"
    " mark BIGINT)",
    "CREATE INDEX IF NOT EXISTS yiemagent_messages_by_session ON yiemagent_messages (session_id, id)",
)
# The server drops a connection whose peer stopped answering (a machine that died without
# closing its sockets) after about idle + interval * count seconds, and with it the hold.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 10, 5, 3
# The hold's statement. A server process marks each lock it holds for a client with a setting of its own
# (yiemagent.hold_<key>, no privilege needed): a process that has the mark already holds the lock for another client, its
# connections shared by a pooler in transaction mode, and is refused (pooled); only one without it takes the lock ({take}, true once taken)
# and is marked. A mark counts only where the server's lock table (pg_lock_status(), what the view pg_locks shows, which a role may be
# denied) has the process holding the lock: one left without it (a pooler's reset that released the locks but kept the settings) is
# stale, and the lock is taken. One statement, so one server process answers all of it, through any pooler; the CTEs run in order.
_TAKE = (
    "WITH before AS MATERIALIZED (SELECT COALESCE(current_setting('yiemagent.hold_' || %s, true), '') = 'held'"
    " AND EXISTS (SELECT 1 FROM pg_lock_status() WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND classid = %s AND objid = %s AND objsubid = 2) AS pooled),"
    " took AS MATERIALIZED (SELECT pooled, CASE WHEN pooled THEN NULL ELSE {take} END AS taken FROM before)"
    " SELECT pooled, taken, CASE WHEN taken THEN set_config('yiemagent.hold_' || %s, 'held', false) END FROM took"
)
# The release: the mark is cleared only where the lock was held (another process's mark is another client's)
_RELEASE = (
    "WITH freed AS MATERIALIZED (SELECT pg_advisory_unlock(%s, %s) AS released)"
    " SELECT released, CASE WHEN released THEN set_config('yiemagent.hold_' || %s, '', false) END FROM freed"
)
_POOLED = (
    "the server process reached holds the session's lock for another client: a connection pooler in transaction mode"
    " (PgBouncer's pool_mode = transaction) shares server processes between clients, and the hold is a session-level advisory"
    " lock, which lives in one server process (decision 17, docs/scale.md \"PgBouncer\"); connect to PostgreSQL directly,"
    " or through a pool in session mode (pool_mode = session)"
)
_READS_TO_SEE_AN_END = 4  # reads of an idle connection's socket ``held`` makes, at most, to see the server closed it


def _one_row(row: Optional[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The row of a statement that always returns one (an aggregate, a function, a row known to exist): typed as such."""
    return cast("tuple[Any, ...]", row)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(f'PostgresSession needs psycopg 3: pip install "yiemagent[postgres]" ({exc})') from exc
    return psycopg


class PostgresSession(ConnectedSession):
    """A session stored in PostgreSQL: one row per message, in order (docs/scale.md).

    Beyond the spec; the ``SQLiteSession`` contract (docs/sessions.md) on a database many
    machines share. ``body`` is the message as JSON text (the form of docs/sessions.md),
    ``mark`` the writer's mark (docs/sessions.md "Rows and their mark");
    ``id`` is an identity column, so a session's rows in ``id`` order are its messages in
    the order appended while one agent holds it (two writers without a hold get the order
    their inserts were numbered in).

    Durability: ``append`` is one ``INSERT`` in autocommit mode, committed when it
    returns; with the server's default ``synchronous_commit=on`` it is in the server's WAL
    on disk, so it survives a killed client, a killed server and a power cut.

    One holder per session id (decision 17): ``acquire`` takes a session-level advisory
    lock ``(LOCK_CLASS, lock_key)`` on this object's connection, ``lock_key`` being the
    id's row in ``yiemagent_sessions`` (a number of its own, so two ids never share a
    lock). The server ends the lock with the connection: at ``release``/``close``, when
    the holder's process dies (its socket closes), or when the holder's machine stops
    answering TCP keepalives (about 25 s). Writes go through the same connection, so a
    holder whose hold ended with its connection cannot write any more.

    Args:
        dsn: a libpq connection string or URI (``"postgresql://user@host/db"``). It may
            hold a password; the session never shows it (``repr``, errors: host, port and
            database only).
        session_id: which conversation in the database this session is (``check_session_id``).
        timeout: seconds to wait for the server: to connect, and for any one statement
            (``statement_timeout``) before it fails.
        hold_timeout: seconds ``acquire`` waits for another holder to let go before
            ``SessionInUseError``; 0 (the default) fails at once.

    Raises:
        ImportError: psycopg 3 is not installed (the ``postgres`` extra).
        ValueError: a session id ``check_session_id`` refuses (empty, a lone surrogate, NUL), or a
            timeout that is not a finite number of seconds >= 0.
        psycopg.Error: the server cannot be reached or refused the connection.
        MessageFormatError: the database has tables of another schema version.

    Thread safety: one connection guarded by ``_lock``; every method may be called from
    any thread (the agent appends from its run thread and ``add_message``'s caller), one
    statement at a time. Other processes and machines need no coordination beyond the
    database's and the hold.
    """

    def __init__(self, dsn: str, session_id: str, *, timeout: float = 30.0, hold_timeout: float = 0.0) -> None:
        check_session_id(session_id)
        for name, value in (("timeout", timeout), ("hold_timeout", hold_timeout)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0 or math.isinf(value):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        pg = _psycopg()  # not named psycopg: that name is the module's, in the annotations
        self.session_id = session_id
        self.timeout = float(timeout)
        self.hold_timeout = float(hold_timeout)
        self._lock = threading.Lock()  # guards _conn, _lock_key and _held: one statement at a time, from any thread
        self._held = False
        self._lock_key: Optional[int] = None
        self._conn: Optional["psycopg.Connection[Any]"] = pg.connect(
            dsn,
            autocommit=True,
            connect_timeout=max(2, math.ceil(timeout)),
            application_name=f"yiemagent {socket.gethostname()} pid {os.getpid()}"[:63],
            keepalives=1,
            keepalives_idle=KEEPALIVE_IDLE_S,
            keepalives_interval=KEEPALIVE_INTERVAL_S,
            keepalives_count=KEEPALIVE_COUNT,
        )
        info = self._conn.info
        self.where = f"postgresql://{info.host}:{info.port}/{info.dbname}"  # no user, no password
        try:
            self._setup()
        except BaseException:
            self._conn.close()
            raise

    def _setup(self) -> None:
        conn = self._conn
        assert conn is not None
        # the server's side of the keepalives (the client's are in the connect call), and the statement bound: one round trip
        conn.execute(
            f"SET tcp_keepalives_idle = {KEEPALIVE_IDLE_S}; SET tcp_keepalives_interval = {KEEPALIVE_INTERVAL_S};"
            f" SET tcp_keepalives_count = {KEEPALIVE_COUNT}; SET statement_timeout = {int(self.timeout * 1000)}"
        )
        tables = "ARRAY['yiemagent_schema', 'yiemagent_sessions', 'yiemagent_messages']"
        present = _one_row(conn.execute(f"SELECT bool_and(to_regclass(t) IS NOT NULL) FROM unnest({tables}) AS t").fetchone())[0]
        if present and [row[0] for row in conn.execute("SELECT version FROM yiemagent_schema")] == [_SCHEMA_VERSION]:
            return  # the common case: no DDL, no setup lock
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, _SETUP_KEY))
            for statement in _SCHEMA:
                conn.execute(statement)
            versions = [row[0] for row in conn.execute("SELECT version FROM yiemagent_schema")]
            if not versions:
                conn.execute("INSERT INTO yiemagent_schema (version) VALUES (%s)", (_SCHEMA_VERSION,))
            elif versions in ([1], [2]):  # schema 1: its rows stay unmarked, checked as they are read; schema 2's rows read as they are
                conn.execute("ALTER TABLE yiemagent_messages ADD COLUMN IF NOT EXISTS mark BIGINT")
                conn.execute("UPDATE yiemagent_schema SET version = %s", (_SCHEMA_VERSION,))
            else:
                self._check_version(versions)

    def _check_version(self, versions: list[int]) -> None:
        if versions != [_SCHEMA_VERSION]:
            raise MessageFormatError(f"PostgreSQL database {self.where} has schema version {versions}; this yiemagent reads {_SCHEMA_VERSION}, 2 and 1")

    def _connection(self) -> "psycopg.Connection[Any]":
        if self._conn is None:
            raise ValueError(f"{self!r} is closed")
        return self._conn

    @reads_checked
    def messages(self) -> list[AgentMessage]:
        """Every message of this session, in the order appended, each checked as the agent checks it (decision 15).

        Raises:
            MessageFormatError: a stored row is not a message; names the session and the row.
            psycopg.Error: the server failed the query (the connection is lost, say).
        """
        with self._lock:
            rows = self._connection().execute(
                "SELECT id, body, mark FROM yiemagent_messages WHERE session_id = %s ORDER BY id", (self.session_id,)
            ).fetchall()
        return messages_from_rows(rows, f"session {self.session_id!r} in {self.where}")

    def append(self, message: AgentMessage) -> None:
        """Store ``message`` after the session's last one; committed when this returns.

        Raises:
            MessageFormatError: ``message`` is not an ``AgentMessage``.
            psycopg.Error: the server refused the write or the connection is lost (then
                the hold is gone too: this session cannot write again).
        """
        if not isinstance(message, AgentMessage):
            raise MessageFormatError(f"a session stores AgentMessages, got {type(message).__name__}")
        body, mark = message_to_row(message)  # UTF-8 (\u escapes for a lone surrogate), so TEXT takes it as it is
        with self._lock:
            self._connection().execute(
                "INSERT INTO yiemagent_messages (session_id, body, mark) VALUES (%s, %s, %s)", (self.session_id, body.decode("utf-8"), mark)
            )

    def clear(self) -> None:
        """Delete every message of this session (other sessions in the database are untouched)."""
        with self._lock:
            self._connection().execute("DELETE FROM yiemagent_messages WHERE session_id = %s", (self.session_id,))

    def acquire(self) -> None:
        """Hold this session for one agent (decision 17); ``YiemAgent`` calls it before reading the history.

        Takes the session-level advisory lock ``(LOCK_CLASS, lock_key)`` on this
        session's connection: at once, or waiting up to ``hold_timeout`` seconds for the
        holder to let go (the server's ``lock_timeout``: no polling). Two
        ``PostgresSession`` objects exclude each other, in one process or many.

        Raises:
            SessionInUseError: another agent holds the session (the message names the
                session, the database and the holder's host and process), or this object
                already holds it (``held``: a hold whose connection ended is not held).
            psycopg.Error: the server failed the query, or ended this session's connection.
            ValueError: the session is closed.
        """
        with self._lock:
            conn = self._connection()
            if self._still_held(conn):
                raise SessionInUseError(f"session {self.session_id!r} in {self.where} is already held by an agent using this PostgresSession")
            key = self._key(conn)
            if self.hold_timeout <= 0:
                pooled, taken, _ = _one_row(conn.execute(_TAKE.format(take="pg_try_advisory_lock(%s, %s)"), (str(key), LOCK_CLASS, key, LOCK_CLASS, key, str(key))).fetchone())
            else:
                pooled, taken = self._wait_for_lock(conn, key)
            if pooled:
                raise SessionInUseError(f"session {self.session_id!r} in {self.where} cannot be held through this connection: {_POOLED}")
            if not taken:
                waited = f" after waiting {self.hold_timeout:g} s" if self.hold_timeout > 0 else ""
                raise SessionInUseError(
                    f"session {self.session_id!r} in {self.where} is held by another agent{self._holder(conn, key)}{waited}: "
                    "one agent holds a session at a time"
                )
            self._held = True

    def _key(self, conn: "psycopg.Connection[Any]") -> int:
        """The session id's advisory lock key: its row in ``yiemagent_sessions``, made on first use."""
        if self._lock_key is None:
            row = conn.execute("SELECT lock_key FROM yiemagent_sessions WHERE session_id = %s", (self.session_id,)).fetchone()
            if row is None:
                row = conn.execute(
                    "INSERT INTO yiemagent_sessions (session_id) VALUES (%s) ON CONFLICT (session_id) DO NOTHING RETURNING lock_key",
                    (self.session_id,),
                ).fetchone()
                if row is None:  # another process inserted it between the two statements
                    row = conn.execute("SELECT lock_key FROM yiemagent_sessions WHERE session_id = %s", (self.session_id,)).fetchone()
            self._lock_key = int(_one_row(row)[0])  # inserted here or by another process; no session's row is ever deleted
        return self._lock_key

    def _wait_for_lock(self, conn: "psycopg.Connection[Any]", key: int) -> tuple[bool, bool]:
        """(pooled, taken) as ``_TAKE`` says, waiting up to ``hold_timeout`` for the lock."""
        psycopg = _psycopg()
        wait_ms = max(1, int(self.hold_timeout * 1000))
        try:
            with conn.transaction():  # SET LOCAL ends with it; the session-level lock does not
                conn.execute(f"SET LOCAL lock_timeout = {wait_ms}")
                conn.execute(f"SET LOCAL statement_timeout = {wait_ms + int(self.timeout * 1000)}")
                pooled, _, _ = _one_row(conn.execute(_TAKE.format(take="(SELECT true FROM pg_advisory_lock(%s, %s))"), (str(key), LOCK_CLASS, key, LOCK_CLASS, key, str(key))).fetchone())
        except psycopg.errors.LockNotAvailable:
            return False, False
        return bool(pooled), not pooled

    def _holder(self, conn: "psycopg.Connection[Any]", key: int) -> str:
        """`` (<application_name>, server pid N)`` of the connection holding the lock, or "" when it cannot be seen.

        pg_locks shows every database's locks, and an advisory key is a lock only within its
        database: another database's session with the same ``lock_key`` is not the holder.
        """
        try:
            row = conn.execute(
                "SELECT a.application_name, l.pid FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND l.classid = %s AND l.objid = %s AND l.objsubid = 2 AND l.granted",
                (LOCK_CLASS, key),
            ).fetchone()
        except _psycopg().Error:
            return ""
        if row is None:
            return ""
        name, pid = row
        return f" ({name}, server pid {pid})" if name else f" (server pid {pid})"

    @property
    def held(self) -> bool:
        """Whether this object holds its session now (docs/sessions.md "What `held` says").

        True from ``acquire`` until ``release`` or ``close``, and while the hold's
        connection has not been seen to end: the server ends the lock with the connection
        (``pg_terminate_backend``, a server restart, a client machine whose keepalives went
        unanswered), and another session may hold the id since. Seen without a round trip
        (``_still_held``), so it costs no query and never waits for the server; a
        connection whose end the client's operating system has not learned yet (a network
        cut: up to the keepalives' 25 s) still counts as held until then, as it would for
        any client of the server.
        """
        with self._lock:
            return self._still_held(self._conn)

    def _still_held(self, conn: "Optional[psycopg.Connection[Any]]") -> bool:
        """``_held``, made False when ``conn`` is seen ended; the caller holds ``_lock``.

        The end is seen as the server sent it: a closed socket (and any last message
        before it, such as the FATAL of ``pg_terminate_backend``) makes the socket readable
        while the connection is idle, and reading it (``PQconsumeInput``, which parses
        nothing) then fails. So one ``poll`` of the socket when nothing arrived, a read of
        what did; a few reads at most (what an idle connection is sent is one or two messages).
        """
        if not self._held or conn is None:
            return self._held
        if not conn.closed:
            poller = select.poll()
            poller.register(conn.fileno(), select.POLLIN)
            for _ in range(_READS_TO_SEE_AN_END):
                if not poller.poll(0):
                    return True
                try:
                    conn.pgconn.consume_input()
                except _psycopg().OperationalError:
                    break
            else:
                return True
        self._held = False
        return False

    def release(self) -> None:
        """End the hold ``acquire`` took. Does nothing when not held; never raises for a lost connection (its hold is gone with it)."""
        with self._lock:
            if not self._held:
                return
            self._held = False
            conn = self._conn
            if conn is None or conn.closed or self._lock_key is None:
                return
            try:
                if not _one_row(conn.execute(_RELEASE, (LOCK_CLASS, self._lock_key, str(self._lock_key))).fetchone())[0]:
                    # the statement reached another server process than the one holding the lock: a pooler in transaction mode
                    logger.error("%r: the hold could not be released, and stays with a server process of the pool: %s", self, _POOLED)
            except _psycopg().Error as exc:
                logger.warning("%r: releasing the hold failed (%s); closing the connection ends it", self, exc)
                conn.close()

    def __repr__(self) -> str:
        return f"PostgresSession({self.where!r}, {self.session_id!r})"
