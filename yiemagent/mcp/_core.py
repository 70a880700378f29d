"""The inside of an ``MCPClient``: its event-loop thread, its one connection, its calls in flight, closing.

``MCPClient`` (client.py) is the shell a caller holds; ``ClientCore`` is what the loop
thread and the futures' callbacks hold, so that nothing of the client's own machinery
keeps the shell alive (docs/mcp.md "A dropped client"; the agent does the same, see
docs/failures.md "A dropped agent"). When the last reference to the shell goes without
``close()``, ``abandon`` warns as Python does for an unclosed resource
(``ResourceWarning``) and closes the core on a short-lived thread of its own: the
connection closes, a stdio server is stopped (killed if it must be), the loop thread ends.

Thread safety: ``_lock`` guards ``_closed`` and ``_calls``; every method may be called
from any thread. The event loop and the connection live on the thread named
``yiemagent-mcp-<label>``, which only the portal touches; ``label``, ``timeout_s`` and
``redact`` never change.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any, Optional

from .._log_masking import install_log_filter, remove_log_filter
from .._secrets import Secrets
from ..errors import YiemAgentError
from . import _session
from ._session import Connection, ListingLoopError, NotConnectedError, Transport, start_loop

__all__ = ["CLOSE_STEP_S", "ClientCore", "MCPConnectionError", "MCPListError", "MCPRequestError", "abandon", "leaf"]

logger = logging.getLogger("yiemagent.mcp")

CLOSE_STEP_S = 5.0
"""How long ``close`` waits for each step it needs the loop thread for: the loop taking the
connection's stop, then the connection's closing (``_session.CLOSE_GRACE_S`` more), the loop
taking the portal's stop, the thread ending. A loop thread stuck longer, in synchronous code
(a logging handler that blocks on a record logged there, a store registering a new tool
list), is abandoned with an ERROR line (it is a daemon thread): ``close`` never waits for
ever. A module constant so that tests can lower it."""


class MCPConnectionError(YiemAgentError, ConnectionError):
    """An MCP server could not be started, reached or initialized, or did not list its tools.

    Raised by ``MCPClient.stdio``, ``MCPClient.http`` and ``tools()`` — the caller's
    set-up. A failing tool call never raises: it is an error result (spec §12).
    """


class MCPListError(MCPConnectionError):
    """An MCP server's list (``tools/list``, ``resources/list``, ``prompts/list``) did not end:
    it gave a cursor a second time, or more than ``_session.MAX_LIST_PAGES`` pages
    (docs/mcp.md "Lists on many pages").

    Raised by ``tools()``, ``resources()`` and ``prompts()`` instead of a list cut short. The
    message names the server, the list and the cause; ``method`` is the list request. A
    ``MCPConnectionError``, as every other failure to list.
    """

    def __init__(self, message: str, method: str) -> None:
        super().__init__(message)
        self.method = method


class MCPRequestError(YiemAgentError, LookupError):
    """An MCP server answered a request with an error: a resource that does not exist, a prompt
    that does not exist or lacks a required argument (``read_resource``, ``get_prompt``).

    The message names the server, the item and the server's own words; ``code`` is the
    JSON-RPC error code (None when the server sent none).
    """

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code


def leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups, which anyio task groups raise."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


class ClientCore:
    """One connection on one event-loop thread; connected when the constructor returns.

    Raises:
        MCPConnectionError: the server could not be started or reached, or did not
            answer ``initialize`` within ``timeout_s`` (the loop thread has ended).
    """

    def __init__(self, transport: Transport, label: str, timeout_s: float, secrets: Secrets) -> None:
        self.label = label
        self.timeout_s = timeout_s
        self._secrets = secrets  # held here: the log filter holds it weakly
        self.redact: Callable[[str], str] = secrets.redact
        self._lock = threading.Lock()  # guards _closed and _calls
        self._closed = False
        self._calls: set[concurrent.futures.Future[Any]] = set()
        # set by the shell (a weak method: the loop thread must not hold the shell); see _follow.py
        self.on_tools: Optional[Callable[[], Optional[Callable[[list[Any]], None]]]] = None
        self._conn = Connection(transport, label, timeout_s, self.redact, self._tools_changed)
        install_log_filter(secrets)
        self._portal, self._thread = start_loop(f"yiemagent-mcp-{label}")
        try:
            self._run, _ = self._portal.start_task(self._conn.run, name=f"mcp-connection-{label}")
        except BaseException as exc:
            self._stop_loop()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):  # Ctrl-C while connecting is the caller's, not a failure
                raise
            raise self.connection_error(f"could not connect to MCP server {label!r}", exc) from None
        self._run.add_done_callback(self._connection_ended)

    def _tools_changed(self, listing: list[Any]) -> None:
        """On the loop thread: the server's new tool list after ``notifications/tools/list_changed``."""
        apply = self.on_tools() if self.on_tools is not None else None
        if apply is not None:
            try:
                apply(listing)
            except Exception:  # a store that refuses a tool must not end the connection
                logger.exception("MCP server %r: the new tool list could not be registered", self.label)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connection(self) -> Connection:
        """The connection, whose coroutines ``submit`` runs on the loop thread."""
        return self._conn

    def connection_error(self, what: str, exc: BaseException) -> MCPConnectionError:
        """``MCPConnectionError`` saying ``what`` failed and why, masked (and logged at DEBUG only: the caller reports it).

        A list that did not end (``ListingLoopError``) gives its subclass ``MCPListError``.
        """
        cause = leaf(exc)
        if isinstance(cause, ListingLoopError):  # the list itself is at fault: MCPListError, with the list's name
            error: MCPConnectionError = MCPListError(self.redact(f"{what}: {cause}"), cause.method)
            logger.debug("%s", error)
            return error
        if isinstance(cause, TimeoutError) and not str(cause):
            detail = f"no answer within {self.timeout_s:g} s (timeout_s)"
        else:
            detail = f"{type(cause).__name__}: {cause}"
        error = MCPConnectionError(self.redact(f"{what}: {detail}"))
        logger.debug("%s", error)
        return error

    def _connection_ended(self, future: concurrent.futures.Future[Any]) -> None:
        """Log why the connection task ended, unless ``close()`` ended it."""
        failure = None if future.cancelled() else future.exception()
        if failure is None:
            return
        message = self.redact(f"MCP server {self.label!r}: the connection failed: {leaf(failure)!r}")
        # while closing, a server already gone (a refused DELETE, a dead pipe) is expected
        logger.log(logging.DEBUG if self._closed else logging.WARNING, "%s", message)

    def submit(self, func: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run the coroutine function ``func(*args)`` on the loop thread; its future is cancelled by ``close``.

        Raises:
            NotConnectedError: the client is closed.
        """
        closed = NotConnectedError(f"the MCPClient for {self.label!r} is closed")
        with self._lock:
            if self._closed:
                raise closed
        # not under the lock: start_task_soon waits for the loop thread, which may be running
        # the _forget of a call that just ended, and _forget takes the lock (a deadlock, seen)
        try:
            future = self._portal.start_task_soon(func, *args)
        except RuntimeError:  # the portal stopped: close() came meanwhile
            raise closed from None
        with self._lock:
            started = not self._closed
            if started:
                self._calls.add(future)
        if not started:  # close() came meanwhile and did not see this call
            future.cancel()
            raise closed
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._calls.discard(future)

    def close(self) -> None:
        """Cancel the calls in flight, close the connection, stop the loop and join its thread (each step bounded).

        Called on the loop thread itself (user code there, a logging handler say), it returns
        once the calls are cancelled and leaves the rest to a thread of its own: the loop
        cannot wait for itself.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            calls = list(self._calls)
        for future in calls:
            future.cancel()
        if threading.current_thread() is self._thread:  # user code on the loop thread (a log handler): it cannot wait for itself
            threading.Thread(target=self._finish_close, name=f"{self._thread.name}-close", daemon=True).start()
            return
        self._finish_close()

    def _finish_close(self) -> None:
        try:
            self._on_loop(self._conn.stop, timeout=CLOSE_STEP_S)
            self._run.result(timeout=_session.CLOSE_GRACE_S + CLOSE_STEP_S)
        except concurrent.futures.TimeoutError:
            logger.error("MCP server %r: the connection did not close in time; its thread is abandoned", self.label)
        except BaseException:  # the connection had already failed; _connection_ended logged why
            pass
        self._stop_loop()

    def _on_loop(self, func: Callable[..., Any], *args: Any, timeout: float) -> None:
        """Run ``func(*args)`` on the loop thread, waiting at most ``timeout`` s for it to be done.

        The portal's ``start_task_soon`` itself waits, without a bound, until the loop thread
        takes the task (anyio's ``run_sync_from_thread``), so the hand-over is made on a
        short-lived daemon thread (``yiemagent-mcp-<label>-close``): a loop thread stuck in
        synchronous code holds that thread, not the caller of ``close``. What ``func`` or the
        portal raises (the loop already gone) is of no use to ``close`` and is dropped.

        Raises:
            concurrent.futures.TimeoutError: not done within ``timeout`` (that thread is left waiting).
        """

        def hand_over() -> None:
            with contextlib.suppress(BaseException):
                self._portal.start_task_soon(func, *args).result()

        thread = threading.Thread(target=hand_over, name=f"{self._thread.name}-close", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise concurrent.futures.TimeoutError

    def _stop_loop(self) -> None:
        try:
            self._on_loop(self._portal.stop, True, timeout=CLOSE_STEP_S)
        except BaseException:  # the loop thread is stuck: joined below, then abandoned
            pass
        self._thread.join(timeout=CLOSE_STEP_S)
        if self._thread.is_alive():
            logger.error("MCP event loop thread %r did not end; abandoning it (a daemon thread)", self._thread.name)
        remove_log_filter(self._secrets)


def abandon(core: ClientCore) -> None:
    """The shell was collected without ``close()``: warn as Python does for unclosed resources, then close the core."""
    if core.closed:
        return
    # stacklevel 3: the line that dropped the client (2 would be weakref.finalize.__call__)
    warnings.warn(
        f"MCPClient for MCP server {core.label!r} was garbage-collected without close(); its connection is closed",
        ResourceWarning,
        stacklevel=3,
    )
    # on a thread of its own: closing waits for the loop thread, and a finalizer may run on any thread, that one too
    threading.Thread(target=core.close, name=f"yiemagent-mcp-{core.label}-abandon", daemon=True).start()
