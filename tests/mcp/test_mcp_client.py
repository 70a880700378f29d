"""MCPClient, the shell a caller holds: its constructors' checks and defaults, its repr, and every failure in words.

The servers are real subprocesses: the hand-written raw server in tests/support, and a second hand-written one
below (``SERVER``) whose answers are chosen per tool and per method, so that each kind of failure can be arranged.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import threading

import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from mcp_support import raw_server_command  # noqa: E402
from helpers import WAIT  # noqa: E402
from yiemagent import AbortSignal, TextContent, ToolError
from yiemagent.mcp import MCPClient, MCPConnectionError, MCPRequestError

SECRET = "s3cret-env-value-42"

# A stdio MCP server by hand (newline-delimited JSON-RPC): argv[1] is the JSON of its tools/list result.
SERVER = textwrap.dedent(
    r'''
    import json, os, sys
    PAGE = json.loads(sys.argv[1])
    sys.stderr.write("SERVER STARTED\n")
    sys.stderr.flush()

    def send(message):
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def text(rid, value):
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": value}]}})

    for line in sys.stdin:
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        params = request.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
                "serverInfo": {"name": "by-hand", "version": "0"},
            }})
        elif method == "tools/list":
            if PAGE == "hang":
                continue
            send({"jsonrpc": "2.0", "id": rid, "result": PAGE})
        elif method == "resources/list":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no resources here"}})
        elif method == "prompts/list":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": 7, "message": ""}})
        elif method == "resources/read":
            uri = params["uri"]
            if uri == "hang://":
                continue
            send({"jsonrpc": "2.0", "id": rid, "result": {"contents": "not a list"}})
        elif method == "tools/call":
            name = params["name"]
            token = (params.get("_meta") or {}).get("progressToken")
            if name == "hang":  # with a progress token, says it started first
                if token is not None:
                    send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 0}})
                continue
            if name == "coded":
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "bad arguments"}})
            elif name == "invalid":
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": 5}]}})
            elif name == "env":
                text(rid, os.environ.get("MCP_TEST_VAR", "unset"))
            elif name == "cwd":
                text(rid, os.getcwd())
            elif name == "leak":
                send({"jsonrpc": "2.0", "id": rid, "result": {
                    "content": [{"type": "text", "text": "denied for " + os.environ.get("MCP_TEST_VAR", "")}], "isError": True}})
            elif name == "progress":
                if token is not None:
                    send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 1}})
                    send({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": 2, "total": 4, "message": "half"}})
                text(rid, "done")
            else:
                text(rid, "pong")
    '''
)

PING = {"name": "ping", "inputSchema": {"type": "object"}}


@pytest.fixture(scope="module")
def server_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcp-client") / "server.py"
    path.write_text(SERVER)
    return path


def command(server_file, page=None) -> list[str]:
    return [sys.executable, str(server_file), json.dumps({"tools": [PING]} if page is None else page)]


@pytest.fixture(scope="module")
def client(server_file):
    with MCPClient.stdio(command(server_file), env={"MCP_TEST_VAR": SECRET}, name="hand", timeout_s=5) as client:
        yield client


# --- constructors -----------------------------------------------------------------------------


def test_the_default_timeout_is_the_documented_sixty_seconds(server_file):
    """docs/api.md: stdio(..., timeout_s=60) and http(..., timeout_s=60); the repr shows it."""
    with MCPClient.stdio(command(server_file)) as client:
        assert client.timeout_s == 60.0 and "timeout_s=60," in repr(client)


def test_a_timeout_that_is_not_a_number_is_a_value_error_and_a_fraction_of_a_second_is_fine(server_file):
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        MCPClient.stdio(command(server_file), timeout_s="5")
    with MCPClient.stdio(command(server_file), timeout_s=0.5) as client:
        assert client.timeout_s == 0.5
        assert [t.name for t in client.tools()] == ["ping"]


def test_a_command_with_a_part_that_is_not_a_string_is_a_value_error():
    with pytest.raises(ValueError, match="command must be a non-empty list of strings"):
        MCPClient.stdio([sys.executable, 5])


def test_without_a_name_a_stdio_client_is_called_by_its_programs_file_name(server_file):
    """The label in messages is the program's base name: ``python3`` for ``/usr/bin/python3`` and for ``python3``."""
    for program in ("python3", "/usr/bin/env"):
        cmd = [program, str(server_file), json.dumps({"tools": [PING]})] if program == "python3" else [program, "python3", str(server_file), json.dumps({"tools": [PING]})]
        with MCPClient.stdio(cmd, timeout_s=5) as client:
            with pytest.raises(MCPRequestError) as caught:
                client.resources()
            expected = program.rsplit("/", 1)[-1]
            assert str(caught.value).startswith(f"MCP server {expected!r} could not list its resources")


def test_env_reaches_the_server_and_is_a_secret(client):
    assert client.call_tool("env", {}).content == [TextContent(SECRET)]
    with pytest.raises(ToolError) as caught:
        client.call_tool("leak", {})
    assert str(caught.value) == "denied for ***"
    assert SECRET not in repr(client) and "'MCP_TEST_VAR': '***'" in repr(client)


def test_cwd_is_the_servers_working_directory(server_file, tmp_path):
    with MCPClient.stdio(command(server_file), cwd=str(tmp_path), timeout_s=5) as client:
        assert client.call_tool("cwd", {}).content == [TextContent(str(tmp_path))]


@pytest.mark.parametrize("fallback", [False, True])
def test_the_servers_stderr_goes_to_ours_or_to_the_real_stderr_when_ours_is_no_file(server_file, tmp_path, monkeypatch, fallback):
    """sys.stderr when it is a real file; sys.__stderr__ when sys.stderr has no file descriptor (a StringIO)."""
    with open(tmp_path / "err.txt", "w") as err:
        if fallback:
            import io

            monkeypatch.setattr(sys, "stderr", io.StringIO())
            monkeypatch.setattr(sys, "__stderr__", err)
        else:
            monkeypatch.setattr(sys, "stderr", err)
        with MCPClient.stdio(command(server_file), timeout_s=5) as client:
            client.tools()
    assert "SERVER STARTED" in (tmp_path / "err.txt").read_text()


def test_an_https_url_is_accepted_and_only_fails_to_connect(unused_port):
    with pytest.raises(MCPConnectionError):
        MCPClient.http(f"https://127.0.0.1:{unused_port}/mcp", timeout_s=5)


@pytest.fixture
def unused_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_http_client_without_a_name_is_called_http_and_its_repr_masks_the_url_and_headers():
    from mcp_support import HttpServer

    server = HttpServer(raw_server_command("plain", http=True))
    try:
        url = server.url.replace("http://", "http://user:pw-in-url@")
        with MCPClient.http(url, headers={"Authorization": "Bearer tok-abc"}, timeout_s=5) as client:
            shown = repr(client)
            assert "pw-in-url" not in shown and "tok-abc" not in shown
            assert shown.startswith("MCPClient(url='http://user:***@") and "headers={'Authorization': '***'}" in shown
            assert shown.endswith("name=None, timeout_s=5, open)")
            with pytest.raises(MCPRequestError) as caught:
                client.resources()
            assert str(caught.value).startswith("MCP server 'http' could not list its resources")
        assert repr(client).endswith(", closed)")
        with MCPClient.http(server.url) as client:
            assert client.timeout_s == 60.0
    finally:
        server.close()


# --- repr -------------------------------------------------------------------------------------


def test_the_repr_says_open_then_closed(server_file):
    client = MCPClient.stdio(command(server_file), name="r", timeout_s=5)
    assert repr(client).endswith("name='r', timeout_s=5, open)")
    client.close()
    assert repr(client).endswith("name='r', timeout_s=5, closed)")


# --- tools() ----------------------------------------------------------------------------------


def test_a_twice_listed_tool_or_a_bad_schema_leaves_out_only_that_tool_and_logs_why(server_file, caplog):
    page = {"tools": [
        PING,
        {"name": "ping", "description": "again", "inputSchema": {"type": "object"}},
        {"name": "broken", "inputSchema": {"type": "object", "properties": {"x": {"type": 5}}}},
        {"name": "later", "inputSchema": {"type": "object"}},
    ]}
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with MCPClient.stdio(command(server_file, page), name="dup", timeout_s=5) as client:
            tools = client.tools()
    assert [t.name for t in tools] == ["dup_ping", "dup_later"]
    assert [t.description for t in tools] == ["", ""]
    assert all(t.parallel_tool_execute is True for t in tools)
    messages = [r.getMessage() for r in caplog.records]
    assert "MCP server 'dup' listed tool 'ping' twice; the first is used" in messages
    [left_out] = [m for m in messages if "left out" in m]
    assert left_out.startswith("MCP server 'dup': tool 'broken' left out: ") and "dup_broken" in left_out


def test_tools_gives_up_after_timeout_s_when_the_list_never_comes(server_file):
    with MCPClient.stdio(command(server_file, "hang"), name="slow", timeout_s=0.5) as client:
        with pytest.raises(MCPConnectionError) as caught:
            client.tools()
    assert str(caught.value) == "MCP server 'slow' did not list its tools: no answer within 0.5 s (timeout_s)"


# --- calls ------------------------------------------------------------------------------------


def test_a_tools_execute_passes_the_abort_signal_on(client):
    signal = AbortSignal()
    signal.abort("user pressed stop")
    [tool] = client.tools()
    with pytest.raises(ToolError, match=r"MCP tool 'ping' failed: aborted \(user pressed stop\) before it was sent"):
        tool.execute("call-1", {}, signal)


def test_a_call_aborted_before_it_is_sent_names_the_tool_and_a_missing_reason(client, caplog):
    signal = AbortSignal()
    signal.abort()
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with pytest.raises(ToolError) as caught:
            client.call_tool("ping", {}, signal)
    assert str(caught.value) == "MCP tool 'ping' failed: aborted (no reason given) before it was sent"
    assert str(caught.value) in [r.getMessage() for r in caplog.records]


def test_a_call_aborted_in_flight_names_the_tool_and_a_missing_reason(client):
    signal = AbortSignal()
    outcome: list = []

    def call():
        try:
            client.call_tool("hang", {}, signal)
        except ToolError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    # the abort may come before or after the request is sent: both name the tool and the missing reason
    signal.abort()
    thread.join(WAIT)
    [error] = outcome
    assert str(error).startswith("MCP tool 'hang' failed: aborted (no reason given)")


def test_a_call_that_never_ends_times_out_naming_the_tool(server_file):
    with MCPClient.stdio(command(server_file), name="t", timeout_s=0.5) as client:
        with pytest.raises(ToolError) as caught:
            client.call_tool("hang", {})
    assert str(caught.value) == "MCP tool 'hang' failed: no answer within 0.5 s (timeout_s); the request was cancelled"


def test_a_call_after_close_or_cut_short_by_close_names_the_tool_and_the_server(server_file):
    client = MCPClient.stdio(command(server_file), name="shut", timeout_s=10)
    outcome: list = []
    started = threading.Event()

    def call():
        started.set()
        try:
            client.call_tool("hang", {})
        except ToolError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    started.wait(WAIT)
    client.close()
    thread.join(WAIT)
    [error] = outcome
    # closed before or after the request went out: either way the tool and the server are named
    assert str(error).startswith("MCP tool 'hang' failed: the MCPClient for 'shut' ")
    with pytest.raises(ToolError) as caught:
        client.call_tool("ping", {})
    assert str(caught.value).startswith("MCP tool 'ping' failed: ") and "'shut'" in str(caught.value)


def test_a_call_in_flight_when_the_client_closes_ends_naming_the_tool_and_the_server(server_file):
    client = MCPClient.stdio(command(server_file), name="shut", timeout_s=30)
    outcome: list = []
    started = threading.Event()

    def call():
        try:
            client.call_tool("hang", {}, None, lambda update: started.set())
        except ToolError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    assert started.wait(WAIT), "the server never said the call started"
    client.close()
    thread.join(WAIT)
    assert [str(e) for e in outcome] == ["MCP tool 'hang' failed: the MCPClient for 'shut' was closed during the call"]


def test_a_protocol_error_names_its_code_and_message(client):
    with pytest.raises(ToolError) as caught:
        client.call_tool("coded", {})
    assert str(caught.value) == "MCP tool 'coded' failed: MCP server 'hand' answered with error -32602: bad arguments"


def test_a_reply_that_is_not_valid_mcp_says_where_and_what(client):
    with pytest.raises(ToolError) as caught:
        client.call_tool("invalid", {})
    message = str(caught.value)
    assert message.startswith("MCP tool 'invalid' failed: MCP server 'hand' sent a reply that is not valid MCP (at content.0.")
    assert message.endswith(": Input should be a valid string)")


def test_progress_without_a_total_or_a_message_and_with_both(client):
    updates: list = []
    result = client.call_tool("progress", {}, None, updates.append)
    assert result.content == [TextContent("done")]
    assert [u.content for u in updates] == [[TextContent("progress 1")], [TextContent("progress 2/4: half")]]


def test_a_call_without_a_progress_callback_asks_for_no_progress(client):
    """No ``on_partial_result``: the request carries no progress token, so a server sends none (and nothing breaks)."""
    assert client.call_tool("progress", {}).content == [TextContent("done")]


# --- resources and prompts --------------------------------------------------------------------


def test_request_failures_name_the_server_the_request_and_the_servers_words(client):
    with pytest.raises(MCPRequestError) as caught:
        client.resources()
    assert str(caught.value) == "MCP server 'hand' could not list its resources: error -32601: no resources here"
    with pytest.raises(MCPRequestError) as caught:
        client.prompts()
    assert str(caught.value).startswith("MCP server 'hand' could not list its prompts: error 7: ")
    assert not str(caught.value).endswith("None")
    with pytest.raises(MCPConnectionError) as caught:
        client.read_resource("file:///x")
    assert str(caught.value).startswith("MCP server 'hand' could not read resource 'file:///x': MCP server 'hand' sent a reply that is not valid MCP (at ")


def test_a_request_never_answered_gives_up_after_timeout_s(server_file):
    with MCPClient.stdio(command(server_file), name="r", timeout_s=0.5) as client:
        with pytest.raises(MCPConnectionError) as caught:
            client.read_resource("hang://")
    assert str(caught.value) == "MCP server 'r' could not read resource 'hang://': no answer within 0.5 s (timeout_s)"


def test_a_request_cut_short_by_close_says_the_client_was_closed(server_file):
    client = MCPClient.stdio(command(server_file), name="r", timeout_s=10)
    outcome: list = []
    started = threading.Event()

    def read():
        started.set()
        try:
            client.read_resource("hang://")
        except MCPConnectionError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    started.wait(WAIT)
    client.close()
    thread.join(WAIT)
    [error] = outcome
    assert str(error).startswith("MCP server 'r' could not read resource 'hang://': ") and "closed" in str(error)


def test_a_client_still_open_at_interpreter_exit_is_not_reported_as_dropped(server_file):
    """At exit the loop thread (a daemon) just stops: no "garbage-collected without close()" warning for a client still held."""
    import subprocess

    script = textwrap.dedent(
        f"""
        import sys
        from yiemagent.mcp import MCPClient
        client = MCPClient.stdio({command(server_file)!r}, name="kept", timeout_s=5)
        print([t.name for t in client.tools()], flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", script], capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0 and done.stdout == "['kept_ping']\n"
    assert "without close()" not in done.stderr
