"""MCPClient.http against a real MCP server written with the SDK's MCPServer, over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from localserver import LocalServer, Reply  # noqa: E402
from mcp_support import HERE, WAIT, HttpServer, raw_server_command  # noqa: E402
from mcp_http_server import PNG  # noqa: E402
from helpers import make_agent  # noqa: E402
from yiemagent import AbortSignal, ImageContent, TextContent, ToolError, ask, shutdown
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.mcp import MCPClient, MCPConnectionError

TOKEN = "Bearer sk-mcp-very-secret-token"


@pytest.fixture(scope="module")
def server():
    server = HttpServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(server):
    with MCPClient.http(server.url, headers={"Authorization": TOKEN}, name="web") as client:
        yield client


def tool(client: MCPClient, name: str):
    return {t.name: t for t in client.tools()}[name]


class Call(threading.Thread):
    """A tool call on its own thread, as the pipeline makes it; ``outcome`` is its result or exception."""

    def __init__(self, client: MCPClient, name: str, args: dict, signal: AbortSignal) -> None:
        super().__init__(name="mcp-test-call", daemon=True)
        self.client, self.tool_name, self.args, self.signal = client, name, args, signal
        self.outcome = None
        self.start()

    def run(self) -> None:
        try:
            self.outcome = self.client.call_tool(self.tool_name, self.args, self.signal)
        except Exception as exc:
            self.outcome = exc

    def result(self):
        self.join(WAIT)
        assert not self.is_alive(), "the call did not end"
        return self.outcome


def test_text_round_trip(client):
    """A tool's text result comes back as one TextContent."""
    result = tool(client, "web_echo").execute("c1", {"text": "héllo"}, AbortSignal(), None)
    assert result.content == [TextContent("héllo")]


def test_a_dotted_name_is_mapped_and_structured_content_is_details(client):
    """weather.forecast becomes web_weather_forecast; its structured content is the details."""
    forecast = tool(client, "web_weather_forecast")
    assert forecast.input_schema["required"] == ["city"]
    result = forecast.execute("c2", {"city": "Oslo"}, AbortSignal(), None)
    assert result.details == {"city": "Oslo", "temperature_c": 21.5, "sky": "clear"}


def test_an_image_becomes_image_content(client):
    """Image content keeps its base64 data and MIME type."""
    result = tool(client, "web_picture").execute("c3", {"caption": "a red dot"}, AbortSignal(), None)
    assert result.content == [TextContent("a red dot"), ImageContent(PNG, "image/png")]
    assert result.details == {}


def test_an_mcp_tools_image_reaches_the_model_with_both_clients(client):
    """An MCP tool's image goes to the model where each provider documents it: after the results in a user message (OpenAI), inside tool_result (Anthropic)."""
    call = {"id": "c9", "type": "function", "function": {"name": "web_picture", "arguments": json.dumps({"caption": "a red dot"})}}
    openai = [
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "A red dot."}, "finish_reason": "stop"}]},
    ]
    use = {"type": "tool_use", "id": "c9", "name": "web_picture", "input": {"caption": "a red dot"}}
    anthropic = [
        {"type": "message", "role": "assistant", "content": [use], "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}},
        {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "A red dot."}], "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}},
    ]
    for replies, make_client in ((openai, lambda url: OpenAIClient(f"{url}/v1", "gpt-4o", "sk-test", max_retries=0)), (anthropic, lambda url: AnthropicClient("claude", "key", base_url=url, max_retries=0))):
        served = iter(replies)
        with LocalServer(lambda request: Reply(body=next(served))) as llm:
            agent = make_agent(make_client(llm.url), tool(client, "web_picture"))
            try:
                assert ask(agent, "What is in the picture?", timeout=WAIT).text == "A red dot."
            finally:
                shutdown(agent)
        messages = llm.requests[1].json()["messages"]
        if replies is openai:
            assert messages[-1]["content"][1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
        else:
            (result,) = messages[-1]["content"]
            assert result["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


def test_other_kinds_of_content_become_sensible_text(client):
    """Audio, links, embedded resources and bad images become text or images the next LLM round can take."""
    content = tool(client, "web_mixed").execute("c4", {}, AbortSignal(), None).content
    assert content == [
        TextContent("[audio (audio/wav, 3 bytes) omitted: yiemagent carries no audio]"),
        TextContent("[resource link 'readme' <file:///srv/readme.md>: the readme]"),
        TextContent("[resource <file:///srv/notes.txt>]\nsome notes"),
        ImageContent(PNG, "image/png"),
        TextContent("[resource <file:///srv/data.bin> (application/octet-stream, 3 bytes) omitted: binary data]"),
        TextContent("[image (image/png) omitted: its data is not valid base64]"),
    ]


def test_progress_notifications_become_partial_results(client):
    """Each progress notification of a call reaches on_partial_result, in order, before the result."""
    partials = []
    result = tool(client, "web_countdown").execute("c7", {"steps": 3}, AbortSignal(), partials.append)
    assert [p.content for p in partials] == [[TextContent(f"progress {n}/3: step {n}")] for n in (1, 2, 3)]
    assert partials[0].details == {"progress": 1, "total": 3, "message": "step 1"}
    assert result.content == [TextContent("lift-off")]


def test_a_tool_error_is_an_error_result(client):
    """A server-side ToolError arrives as isError and raises ToolError with its words."""
    with pytest.raises(ToolError, match="the disk is full"):
        tool(client, "web_fail").execute("c5", {"why": "the disk is full"}, AbortSignal(), None)


def test_headers_are_sent_and_masked_in_errors_logs_and_repr(client, caplog):
    """The Authorization header reaches the server, yet no error, log line or repr shows its value."""
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ToolError) as caught:
            tool(client, "web_leak").execute("c6", {}, AbortSignal(), None)
    assert str(caught.value) == "Error executing tool leak: token rejected: ***"
    assert "sk-mcp-very-secret-token" not in caplog.text
    assert "sk-mcp-very-secret-token" not in repr(client) and "'Authorization': '***'" in repr(client)


def test_a_tool_that_is_not_valid_mcp_is_left_out_over_http_too(caplog):
    """Over streamable HTTP as over stdio, a tool whose inputSchema is a list is left out with a warning; the rest work."""
    raw = HttpServer(raw_server_command("listschema", http=True))
    try:
        with caplog.at_level(logging.WARNING, logger="yiemagent.mcp"):
            with MCPClient.http(raw.url, name="odd") as odd:
                tools = odd.tools()
                assert [t.name for t in tools] == ["odd_ping"]
                assert tools[0].execute("c9", {}, AbortSignal(), None).content == [TextContent("pong")]
    finally:
        raw.close()
    left_out = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert left_out[0] == "MCP server 'odd': tool 'listed' left out: it is not valid MCP (at inputSchema: Input should be a valid dictionary or instance of InputSchema)"
    assert len(left_out) == 4


def test_a_logger_made_after_the_client_has_its_records_masked(client, caplog):
    """A logger of the SDK or its HTTP stack that first appears after the client was made: its records are masked too."""
    made_later = [logging.getLogger(f"{root}.made-after-the-client-{id(caplog)}") for root in ("httpcore2", "httpx2", "mcp")]
    with caplog.at_level(logging.DEBUG):
        for logger in made_later:
            logger.debug("response headers: %s", [(b"x-echo-authorization", TOKEN.encode())])
    assert len(caplog.records) == 3
    for record in caplog.records:
        assert "sk-mcp-very-secret-token" not in record.getMessage() and "***" in record.getMessage()


FIRST_CLIENT = """
import logging, sys
sys.path.insert(0, {tests!r})
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s %(message)s")
from yiemagent.mcp import MCPClient
assert "httpcore2.http11" not in logging.root.manager.loggerDict, "the test needs a logger that appears after the client"
with MCPClient.http({url!r}, headers={{"Authorization": {token!r}}}) as client:
    client.call_tool("echo", {{"text": "hi"}})
print("httpcore2.http11" in logging.root.manager.loggerDict)
"""


def test_the_first_client_of_a_process_masks_the_token_the_server_echoes_in_httpcore_debug_lines(server):
    """In a fresh process httpcore2's http11 logger appears during the first connection, after the client was made:
    the Authorization header the server echoes in a response header is masked in its DEBUG lines."""
    code = textwrap.dedent(FIRST_CLIENT).format(tests=str(HERE), url=server.url, token=TOKEN)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "True"
    echoed = [line for line in run.stderr.splitlines() if line.startswith("httpcore2.http11") and "x-echo-authorization" in line]
    assert echoed, "httpcore2 logged the response headers"
    assert all("b'***'" in line for line in echoed)
    assert "sk-mcp-very-secret-token" not in run.stderr


def test_a_slow_call_times_out_and_the_server_cancels_it(server):
    """A call past timeout_s is an error result naming the limit, and the server's handler is cancelled."""
    with MCPClient.http(server.url, name="impatient", timeout_s=2) as impatient:
        with pytest.raises(ToolError, match=r"no answer within 2 s"):
            impatient.call_tool("slow", {"seconds": 60})
        server.wait_for("CANCELLED slow")


def test_abort_cancels_a_call_in_flight(client, server):
    """Firing the call's abort signal ends the call at once as an error result and cancels it on the server."""
    signal = AbortSignal()
    call = Call(client, "slow", {"seconds": 60}, signal)
    server.wait_for("STARTED slow")
    signal.abort("the user pressed stop")
    outcome = call.result()
    assert isinstance(outcome, ToolError) and "aborted (the user pressed stop)" in str(outcome)
    server.wait_for("CANCELLED slow")


def test_close_during_a_call_ends_the_call(server):
    """close() while a call is in flight ends that call as an error result, and the thread."""
    other = MCPClient.http(server.url, name="closer")
    call = Call(other, "slow", {"seconds": 60}, AbortSignal())
    server.wait_for("STARTED slow")
    other.close()
    outcome = call.result()
    assert isinstance(outcome, ToolError) and "closed" in str(outcome)
    assert "yiemagent-mcp-closer" not in [t.name for t in threading.enumerate()]


def test_a_server_killed_mid_call_gives_error_results():
    """Killing the server process during a call ends that call and later ones as error results; close returns."""
    doomed = HttpServer()
    try:
        victim = MCPClient.http(doomed.url, name="victim", timeout_s=30)
        call = Call(victim, "slow", {"seconds": 60}, AbortSignal())
        doomed.wait_for("STARTED slow")
        doomed.kill()
        outcome = call.result()
        assert isinstance(outcome, ToolError) and "MCP tool 'slow' failed" in str(outcome)
        with pytest.raises(ToolError, match="MCP tool 'echo' failed"):
            victim.call_tool("echo", {"text": "anyone?"})
        victim.close()
    finally:
        doomed.close()


def test_nothing_listening_raises_at_connect():
    """A URL where no server listens gives MCPConnectionError naming the cause."""
    with pytest.raises(MCPConnectionError, match="could not connect to MCP server 'nobody'"):
        MCPClient.http("http://127.0.0.1:9/mcp", name="nobody", timeout_s=5)


def test_a_server_that_accepts_but_never_answers_times_out_at_connect():
    """A socket that takes the connection but never answers gives MCPConnectionError after timeout_s."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)  # connections complete in the backlog; nothing ever reads them
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        with pytest.raises(MCPConnectionError, match=r"did not answer initialize within 1 s"):
            MCPClient.http(url, name="mute", timeout_s=1)


def test_a_server_that_is_not_mcp_fails_at_connect_and_keeps_the_header_secret():
    """A web server answering HTML gives MCPConnectionError, with the header that was sent masked."""
    with LocalServer(lambda request: Reply(status=404, body=f"<html>no MCP here, {request.headers.get('Authorization')}</html>")) as web:
        with pytest.raises(MCPConnectionError) as caught:
            MCPClient.http(f"{web.url}/mcp", headers={"Authorization": TOKEN}, name="web404", timeout_s=10)
    assert web.requests[0].headers["Authorization"] == TOKEN
    assert "could not connect to MCP server 'web404'" in str(caught.value)
    assert "sk-mcp-very-secret-token" not in str(caught.value)


def test_a_url_that_is_not_http_is_a_value_error():
    """MCPClient.http wants an http(s) URL."""
    with pytest.raises(ValueError, match="http"):
        MCPClient.http("ftp://127.0.0.1/mcp")
