"""``MCPClient``: a Model Context Protocol server's tools as blocking ``AgentTool`` s.

docs/mcp.md; docs/api.md "MCP servers". The SDK is asyncio-based; the client owns one
event-loop thread (see ``_session``) and every public method, and every tool's
``execute``, is a plain blocking call that hands a coroutine to that thread and waits
for its future with a deadline. docs/mcp.md describes the threads and every failure.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any, Optional

from .._secrets import Secrets
from ..errors import ToolError, ToolSchemaError
from ..types import AbortSignal, AgentMessage, AgentTool, AgentToolResult, MessageContent, TextContent
from ..registry import ToolStore, check_input_schema
from ._convert import (
    MCPPrompt,
    MCPResource,
    agent_tool_names,
    content_blocks,
    error_text,
    prompt_messages,
    prompt_record,
    resource_blocks,
    resource_record,
    tool_label,
)
from ._core import ClientCore, MCPConnectionError, MCPListError, MCPRequestError, abandon, leaf
from ._follow import ToolFollower
from ._session import ListingLoopError, NotConnectedError, Transport, http_transport, stdio_transport

__all__ = ["MCPClient", "MCPConnectionError", "MCPListError", "MCPRequestError"]

logger = logging.getLogger("yiemagent.mcp")

_CONNECTION_CLOSED = -32000  # JSON-RPC error codes the SDK uses (mcp_types.jsonrpc)
_REQUEST_TIMEOUT = -32001
_DONE = object()  # put on a call's update queue when the call's future is done


def _masked(secrets: Secrets, mapping: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
    """``mapping`` (headers, env) for a repr: every value ``***``; None stays None."""
    return None if mapping is None else secrets.masked_headers(mapping)


def _errlog() -> Any:
    """Where a stdio server's stderr goes: ours, as every MCP client does (a real file is needed)."""
    for stream in (sys.stderr, sys.__stderr__):
        if stream is None:  # no stderr at all (pythonw)
            continue
        try:
            stream.fileno()
            return stream
        except (AttributeError, OSError, ValueError):
            continue
    return None


class MCPClient:
    """A connection to one MCP server, whose tools become ``AgentTool`` s.

    Make one with ``MCPClient.stdio(...)`` or ``MCPClient.http(...)``: both connect,
    initialize and return only when the server answered (or raise
    ``MCPConnectionError`` within ``timeout_s``). ``tools()`` lists the server's tools;
    each tool's ``execute`` sends ``tools/call`` and waits at most ``timeout_s``; the
    call's abort signal cancels the request. ``close()`` (or leaving a ``with`` block)
    closes the connection, stops a stdio server (killing it if it ignores the request),
    and ends the client's thread.

    A client dropped without ``close()`` gives a ``ResourceWarning`` when it is
    collected, and is closed then (its server stopped, its thread ended): the loop
    thread holds only the client's inside (``_core.ClientCore``), never the client.
    Each of its tools holds the client, so a tool still in use keeps it open.

    Thread safety: every method may be called from any thread, and tools may run in
    parallel (their requests share the one connection); ``ClientCore`` holds the state
    they share and its lock. ``name`` and ``timeout_s`` never change.
    """

    def __init__(self, transport: Transport, *, label: str, name: Optional[str], timeout_s: float, secrets: Secrets, shown: str) -> None:
        """Connect; use ``MCPClient.stdio`` or ``MCPClient.http`` rather than this."""
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"name must be a non-empty string or None, got {name!r}")
        self.name = name
        self.timeout_s = float(timeout_s)
        self._shown = shown
        self._core = ClientCore(transport, label, self.timeout_s, secrets)
        self._redact = self._core.redact
        self._follower = ToolFollower(self._core.label)
        self._core.on_tools = weakref.WeakMethod(self._tools_changed)  # the loop thread holds the core, never the shell
        finalizer = weakref.finalize(self, abandon, self._core)
        finalizer.atexit = False  # at exit the daemon thread just stops and a stdio server sees its stdin close

    # --- construction ------------------------------------------------------------------

    @classmethod
    def stdio(
        cls,
        command: list[str],
        *,
        env: Optional[dict[str, str]] = None,
        cwd: Optional[str] = None,
        name: Optional[str] = None,
        timeout_s: float = 60,
    ) -> MCPClient:
        """Start ``command`` (``[program, *args]``) as a subprocess and speak MCP over its stdin/stdout.

        ``env`` is added to a safe default environment (HOME, PATH, SHELL, TERM, USER,
        LOGNAME: the SDK's choice, so a server does not inherit every secret of ours);
        its values are treated as secrets. The server's stderr is ours. ``name``
        prefixes the tool names (``<name>_<tool>``) and names the client's thread.

        Raises:
            ValueError: ``command`` is not a non-empty list of strings.
            MCPConnectionError: the program could not be started, or did not answer
                ``initialize`` within ``timeout_s``.
        """
        if isinstance(command, str) or not command or not all(isinstance(part, str) for part in command):
            raise ValueError(f"command must be a non-empty list of strings, e.g. ['mcp-server-time'], got {command!r}")
        label = name or command[0].rsplit("/", 1)[-1]
        secrets = Secrets(values=env)
        shown = f"command={command!r}, env={_masked(secrets, env)!r}"
        return cls(stdio_transport(list(command), env, cwd, _errlog()), label=label, name=name, timeout_s=timeout_s, secrets=secrets, shown=shown)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Optional[dict[str, str]] = None,
        name: Optional[str] = None,
        timeout_s: float = 60,
    ) -> MCPClient:
        """Connect to an MCP server over streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``).

        ``headers`` (say ``{"Authorization": "Bearer ..."}``) go with every request and
        are secrets: reprs show ``***``, and error messages and logs have their values
        replaced by ``***``.

        Raises:
            ValueError: ``url`` is not an http(s) URL.
            MCPConnectionError: the server could not be reached or did not answer
                ``initialize`` within ``timeout_s``.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
        label = name or "http"
        secrets = Secrets(url=url, values=headers)
        shown = f"url={secrets.redact(url)!r}, headers={_masked(secrets, headers)!r}"
        return cls(http_transport(url, dict(headers or {}), float(timeout_s)), label=label, name=name, timeout_s=timeout_s, secrets=secrets, shown=shown)

    def __repr__(self) -> str:
        state = "closed" if self._core.closed else "open"
        return f"MCPClient({self._shown}, name={self.name!r}, timeout_s={self.timeout_s:g}, {state})"

    def __enter__(self) -> MCPClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # --- the blocking facade ------------------------------------------------------------

    def tools(self, store: Optional[ToolStore] = None) -> list[AgentTool]:
        """The server's tools, listed now (``tools/list``), as ``AgentTool`` s.

        With a ``store`` (``agent.tool_store``) they are registered there too, and the
        client keeps that store in step with the server: after the server sends
        ``notifications/tools/list_changed`` the client relists and registers the new
        list (new tools added, changed ones replaced, dropped ones removed), so the
        agent sees it at its next LLM round (docs/mcp.md "Tools that change").

        Each tool's ``input_schema`` is the MCP tool's ``inputSchema``; its name is the
        MCP name, or ``<name>_<tool>`` when the client has a ``name``, mapped into
        ``[A-Za-z0-9_-]{1,64}`` (the rule LLM APIs enforce). A tool whose schema is not
        valid JSON Schema is left out, with a warning in the log. Every tool has
        ``parallel_tool_execute=True``: calls are independent requests on the one
        connection (an agent still runs them one by one unless it is parallel).

        Raises:
            MCPConnectionError: the client is closed, the server is gone, or it did not
                answer within ``timeout_s``.
            MCPListError: its list did not end (a cursor given twice, more than
                ``MAX_LIST_PAGES`` pages; docs/mcp.md "Lists on many pages").
        """
        try:
            listing = self._core.submit(self._core.connection.list_tools).result(timeout=self.timeout_s)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise self._core.connection_error(f"MCP server {self._core.label!r} did not list its tools", exc) from None
        tools = self._agent_tools(listing)
        if store is not None:
            self._follower.follow(store, tools)
        return tools

    def _tools_changed(self, listing: list[Any]) -> None:
        """On the loop thread, after ``notifications/tools/list_changed``: the new list into every store followed."""
        self._follower.update(self._agent_tools(listing))

    def _agent_tools(self, listing: list[Any]) -> list[AgentTool]:
        by_name: dict[str, Any] = {}
        for tool in listing:
            if tool.name in by_name:
                logger.warning("MCP server %r listed tool %r twice; the first is used", self._core.label, tool.name)
                continue
            by_name[tool.name] = tool
        tools = []
        for agent_name, mcp_name in agent_tool_names(by_name, self.name).items():
            tool = by_name[mcp_name]
            schema = dict(tool.input_schema)
            try:
                check_input_schema(agent_name, schema)
            except ToolSchemaError as exc:
                logger.warning("MCP server %r: tool %r left out: %s", self._core.label, mcp_name, exc)
                continue
            tools.append(
                AgentTool(
                    name=agent_name,
                    label=tool_label(tool),
                    description=tool.description or "",
                    input_schema=schema,
                    execute=self._executor(mcp_name),
                    parallel_tool_execute=True,
                )
            )
        return tools

    def _executor(self, mcp_name: str) -> Callable[..., AgentToolResult]:
        def execute(tool_call_id: str, args: dict[str, Any], signal: Optional[AbortSignal] = None, on_partial_result: Any = None) -> AgentToolResult:
            return self.call_tool(mcp_name, args, signal, on_partial_result)

        execute.__name__ = execute.__qualname__ = f"mcp_{mcp_name}"
        return execute

    def call_tool(
        self, name: str, arguments: dict[str, Any], signal: Optional[AbortSignal] = None, on_partial_result: Optional[Callable[[Any], Any]] = None
    ) -> AgentToolResult:
        """Call the MCP tool ``name`` (its MCP name) and wait at most ``timeout_s``.

        This is what each tool's ``execute`` does. An MCP result with ``is_error``, a
        protocol error, a dead or silent server, a result that is not valid MCP, an
        abort and the timeout all raise ``ToolError`` with the cause in words, which the
        pipeline turns into an error result (spec §8.2); each also logs a warning.
        Otherwise the result's text and images are its content (other kinds become a
        line of text) and its ``structured_content`` is ``details``. Each progress
        notification the server sends for the call is passed to ``on_partial_result``
        (spec §13: a ``ToolExecUpdateEvent``), on this thread, never on the loop's.

        Raises:
            ToolError: as above; never anything else for a failure of the server.
        """
        label = self._core.label
        if signal is not None and signal.aborted:  # not sent at all (a cancel could come after a fast answer)
            raise self._call_failed(name, f"aborted ({signal.reason or 'no reason given'}) before it was sent")
        # progress notifications and the call's end, in order; the loop thread only puts (never blocks)
        updates: queue.SimpleQueue[Any] = queue.SimpleQueue()

        async def progress(value: float, total: Optional[float], message: Optional[str]) -> None:
            updates.put((value, total, message))

        try:
            future = self._core.submit(self._core.connection.call_tool, name, dict(arguments), progress if on_partial_result else None)
        except NotConnectedError as exc:
            raise self._call_failed(name, str(exc)) from None
        future.add_done_callback(lambda _: updates.put(_DONE))
        unregister = signal.on_abort(future.cancel) if signal is not None else (lambda: None)
        try:
            self._wait(future, updates, on_partial_result)
            result = future.result(timeout=0)
        except concurrent.futures.TimeoutError:
            raise self._call_failed(name, f"no answer within {self.timeout_s:g} s (timeout_s); the request was cancelled") from None
        except concurrent.futures.CancelledError:
            if signal is not None and signal.aborted:
                raise self._call_failed(name, f"aborted ({signal.reason or 'no reason given'}); the request was cancelled") from None
            raise self._call_failed(name, f"the MCPClient for {label!r} was closed during the call") from None
        except Exception as exc:
            raise self._call_failed(name, self._explain(exc)) from None
        finally:
            unregister()
            future.cancel()  # a no-op once done; otherwise (timeout, a raising callback) the request is abandoned
        if result.is_error:
            raise ToolError(self._redact(error_text(result)))
        details = result.structured_content if result.structured_content is not None else {}
        return AgentToolResult(content_blocks(result), details)

    def _wait(self, future: concurrent.futures.Future[Any], updates: queue.SimpleQueue[Any], on_partial_result: Any) -> None:
        """Block until the call ends, passing on progress; raise ``TimeoutError`` after ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                item = updates.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise concurrent.futures.TimeoutError from None
            if item is _DONE:
                return
            value, total, message = item
            done = f"{value:g}/{total:g}" if total is not None else f"{value:g}"
            text = f"progress {done}" + (f": {message}" if message else "")
            on_partial_result(AgentToolResult([TextContent(self._redact(text))], {"progress": value, "total": total, "message": message}))

    def _explain(self, exc: BaseException) -> str:
        """A failed call's cause in words for the model and the log."""
        exc = leaf(exc)
        label = self._core.label
        code = getattr(exc, "code", None)
        if isinstance(exc, NotConnectedError):
            return str(exc)
        if code == _CONNECTION_CLOSED:
            return f"the connection to MCP server {label!r} is closed (the server exited or dropped it)"
        if code == _REQUEST_TIMEOUT:
            return f"MCP server {label!r} did not answer in time"
        if isinstance(code, int):
            return f"MCP server {label!r} answered with error {code}: {getattr(exc, 'message', exc)}"
        if type(exc).__name__ == "ValidationError":  # pydantic: the reply is not valid MCP
            first = exc.errors()[0] if hasattr(exc, "errors") else {}
            where = ".".join(str(part) for part in first.get("loc", ())) or "(root)"
            return f"MCP server {label!r} sent a reply that is not valid MCP (at {where}: {first.get('msg', exc)})"
        return f"MCP server {label!r}: {type(exc).__name__}: {exc}"

    def _call_failed(self, name: str, why: str) -> ToolError:
        message = self._redact(f"MCP tool {name!r} failed: {why}")
        logger.warning("%s", message)
        return ToolError(message)

    # --- resources and prompts (docs/mcp.md "Resources and prompts") ---------------------

    def resources(self) -> list[MCPResource]:
        """The server's resources (``resources/list``, every page: docs/mcp.md "Lists on many pages").

        Raises:
            MCPConnectionError: the client is closed, the server is gone or did not answer in ``timeout_s``.
            MCPListError: the list did not end (a cursor given twice, more than ``MAX_LIST_PAGES`` pages).
            MCPRequestError: the server answered with an error (it offers no resources, say).
        """
        return [resource_record(r) for r in self._request("list its resources", self._core.connection.list_resources)]

    def read_resource(self, uri: str) -> list[MessageContent]:
        """The contents of the resource at ``uri`` (``resources/read``): text as ``TextContent``, an image as ``ImageContent``.

        Raises:
            MCPRequestError: the server answered with an error (no such resource), naming the server and the URI.
            MCPConnectionError: as for ``resources()``.
        """
        return resource_blocks(self._request(f"read resource {uri!r}", self._core.connection.read_resource, str(uri)))

    def prompts(self) -> list[MCPPrompt]:
        """The server's prompts (``prompts/list``, every page), each with its arguments.

        Raises:
            MCPConnectionError, MCPListError, MCPRequestError: as for ``resources()``.
        """
        return [prompt_record(p) for p in self._request("list its prompts", self._core.connection.list_prompts)]

    def get_prompt(self, name: str, arguments: Optional[dict[str, str]] = None) -> list[AgentMessage]:
        """The messages of prompt ``name`` filled with ``arguments`` (``prompts/get``), as ``UserMessage`` / ``AssistantMessage``.

        Raises:
            MCPRequestError: the server answered with an error (no such prompt, a required
                argument missing), naming the server and the prompt.
            MCPConnectionError: as for ``resources()``.
        """
        args = {str(k): str(v) for k, v in (arguments or {}).items()}
        return prompt_messages(self._request(f"get prompt {name!r}", self._core.connection.get_prompt, str(name), args or None))

    def _request(self, what: str, func: Callable[..., Any], *args: Any) -> Any:
        """Run one request on the loop thread and wait at most ``timeout_s``; its failure named with ``what``."""
        label = self._core.label
        try:
            future = self._core.submit(func, *args)
        except NotConnectedError as exc:
            raise MCPConnectionError(self._redact(f"MCP server {label!r} could not {what}: {exc}")) from None
        try:
            return future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise MCPConnectionError(self._redact(f"MCP server {label!r} could not {what}: no answer within {self.timeout_s:g} s (timeout_s)")) from None
        except concurrent.futures.CancelledError:
            raise MCPConnectionError(self._redact(f"MCP server {label!r} could not {what}: the client was closed")) from None
        except Exception as exc:
            cause = leaf(exc)
            if isinstance(cause, ListingLoopError):
                raise self._core.connection_error(f"MCP server {label!r} could not {what}", cause) from None
            code = getattr(cause, "code", None)
            if isinstance(code, int) and code not in (_CONNECTION_CLOSED, _REQUEST_TIMEOUT):
                message = getattr(cause, "message", None) or str(cause)
                raise MCPRequestError(self._redact(f"MCP server {label!r} could not {what}: error {code}: {message}"), code) from None
            raise MCPConnectionError(self._redact(f"MCP server {label!r} could not {what}: {self._explain(exc)}")) from None

    # --- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection, stop the server (stdio), and end the client's thread.

        Calls in flight end at once as error results. For a stdio server the SDK closes
        its stdin, waits 2 s, sends SIGTERM to its process group, waits 2 s, then
        SIGKILL; closing as a whole is cut short after 10 s and the thread is joined
        with a timeout, so ``close`` never hangs. Calling it again does nothing.
        """
        self._core.close()
