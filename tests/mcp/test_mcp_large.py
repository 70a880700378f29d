"""Large MCP results over stdio: the linear-time reader (mcp/_stdio.py) gives every line whole, across reads and UTF-8 sequences."""

from __future__ import annotations

import sys

import anyio
import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from helpers import WAIT  # noqa: E402
from mcp_support import HERE, HttpServer  # noqa: E402
from yiemagent.mcp import MCPClient
from yiemagent.mcp import _stdio

SERVER = [sys.executable, str(HERE / "mcp_features_server.py")]


def test_a_result_of_many_reads_with_multibyte_text_comes_back_whole():
    """A 3-million-character result of two-byte characters (6 MB, several reads of the pipe) arrives whole and exact."""
    with MCPClient.stdio(SERVER, name="feat", timeout_s=WAIT) as client:
        result = client.call_tool("big", {"megabytes": 3, "char": "é"})
        assert result.content[0].text == "é" * 3_000_000
        assert client.call_tool("big", {"megabytes": 0.001}).content[0].text == "x" * 1000  # the connection goes on


def test_the_big_tool_sends_its_text_once_so_its_message_is_the_size_asked(monkeypatch):
    """big's 2 MB of text passes a 3 MiB cap: sent as content only, not also as structuredContent (4 MB)."""
    monkeypatch.setattr(_stdio, "MAX_MESSAGE_BYTES", 3 << 20)
    with MCPClient.stdio(SERVER, name="feat", timeout_s=WAIT) as client:
        assert client.call_tool("big", {"megabytes": 2}).content[0].text == "x" * 2_000_000


def test_a_result_above_the_sdks_1_mib_event_cap_comes_over_http():
    """Over streamable HTTP a 3 MB result arrives whole: the client takes SSE events up to 64 MiB (the SDK's default is 1 MiB)."""
    server = HttpServer(SERVER + ["--http"])
    try:
        with MCPClient.http(server.url, name="feat", timeout_s=WAIT) as client:
            assert client.call_tool("big", {"megabytes": 3}).content[0].text == "x" * 3_000_000
    finally:
        server.close()


class _Pipe:
    """A stdout that hands out the given byte chunks, then ends."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    async def receive(self, max_bytes: int) -> bytes:
        assert max_bytes == _stdio.READ_CHUNK
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)


class _Process:
    def __init__(self, chunks: list[bytes]) -> None:
        self.stdout = _Pipe(chunks)


class _Collect:
    def __init__(self) -> None:
        self.items: list = []

    async def send(self, item) -> None:
        self.items.append(item)

    async def aclose(self) -> None:
        self.items.append("closed")


@pytest.mark.parametrize("cut", [1, 7, 12, 13, 30])
def test_lines_split_anywhere_are_joined_and_several_in_one_read_are_apart(cut):
    """Lines cut at any byte (inside a UTF-8 character too) are joined before parsing; two lines in one read give two messages."""
    one = '{"jsonrpc":"2.0","id":1,"result":{"t":"été"}}'.encode()
    two = '{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}'.encode()
    data = one + b"\n" + two + b"\n"
    collected = _Collect()
    anyio.run(_stdio._read_lines, _Process([data[:cut], data[cut:]]), collected, "utf-8", "strict")
    first, second = collected.items
    assert first.message.result == {"t": "été"} and second.message.method == "notifications/tools/list_changed"


def test_a_line_that_is_not_json_rpc_is_passed_on_as_an_error_value():
    """A bad line becomes the SDK's parse-error value (the session logs it); the next line still parses."""
    collected = _Collect()
    anyio.run(_stdio._read_lines, _Process([b"not json\n", b'{"jsonrpc":"2.0","id":2,"result":{}}\n']), collected, "utf-8", "strict")
    bad, good = collected.items
    assert isinstance(bad, Exception) and good.message.id == 2


def test_a_message_past_the_cap_ends_the_connection_and_is_logged(monkeypatch, caplog):
    """A line longer than MAX_MESSAGE_BYTES is not kept growing: the reader stops there, naming the cap; nothing is parsed."""
    monkeypatch.setattr(_stdio, "MAX_MESSAGE_BYTES", 10)
    collected = _Collect()
    ok = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    with caplog.at_level("ERROR", logger="yiemagent.mcp"):
        anyio.run(_stdio._read_lines, _Process([b"0123456789", b"abc", b"def\n" + ok + b"\n"]), collected, "utf-8", "strict")
    assert collected.items == ["closed"] and "MAX_MESSAGE_BYTES=10" in caplog.text


def test_a_result_past_the_cap_fails_the_call_at_once_naming_the_server(monkeypatch):
    """Over a real stdio server, a 2 MB result against a 1 MB cap is an MCP error for that call, not a hang or a client holding it all."""
    from yiemagent.errors import ToolError

    monkeypatch.setattr(_stdio, "MAX_MESSAGE_BYTES", 1 << 20)
    with MCPClient.stdio(SERVER, name="feat", timeout_s=WAIT) as client:
        with pytest.raises(ToolError, match="MCP server .feat. is closed"):
            client.call_tool("big", {"megabytes": 2})
