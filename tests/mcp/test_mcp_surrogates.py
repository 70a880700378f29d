"""Text UTF-8 cannot carry in a server's reply (docs/mcp.md "Text UTF-8 cannot carry"): the escape of a lone surrogate
(``"a\\ud800c"`` in the JSON) is answered at once as U+FFFD, over stdio and HTTP (a JSON body or an SSE stream), never
dropped while the call waits for its timeout (decision 15: nothing enters the history that cannot be sent again).
"""

from __future__ import annotations

import json

import anyio
import httpx2
import pydantic_core
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from helpers import WAIT, make_agent  # noqa: E402
from mcp_support import HttpServer, raw_server_command  # noqa: E402
from yiemagent import TextContent, ToolError, ToolResultMessage, run_agent, shutdown, take_response
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply
from yiemagent.mcp import MCPClient
from yiemagent.mcp._surrogates import MendedBody, mend_lone_surrogates, mend_response


LISTED = json.dumps({"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in ("ping", "lone_surrogate")]})


@pytest.fixture(params=["stdio", "http", "sse"])
def client(request):
    """The raw server listing ``ping`` and ``lone_surrogate``, over stdio, HTTP with JSON bodies, or HTTP with SSE events written 7 bytes at a time."""
    if request.param == "stdio":
        with MCPClient.stdio(raw_server_command("scripted", LISTED), name="s", timeout_s=WAIT) as made:
            yield made
        return
    server = HttpServer(raw_server_command("scripted", LISTED, *(["--sse"] if request.param == "sse" else []), http=True))
    try:
        with MCPClient.http(server.url, name="s", timeout_s=WAIT) as made:
            yield made
    finally:
        server.close()


def test_a_reply_holding_a_lone_surrogate_escape_is_answered_with_u_fffd(client):
    """A tools/call answer whose text is the JSON escape of a lone surrogate gives that text with U+FFFD in its place,
    and the connection goes on."""
    assert client.call_tool("lone_surrogate", {}).content == [TextContent("a\ufffdc")]
    assert client.call_tool("ping", {}).content == [TextContent("pong")]


def test_an_agent_keeps_the_mended_result_and_its_next_round_is_sent(client):
    """Through an agent, the result enters the history as text UTF-8 can carry, and the next LLM round gets it."""
    llm = ScriptedLLM([tool_call_reply(("c1", "s_lone_surrogate", {})), "done"])
    agent = make_agent(llm, builtin_tools=False)
    try:
        client.tools(agent.tool_store)
        run_agent(agent, "read it")
        assert take_response(agent, timeout=WAIT).content[0].text == "done"
        [result] = [m for m in agent.history() if isinstance(m, ToolResultMessage)]
        assert result.content == [TextContent("a\ufffdc")] and not result.is_error
        json.dumps(llm.requests[1]["messages"], ensure_ascii=False).encode("utf-8")  # the next round's request can be sent
    finally:
        shutdown(agent, timeout=WAIT)


def test_a_compressed_body_is_not_mended_and_the_call_fails_at_once_naming_the_parse_error():
    """A body the server compressed is passed on as it came (its bytes are not JSON text): a lone surrogate escape in it
    makes the call an error result at once, in the SDK's words naming the escape, and the connection goes on."""
    server = HttpServer(raw_server_command("scripted", LISTED, "--gzip", http=True))
    try:
        with MCPClient.http(server.url, name="s", timeout_s=WAIT) as client:
            with pytest.raises(ToolError, match=r"(?s)^MCP tool 'lone_surrogate' failed: MCP server 's' answered with error -32700: Failed to parse JSON response: .*unexpected end of hex escape"):
                client.call_tool("lone_surrogate", {})
            assert client.call_tool("ping", {}).content == [TextContent("pong")]
    finally:
        server.close()


SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"])
PIECES = st.one_of(SURROGATES, st.sampled_from(["\\", "u", "d800", "dc00", '"', "\n"]), st.characters())
TEXTS = st.lists(PIECES, max_size=12).map("".join)


def as_utf16_reads(text: str) -> str:
    """``text`` read as JSON reads an escaped string: a high surrogate then a low one are one character; any other surrogate is U+FFFD."""
    out, i = [], 0
    while i < len(text):
        unit = ord(text[i])
        low = ord(text[i + 1]) if i + 1 < len(text) else 0
        if 0xD800 <= unit <= 0xDBFF and 0xDC00 <= low <= 0xDFFF:
            out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))
            i += 2
            continue
        out.append("\ufffd" if 0xD800 <= unit <= 0xDFFF else text[i])
        i += 1
    return "".join(out)


@given(TEXTS, TEXTS)
def test_mended_json_parses_as_the_sdk_parses_with_u_fffd_for_each_lone_surrogate(key, value):
    """For any str holding lone surrogates, pairs, backslashes and "u" text, json.dumps then mend_lone_surrogates gives JSON
    the SDK's parser (pydantic) reads, with each lone surrogate U+FFFD, each pair one character, all else as it was."""
    mended = mend_lone_surrogates(json.dumps({key: [value]}))
    assert pydantic_core.from_json(mended) == {as_utf16_reads(key): [as_utf16_reads(value)]}


@given(TEXTS)
def test_json_without_a_lone_surrogate_escape_is_left_as_it_is(text):
    """JSON whose escapes are all of whole characters (a pair, a backslash before "u" text) comes back unchanged."""
    dumped = json.dumps(as_utf16_reads(text))
    assert mend_lone_surrogates(dumped) == dumped


@given(TEXTS, st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_a_body_mended_in_pieces_is_the_body_mended_whole(value, cuts):
    """However the transport cuts a body (an SSE stream) into reads, the mended body is the whole body mended, line by line."""
    body = b"event: message\ndata: " + json.dumps({"text": value}).encode() + b"\n\n" + json.dumps([value]).encode()
    points = sorted({min(c, len(body)) for c in cuts})
    reads = [body[a:b] for a, b in zip([0, *points], [*points, len(body)]) if b > a]

    class Body:
        async def __aiter__(self):
            for read in reads:
                yield read

    async def mended() -> bytes:
        return b"".join([chunk async for chunk in MendedBody(Body(), 1 << 20)])

    whole = b"".join(mend_lone_surrogates(line).encode("latin-1") for line in body.decode("latin-1").splitlines(keepends=True))
    assert anyio.run(mended) == whole


def mended_reads(reads: list[bytes], limit: int) -> list[bytes]:
    """What ``MendedBody`` passes on for a body the transport delivers as ``reads``."""

    class Body:
        async def __aiter__(self):
            for read in reads:
                yield read

    async def mended() -> list[bytes]:
        return [chunk async for chunk in MendedBody(Body(), limit)]

    return anyio.run(mended)


LONE, FFFD = b'"\\ud800"', b'"\\ufffd"'


def test_escaped_backslashes_before_u_text_and_uppercase_pairs_are_left_as_sent():
    """An escaped backslash before "ud800" is text (a lone low escape after it is still mended), and a pair
    written in upper case (``\\uDB40\\uDC00``) is one character: both stay as the server sent them."""
    assert mend_lone_surrogates('"\\\\ud800"') == '"\\\\ud800"'
    assert mend_lone_surrogates('"\\\\ud800\\udc00"') == '"\\\\ud800\\ufffd"'
    assert mend_lone_surrogates('"\\uDB40\\uDC00"') == '"\\uDB40\\uDC00"'


def test_a_body_read_after_a_first_read_without_a_backslash_is_passed_on_and_mended():
    """A first read with no backslash is passed on at once and the reads after it still come, each line mended."""
    assert b"".join(mended_reads([b'{"a": 1}\n', LONE + b"\n", b"tail"], 1 << 20)) == b'{"a": 1}\n' + FFFD + b"\ntail"


def test_a_line_held_up_to_the_limit_is_mended_and_one_byte_more_is_passed_on_as_it_came():
    """A line of exactly ``limit`` bytes held over several reads is mended at its newline; one of ``limit + 1``
    bytes is passed on unmended, the pieces joined as read, and the count starts again at 0 after it,
    after a line's rest without a backslash, and after a newline that starts a read; every whole line of a read is mended at once."""
    line = LONE + b"x" * 12  # 20 bytes
    assert b"".join(mended_reads([line[:10], line[10:], b"\n"], 20)) == FFFD + b"x" * 12 + b"\n"
    longer = line + b"y"
    assert mended_reads([longer[:10], longer[10:]], 20) == [longer]
    assert b"".join(mended_reads([longer[:10], longer[10:], line, b"\n"], 20)) == longer + FFFD + b"x" * 12 + b"\n"
    assert b"".join(mended_reads([LONE + b"\nb", line, b"\n"], 20)) == FFFD + b"\nb" + FFFD + b"x" * 12 + b"\n"
    assert b"".join(mended_reads([LONE + b"\n" + LONE + b"\n", b"zz"], 10)) == FFFD + b"\n" + FFFD + b"\nzz"
    assert b"".join(mended_reads([LONE, b"\n", LONE + b" more text 12"], 20)) == FFFD + b"\n" + LONE + b" more text 12"
    assert b"".join(mended_reads([LONE + b"\n" + LONE, b" more text\n"], 1 << 20)) == FFFD + b"\n" + FFFD + b" more text\n"


def test_only_a_body_without_a_content_encoding_is_mended():
    """The response hook wraps a body whose Content-Encoding is missing, empty or identity (any case), never a compressed one."""
    hook = mend_response(1 << 20)
    for headers, wrapped in (({}, True), ({"Content-Encoding": ""}, True), ({"Content-Encoding": " Identity "}, True), ({"Content-Encoding": "gzip"}, False)):
        response = httpx2.Response(200, headers=headers, stream=httpx2.ByteStream(b"{}"))
        anyio.run(hook, response)
        assert isinstance(response.stream, MendedBody) is wrapped, headers
