"""Sessions: where an agent's history lives between runs and processes (docs/sessions.md).

A session is any object with ``messages() -> list[AgentMessage]``, ``append(message)``
and ``clear()``. ``YiemAgent(session=...)`` starts from ``session.messages()`` and calls
``session.append`` for each message as it enters the history, before the next LLM round
can see it (so before it can be sent anywhere). ``SQLiteSession`` is the one shipped.

A session may also have ``acquire()`` and ``release()`` (``HeldSession``): then one agent
holds it at a time (decision 17). The agent acquires it before it reads the history and
releases it once its last message is stored; ``SQLiteSession`` holds an OS file lock, so
a second agent on the same id, in this process or another, gets ``SessionInUseError`` at
once, and the hold dies with its process.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Optional, Protocol, TypeVar, Union

from ._json import message_from_json, message_to_row, row_mark
from ._stored import _MARKED, loads_row, loads_rows, read_stored
from ._locked_files import release_hold, take_hold
from ..errors import MessageFormatError, SessionInUseError
from ..types import AgentMessage
from .._failures import user_code_errors

__all__ = ["ConnectedSession", "HeldSession", "SQLiteSession", "Session", "check_session_id", "hold_session", "loads_checked", "reads_checked", "release_session"]

logger = logging.getLogger("yiemagent.sessions")

# 2: rows in the compact form, with the writer's mark (docs/sessions.md "Rows and their mark");
# a database of schema 1 gets the column when a session opens it, its rows stay as they are.
# 3: a content of one text block is written as its text, which a reader of schema 2 refuses;
# the rows of schema 2 (and their marks) read as they are
_SCHEMA_VERSION = 3
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS yiemagent_messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, body TEXT NOT NULL, mark INTEGER)",
    "CREATE INDEX IF NOT EXISTS yiemagent_messages_by_session ON yiemagent_messages (session_id, id)",
)
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_PRIVATE_DATABASES = ("", ":memory:")  # a database only its own connection sees: held by the object alone


class Session(Protocol):
    """What ``YiemAgent(session=...)`` needs of a session (docs/sessions.md).

    ``append`` is called for each message as it enters the history, from the agent's run
    thread or the thread calling ``add_message``; a session used by one agent is called
    by one of them at a time (under the ``HistoryWriter``'s ``store_lock``). It should
    have stored the message durably when it returns. While it stalls, the agent's history
    can still be read and messages still sent; the run waits.
    """

    def messages(self) -> list[AgentMessage]: ...

    def append(self, message: AgentMessage) -> None: ...

    def clear(self) -> None: ...


class HeldSession(Session, Protocol):
    """A session one agent holds at a time (decision 17; docs/sessions.md "One agent per session").

    ``YiemAgent`` calls ``acquire`` in its constructor, before it reads ``messages()``,
    and ``release`` once the agent has ended and its last message is stored: after
    ``shutdown``, after it was garbage-collected, or when the constructor failed. A session
    without these methods is not held (several agents may then share it, at their risk).

    ``acquire()`` takes the hold or raises ``SessionInUseError`` naming the session; it
    may wait for the holder first, up to a timeout of the session's own (``SQLiteSession``
    does not wait). The hold must end with its holder's process, whatever kills it.
    ``release()`` ends it; calling it when not held does nothing. Both are called from
    any thread, never at once for one agent.
    """

    def acquire(self) -> None: ...

    def release(self) -> None: ...


_CHECKING_READERS: set[Callable[..., Any]] = set()  # messages() functions whose messages come back checked; filled at import, then only read


def reads_checked(messages: Callable[..., list[AgentMessage]]) -> Callable[..., list[AgentMessage]]:
    """Mark a shipped session's ``messages`` as one whose every message is checked as it is read.

    Such a reader returns each message as ``normalize_message`` leaves it (it reads rows
    with ``message_from_json``), so an agent starting from it does not check them again
    (decision 15, checked once; docs/performance.md "Cost at the edges").
    """
    _CHECKING_READERS.add(messages)
    return messages


def loads_checked(session: Session) -> bool:
    """Whether ``session.messages()`` is a reader marked ``reads_checked``.

    The bound method's own function is compared, so a subclass or an instance that
    replaces ``messages`` is not taken for checked: its messages are checked by the agent.
    """
    return getattr(getattr(session, "messages", None), "__func__", None) in _CHECKING_READERS


def messages_from_rows(rows: "list[tuple[Any, str | bytes, Optional[int]]]", where: str) -> list[AgentMessage]:
    """``message_from_json`` of each ``(row id, body, mark)``; a refusal names ``where`` and the row.

    A row whose mark is the one its body's writer gave it (``_json.row_mark``: the body is
    what that writer checked) is built without checking it again (``_stored.read_marked``;
    docs/sessions.md "Rows and their mark"); those rows are parsed together, as one JSON
    array (``_stored.loads_rows``). Any other row (no mark: written by an older version or
    by other means; a mark that is not its body's: edited since) is checked: the stored
    form the fast way (``_stored.read_stored``), naming no row until one is refused;
    anything else by ``message_from_json`` itself.
    """
    texts = [body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass") for _, body, _ in rows]
    trusted = [mark is not None and mark == row_mark(text) for (_, _, mark), text in zip(rows, texts, strict=True)]
    marked = _MARKED  # read_marked's table, looked up here: a row costs two calls fewer
    if all(trusted):  # the common case: every row marked by its writer
        try:
            return [marked[data["role"]](data) for data in loads_rows(texts)]  # _stored.read_marked
        except Exception:  # a forged mark: each row again, below, the one that fails named
            pass
    values = iter(loads_rows([text for text, ok in zip(texts, trusted, strict=True) if ok]))
    out = []
    for (row_id, body, _), text, ok in zip(rows, texts, trusted, strict=True):
        message = None
        try:
            if ok:
                data = next(values)
                message = marked[data["role"]](data)  # _stored.read_marked
            else:
                message = read_stored(loads_row(text))
        except Exception:  # not JSON, or a marked row that is not what its writer gave (only a forged mark): read the checked way, naming the row
            message = None
        out.append(message if message is not None else message_from_json(body, f"{where}: row {row_id}"))
    return out


def check_session_id(session_id: object) -> None:
    """Refuse a session id a shipped session could not store or hold (docs/sessions.md "Session ids").

    One check for ``SQLiteSession`` and ``PostgresSession``, made by their constructors,
    so an id one of them takes the other takes too: a non-empty str that UTF-8 can
    encode (no lone surrogate: the id is stored as UTF-8 text and hashed as UTF-8 for the
    hold) and without NUL (PostgreSQL's text cannot hold one).

    Raises:
        ValueError: the id is not such a str; the message shows it and names its problem.
    """
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"session_id must be text UTF-8 can encode, got {session_id!r} (a lone surrogate at position {exc.start})") from None
    nul = session_id.find("\x00")
    if nul >= 0:
        raise ValueError(f"session_id must not hold a NUL character, got {session_id!r} (at position {nul})")


def hold_session(session: Session) -> None:
    """Take ``session``'s hold if it has one (``HeldSession``); raises ``SessionInUseError``."""
    acquire = getattr(session, "acquire", None)
    if callable(acquire) and callable(getattr(session, "release", None)):
        acquire()


def release_session(session: Session) -> None:
    """Give ``session``'s hold back if it has one; never raises (it is called as agents end)."""
    release = getattr(session, "release", None)
    if callable(release) and callable(getattr(session, "acquire", None)):
        try:
            release()
        except user_code_errors() as exc:
            logger.error("the session %r could not be released: %s: %s", session, type(exc).__name__, exc, exc_info=True)


_Connected = TypeVar("_Connected", bound="ConnectedSession")  # typing.Self is Python 3.11+ (setup.cfg: python_requires >= 3.10)


class ConnectedSession:
    """What the shipped sessions share: one connection (``_conn``, guarded by ``_lock``) and a hold.

    ``close`` ends the hold (``release``), then closes the connection; a ``with`` block closes it.
    """

    _lock: threading.Lock
    _conn: Any

    def release(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """End the hold, if any, and close the connection; further calls raise ``ValueError``. Calling it again does nothing."""
        self.release()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self: _Connected) -> _Connected:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _into_wal(conn: sqlite3.Connection, timeout: float) -> str:
    """Put the database in WAL mode and return the journal mode it is in, waiting up to ``timeout`` for another connection's lock.

    SQLite answers the switch out of a rollback journal "database is locked" at once, without its busy
    handler, while another connection holds a write lock (waiting could deadlock it): eight sessions
    opening one database of schema 1 at once saw it. So the switch is tried again, as the busy handler
    would, until it is done or ``timeout`` has passed.
    """
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # a bounded wait for another connection's lock, once per open (not the loop)
        pause = min(pause * 2, 0.05)


class SQLiteSession(ConnectedSession):
    """A session stored in an SQLite database: one row per message, in order.

    Beyond the spec (docs/sessions.md). Uses the standard library's
    ``sqlite3`` in WAL mode. The table ``yiemagent_messages`` holds ``(id, session_id,
    body, mark)``: ``id`` is SQLite's rowid, which grows with each insert, so a session's rows
    read in ``id`` order are its messages in the order they were appended; ``body`` is the
    message as JSON (the form of docs/sessions.md), ``mark`` the writer's mark that it
    checked the body (docs/sessions.md "Rows and their mark"). Several sessions (other
    ``session_id``s, other processes) may share one file: each append is one ``INSERT``
    in its own transaction, and SQLite serialises writers across processes (a writer
    waits up to ``timeout`` seconds for another's lock).

    Durability: every ``append`` commits before it returns. With ``synchronous="FULL"``
    (the default) the commit is fsynced, so a stored message survives a power cut as
    well as a killed process; ``"NORMAL"`` survives a killed process (SIGKILL, a crash)
    but may lose the last commits on a power cut, and is several times faster
    (``bench/bench_session.py``).

    Args:
        path: the database file; created with its table if absent.
        session_id: which conversation in the file this session is: a non-empty str without
            a lone surrogate or NUL (``check_session_id``; else ``ValueError``).
        synchronous: SQLite's ``PRAGMA synchronous`` for this connection.
        timeout: seconds to wait for another writer's lock before ``sqlite3.OperationalError``.

    One agent holds a session id at a time (decision 17): ``acquire`` / ``release``
    (``HeldSession``), called by ``YiemAgent``. Reading and appending through a session
    that is not held works as before (a reader beside a running agent, a bulk import).

    Thread safety: one connection, opened with ``check_same_thread=False`` and guarded by
    ``_lock`` with the hold, so every method may be called from any thread (the agent
    appends from its run thread and ``add_message``'s caller). Calls are serialised —
    SQLite serialises writers anyway. Other processes need no coordination beyond SQLite's
    and the hold's file lock.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        session_id: str,
        *,
        synchronous: str = "FULL",
        timeout: float = 30.0,
    ) -> None:
        check_session_id(session_id)
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}")
        self.path = os.fspath(path)
        self.session_id = session_id
        self._lock = threading.Lock()  # guards _conn (one statement at a time, from any thread) and _hold
        self._hold: Union[IO[bytes], bool, None] = None  # the locked lock file while an agent holds the session (True: a private database)
        self._conn: Optional[sqlite3.Connection] = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._setup(synchronous.upper(), timeout)
        except BaseException:
            self._conn.close()
            raise

    def _setup(self, synchronous: str, timeout: float) -> None:
        conn = self._conn
        assert conn is not None
        mode = _into_wal(conn, timeout)
        if str(mode).lower() != "wal":  # e.g. an in-memory database: works, without WAL's concurrency
            logger.warning("SQLite database %r is in journal mode %r, not WAL", self.path, mode)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        if conn.execute("PRAGMA user_version").fetchone()[0] == _SCHEMA_VERSION:
            return  # the common case: nothing to create or change
        conn.execute("BEGIN IMMEDIATE")  # one process creates or upgrades the table; another opening it meanwhile waits, then sees it done
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, 1, 2, _SCHEMA_VERSION):
                raise MessageFormatError(f"SQLite database {self.path!r} has schema version {version}; this yiemagent reads {_SCHEMA_VERSION}, 2 and 1")
            for statement in _SCHEMA:
                conn.execute(statement)
            if "mark" not in {column[1] for column in conn.execute("PRAGMA table_info(yiemagent_messages)")}:
                conn.execute("ALTER TABLE yiemagent_messages ADD COLUMN mark INTEGER")  # schema 1: its rows stay unmarked, checked as they are read
            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"{self!r} is closed")
        return self._conn

    @reads_checked
    def messages(self) -> list[AgentMessage]:
        """Every message of this session, in the order appended, each checked as the agent checks it (decision 15).

        Checked once: a row its writer checked and marked is not checked again (``messages_from_rows``).

        Not mended (decision 17): an agent started on the session, and
        ``history.complete_tool_calls``, make the history valid to send (docs/sessions.md).

        Raises:
            MessageFormatError: a stored row is not a message; names the session and the row.
        """
        with self._lock:
            rows = self._connection().execute(
                # as bytes: a body that is not UTF-8 (a corrupt row) is then the row's MessageFormatError,
                # not an sqlite3.OperationalError from fetching it that names no row
                "SELECT id, CAST(body AS BLOB), mark FROM yiemagent_messages WHERE session_id = ? ORDER BY id", (self.session_id,)
            ).fetchall()
        return messages_from_rows(rows, f"session {self.session_id!r} in {self.path!r}")

    def append(self, message: AgentMessage) -> None:
        """Store ``message`` after the session's last one; committed when this returns.

        Whatever ``details`` holds is stored (docs/sessions.md, "The JSON form").

        Raises:
            MessageFormatError: ``message`` is not an ``AgentMessage``, or no agent would
                take it (``normalize_message``, decision 15): it would not load again.
            sqlite3.Error: the database refused the write (full disk, locked past ``timeout``).
        """
        if not isinstance(message, AgentMessage):
            raise MessageFormatError(f"a session stores AgentMessages, got {type(message).__name__}")
        body, mark = message_to_row(message)  # UTF-8 bytes, stored as TEXT: any str the message holds can be stored
        with self._lock:
            self._connection().execute(
                "INSERT INTO yiemagent_messages (session_id, body, mark) VALUES (?, CAST(? AS TEXT), ?)", (self.session_id, body, mark)
            )

    def clear(self) -> None:
        """Delete every message of this session (other sessions in the file are untouched)."""
        with self._lock:
            self._connection().execute("DELETE FROM yiemagent_messages WHERE session_id = ?", (self.session_id,))

    def acquire(self) -> None:
        """Hold this session for one agent (decision 17); ``YiemAgent`` calls it. Does not wait.

        The hold is an exclusive ``fcntl.flock`` on ``<database>-locks/<hash>.lock``, a file
        named by the SHA-256 of the session id, in a directory beside the database file
        (the database's real path, so every path to one file finds the same lock). The
        kernel drops the lock when the process dies, SIGKILL included: no stale hold. A
        flock belongs to one open file, so two ``SQLiteSession`` objects in one process
        exclude each other too. The file holds the holder's process id, for the error
        message; ``release`` removes it. A database only its connection sees
        (``":memory:"``) is held by this object alone.

        Raises:
            SessionInUseError: another agent holds the session (the message names the
                session, the file and the holder's process id), or this object already holds it.
            OSError: the lock file cannot be created (e.g. a read-only directory).
            ValueError: the session is closed.
        """
        with self._lock:
            self._connection()
            if self._hold is not None:
                raise SessionInUseError(f"session {self.session_id!r} in {self.path!r} is already held by an agent using this SQLiteSession")
            self._hold = True if self.path in _PRIVATE_DATABASES else self._lock_hold_file()

    def _lock_hold_file(self) -> IO[bytes]:
        directory = os.path.realpath(self.path) + "-locks"
        os.makedirs(directory, exist_ok=True)
        handle, holder = take_hold(os.path.join(directory, hashlib.sha256(self.session_id.encode("utf-8")).hexdigest()[:32] + ".lock"))
        if handle is None:
            by = f" (process {holder})" if holder else ""
            raise SessionInUseError(f"session {self.session_id!r} in {self.path!r} is held by another agent{by}: one agent holds a session at a time")
        return handle

    def release(self) -> None:
        """End the hold ``acquire`` took: the lock file is removed, then unlocked. Does nothing when not held."""
        with self._lock:
            hold, self._hold = self._hold, None
            if hold is not None and hold is not True:
                release_hold(hold)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"SQLiteSession({self.path!r}, {self.session_id!r})"

