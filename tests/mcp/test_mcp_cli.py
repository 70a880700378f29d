"""The command line's --mcp flag, run as a subprocess with mcp-server-time."""

from __future__ import annotations

import json
import re
import shlex
import signal

import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from localserver import LocalServer, Reply  # noqa: E402
from mcp_support import WAIT, alive, raw_server_command, time_server_command  # noqa: E402
from cli_support import cli, start_cli  # noqa: E402,F401  (start_cli: a fixture)

TIME_SERVER = shlex.join(time_server_command())


def test_ask_with_mcp_calls_the_servers_tool():
    """--mcp starts the server; the model sees its tools, calls one, and gets its answer back."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_current_time", "arguments": json.dumps({"timezone": "Asia/Tokyo"})}}
    replies = [
        {"choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [call]}, "finish_reason": "tool_calls"}], "model": "tiny"},
        {"choices": [{"message": {"role": "assistant", "content": "It is night in Tokyo."}, "finish_reason": "stop"}], "model": "tiny"},
    ]
    with LocalServer(lambda r: Reply(body=replies.pop(0))) as server:
        result = cli("--mcp", TIME_SERVER, "ask", "What time is it in Tokyo?", env={"OPENAI_BASE_URL": f"{server.url}/v1", "YIEMAGENT_MODEL": "tiny"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "It is night in Tokyo."
    assert "tools get_current_time, convert_time" in result.stderr and "✓ get_current_time" in result.stderr
    offered = {t["function"]["name"]: t["function"] for t in server.requests[0].json()["tools"]}
    assert offered["get_current_time"]["parameters"]["required"] == ["timezone"]
    tool_message = [m for m in server.requests[1].json()["messages"] if m["role"] == "tool"][0]
    assert '"timezone": "Asia/Tokyo"' in str(tool_message["content"])


def test_chat_lists_the_mcp_tools():
    """/tools in a chat shows the MCP server's tools beside the built-in ones."""
    result = cli("--mcp", TIME_SERVER, "chat", stdin="/tools\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "get_current_time: get_current_time — Get current time in a specific timezone" in result.stdout
    assert "getTime:" in result.stdout


def test_an_mcp_server_that_does_not_start_is_an_error():
    """A --mcp command that cannot start ends the CLI with status 2 and says why, once."""
    result = cli("--mcp", "/nonexistent/server --flag", "ask", "hi")
    assert result.returncode == 2
    assert result.stderr.count("No such file or directory") == 1
    assert "error: --mcp '/nonexistent/server --flag': could not connect to MCP server 'server'" in result.stderr


def test_two_servers_with_the_same_tool_name_warn():
    """Without prefixes a later server's tool replaces an earlier one of the same name, and the CLI says so."""
    plain = shlex.join(raw_server_command("plain"))
    result = cli("--mcp", plain, "--mcp", plain, "chat", stdin="/tools\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "warning: the MCP tool 'ping' replaces a tool of the same name" in result.stderr
    assert result.stdout.count("ping: ping") == 1


def test_ctrl_c_while_an_mcp_server_starts_exits_130_with_one_line_and_stops_the_server(start_cli):
    """Ctrl-C while --mcp waits for a server's initialize: no traceback and no "could not connect" error, one line,
    status 130, and the server process is stopped."""
    process, out, err = start_cli("--mcp", shlex.join(raw_server_command("silent")), "ask", "hi")
    assert err.wait_for("GOT initialize"), err.text
    server_pid = int(re.search(r"GOT initialize \(pid (\d+)\)", err.text).group(1))
    process.send_signal(signal.SIGINT)
    assert process.wait(WAIT) == 130, err.rest()
    assert err.rest().splitlines()[-1] == "yiemagent: interrupted with Ctrl-C"
    assert "Traceback" not in err.rest() and "could not connect" not in err.rest()
    assert not alive(server_pid)
