"""The inside of an MCPClient (mcp/_core.py): its threads, what it logs when the connection fails, a store that
refuses a new tool list, a listing that gets no answer (docs/mcp.md "Threads" and "What happens on each failure").

The servers are real subprocesses: ``SERVER`` below, a hand-written newline-delimited JSON-RPC server in the modes
these tests need, and tests/support/mcp_raw_server.py.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import http.server
import json
import logging
import os
import queue
import select
import sys
import threading

import pytest

import yiemagent
import yiemagent.mcp._core
import yiemagent.mcp._session

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from helpers import WAIT  # noqa: E402
from mcp_support import alive, child_pids, raw_server_command  # noqa: E402
from yiemagent import TextContent, ToolError, ToolStore
from yiemagent.errors import ToolSchemaError
from yiemagent.mcp import MCPClient, MCPConnectionError, MCPListError

# ``python -c SERVER MODE``: answers initialize and lists ``ping`` and ``change`` (each answering "pong"); a call to
# ``where`` writes a line to stderr and answers its cwd, $CORE_GREETING and the client's name and version;
# resources/list gives one resource a page and a next cursor, for ever; resources/read is never answered (the server
# writes "reading <uri>" to stderr). In MODE:
# - ``nolist``: never answers tools/list;
# - ``nan``: a call to ``change`` announces tools/list_changed, and from then on the list also holds ``bad``, whose
#   schema has a NaN (valid JSON Schema, but no tool store takes it: a schema is sent to the LLM as strict JSON);
# - ``relist-refused`` / ``relist-silent``: as ``nan``, but the tools/list after the change gets an error / no answer;
# - ``garble``: a call to ``garble`` gets a line that is not UTF-8, and the server exits;
# - ``garble-at-exit``: behaves, and writes a line that is not UTF-8 when its stdin ends (when the client closes);
# - ``linger``: behaves, but stays on when its stdin ends (SIGTERM stops it);
# - ``early``: announces tools/list_changed before it answers initialize (out of the protocol's order).
# - ``reorder``: a call to ``change`` announces tools/list_changed twice; the server holds the first tools/list that
#   follows and answers the second first (its list also holds ``second``), then the first (``first`` instead).
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
held = None
for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        client = request["params"]["clientInfo"]
        if MODE == "early":
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}, "resources": {}},
            "serverInfo": {"name": MODE, "version": "0"},
        }})
    elif method == "tools/list" and changed and MODE == "reorder":  # JSON-RPC lets answers come in any order
        if held is None:
            held = rid
            continue
        for tool, answered in (("second", rid), ("first", held)):
            send({"jsonrpc": "2.0", "id": answered, "result": {"tools": [PING, CHANGE, {"name": tool, "inputSchema": {"type": "object"}}]}})
        held = None
    elif method == "tools/list" and changed and MODE == "relist-refused":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "the list is being rebuilt"}})
    elif method == "tools/list" and MODE != "nolist" and not (changed and MODE == "relist-silent"):
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [PING, CHANGE, BAD] if changed else [PING, CHANGE]}})
    elif method == "resources/read":  # never answered; says on stderr that it came
        sys.stderr.write("reading " + request["params"]["uri"] + "\n")
        sys.stderr.flush()
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
            for _ in range(2 if MODE == "reorder" else 1):
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


def test_the_relist_of_the_last_list_changed_wins_over_an_earlier_one_answered_after_it():
    """Two tools/list_changed in a row start two relists, and the server answers the second first: the store keeps
    the list the last notice's relist got, not the older one that came after it (docs/mcp.md "Tools that change")."""
    store = ToolStore("core")
    with MCPClient.stdio(server("reorder"), name="core-reorder", timeout_s=WAIT) as client:
        client.tools(store)
        assert client.call_tool("change", {}).content == [TextContent("pong")]
        # the first relist's answer was sent before this call's: it has been handled when the call returns
        assert client.call_tool("ping", {}).content == [TextContent("pong")]
        assert list(store.tools) == ["core-reorder_ping", "core-reorder_change", "core-reorder_second"]


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


def test_resources_on_pages_that_never_end_raise_after_max_list_pages():
    """resources() follows next_cursor over every page, but at most MAX_LIST_PAGES (1000) pages: a cursor that never ends
    neither hangs it nor cuts the list short without a word, it raises MCPListError naming the server, the list and the limit."""
    assert yiemagent.mcp._session.MAX_LIST_PAGES == 1000  # the documented maximum (docs/mcp.md "Lists on many pages")
    with MCPClient.stdio(server("plain"), name="core-pages", timeout_s=WAIT) as client:
        with pytest.raises(MCPListError, match=r"^MCP server 'core-pages' could not list its resources: resources/list has more than MAX_LIST_PAGES=1000 pages; the rest was not read$"):
            client.resources()
        assert [t.name for t in client.tools()] == ["core-pages_ping", "core-pages_change"]  # the connection goes on


# --- close() and its bounds (docs/mcp.md "Threads": each step of close has a bound; close never hangs) ----------------


class Stuck(logging.Handler):
    """User code that blocks the loop thread: a handler that, given the record saying ``words`` on that thread, waits to
    be freed (at most WAIT / 2, so that a close that waits for it fails the test instead of hitting its time limit).
    It blocks in ``handle`` without taking the handler's lock, so other threads can still log through it."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.DEBUG)
        self.words = words
        self.holding = threading.Event()  # set while the loop thread is held here
        self.free = threading.Event()

    def handle(self, record: logging.LogRecord) -> bool:
        if self.words in record.getMessage() and threading.current_thread().name.startswith("yiemagent-mcp-"):
            self.holding.set()
            self.free.wait(WAIT / 2)
            self.holding.clear()
        return True

    def emit(self, record: logging.LogRecord) -> None:
        pass


@pytest.fixture
def stuck():
    handlers: list[Stuck] = []

    def on(words: str) -> Stuck:
        handler = Stuck(words)
        logging.getLogger("yiemagent.mcp").addHandler(handler)
        handlers.append(handler)
        return handler

    yield on
    for handler in handlers:
        handler.free.set()
        logging.getLogger("yiemagent.mcp").removeHandler(handler)


def logged(records: Records) -> list[tuple[str, str]]:
    """Every record on the queue so far, as (level, message)."""
    out = []
    while not records.queue.empty():
        record = records.queue.get()
        out.append((record.levelname, record.getMessage()))
    return out


def test_close_returns_while_the_loop_thread_is_stuck_in_user_code_and_abandons_that_thread(records, stuck, monkeypatch):
    """The loop thread is blocked in a logging handler (user code: here the record of a store refusing the new tool
    list) when close() is called: close does not wait for it for ever. Each step it needs the loop for gives up after
    CLOSE_STEP_S with an ERROR, the call in flight ends as an error result at once, and the thread is abandoned; once the
    handler returns, that thread still closes the connection and ends, and the server is stopped."""
    monkeypatch.setattr(yiemagent.mcp._core, "CLOSE_STEP_S", 0.2)
    handler = stuck("could not be registered")
    before = child_pids()
    client = MCPClient.stdio(server("nan"), name="core-stuck", timeout_s=WAIT)
    (server_pid,) = child_pids() - before
    store = ToolStore("core")
    client.tools(store)
    [loop] = named("yiemagent-mcp-core-stuck")
    failures: queue.Queue[str] = queue.Queue()

    def call() -> None:
        try:
            client.call_tool("change", {})  # the server announces a new tool list: the loop thread relists, and logs
        except ToolError as exc:
            failures.put(str(exc))

    calling = threading.Thread(target=call, name="core-stuck-call")
    calling.start()
    assert handler.holding.wait(WAIT)
    client.close()
    assert handler.holding.is_set(), "close returned while the loop thread was still stuck"
    assert failures.get(timeout=WAIT) in {  # "is closed": the close came before the call was registered (a loaded machine)
        "MCP tool 'change' failed: the MCPClient for 'core-stuck' was closed during the call",
        "MCP tool 'change' failed: the MCPClient for 'core-stuck' is closed",
    }
    assert [entry for entry in logged(records) if entry[0] == "ERROR"][-2:] == [
        ("ERROR", "MCP server 'core-stuck': the connection did not close in time; its thread is abandoned"),
        ("ERROR", "MCP event loop thread 'yiemagent-mcp-core-stuck' did not end; abandoning it (a daemon thread)"),
    ]
    # left waiting: the loop thread and the two hand-overs to it (the stop, the portal's stop), daemons named after it
    left = named("yiemagent-mcp-core-stuck")
    assert sorted(t.name for t in left) == ["yiemagent-mcp-core-stuck"] + ["yiemagent-mcp-core-stuck-close"] * 2
    assert all(t.daemon for t in left) and loop in left
    handler.free.set()
    loop.join(WAIT)
    for thread in named("yiemagent-mcp-core-stuck"):  # the hand-overs to the loop end with it
        thread.join(WAIT)
    calling.join(WAIT)
    assert not loop.is_alive() and not named("yiemagent-mcp-core-stuck")
    assert not alive(server_pid)


def test_closing_that_outlasts_the_grace_and_a_step_is_left_to_the_loop_thread_which_ends_later(records, monkeypatch):
    """close() waits for the connection CLOSE_GRACE_S + CLOSE_STEP_S, and for the loop thread CLOSE_STEP_S more; a
    stdio server that takes longer to stop (2 s: it stays on until SIGTERM) outlasts both when they are lowered: close
    returns with two ERRORs, and the abandoned thread goes on stopping the server, then ends."""
    monkeypatch.setattr(yiemagent.mcp._session, "CLOSE_GRACE_S", 0.2)
    monkeypatch.setattr(yiemagent.mcp._core, "CLOSE_STEP_S", 0.2)
    before = child_pids()
    client = MCPClient.stdio(server("linger"), name="core-late", timeout_s=WAIT)
    (server_pid,) = child_pids() - before
    [loop] = named("yiemagent-mcp-core-late")
    assert client.call_tool("ping", {}).content == [TextContent("pong")]
    client.close()
    assert [entry for entry in logged(records) if entry[0] == "ERROR"] == [
        ("ERROR", "MCP server 'core-late': the connection did not close in time; its thread is abandoned"),
        ("ERROR", "MCP event loop thread 'yiemagent-mcp-core-late' did not end; abandoning it (a daemon thread)"),
    ]
    loop.join(WAIT)
    assert not loop.is_alive() and not alive(server_pid)


class SessionServer(http.server.BaseHTTPRequestHandler):
    """Streamable HTTP in its simplest form (one JSON body per POST) with a session: initialize's answer names session
    ``core-4711`` (the ``Mcp-Session-Id`` header). Each DELETE's session is put on the server's ``deletes`` queue; it is
    answered once the server's ``answer`` event is set."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, rid = request.get("method"), request.get("id")
        if method == "initialize":
            result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "0"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
        else:
            result = None
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode() if rid is not None and result is not None else b""
        self.send_response(200 if body else 202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "core-4711")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # no stream the server starts
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_DELETE(self) -> None:
        self.server.deletes.put(self.headers.get("Mcp-Session-Id"))  # type: ignore[attr-defined]
        self.server.answer.wait(WAIT)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def session_server():
    """A SessionServer on 127.0.0.1 (its URL is ``.url``), on a thread of its own."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SessionServer)
    httpd.daemon_threads = True
    httpd.deletes = queue.Queue()  # type: ignore[attr-defined]
    httpd.answer = threading.Event()  # type: ignore[attr-defined]
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}/mcp"  # type: ignore[attr-defined]
    serving = threading.Thread(target=httpd.serve_forever, name="core-session-server", daemon=True)
    serving.start()
    yield httpd
    httpd.answer.set()  # type: ignore[attr-defined]
    httpd.shutdown()
    httpd.server_close()


def test_close_ends_an_http_session_with_a_delete_naming_it(session_server):
    """Over streamable HTTP, close() asks the connection to stop, so the SDK ends the session as the spec asks: one
    DELETE carrying the session's id (a connection merely cancelled would not send it)."""
    session_server.answer.set()
    client = MCPClient.http(session_server.url, name="core-session", timeout_s=WAIT)
    assert [t.name for t in client.tools()] == ["core-session_ping"]
    client.close()
    assert session_server.deletes.get(timeout=WAIT) == "core-4711"
    assert session_server.deletes.empty()


def test_closing_that_outlasts_close_grace_s_is_cut_short_with_a_warning_and_no_error(session_server, records, monkeypatch):
    """The HTTP server never answers the session's DELETE: closing is cut short after CLOSE_GRACE_S (lowered here) with
    one WARNING naming the server and the grace; close() waited for that (no ERROR, the thread has ended)."""
    monkeypatch.setattr(yiemagent.mcp._session, "CLOSE_GRACE_S", 0.5)
    client = MCPClient.http(session_server.url, name="core-grace", timeout_s=WAIT)
    assert [t.name for t in client.tools()] == ["core-grace_ping"]
    client.close()
    assert session_server.deletes.get(timeout=WAIT) == "core-4711"
    assert [entry for entry in logged(records) if entry[0] in ("WARNING", "ERROR")] == [
        ("WARNING", "MCP server 'core-grace': closing took longer than 0.5 s and was cut short")
    ]
    assert not named("yiemagent-mcp-core-grace")


# --- the client's words for two failures (client.py's _request and _explain) ------------------------------------------


def test_a_request_in_flight_when_the_client_closes_says_the_client_was_closed(monkeypatch):
    """read_resource waits for an answer that never comes; the server has the request (it says so on its stderr, a pipe
    here) when close() is called: the request ends at once with MCPConnectionError naming the server, the request and
    that the client was closed."""
    readable, writable = os.pipe()
    errors = os.fdopen(writable, "w")
    monkeypatch.setattr(sys, "stderr", errors)  # the server's stderr is sys.stderr when the client is made
    client = MCPClient.stdio(server("plain"), name="core-read", timeout_s=WAIT)
    monkeypatch.undo()
    errors.close()
    outcome: queue.Queue[BaseException] = queue.Queue()

    def read() -> None:
        try:
            client.read_resource("notes://slow")
        except MCPConnectionError as exc:
            outcome.put(exc)

    reading = threading.Thread(target=read, name="core-read-call")
    reading.start()
    said = b""
    while b"reading notes://slow\n" not in said:
        assert select.select([readable], [], [], WAIT)[0], "the server never got the request"
        said += os.read(readable, 4096)
    client.close()
    reading.join(WAIT)
    os.close(readable)
    # the second when the close came before the request was registered as in flight: on a loaded machine the reading
    # thread, woken once the loop took the request, may not have run again by the time the server has it
    assert str(outcome.get(timeout=0)) in {
        "MCP server 'core-read' could not read resource 'notes://slow': the client was closed",
        "MCP server 'core-read' could not read resource 'notes://slow': the MCPClient for 'core-read' is closed",
    }


def test_a_call_failing_in_the_sdk_names_the_server_and_the_exceptions_type():
    """A failure that is neither an answer of the server nor a closed connection (here the SDK's check of structured
    content against the tool's outputSchema, a RuntimeError) is an error result naming the server, the exception's type
    and its words."""
    with MCPClient.stdio(raw_server_command("nonsense"), name="core-shaped", timeout_s=WAIT) as client:
        with pytest.raises(ToolError) as raised:
            client.call_tool("shaped", {})
    assert str(raised.value).startswith(
        "MCP tool 'shaped' failed: MCP server 'core-shaped': RuntimeError: Invalid structured content returned by tool shaped"
    )


class Exits(logging.Handler):
    """User code that ends the loop thread: a handler that calls sys.exit() on the record saying ``words``, if it is
    logged on that thread (SystemExit is not an Exception: the library's ``except Exception`` lets it through)."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.DEBUG)
        self.words = words

    def handle(self, record: logging.LogRecord) -> bool:
        if self.words in record.getMessage() and threading.current_thread().name.startswith("yiemagent-mcp-"):
            sys.exit("a handler exits")
        return True

    def emit(self, record: logging.LogRecord) -> None:
        pass


def test_user_code_that_ends_the_loop_thread_is_logged_naming_the_thread_and_close_still_returns(records, monkeypatch):
    """A logging handler calls sys.exit() on a record logged on the loop thread (a store refusing the new tool list):
    SystemExit ends the event loop and its thread; that is an ERROR naming the thread, with the exception, never lost
    silently. The call in flight fails, and close() returns and stops the server, with no exception left in any thread
    (closing finds the loop gone: nothing to hand over)."""
    escaped: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    exits = Exits("could not be registered")
    logger = logging.getLogger("yiemagent.mcp")
    logger.addHandler(exits)
    try:
        before = child_pids()
        client = MCPClient.stdio(server("nan"), name="core-exit", timeout_s=WAIT)
        (server_pid,) = child_pids() - before
        store = ToolStore("core")
        client.tools(store)
        [loop] = named("yiemagent-mcp-core-exit")
        with pytest.raises(ToolError):
            client.call_tool("change", {})
        record = records.wait_for("ended with an error")
        loop.join(WAIT)
        client.close()
    finally:
        logger.removeHandler(exits)
    assert (record.levelname, record.getMessage(), record.threadName) == (
        "ERROR",
        "MCP event loop thread 'yiemagent-mcp-core-exit' ended with an error",
        "yiemagent-mcp-core-exit",
    )
    cause = record.exc_info[1] if record.exc_info else None
    while isinstance(cause, BaseExceptionGroup):  # the task groups it came through
        cause = cause.exceptions[0]
    assert isinstance(cause, SystemExit) and cause.code == "a handler exits"
    assert not loop.is_alive() and not alive(server_pid)
    assert [(args.thread.name, args.exc_type) for args in escaped] == []


def test_a_tool_list_change_announced_before_initialize_is_answered_is_ignored(records):
    """A server that sends tools/list_changed before its initialize answer (out of the protocol's order): there is no
    session to relist with yet, so the notice is ignored: no relist, nothing logged above DEBUG; tools() and calls work."""
    store = ToolStore("core")
    with MCPClient.stdio(server("early"), name="core-early", timeout_s=WAIT) as client:
        client.tools(store)
        assert client.call_tool("ping", {}).content == [TextContent("pong")]
        assert list(store.tools) == ["core-early_ping", "core-early_change"]
    assert [entry for entry in logged(records) if entry[0] != "DEBUG"] == []


class Closes(logging.Handler):
    """User code on the loop thread that closes the client: a handler that calls ``client.close()`` on the record saying
    ``words``, if it is logged on that thread; what close raised there (if anything) is put on ``raised``, and the
    threads that close left running (their names and whether they are daemons) on ``started``."""

    def __init__(self, words: str, client: MCPClient) -> None:
        super().__init__(logging.DEBUG)
        self.words, self.client = words, client
        self.raised: queue.Queue[object] = queue.Queue()
        self.started: queue.Queue[set[tuple[str, bool]]] = queue.Queue()

    def handle(self, record: logging.LogRecord) -> bool:
        if self.words in record.getMessage() and threading.current_thread().name.startswith("yiemagent-mcp-"):
            before = set(threading.enumerate())
            try:
                self.client.close()
                self.raised.put(None)
            except BaseException as exc:  # noqa: BLE001  the test reports it
                self.raised.put(exc)
            self.started.put({(t.name, t.daemon) for t in set(threading.enumerate()) - before})
        return True

    def emit(self, record: logging.LogRecord) -> None:
        pass


def test_close_called_on_the_loop_thread_returns_at_once_and_the_client_still_closes(records):
    """User code on the loop thread (a logging handler, on the record of a store refusing the new tool list) calls
    close(): the loop cannot wait for itself, so close returns at once there, without an error, and the closing goes
    on on a thread of its own: the call ends as an error result, the connection closes, the loop thread ends, the server stops,
    and nothing is logged as an error but the refused list."""
    before = child_pids()
    client = MCPClient.stdio(server("nan"), name="core-self", timeout_s=WAIT)
    (server_pid,) = child_pids() - before
    store = ToolStore("core")
    client.tools(store)
    [loop] = named("yiemagent-mcp-core-self")
    closes = Closes("could not be registered", client)
    logger = logging.getLogger("yiemagent.mcp")
    logger.addHandler(closes)
    try:
        with pytest.raises(ToolError) as raised:
            client.call_tool("change", {})
        assert closes.raised.get(timeout=WAIT) is None
        assert closes.started.get(timeout=WAIT) == {("yiemagent-mcp-core-self-close", True)}  # the closing, and its hand-over
        loop.join(WAIT)
        for thread in named("yiemagent-mcp-core-self"):
            thread.join(WAIT)
    finally:
        logger.removeHandler(closes)
    # "is closed" when the close came before the call was registered: on a loaded machine the loop thread can run the
    # call and the relist before the calling thread, woken, gets to run again
    assert str(raised.value) in {
        "MCP tool 'change' failed: the MCPClient for 'core-self' was closed during the call",
        "MCP tool 'change' failed: the MCPClient for 'core-self' is closed",
    }
    assert not loop.is_alive() and not named("yiemagent-mcp-core-self") and not alive(server_pid)
    assert "closed" in repr(client)
    assert [entry for entry in logged(records) if entry[0] in ("WARNING", "ERROR") and "'change' failed" not in entry[1]] == [
        ("ERROR", "MCP server 'core-self': the new tool list could not be registered")
    ]
