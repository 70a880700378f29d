"""One LLM call's deadline and abort: when either fires, the call's socket is shut down.

Beyond the spec (docs/failures.md; docs/streaming.md: an abort stops reading at once). requests'
``timeout`` bounds each read, not the call: a server trickling a byte every few seconds
could hold a call for ever. A ``CallGuard`` bounds the whole call (connecting, waiting
for headers, the body or the stream, the waits between retries) by ``deadline_s``, and
ends it at once when the run's ``AbortSignal`` fires.

How: the guard learns which connection the call uses (the connection pools below report
each connection they hand out in the calling thread), and tripping it shuts that
connection's socket down (``shutdown(SHUT_RDWR)``, which wakes a ``recv`` blocked in
another thread where ``close`` would not). The blocked read returns or raises at once;
the transport sees ``guard.reason`` and raises the matching ``LLMError``. A
deadline is tripped by the process's one deadline thread (``_threads.call_at``), the abort
by ``AbortSignal.on_abort``. No polling.
"""

from __future__ import annotations

import contextvars
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .._threads import call_at
from ..events import current_stream
from ..types import AbortSignal

__all__ = ["ABORTED", "DEADLINE", "CallGuard", "GuardedAdapter"]

ABORTED = "aborted"
DEADLINE = "deadline"

_current: contextvars.ContextVar[Optional["CallGuard"]] = contextvars.ContextVar("yiemagent_call_guard", default=None)


class CallGuard:
    """The deadline and abort of one call, and whether any delta was shown yet.

    Thread safety: made and used by the calling thread; ``trip`` may be called from any
    thread (the deadline thread's, the aborting one). ``_lock`` guards ``_connection``, ``_finished`` and ``reason``.
    """

    def __init__(self, deadline_s: Optional[float], signal: Optional[AbortSignal]) -> None:
        self.deadline_s = deadline_s
        self._deadline = time.monotonic() + deadline_s if deadline_s is not None else None
        self._signal = signal
        self._lock = threading.Lock()  # guards _connection, _finished and reason
        self._connection: Any = None
        self._sockets: list[socket.socket] = []  # dups of the sockets the call opened (see attach_socket)
        self._finished = False  # the call returned: late trips are ignored
        self.reason: Optional[str] = None
        self._tripped = threading.Event()  # set once reason is; retry waits block on it
        self.emitted = False  # a delta went to a listener: retrying would show it twice
        self._cancel_deadline: Callable[[], None] = lambda: None
        self._unregister: Callable[[], None] = lambda: None
        self._token: Optional[contextvars.Token[Optional[CallGuard]]] = None
        self._stream = current_stream()  # who listens to this call's deltas: fixed for the call (events.stream_to)

    def __enter__(self) -> "CallGuard":
        self._token = _current.set(self)
        if self._deadline is not None:
            self._cancel_deadline = call_at(self._deadline, lambda: self.trip(DEADLINE))
        if self._signal is not None:
            self._unregister = self._signal.on_abort(lambda: self.trip(ABORTED))
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            # the call is over: its connection may go back to the pool and serve the next
            # call, so a timer or an abort firing late must not shut it down
            self._connection, self._finished = None, True
            sockets, self._sockets = self._sockets, []
        for duplicate in sockets:
            duplicate.close()  # the connection keeps its own descriptor
        self._cancel_deadline()
        self._unregister()
        if self._token is not None:
            _current.reset(self._token)

    def remaining(self) -> Optional[float]:
        """Seconds left before the deadline (never below 0), or None without a deadline."""
        return max(self._deadline - time.monotonic(), 0.0) if self._deadline is not None else None

    def attach(self, connection: Any) -> None:
        """The connection the call now uses; shut down at once if the guard has already tripped."""
        with self._lock:
            self._connection = connection
            tripped = self.reason is not None
        if tripped:
            _shutdown(connection)

    def attach_socket(self, sock: socket.socket) -> None:
        """A socket the call just connected; shut down at once if the guard has already tripped.

        TLS wraps the socket in an ``SSLSocket`` that takes its descriptor over (the
        plain socket is detached during the handshake), so ``connection.sock`` cannot be
        shut down until the handshake is done: a server that accepts and never answers
        the handshake held an aborted call for the whole per-read ``timeout``. A
        duplicate descriptor of the same socket is kept instead (``shutdown`` acts on
        the socket, whichever descriptor names it) and closed when the call ends.
        """
        try:
            duplicate = sock.dup()
        except OSError:
            return
        with self._lock:
            kept = not self._finished
            if kept:
                self._sockets.append(duplicate)
            tripped = self.reason is not None
        if not kept:
            duplicate.close()
        elif tripped:
            _shutdown_socket(duplicate)

    def trip(self, reason: str) -> None:
        """End the call: remember why (the first reason wins) and shut its socket down."""
        with self._lock:
            if self.reason is not None or self._finished:
                return
            self.reason = reason
            connection = self._connection
            sockets = list(self._sockets)
        self._tripped.set()
        if connection is not None:
            _shutdown(connection)
        for duplicate in sockets:
            _shutdown_socket(duplicate)

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` between retries, or less when the guard trips; return whether it tripped."""
        return self._tripped.wait(seconds)

    def emit(self, kind: str, text: str) -> None:
        """Hand a text or thinking fragment to the run's listener, as ``events.emit_delta`` would."""
        stream = self._stream
        if text and stream is not None:
            self.emitted = True
            stream.emit(kind, text)  # refuses a kind that is neither "text" nor "thinking"


def _shutdown(connection: Any) -> None:
    sock = getattr(connection, "sock", None)
    if sock is not None:
        _shutdown_socket(sock)


def _shutdown_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed, detached by TLS, or never connected


class _GuardedConnectionMixin:
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # type: ignore[misc]
        guard = _current.get()
        if guard is not None:
            guard.attach_socket(sock)
        return sock  # type: ignore[no-any-return]


class _GuardedHTTPConnection(_GuardedConnectionMixin, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedConnectionMixin, HTTPSConnection):
    pass


class _GuardedPoolMixin:
    def _get_conn(self, timeout: Optional[float] = None) -> Any:
        connection = super()._get_conn(timeout)  # type: ignore[misc]
        guard = _current.get()
        if guard is not None:
            guard.attach(connection)
        return connection


class _GuardedHTTPPool(_GuardedPoolMixin, HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(_GuardedPoolMixin, HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


_POOLS = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}


class GuardedAdapter(HTTPAdapter):
    """requests' adapter whose pools report each connection to the calling thread's ``CallGuard``.

    Thread safety: as requests' ``HTTPAdapter``; each thread's session has its own (see ``Transport``).
    The guard is found through a ``ContextVar``, so a pool used from two threads reports
    each connection to the guard of the thread that took it.
    """

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = dict(_POOLS)
        return manager
