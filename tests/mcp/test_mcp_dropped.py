"""An MCPClient dropped without close(): a ResourceWarning at the caller's line, then its server and thread end (docs/mcp.md)."""

from __future__ import annotations

import gc
import inspect
import threading
import warnings
import weakref

import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from mcp_support import WAIT, HttpServer, alive, child_pids, raw_server_command  # noqa: E402
from yiemagent import AbortSignal, TextContent
from yiemagent.mcp import MCPClient


def join_threads_of(label: str) -> None:
    """Wait (bounded) for the client's loop thread and the thread closing it, whose names hold ``label``."""
    deadline_threads = [t for t in threading.enumerate() if t.name in (f"yiemagent-mcp-{label}", f"yiemagent-mcp-{label}-abandon")]
    for thread in deadline_threads:
        thread.join(WAIT)
        assert not thread.is_alive(), f"{thread.name} did not end"


def test_a_dropped_stdio_client_warns_at_the_callers_line_and_its_server_process_ends():
    """The last reference to an open client goes: a ResourceWarning naming the server points at that line; then the
    server process is gone and the loop thread has ended."""
    before = child_pids()
    client = MCPClient.stdio(raw_server_command("plain"), name="dropped")
    (server_pid,) = child_pids() - before
    assert client.call_tool("ping", {}).content == [TextContent("pong")]
    collected = weakref.ref(client)
    with pytest.warns(ResourceWarning) as caught:
        line = inspect.currentframe().f_lineno + 1
        del client
    assert collected() is None, "nothing of the client's own machinery holds it"
    [warning] = [w for w in caught if w.category is ResourceWarning]
    assert str(warning.message) == "MCPClient for MCP server 'dropped' was garbage-collected without close(); its connection is closed"
    assert (warning.filename, warning.lineno) == (__file__, line)
    join_threads_of("dropped")
    assert not alive(server_pid), "the server process was stopped"
    assert not [t for t in threading.enumerate() if t.name.startswith("yiemagent-mcp-dropped")]


def test_a_dropped_http_client_ends_its_thread():
    """A streamable-HTTP client dropped without close() warns and its loop thread ends."""
    server = HttpServer()
    try:
        client = MCPClient.http(server.url, name="dropped-http")
        assert [t.name for t in client.tools()][:1] == ["dropped-http_echo"]
        with pytest.warns(ResourceWarning, match="'dropped-http' was garbage-collected without close"):
            del client
            gc.collect()
        join_threads_of("dropped-http")
    finally:
        server.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("yiemagent-mcp-dropped-http")]


def test_a_tool_still_held_keeps_its_client_open():
    """The client's tools hold the client: dropping the client while a tool is registered somewhere does not close it."""
    client = MCPClient.stdio(raw_server_command("plain"), name="held")
    [tool] = client.tools()
    collected = weakref.ref(client)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        del client
        gc.collect()
    assert collected() is not None
    assert tool.execute("c1", {}, AbortSignal(), None).content == [TextContent("pong")]
    with pytest.warns(ResourceWarning, match="'held'"):
        del tool
        gc.collect()
    join_threads_of("held")


def test_a_closed_client_dropped_gives_no_warning():
    """close() first: dropping the client afterwards warns of nothing."""
    client = MCPClient.stdio(raw_server_command("plain"), name="tidy")
    client.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        del client
        gc.collect()
    assert not [t for t in threading.enumerate() if t.name.startswith("yiemagent-mcp-tidy")]
