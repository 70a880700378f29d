"""The inside of an MCPClient (mcp/_core.py): its threads, what it logs when the connection fails, a store that
refuses a new tool list, a listing that gets no answer (docs/mcp.md "Threads" and "What happens on each failure").

The servers are real subprocesses: ``SERVER`` below, a hand-written newline-delimited JSON-RPC server in the modes
these tests need, and tests/support/mcp_raw_server.py.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import json
import logging
import os
import queue
import sys
import threading

import pytest

import yiemagent

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from helpers import WAIT  # noqa: E402
from yiemagent import TextContent, ToolError, ToolStore
from yiemagent.errors import ToolSchemaError
from yiemagent.mcp import MCPClient, MCPConnectionError

# ``python -c SERVER MODE``: answers initialize and lists ``ping`` and ``change`` (each answering "pong"); a call to
# ``where`` writes a line to stderr and answers its cwd, $CORE_GREETING and the client's name and version;
# resources/list gives one resource a page and a next cursor, for ever. In MODE:
# - ``nolist``: never answers tools/list;
# - ``nan``: a call to ``change`` announces tools/list_changed, and from then on the list also holds ``bad``, whose
#   schema has a NaN (valid JSON Schema, but no tool store takes it: a schema is sent to the LLM as strict JSON);
# - ``relist-refused`` / ``relist-silent``: as ``nan``, but the tools/list after the change gets an error / no answer;
# - ``garble``: a call to ``garble`` gets a line that is not UTF-8, and the server exits;
# - ``garble-at-exit``: behaves, and writes a line that is not UTF-8 when its stdin ends (when the client closes);
# - ``linger``: behaves, but stays on when its stdin ends (SIGTERM stops it).
SERVER = r'''
import json, os, sys, threading
MODE = sys.argv[1]
out = sys.stdout.buffer
def send(message):
    out.write((json.dumps(message) + "\n").encode())
    out.flush()
PING = {"name": "ping", "inputSchema": {"type": "object"}}
CHANGE = {"name": "change", "inputSchema": {"type": "object"}}
BAD = {"name": "bad", "inputSchema": {"type": "object", "properties": {"x": {"type": "number", "maximum": float("nan")}}}}
changed = False
for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        client = request["params"]["clientInfo"]
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}, "resources": {}},
            "serverInfo": {"name": MODE, "version": "0"},
        }})
    elif method == "tools/list" and changed and MODE == "relist-refused":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "the list is being rebuilt"}})
    elif method == "tools/list" and MODE != "nolist" and not (changed and MODE == "relist-silent"):
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [PING, CHANGE, BAD] if changed else [PING, CHANGE]}})
    elif method == "resources/list":  # endless pages, one resource each
        n = int((request.get("params") or {}).get("cursor") or 0) + 1
        send({"jsonrpc": "2.0", "id": rid, "result": {"resources": [{"uri": f"notes://r{n}", "name": f"r{n}"}], "nextCursor": str(n)}})
    elif method == "tools/call":
        name = request["params"]["name"]
        if name == "where":
            sys.stderr.write("core server says hello on stderr\n")
            sys.stderr.flush()
            text = json.dumps({"cwd": os.getcwd(), "greeting": os.environ.get("CORE_GREETING"), "client": [client["name"], client["version"]]})
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})
            continue
        if name == "garble":
            out.write(b"\xff\n")
            out.flush()
            sys.exit(0)
        if name == "change":
            changed = True
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "pong"}]}})
if MODE == "garble-at-exit":
    out.write(b"\xff\n")
    out.flush()
if MODE == "linger":
    threading.Event().wait()
'''


def server(mode: str) -> list[str]:
    return [sys.executable, "-c", SERVER, mode]


def named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


class Records(logging.Handler):
    """The ``yiemagent.mcp`` records, on a queue a test can wait on (they may come from the loop thread after the call)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.queue: queue.Queue[logging.LogRecord] = queue.Queue()

    def emit(self, record: logging.LogRecord) -> None:
        self.queue.put(record)

    def wait_for(self, words: str) -> logging.LogRecord:
        while True:
            record = self.queue.get(timeout=WAIT)
            if words in record.getMessage():
                return record


@pytest.fixture
def records():
    logger = logging.getLogger("yiemagent.mcp")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_an_open_client_has_one_daemon_loop_thread_named_after_it_and_close_ends_it():
    """docs/mcp.md "Threads": the loop thread is yiemagent-mcp-<label>, a daemon thread (one that does not end is
    abandoned, and must not keep the interpreter from exiting); close() ends it."""
    client = MCPClient.stdio(server("plain"), name="core-thread", timeout_s=WAIT)
    try:
        [thread] = named("yiemagent-mcp-core-thread")
        assert thread.name == "yiemagent-mcp-core-thread" and thread.daemon
    finally:
        client.close()
    assert not thread.is_alive() and not named("yiemagent-mcp-core-thread")


def test_a_dropped_client_is_closed_on_a_daemon_thread_named_after_it():
    """docs/mcp.md "A dropped client": the finalizer closes the client on yiemagent-mcp-<label>-abandon, a daemon thread,
    so a program that drops a client and exits is not held up by the closing (here: a server that stays on when its
    stdin ends, stopped only by the SIGTERM that comes 2 s later)."""
    client = MCPClient.stdio(server("linger"), name="core-linger", timeout_s=WAIT)
    assert client.call_tool("ping", {}).content == [TextContent("pong")]
    with pytest.warns(ResourceWarning, match="'core-linger' was garbage-collected without close"):
        del client
        gc.collect()
    [closing] = named("yiemagent-mcp-core-linger-abandon")
    assert closing.daemon
    closing.join(WAIT)
    assert not closing.is_alive() and not named("yiemagent-mcp-core-linger")


def test_tools_that_get_no_answer_raise_naming_timeout_s_and_log_it_at_debug_only(caplog):
    """tools() against a server that never answers tools/list: MCPConnectionError says it got no answer within
    timeout_s; the error is logged at DEBUG only (the caller reports it), never as a warning."""
    with caplog.at_level(logging.DEBUG, logger="yiemagent.mcp"):
        with MCPClient.stdio(server("nolist"), name="core-nolist", timeout_s=1) as client:
            with pytest.raises(MCPConnectionError) as raised:
                client.tools()
    text = "MCP server 'core-nolist' did not list its tools: no answer within 1 s (timeout_s)"
    assert str(raised.value) == text
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "yiemagent.mcp"]
    assert [entry for entry in logged if "did not list" in entry[1]] == [("DEBUG", text)]
    assert [entry for entry in logged if entry[0] != "DEBUG"] == []


def test_a_new_tool_list_the_store_refuses_is_logged_and_the_connection_goes_on(caplog):
    """After tools/list_changed the new list holds a tool no store takes (a NaN in its schema): the error is logged
    with its traceback, naming the server; the store keeps its tools, and calls go on."""
    store = ToolStore("core")
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with MCPClient.stdio(server("nan"), name="core-nan", timeout_s=WAIT) as client:
            client.tools(store)
            assert client.call_tool("change", {}).content == [TextContent("pong")]  # returns once the new list was handled
            logged = [(r.levelname, r.getMessage(), r.exc_info[0] if r.exc_info else None) for r in caplog.records if r.name == "yiemagent.mcp"]
            assert logged == [("ERROR", "MCP server 'core-nan': the new tool list could not be registered", ToolSchemaError)]
            assert list(store.tools) == ["core-nan_ping", "core-nan_change"]
            assert client.call_tool("ping", {}).content == [TextContent("pong")]


def test_a_connection_that_fails_while_open_is_logged_as_a_warning_naming_the_server_and_the_cause(records):
    """The server sends a line that is not UTF-8 and exits: the call fails, and the connection's end is logged once,
    as a WARNING naming the server and the cause."""
    with MCPClient.stdio(server("garble"), name="core-garble", timeout_s=WAIT) as client:
        with pytest.raises(ToolError, match="the connection to MCP server 'core-garble' is closed"):
            client.call_tool("garble", {})
        record = records.wait_for("the connection failed")
        assert (record.levelname, record.getMessage()) == (
            "WARNING",
            "MCP server 'core-garble': the connection failed: UnicodeDecodeError('utf-8', b'\\xff', 0, 1, 'invalid start byte')",
        )
        with pytest.raises(ToolError) as later:  # the connection has ended: every later call fails at once
            client.call_tool("ping", {})
        assert str(later.value) == "MCP tool 'ping' failed: MCP server 'core-garble' is not connected"


def test_a_connection_that_fails_while_closing_is_logged_at_debug_only(caplog):
    """A server that writes garbage as it is stopped: while closing, a failing server is expected, so its failure
    is logged at DEBUG, not as a warning."""
    with caplog.at_level(logging.DEBUG, logger="yiemagent.mcp"):
        with MCPClient.stdio(server("garble-at-exit"), name="core-exit", timeout_s=WAIT) as client:
            assert client.call_tool("ping", {}).content == [TextContent("pong")]
    failed = [(r.levelname, r.getMessage()) for r in caplog.records if "the connection failed" in r.getMessage()]
    assert failed == [
        ("DEBUG", "MCP server 'core-exit': the connection failed: UnicodeDecodeError('utf-8', b'\\xff', 0, 1, 'invalid start byte')")
    ]


def test_calls_and_a_close_on_a_healthy_server_log_no_failure_at_any_level(caplog):
    """Nothing failed, so nothing in the log says so: no "connection failed" line, no error of a call's callbacks."""
    with caplog.at_level(logging.DEBUG):
        with MCPClient.stdio(server("plain"), name="core-healthy", timeout_s=WAIT) as client:
            for _ in range(3):
                assert client.call_tool("ping", {}).content == [TextContent("pong")]
    assert [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING or "failed" in r.getMessage()] == []


def test_a_client_does_not_keep_the_calls_it_finished():
    """A long-lived client makes many calls: each finished call (its future, holding the server's result) is let go
    at once, not kept until close()."""

    def futures() -> int:
        gc.collect()
        return sum(isinstance(o, concurrent.futures.Future) for o in gc.get_objects())

    with MCPClient.stdio(server("plain"), name="core-calls", timeout_s=WAIT) as client:
        assert client.call_tool("ping", {}).content == [TextContent("pong")]
        before = futures()
        for _ in range(20):
            assert client.call_tool("ping", {}).content == [TextContent("pong")]
        assert futures() - before < 10


def test_an_open_clients_secrets_are_masked_in_the_sdks_log_records_until_it_closes(caplog):
    """docs/mcp.md "Secrets": while a client is open, a value of its env in a record of the SDK's loggers is ***;
    once it is closed, the value is no longer its secret to mask."""
    sdk_logger = logging.getLogger("mcp.client.stdio")
    with caplog.at_level(logging.DEBUG, logger="mcp"):
        with MCPClient.stdio(server("plain"), env={"CORE_TOKEN": "core-secret-4711"}, name="core-env", timeout_s=WAIT):
            sdk_logger.debug("sent: %s", "token core-secret-4711")
        sdk_logger.debug("after close: %s", "core-secret-4711")
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith(("sent: ", "after close: "))]
    assert logged == ["sent: token ***", "after close: core-secret-4711"]


def test_a_relist_the_server_refuses_is_logged_naming_the_error_and_the_old_list_stays(records):
    """After tools/list_changed the server answers tools/list with an error: a WARNING names the server and the
    error, the store keeps the list it had, and calls go on."""
    store = ToolStore("core")
    with MCPClient.stdio(server("relist-refused"), name="core-refused", timeout_s=WAIT) as client:
        client.tools(store)
        assert client.call_tool("change", {}).content == [TextContent("pong")]
        record = records.wait_for("relisting")
        assert (record.levelname, record.getMessage()) == (
            "WARNING",
            "MCP server 'core-refused': relisting its tools after tools/list_changed failed: 'MCPError: the list is being rebuilt'",
        )
        assert list(store.tools) == ["core-refused_ping", "core-refused_change"]
        assert client.call_tool("ping", {}).content == [TextContent("pong")]


def test_a_relist_that_gets_no_answer_is_given_up_after_timeout_s(records):
    """After tools/list_changed the server never answers tools/list: the relist gives up after timeout_s with a
    WARNING, and the store keeps the list it had."""
    store = ToolStore("core")
    with MCPClient.stdio(server("relist-silent"), name="core-silent", timeout_s=1) as client:
        client.tools(store)
        with contextlib.suppress(ToolError):  # the call waits for the relist, within its own timeout_s: it may end first
            client.call_tool("change", {})
        record = records.wait_for("relisting")
        assert (record.levelname, record.getMessage()) == (
            "WARNING",
            "MCP server 'core-silent': relisting its tools after tools/list_changed failed: 'TimeoutError: '",
        )
        assert list(store.tools) == ["core-silent_ping", "core-silent_change"]


def test_the_server_gets_the_env_and_cwd_given_its_stderr_is_ours_and_the_client_says_it_is_yiemagent(tmp_path, monkeypatch):
    """docs/mcp.md: ``env`` is added to the server's environment, ``cwd`` is its working directory, its stderr goes to
    ours (here a file: sys.stderr at the time the client is made), and initialize names the client yiemagent."""
    errors = (tmp_path / "stderr.txt").open("w")
    monkeypatch.setattr(sys, "stderr", errors)
    with MCPClient.stdio(server("plain"), env={"CORE_GREETING": "hello"}, cwd=str(tmp_path), name="core-where", timeout_s=WAIT) as client:
        [where] = client.call_tool("where", {}).content
    monkeypatch.undo()
    errors.close()
    assert json.loads(where.text) == {"cwd": os.path.realpath(tmp_path), "greeting": "hello", "client": ["yiemagent", yiemagent.__version__]}
    assert "core server says hello on stderr" in (tmp_path / "stderr.txt").read_text()


def test_resources_on_pages_that_never_end_stop_at_100_pages():
    """resources() follows next_cursor over every page, but at most 100 pages, so a cursor that never ends cannot hang it."""
    with MCPClient.stdio(server("plain"), name="core-pages", timeout_s=WAIT) as client:
        resources = client.resources()
    assert [(r.uri, r.name) for r in resources] == [(f"notes://r{n}", f"r{n}") for n in range(1, 101)]
