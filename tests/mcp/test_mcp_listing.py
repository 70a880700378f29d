"""How a tools/list page is checked tool by tool (docs/mcp.md "What happens on each failure"), against a stdio server that lists what the test gives it."""

from __future__ import annotations

import json
import logging

import anyio
import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from helpers import WAIT  # noqa: E402
from mcp_support import raw_server_command  # noqa: E402
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, JSONRPCResponse
from yiemagent import TextContent
from yiemagent.mcp import MCPClient, MCPConnectionError
from yiemagent.mcp._listing import ToolListing

PING = {"name": "ping", "description": "Answer pong.", "inputSchema": {"type": "object"}}
LISTED = {"name": "listed", "inputSchema": [{"type": "object"}]}


def scripted(page: dict, *flags: str, timeout_s: float = WAIT) -> MCPClient:
    """A client of the hand-written server listing ``page`` (tests/support/mcp_raw_server.py, mode ``scripted``)."""
    return MCPClient.stdio([*raw_server_command("scripted"), json.dumps(page), *flags], name="s", timeout_s=timeout_s)


def left_out(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "yiemagent.mcp" and "left out" in r.getMessage()]


def test_a_listed_tool_that_is_not_an_object_is_left_out_by_its_position(caplog):
    """A page entry that is not a JSON object at all is left out with a warning naming its position and saying the fault is the tool itself; the rest are listed."""
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with scripted({"tools": [PING, "ping", 7]}) as client:
            assert [t.name for t in client.tools()] == ["s_ping"]
    fault = "it is not valid MCP (at the tool itself: Input should be a valid dictionary or instance of Tool)"
    assert left_out(caplog) == [
        f"MCP server 's': tool #2 of the page (it has no name) left out: {fault}",
        f"MCP server 's': tool #3 of the page (it has no name) left out: {fault}",
    ]


@pytest.mark.parametrize("page", [{"tools": [PING], "nextCursor": 5}, {"tools": "ping"}, {"tools": {"ping": PING}}])
def test_a_page_whose_fault_is_not_one_tools_is_refused_whole_without_leaving_tools_out(caplog, page):
    """A page that is wrong as a page (nextCursor not a string, tools not a list) is not mended tool by tool: tools() raises MCPConnectionError and no tool is reported left out."""
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with scripted(page) as client:
            with pytest.raises(MCPConnectionError, match="^MCP server 's' did not list its tools"):
                client.tools()
    assert left_out(caplog) == []


def test_an_answer_the_server_repeats_is_not_checked_again(caplog):
    """A second answer to a tools/list already answered (the SDK drops it) gives no second warning: each listing reports its bad tool once."""
    with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
        with scripted({"tools": [PING, LISTED]}, "twice") as client:
            assert [t.name for t in client.tools()] == ["s_ping"]
            assert [t.name for t in client.tools()] == ["s_ping"]  # its answer comes after the first one's duplicate
    fault = "it is not valid MCP (at inputSchema: Input should be a valid dictionary or instance of InputSchema)"
    assert left_out(caplog) == [f"MCP server 's': tool 'listed' left out: {fault}"] * 2


def test_the_client_answers_a_ping_the_server_sends_during_a_call():
    """A server may ping the client (MCP "ping" utility, either side): the client's reply goes out through the checked write stream and the call completes."""
    with scripted({"tools": [PING]}, "ping", timeout_s=5) as client:
        assert client.call_tool("ping", {}).content == [TextContent("ping answered: {}")]


def test_the_wrapped_streams_act_as_the_transports_own():
    """The read side cleans a page read with receive() as with async for, and what it does not override (statistics, the SDK's last_context) is the transport stream's own."""

    async def main() -> None:
        listing = ToolListing("w", str)
        into_read, read = anyio.create_memory_object_stream[object](1)
        write, out_of_write = anyio.create_memory_object_stream[object](1)
        reader, writer = listing.wrap(read, write)
        request = SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=1, method="tools/list"))
        await writer.send(request)
        assert await out_of_write.receive() is request
        await into_read.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=1, result={"tools": [PING, LISTED]})))
        assert reader.statistics() == read.statistics()
        assert (await reader.receive()).message.result == {"tools": [PING]}

    anyio.run(main)
