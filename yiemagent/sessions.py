"""Sessions: where an agent's history lives between runs and processes (API.md "History and sessions").

A session is any object with ``messages() -> list[AgentMessage]``, ``append(message)``
and ``clear()``. ``YiemAgent(session=...)`` starts from ``session.messages()`` and calls
``session.append`` for each message as it enters the history, before the next LLM round
can see it (so before it can be sent anywhere). ``SQLiteSession`` is the one shipped.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from typing import TYPE_CHECKING, Any, Optional, Protocol, Union

from ._history_json import message_from_json, message_to_json
from .errors import MessageFormatError
from .messages import AgentMessage
from ._failures import user_code_errors

if TYPE_CHECKING:
    from .tooling import AgentState

__all__ = ["HistoryWriter", "SQLiteSession", "Session"]

logger = logging.getLogger("yiemagent.sessions")

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS yiemagent_messages (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS yiemagent_messages_by_session ON yiemagent_messages (session_id, id);
"""
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


class Session(Protocol):
    """What ``YiemAgent(session=...)`` needs of a session (API.md "History and sessions").

    ``append`` is called for each message as it enters the history, from the agent's run
    thread or the thread calling ``add_message``; a session used by one agent is called
    by one of them at a time (under the ``HistoryWriter``'s ``store_lock``). It should
    have stored the message durably when it returns. While it stalls, the agent's history
    can still be read and messages still sent; the run waits.
    """

    def messages(self) -> list[AgentMessage]: ...

    def append(self, message: AgentMessage) -> None: ...

    def clear(self) -> None: ...


class HistoryWriter:
    """Where every message enters an agent's history: ``state.messages``, then the session.

    Spec: §6 (the run appends input, replies and results); API.md "Agent options"
    ``session``: each message is stored as it enters the history, before the next LLM
    round can see it.

    Thread safety: two locks, taken in this order. ``store_lock`` is held across the
    session's ``append``, so the session's order is the history's; only appenders take
    it. ``lock`` guards ``state.messages`` and ``_failure`` and is held only for a list
    operation, never across the session: a session that stalls (a disk, a database lock)
    blocks the thread appending and those queued behind it, never a reader of the history.
    Neither lock is held while taking the agent's ``_wake`` (the agent never waits for
    ``store_lock`` while holding ``_wake``), so there is no lock-order cycle. Any thread
    may call any method.
    """

    __slots__ = ("state", "session", "lock", "store_lock", "_failure")

    def __init__(self, state: "AgentState", session: Optional[Session]) -> None:
        self.state = state
        self.session = session
        self.lock = threading.Lock()  # guards state.messages and _failure; never held across the session
        self.store_lock = threading.Lock()  # orders appends: held from the memory append to the session's return
        self._failure: Optional[str] = None  # the first store that failed since take_failure

    def append(self, message: AgentMessage) -> None:
        """Keep ``message`` in memory and store it; never raises (the run's path).

        A session that fails leaves the message in memory (the conversation stays whole,
        so valid to send) and records the failure: the run takes it with ``take_failure``
        before its next LLM round and ends with stop_reason "error" naming it, so no round
        sees a message the session lacks without the caller being told. Called in the
        agent's run thread, where anything the session raises — ``SystemExit`` too — is
        contained (``pipeline.user_code_errors``): it must not strand the run's response.
        """
        with self.store_lock:
            with self.lock:
                self.state.messages.append(message)
            if self.session is None:
                return
            try:
                self.session.append(message)
            except user_code_errors() as exc:  # sqlite3.Error, OSError, a custom session's own
                why = f"the session {self.session!r} could not store a {getattr(message, 'role', '?')} message: {type(exc).__name__}: {exc}"
                logger.error("%s", why, exc_info=True)
                with self.lock:
                    self._failure = self._failure or why

    def append_stored_first(self, message: AgentMessage) -> None:
        """Store ``message``, then keep it (``add_message`` while idle): a failure raises and nothing is added."""
        with self.store_lock:
            if self.session is not None:
                self.session.append(message)
            with self.lock:
                self.state.messages.append(message)

    def take_failure(self) -> Optional[str]:
        """The first store failure since the last call, if any; clears it."""
        with self.lock:
            failure, self._failure = self._failure, None
            return failure


class SQLiteSession:
    """A session stored in an SQLite database: one row per message, in order.

    Beyond the spec; API.md "History and sessions". Uses the standard library's
    ``sqlite3`` in WAL mode. The table ``yiemagent_messages`` holds ``(id, session_id,
    body)``: ``id`` is SQLite's rowid, which grows with each insert, so a session's rows
    read in ``id`` order are its messages in the order they were appended; ``body`` is the
    message as JSON (the form of docs/sessions.md). Several sessions (other
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
        session_id: which conversation in the file this session is.
        synchronous: SQLite's ``PRAGMA synchronous`` for this connection.
        timeout: seconds to wait for another writer's lock before ``sqlite3.OperationalError``.

    Thread safety: one connection, opened with ``check_same_thread=False`` and guarded by
    ``_lock``, so every method may be called from any thread (the agent appends from its
    run thread and ``add_message``'s caller). Calls are serialised —
    SQLite serialises writers anyway. Other processes need no coordination beyond SQLite's.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        session_id: str,
        *,
        synchronous: str = "FULL",
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"session_id must be text UTF-8 can encode, got {session_id!r} (a lone surrogate)") from None
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}")
        self.path = os.fspath(path)
        self.session_id = session_id
        self._lock = threading.Lock()  # guards _conn: one statement at a time, from any thread
        self._conn: Optional[sqlite3.Connection] = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._setup(synchronous.upper())
        except BaseException:
            self._conn.close()
            raise

    def _setup(self, synchronous: str) -> None:
        conn = self._conn
        assert conn is not None
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":  # e.g. an in-memory database: works, without WAL's concurrency
            logger.warning("SQLite database %r is in journal mode %r, not WAL", self.path, mode)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.executescript(_SCHEMA)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        elif version != _SCHEMA_VERSION:
            raise MessageFormatError(f"SQLite database {self.path!r} has schema version {version}; this yiemagent reads {_SCHEMA_VERSION}")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"{self!r} is closed")
        return self._conn

    def messages(self) -> list[AgentMessage]:
        """Every message of this session, in the order appended.

        Raises:
            MessageFormatError: a stored row is not a message; names the session and the row.
        """
        with self._lock:
            rows = self._connection().execute(
                # as bytes: a body that is not UTF-8 (a corrupt row) is then the row's MessageFormatError,
                # not an sqlite3.OperationalError from fetching it that names no row
                "SELECT id, CAST(body AS BLOB) FROM yiemagent_messages WHERE session_id = ? ORDER BY id", (self.session_id,)
            ).fetchall()
        return [message_from_json(body, f"session {self.session_id!r} in {self.path!r}: row {row_id}") for row_id, body in rows]

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
        body = message_to_json(message)  # UTF-8 bytes, stored as TEXT: any str the message holds can be stored
        with self._lock:
            self._connection().execute(
                "INSERT INTO yiemagent_messages (session_id, body) VALUES (?, CAST(? AS TEXT))", (self.session_id, body)
            )

    def clear(self) -> None:
        """Delete every message of this session (other sessions in the file are untouched)."""
        with self._lock:
            self._connection().execute("DELETE FROM yiemagent_messages WHERE session_id = ?", (self.session_id,))

    def close(self) -> None:
        """Close the connection; further calls raise ``ValueError``. Calling it again does nothing."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "SQLiteSession":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteSession({self.path!r}, {self.session_id!r})"
