"""MCPClient.stdio against real servers: mcp-server-time from PyPI, and a hand-written misbehaving one."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone

import anyio
import pytest

import yiemagent.mcp._session

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from mcp_support import alive, child_pids, raw_server_command, time_server_command  # noqa: E402
from yiemagent import AbortSignal, TextContent, ToolError
from yiemagent.mcp import MCPClient, MCPConnectionError, MCPListError, _stdio


@pytest.fixture(scope="module")
def time_client():
    with MCPClient.stdio(time_server_command(), name="time") as client:
        yield client


def by_name(client: MCPClient) -> dict:
    return {tool.name: tool for tool in client.tools()}


def mcp_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("yiemagent-mcp-")]


def test_time_server_tools_keep_their_schema_and_description_under_the_prefix(time_client):
    """Each MCP tool becomes an AgentTool named <name>_<tool>, with the tool's inputSchema and description."""
    tools = by_name(time_client)
    assert set(tools) == {"time_get_current_time", "time_convert_time"}
    current = tools["time_get_current_time"]
    assert current.input_schema["required"] == ["timezone"]
    assert current.input_schema["properties"]["timezone"]["type"] == "string"
    assert current.description == "Get current time in a specific timezone"
    assert current.label == "get_current_time" and current.parallel_tool_execute
    assert set(tools["time_convert_time"].input_schema["required"]) == {"source_timezone", "time", "target_timezone"}


def test_without_a_name_the_tools_keep_their_mcp_names():
    """A client without name= does not prefix: the LLM sees the server's own tool names."""
    with MCPClient.stdio(raw_server_command("plain")) as client:
        assert [t.name for t in client.tools()] == ["ping"]


def test_tools_on_several_pages_are_all_listed_once_with_their_titles(caplog):
    """tools() follows next_cursor, uses a tool's title as its label, and keeps the first of a twice-listed name."""
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with MCPClient.stdio(raw_server_command("paged"), name="paged") as client:
            tools = client.tools()
    assert [t.name for t in tools] == ["paged_ping", "paged_titled", "paged_structured_only", "paged_quiet_error"]
    assert tools[1].label == "Titled Tool" and tools[0].label == "ping"
    assert any("listed tool 'ping' twice" in r.getMessage() for r in caplog.records)


def test_a_server_whose_listing_never_ends_raises_after_max_list_pages(monkeypatch):
    """A next_cursor that never ends cannot hang tools(): after MAX_LIST_PAGES pages it raises MCPListError naming the list."""
    monkeypatch.setattr(yiemagent.mcp._session, "MAX_LIST_PAGES", 100)
    with MCPClient.stdio(raw_server_command("endless"), name="endless") as client:
        with pytest.raises(MCPListError, match=r"^MCP server 'endless' did not list its tools: tools/list has more than MAX_LIST_PAGES=100 pages"):
            client.tools()


def test_structured_content_without_content_is_also_given_as_text():
    """A result with only structured content gives it as details and as JSON text the model can read."""
    with MCPClient.stdio(raw_server_command("paged")) as client:
        result = client.call_tool("structured_only", {})
        assert result.details == {"n": 1} and result.content == [TextContent('{"n": 1}')]
        with pytest.raises(ToolError, match="^the server reported an error without a message$"):
            client.call_tool("quiet_error", {})


def test_get_current_time_gives_text_and_structured_details(time_client):
    """A tools/call result's text is the content and its structuredContent the details."""
    result = by_name(time_client)["time_get_current_time"].execute("c1", {"timezone": "Europe/Warsaw"}, AbortSignal(), None)
    assert result.details["timezone"] == "Europe/Warsaw"
    stamp = datetime.fromisoformat(result.details["datetime"])
    assert abs((stamp - datetime.now(timezone.utc)).total_seconds()) < 120
    assert [type(b) for b in result.content] == [TextContent]
    assert json.loads(result.content[0].text) == result.details


def test_convert_time_converts_between_zones(time_client):
    """convert_time answers with the converted time, proving arguments reach the server intact."""
    tool = by_name(time_client)["time_convert_time"]
    result = tool.execute("c2", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}, AbortSignal(), None)
    assert result.details["target"]["timezone"] == "Asia/Tokyo"
    assert "T21:00" in result.details["target"]["datetime"]
    assert result.details["time_difference"] == "+9.0h"


def test_an_invalid_timezone_is_an_error_result(time_client):
    """An isError result raises ToolError with the server's words, which the pipeline makes an error result."""
    with pytest.raises(ToolError, match="Invalid timezone"):
        by_name(time_client)["time_get_current_time"].execute("c3", {"timezone": "Mars/Olympus"}, AbortSignal(), None)


def test_a_protocol_error_names_the_code_and_logs(time_client, caplog):
    """A JSON-RPC error answer (unknown tool) is a ToolError naming the server, the code and the message, and a log line."""
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with pytest.raises(ToolError, match=r"answered with error -32602: Unknown tool: nope"):
            time_client.call_tool("nope", {})
    assert any("'nope'" in r.getMessage() for r in caplog.records)


def test_an_already_aborted_signal_stops_the_call(time_client):
    """A call whose signal has already fired is not sent, and says it was aborted."""
    signal = AbortSignal()
    signal.abort("the user left")
    with pytest.raises(ToolError, match=r"aborted \(the user left\) before it was sent"):
        time_client.call_tool("get_current_time", {"timezone": "UTC"}, signal)


def test_close_stops_the_server_process_and_the_thread():
    """close() ends the server process and the client's event-loop thread; a second close does nothing."""
    before = child_pids()
    client = MCPClient.stdio(time_server_command(), name="closing")
    (server_pid,) = child_pids() - before
    assert "yiemagent-mcp-closing" in mcp_threads()
    client.close()
    assert not alive(server_pid)
    assert "yiemagent-mcp-closing" not in mcp_threads()
    client.close()
    assert "closed" in repr(client)


def test_leaving_the_with_block_closes_and_later_calls_are_errors():
    """After the with block a tool call is an error result and tools() raises MCPConnectionError."""
    with MCPClient.stdio(raw_server_command("plain"), name="later") as client:
        tool = client.tools()[0]
    with pytest.raises(ToolError, match="is closed"):
        tool.execute("c4", {}, AbortSignal(), None)
    with pytest.raises(MCPConnectionError, match="did not list its tools"):
        client.tools()
    assert "yiemagent-mcp-later" not in mcp_threads()


def test_a_program_that_does_not_exist_raises_at_once():
    """A command that cannot start raises MCPConnectionError naming the cause, and leaves no thread."""
    with pytest.raises(MCPConnectionError, match="could not connect to MCP server 'missing'.*FileNotFoundError"):
        MCPClient.stdio(["/nonexistent/mcp-server"], name="missing")
    assert "yiemagent-mcp-missing" not in mcp_threads()


def test_bad_arguments_to_stdio_raise_value_error():
    """A command given as a string, or a non-positive timeout, is a programmer error raised at once."""
    with pytest.raises(ValueError, match="list of strings"):
        MCPClient.stdio("mcp-server-time")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s"):
        MCPClient.stdio(time_server_command(), timeout_s=0)
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        MCPClient.stdio(time_server_command(), name="")


def test_a_server_that_never_initializes_times_out():
    """A server silent on initialize gives MCPConnectionError after timeout_s, and is stopped."""
    before = child_pids()
    with pytest.raises(MCPConnectionError, match=r"did not answer initialize within 1 s"):
        MCPClient.stdio(raw_server_command("silent"), name="silent", timeout_s=1)
    assert child_pids() - before == set()
    assert "yiemagent-mcp-silent" not in mcp_threads()


def test_a_hanging_call_times_out_and_is_cancelled(capfd):
    """A tools/call never answered ends after timeout_s as an error result, and the server is told to cancel."""
    with MCPClient.stdio(raw_server_command("hang"), name="hang", timeout_s=2) as client:
        with pytest.raises(ToolError, match=r"no answer within 2 s \(timeout_s\); the request was cancelled"):
            client.tools()[0].execute("c5", {}, AbortSignal(), None)
    assert "GOT notifications/cancelled" in capfd.readouterr().err


def test_a_reply_that_is_not_mcp_is_an_error_result_and_the_connection_survives(caplog):
    """A result of the wrong shape is an error naming the bad field; a non-JSON line is logged and skipped."""
    with MCPClient.stdio(raw_server_command("nonsense"), name="nonsense", timeout_s=10) as client:
        with pytest.raises(ToolError, match=r"not valid MCP \(at content"):
            client.call_tool("ping", {})
        with caplog.at_level(logging.ERROR):
            assert client.call_tool("garbage", {}).content == [TextContent("pong")]
    assert any("JSON" in r.getMessage() for r in caplog.records)


def test_structured_content_that_breaks_the_output_schema_is_an_error_result():
    """The SDK checks structuredContent against the tool's outputSchema; a mismatch is an error result."""
    with MCPClient.stdio(raw_server_command("nonsense"), name="shaped", timeout_s=10) as client:
        with pytest.raises(ToolError, match="Invalid structured content returned by tool shaped"):
            client.call_tool("shaped", {})


def test_a_server_that_exits_mid_call_gives_error_results():
    """A server process that dies during a call: that call and later ones are error results, close still works."""
    with MCPClient.stdio(raw_server_command("exit"), name="crash", timeout_s=30) as client:
        # the message names the closed connection, not the timeout: the dead pipe ended the call
        with pytest.raises(ToolError, match="connection to MCP server 'crash' is closed"):
            client.call_tool("ping", {})
        with pytest.raises(ToolError, match="closed"):
            client.call_tool("ping", {})


def test_a_server_that_ignores_shutdown_is_killed():
    """A server ignoring the end of its stdin and SIGTERM is killed on close, and close returns."""
    before = child_pids()
    client = MCPClient.stdio(raw_server_command("stubborn"), name="stubborn")
    (server_pid,) = child_pids() - before
    assert client.call_tool("ping", {}).content == [TextContent("pong")]
    client.close()
    assert not alive(server_pid)
    assert "yiemagent-mcp-stubborn" not in mcp_threads()


def test_a_tool_whose_schema_is_not_json_schema_is_left_out(caplog):
    """tools() leaves out a tool with an invalid inputSchema and logs a warning naming it."""
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with MCPClient.stdio(raw_server_command("badschema"), name="bad") as client:
            assert [t.name for t in client.tools()] == ["bad_ping"]
    assert any("'broken' left out" in r.getMessage() for r in caplog.records)


LEFT_OUT = [
    "MCP server 'odd': tool 'listed' left out: it is not valid MCP (at inputSchema: Input should be a valid dictionary or instance of InputSchema)",
    "MCP server 'odd': tool 'stringy' left out: it is not valid MCP (at inputSchema: Input should be a valid dictionary or instance of InputSchema)",
    "MCP server 'odd': tool 'untyped' left out: it is not valid MCP (at inputSchema.type: Field required)",
    "MCP server 'odd': tool #5 of the page (it has no name) left out: it is not valid MCP (at name: Field required)",
]


def test_a_tool_that_is_not_valid_mcp_is_left_out_and_the_others_are_listed(caplog):
    """A tool whose inputSchema is a list (or a string, or no name) is left out with a warning naming server and tool; the rest work."""
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with MCPClient.stdio(raw_server_command("listschema"), name="odd") as client:
            tools = client.tools()
            assert [t.name for t in tools] == ["odd_ping"]
            assert tools[0].execute("c9", {}, AbortSignal(), None).content == [TextContent("pong")]
    assert [r.getMessage() for r in caplog.records if r.name == "yiemagent.mcp"] == LEFT_OUT


def test_a_call_before_any_listing_works_beside_a_tool_that_is_not_valid_mcp():
    """The SDK lists the tools by itself before checking a first call's result: that listing drops the bad tool too."""
    with MCPClient.stdio(raw_server_command("listschema"), name="first") as client:
        assert client.call_tool("ping", {}).content == [TextContent("pong")]


def test_env_values_are_masked_in_the_repr():
    """env values are secrets: the repr shows their names only."""
    with MCPClient.stdio(raw_server_command("plain"), env={"TIME_API_TOKEN": "tok-0123456789"}, name="env") as client:
        assert "tok-0123456789" not in repr(client)
        assert "'TIME_API_TOKEN': '***'" in repr(client)


_MANY_CALLERS = """
import sys, threading
sys.path.insert(0, {support!r})
from mcp_support import time_server_command
from yiemagent.mcp import MCPClient
with MCPClient.stdio(time_server_command(), name="time", timeout_s=20) as client:
    errors = []
    def work():
        for _ in range(40):
            try:
                client.call_tool("get_current_time", {{"timezone": "UTC"}})
            except Exception as exc:
                errors.append(exc)
    threads = [threading.Thread(target=work, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(40)
    print(sum(t.is_alive() for t in threads), len(errors))
"""


def test_calls_from_many_threads_at_once_never_deadlock_the_client():
    """8 threads x 40 calls on one client: submitting a call while another's completion runs on the loop thread took one lock twice (seen hung)."""
    import subprocess
    import sys

    from helpers import ROOT

    code = _MANY_CALLERS.format(support=str(ROOT / "tests" / "support"))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert done.stdout.split() == ["0", "0"], done.stdout + done.stderr[-2000:]


# --- the line reader (mcp/_stdio.py, docs/mcp.md "Large results"), fed exact reads -------


class _Stdout:
    """A server process whose stdout hands out ``chunks``, one a read, then ends."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.stdout, self._chunks = self, iter(chunks)

    async def receive(self, max_bytes: int) -> bytes:
        assert max_bytes == _stdio.READ_CHUNK
        for chunk in self._chunks:
            return chunk
        raise anyio.EndOfStream


def read_lines(chunks: list[bytes], errors: str = "strict") -> list:
    """What the reader hands the session for these reads: each message's id (or the error value), then "closed" if it closed the stream."""
    send, receive = anyio.create_memory_object_stream[object](len(chunks) + 10)
    anyio.run(_stdio._read_lines, _Stdout(chunks), send, "utf-8", errors)
    given: list = []
    while True:
        try:
            item = receive.receive_nowait()
        except anyio.EndOfStream:
            return given + ["closed"]
        except anyio.WouldBlock:
            return given
        given.append(item if isinstance(item, Exception) else item.message.id)


def reply(n: int) -> bytes:
    """A JSON-RPC response with id ``n`` (0-9): every one the same length."""
    return b'{"jsonrpc":"2.0","id":%d,"result":{}}' % n


def test_a_message_of_exactly_max_message_bytes_is_read_wherever_the_reads_cut_it(monkeypatch):
    """MAX_MESSAGE_BYTES is the longest message a server may send: one of exactly that many bytes is read, first in a read or after another line, whole or split across reads (also just before its newline)."""
    monkeypatch.setattr(_stdio, "MAX_MESSAGE_BYTES", len(reply(1)))
    assert read_lines([reply(1) + b"\n" + reply(2) + b"\n"]) == [1, 2]
    assert read_lines([reply(1) + b"\n" + reply(2)[:5], reply(2)[5:] + b"\n" + reply(3) + b"\n"]) == [1, 2, 3]
    assert read_lines([reply(1), b"\n" + reply(2), b"\n"]) == [1, 2]


def test_a_message_one_byte_past_max_message_bytes_closes_the_stream_and_is_logged(monkeypatch, caplog):
    """A message one byte longer than the cap is never parsed, whether its newline comes in the same read or a later one: the session's stream is closed, with an error naming the cap."""
    monkeypatch.setattr(_stdio, "MAX_MESSAGE_BYTES", len(reply(1)) - 1)
    with caplog.at_level(logging.ERROR, logger="yiemagent.mcp"):
        assert read_lines([reply(1) + b"\n"]) == ["closed"]
        assert read_lines([reply(1)[:5], reply(1)[5:] + b"\n" + reply(2)]) == ["closed"]
    limit = len(reply(1)) - 1
    assert [r.getMessage() for r in caplog.records] == [
        f"the MCP server sent a message of more than MAX_MESSAGE_BYTES={limit} bytes; the connection was closed"
    ] * 2


def test_the_reader_decodes_with_the_servers_encoding_error_handler():
    """The reader decodes each line with the StdioServerParameters' encoding_error_handler, as the SDK's does: "replace" turns a byte that is not UTF-8 into U+FFFD."""
    send, receive = anyio.create_memory_object_stream[object](2)
    anyio.run(_stdio._read_lines, _Stdout([b'{"jsonrpc":"2.0","id":1,"result":{"t":"\xff"}}\n']), send, "utf-8", "replace")
    assert receive.receive_nowait().message.result == {"t": "\ufffd"}
