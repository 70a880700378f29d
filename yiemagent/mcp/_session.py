"""The asyncio side of an ``MCPClient``: its event-loop thread and its one connection.

This is the only asyncio code in yiemagent. ``start_loop`` starts one thread that runs
one event loop (anyio on asyncio) with a ``BlockingPortal`` in it; every coroutine
below runs on that thread, started from other threads through the portal. Nothing here
blocks a thread other than the loop's own.

Thread safety: ``Connection``'s methods run on the loop thread only (the portal puts
them there); ``session`` is written there. Other threads read ``Connection.label`` and
``timeout_s``, which never change.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Optional

import anyio
import httpx2
from anyio.from_thread import BlockingPortal
from mcp import ClientSession, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation, PaginatedRequestParams

from .. import __version__
from ._listing import ToolListing
from ._stdio import stdio_client
from ._surrogates import mend_response

__all__ = ["MAX_LIST_PAGES", "Connection", "ListingLoopError", "NotConnectedError", "http_transport", "start_loop", "stdio_transport"]

logger = logging.getLogger("yiemagent.mcp")

CLOSE_GRACE_S = 10.0
"""How long closing may take once the server was asked to stop; then ``run`` cuts it short with a
warning. The SDK's own stdio shutdown (close stdin, 2 s, SIGTERM, 2 s, SIGKILL) fits well inside
it, and runs to its end anyway (shielded); what it bounds is, say, an HTTP server that never
answers the session's DELETE. Read at each close: a module constant that tests can lower."""
MAX_HTTP_EVENT_BYTES = 64 * 1024 * 1024
"""The largest SSE event (one message) taken over streamable HTTP: the LLM clients' max_reply_bytes; the SDK's default is 1 MiB."""
MAX_LIST_PAGES = 1000
"""The most pages one listing (``tools/list``, ``resources/list``, ``prompts/list``) follows; a server
with more, or one that gives a cursor twice, makes the listing fail with ``ListingLoopError``
(docs/mcp.md "Lists on many pages"). Read at each listing: a module constant that tests can lower."""
_CLIENT_INFO = Implementation(name="yiemagent", version=__version__)

Transport = Callable[[], AbstractAsyncContextManager[Any]]


class NotConnectedError(ConnectionError):
    """The connection is not (or no longer) open."""


class ListingLoopError(RuntimeError):
    """A paginated list did not end: a cursor came twice, or more than ``MAX_LIST_PAGES`` pages came.

    ``method`` is the list request (``resources/list``); the message says why. The client turns
    it into ``MCPListError`` naming the server.
    """

    def __init__(self, method: str, why: str) -> None:
        super().__init__(f"{method} {why}")
        self.method = method


def start_loop(thread_name: str) -> tuple[BlockingPortal, threading.Thread]:
    """Start a daemon thread running an event loop, and return the loop's portal and the thread.

    Like ``anyio.from_thread.start_blocking_portal`` but not a context manager, so that
    the owner can join the thread with a timeout instead of for ever.
    """
    ready: Future[BlockingPortal] = Future()

    async def serve() -> None:
        async with BlockingPortal() as portal:
            ready.set_result(portal)
            await portal.sleep_until_stopped()

    def run() -> None:
        try:
            anyio.run(serve)
        except BaseException as exc:  # kept on the future or logged, never lost in the thread
            if not ready.done():
                ready.set_exception(exc)
            else:
                logger.exception("MCP event loop thread %r ended with an error", thread_name)

    thread = threading.Thread(target=run, name=thread_name, daemon=True)
    thread.start()
    return ready.result(), thread


def stdio_transport(command: list[str], env: Optional[dict[str, str]], cwd: Optional[str], errlog: Any) -> Transport:
    """The stdio transport (``_stdio``: the SDK's, with a linear-time reader): start ``command`` and speak JSON-RPC on its pipes.

    ``env`` is added to the SDK's safe default environment (HOME, PATH, ...); the
    server's stderr goes to ``errlog``.
    """
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=cwd)
    return lambda: stdio_client(params, errlog=errlog)


def http_transport(url: str, headers: Optional[dict[str, str]], timeout_s: float) -> Transport:
    """The SDK's streamable HTTP transport, with ``headers`` on every request."""

    @asynccontextmanager
    async def open_http() -> AsyncIterator[Any]:
        # read stays long: the server may hold an SSE stream open; calls are bounded by the client
        timeout = httpx2.Timeout(min(timeout_s, 30.0), read=max(timeout_s, 300.0))
        # the hook mends lone surrogate escapes the SDK's parser refuses (_surrogates, docs/mcp.md)
        hooks = {"response": [mend_response(MAX_HTTP_EVENT_BYTES)]}
        async with httpx2.AsyncClient(headers=headers or {}, timeout=timeout, event_hooks=hooks) as client:
            async with streamable_http_client(url, http_client=client, max_sse_event_size=MAX_HTTP_EVENT_BYTES) as streams:
                yield streams

    return open_http


class Connection:
    """One MCP connection: the transport and a ``ClientSession``, opened and closed in one task.

    anyio ties a transport's task group and cancel scopes to the task that entered it,
    so ``run`` enters the transport and the session, reports that it started, and then
    holds them open until ``stop``; calls are separate tasks that use ``session``.

    Thread safety: loop thread only (see the module docstring).
    """

    def __init__(
        self,
        transport: Transport,
        label: str,
        timeout_s: float,
        redact: Callable[[str], str],
        on_tools: Optional[Callable[[list[Any]], None]] = None,
    ) -> None:
        self.label = label
        self._on_tools = on_tools  # called on this thread with the new list after notifications/tools/list_changed
        self._tasks: Optional[anyio.abc.TaskGroup] = None  # where relisting runs (a notification handler must not wait)
        self._relisting: Optional[anyio.Event] = None  # set when the relist in flight is done
        self.timeout_s = timeout_s
        self._transport = transport
        # one bad tool of a tools/list page leaves out that tool only; it also sees tools/list_changed in wire order
        self._listing = ToolListing(label, redact, self._list_changed)
        self.session: Optional[ClientSession] = None
        self._stop: Optional[anyio.Event] = None

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect and initialize within ``timeout_s``, report started, then wait for ``stop``.

        Closing (the session, then the transport: for stdio the SDK closes the server's
        stdin, waits, then SIGTERM and SIGKILL) gets ``CLOSE_GRACE_S``; whatever is not
        done by then is cancelled.
        """
        self._stop = anyio.Event()
        started = False
        try:
            # One scope around everything: its deadline bounds connecting, is lifted while
            # connected, and bounds closing. (A scope around the connecting alone would
            # close before the transport's task group it encloses, which anyio forbids.)
            with anyio.CancelScope(deadline=anyio.current_time() + self.timeout_s) as scope:
                async with AsyncExitStack() as stack:
                    self._tasks = await stack.enter_async_context(anyio.create_task_group())  # exits last: relists end first
                    read, write = self._listing.wrap(*await stack.enter_async_context(self._transport()))
                    session = await stack.enter_async_context(ClientSession(read, write, client_info=_CLIENT_INFO))
                    self._listing.version = (await session.initialize()).protocol_version
                    scope.deadline = math.inf
                    self.session = session
                    started = True
                    task_status.started()
                    await self._stop.wait()
                    self.session = None
                    scope.deadline = anyio.current_time() + CLOSE_GRACE_S
            if not started:
                raise TimeoutError(f"MCP server {self.label!r} did not answer initialize within {self.timeout_s:g} s (timeout_s)")
            if scope.cancelled_caught:
                logger.warning("MCP server %r: closing took longer than %g s and was cut short", self.label, CLOSE_GRACE_S)
        finally:
            self.session = None

    def stop(self) -> None:
        """Ask ``run`` to close the connection (called on the loop thread, through the portal)."""
        if self._stop is not None:
            self._stop.set()

    def _list_changed(self) -> None:
        """``notifications/tools/list_changed`` was read: start a relist (docs/mcp.md "Tools that change").

        Called by the read stream as the notification is read, so a response read after it
        (the call during which the server changed its tools) waits for the relist.
        """
        if self._on_tools is not None and self._tasks is not None and self.session is not None:
            done = self._relisting = anyio.Event()
            self._tasks.start_soon(self._relist, done)

    async def _relist(self, done: anyio.Event) -> None:
        try:
            with anyio.fail_after(self.timeout_s):
                tools = await self.list_tools()
            if self._relisting is done and self._on_tools is not None:  # a later notification's relist wins
                self._on_tools(tools)
        except Exception as exc:  # the connection closed, the server did not answer: the old list stays
            logger.warning("MCP server %r: relisting its tools after tools/list_changed failed: %r", self.label, leaf_text(exc))
        finally:
            done.set()

    async def relisted(self) -> None:
        """Wait (at most ``timeout_s``) for the relist a ``list_changed`` started, if one is in flight."""
        pending = self._relisting
        if pending is not None:
            with anyio.move_on_after(self.timeout_s):
                await pending.wait()

    def _session(self) -> ClientSession:
        if self.session is None:
            raise NotConnectedError(f"MCP server {self.label!r} is not connected")
        return self.session

    async def list_tools(self) -> list[Any]:
        """Every tool the server lists (``tools/list``), every page."""
        return await self._pages("tools/list", "list_tools", "tools")

    async def call_tool(self, name: str, arguments: dict[str, Any], on_progress: Optional[Callable[..., Any]] = None) -> Any:
        """Send ``tools/call``; cancelling this task abandons the request (the SDK tells the server).

        With ``on_progress`` the request carries a progress token and each progress
        notification is awaited as ``on_progress(progress, total, message)``.
        """
        result = await self._session().call_tool(name, arguments, progress_callback=on_progress)
        await self.relisted()  # a call that changed the tool list returns once the new list is in place
        return result

    async def _pages(self, method: str, fetch_name: str, field: str) -> list[Any]:
        """Every item of the paginated list ``method``, following each ``next_cursor`` (docs/mcp.md "Lists on many pages").

        Raises:
            ListingLoopError: a cursor came a second time (the server's list loops), or
                more than ``MAX_LIST_PAGES`` pages came; nothing of the list is returned.
        """
        fetch = getattr(self._session(), fetch_name)
        result = await fetch()
        items = list(getattr(result, field))
        seen: set[str] = set()
        pages = 1
        while result.next_cursor:  # MCP: an absent (or empty) nextCursor ends the list
            cursor = result.next_cursor
            if cursor in seen:
                raise ListingLoopError(method, f"gave the cursor {cursor!r} a second time (page {pages + 1}): its list loops")
            if pages >= MAX_LIST_PAGES:
                raise ListingLoopError(method, f"has more than MAX_LIST_PAGES={MAX_LIST_PAGES} pages; the rest was not read")
            seen.add(cursor)
            result = await fetch(params=PaginatedRequestParams(cursor=cursor))
            items.extend(getattr(result, field))
            pages += 1
        return items

    async def list_resources(self) -> list[Any]:
        """Every resource the server lists (``resources/list``)."""
        return await self._pages("resources/list", "list_resources", "resources")

    async def read_resource(self, uri: str) -> Any:
        """``resources/read`` of one URI."""
        return await self._session().read_resource(uri)

    async def list_prompts(self) -> list[Any]:
        """Every prompt the server lists (``prompts/list``)."""
        return await self._pages("prompts/list", "list_prompts", "prompts")

    async def get_prompt(self, name: str, arguments: Optional[dict[str, str]]) -> Any:
        """``prompts/get`` of one prompt with its arguments."""
        return await self._session().get_prompt(name, arguments)


def leaf_text(exc: BaseException) -> str:
    """The first real exception inside (nested) exception groups, in words."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {exc}"
