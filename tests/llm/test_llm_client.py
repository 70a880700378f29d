"""What the two HTTP clients share (``llm/_client.py``): the repr, reading a stream in any of its forms, the caps, the errors' words.

docs/streaming.md, docs/failures.md "A reply too large", README "Secrets"; decisions 13
and 14. Every test runs the real client against a real ``http.server`` on 127.0.0.1
(``LocalServer``, or ``raw_server`` below when the test needs the exact header lines).
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from localserver import LocalServer, Reply
from yiemagent import LLMError
from yiemagent.events import stream_to
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.types import TextContent

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
NDJSON = {"Content-Type": "application/x-ndjson"}


def raw_server(raw: bytes) -> LocalServer:
    """A real HTTP server on 127.0.0.1 that answers every POST with ``raw``, byte for byte (status line, headers, body).

    ``LocalServer``'s own handler always writes a ``Content-Type``; this one writes only what the test gives.
    """

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.close_connection = True
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = LocalServer(lambda request: Reply())
    server._server.RequestHandlerClass = Handler
    return server


def raw_reply(head: str, body: bytes) -> bytes:
    """An HTTP/1.1 200 reply with the header lines ``head`` (each ending in CRLF), a Content-Length, and ``body``."""
    return f"HTTP/1.1 200 OK\r\n{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body


def sse(*events: dict[str, Any]) -> bytes:
    """An OpenAI stream of ``events``, then ``[DONE]``."""
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def text_chunk(text: str, finish: Any = None) -> dict[str, Any]:
    return {"model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def streamed(client, formatted=FORMATTED):
    """``(reply, deltas)``: the client's reply to ``formatted`` and the deltas it emitted on the way."""
    deltas: list[tuple[str, str]] = []
    with stream_to(lambda kind, text: deltas.append((kind, text))):
        reply = client(formatted)
    return reply, deltas


# --- the repr ---------------------------------------------------------------------------


def test_repr_says_whether_a_key_is_set_without_showing_it():
    """A client's repr shows ``api_key='***'`` when it has a key and ``api_key=None`` when it has none (README "Secrets")."""
    keyed = OpenAIClient("http://127.0.0.1:9/v1", "gpt", api_key="sk-test-0123456789")
    keyless = OpenAIClient("http://127.0.0.1:9/v1", "gpt")
    assert repr(keyed) == "OpenAIClient(base_url='http://127.0.0.1:9/v1', model='gpt', api_key='***')"
    assert repr(keyless) == "OpenAIClient(base_url='http://127.0.0.1:9/v1', model='gpt', api_key=None)"
    assert repr(AnthropicClient("claude", None, base_url="http://127.0.0.1:9")) == "AnthropicClient(model='claude', base_url='http://127.0.0.1:9', api_key=None)"


def test_repr_shows_the_custom_headers_after_the_key_with_credentials_masked():
    """Headers given with ``headers=`` follow the key in the repr; a credential header's value is ``***``, any other shows as given."""
    client = AnthropicClient("claude", "sk-ant-0123456789", base_url="http://127.0.0.1:9", headers={"X-Title": "My App", "X-Gateway-Token": "gw-0123456789"})
    assert repr(client) == (
        "AnthropicClient(model='claude', base_url='http://127.0.0.1:9', api_key='***', headers={'X-Title': 'My App', 'X-Gateway-Token': '***'})"
    )


def test_a_key_holding_a_space_is_masked_whole_when_the_server_echoes_it():
    """README "Secrets": the API key itself is a secret, not only the words of its ``Authorization`` header: a key
    whose first word is too short to be searched for alone is still masked whole in an echoed error."""
    key = "k7 0123456789abcdef"
    with LocalServer(lambda r: Reply(status=401, body={"error": {"message": f"Incorrect API key provided: {key}.", "code": "invalid_api_key"}})) as server:
        client = OpenAIClient(f"{server.url}/v1", "gpt", api_key=key, max_retries=0)
        with pytest.raises(LLMError) as info:
            client(FORMATTED)
    assert server.requests[0].headers["Authorization"] == f"Bearer {key}"
    assert str(info.value) == f"OpenAI-compatible API error 401 from {server.url}/v1/chat/completions: Incorrect API key provided: ***. [invalid_api_key]"


# --- a request that cannot be built ----------------------------------------------------


def test_a_formatted_dict_no_request_can_be_built_from_names_the_exception():
    """A formatted dict that is not a chat request (messages a str) is an LLMError naming the provider and the exception's type and words; nothing is sent."""
    with LocalServer(lambda r: Reply(body={})) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "gpt")({"messages": "hello"})
    assert str(info.value) == "OpenAI-compatible: no request can be built from the formatted dict: AttributeError: 'str' object has no attribute 'get'"
    assert server.requests == []


# --- what a stream request may be answered with ----------------------------------------


def test_a_stream_whose_content_type_has_parameters_is_read_as_server_sent_events():
    """``text/event-stream; charset=utf-8`` is server-sent events: the media type is read without its parameters (docs/streaming.md)."""
    body = sse(text_chunk("Hel"), text_chunk("lo", "stop"))
    with LocalServer(lambda r: Reply(chunks=[body], headers={"Content-Type": "text/event-stream; charset=utf-8"})) as server:
        reply, deltas = streamed(OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0))
    assert reply.content == [TextContent("Hello")] and deltas == [("text", "Hel"), ("text", "lo")]


def test_a_stream_without_a_content_type_is_read_as_server_sent_events():
    """A stream answered with no Content-Type at all (some proxies drop it) is read as server-sent events, not refused."""
    body = sse(text_chunk("Hel"), text_chunk("lo", "stop"))
    with raw_server(raw_reply("", body)) as server:
        reply, deltas = streamed(OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0))
    assert reply.content == [TextContent("Hello")] and deltas == [("text", "Hel"), ("text", "lo")]


def test_a_stream_request_answered_with_a_whole_json_reply_emits_its_thinking_and_its_text():
    """A server that ignores ``stream`` and sends one JSON reply: its thinking, then its text, are each emitted at once (docs/streaming.md)."""
    body = {"model": "m", "choices": [{"message": {"reasoning_content": "Let me think.", "content": "Hello"}, "finish_reason": "stop"}]}
    with LocalServer(lambda r: Reply(body=body)) as server:
        reply, deltas = streamed(OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0))
    assert deltas == [("thinking", "Let me think."), ("text", "Hello")]
    assert reply.content == [{"type": "thinking", "thinking": "Let me think.", "wire_field": "reasoning_content"}, TextContent("Hello")]


def test_a_stream_request_answered_with_html_quotes_its_first_200_bytes_with_bad_bytes_replaced():
    """A proxy's HTML page is an LLMError naming the status and the media type and quoting the page's first 200 bytes,
    bytes that are not UTF-8 shown as U+FFFD (docs/streaming.md: never an empty reply)."""
    page = b"<html>\xff" + b"x" * 300 + b"</html>"
    with LocalServer(lambda r: Reply(body=page, headers={"Content-Type": "text/html"})) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0)(FORMATTED)
    quoted = "<html>\ufffd" + "x" * 193
    assert str(info.value) == (
        f"OpenAI-compatible reply from {server.url}/v1/chat/completions: a stream request answered with HTTP 200 and "
        f"Content-Type 'text/html', not server-sent events: {quoted!r}"
    )


def test_stream_data_that_is_not_json_is_an_llm_error_quoting_its_first_200_characters():
    """Decision 14: an event whose data is not JSON ends the call with an LLMError saying why and quoting the data's first 200 characters."""
    data = "<" + "y" * 300
    with LocalServer(lambda r: Reply(chunks=[f"data: {data}\n\n".encode()])) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0)(FORMATTED)
    assert str(info.value) == (
        f"OpenAI-compatible reply from {server.url}/v1/chat/completions: stream data that is not JSON "
        f"(Expecting value: line 1 column 1 (char 0)): {data[:200]!r}"
    )


def test_an_error_event_is_an_llm_error_whatever_its_data_holds():
    """An ``event: error`` (Groq's form) ends the call with the server's words even when its data has no ``error`` key (decision 14)."""
    body = b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\nevent: error\ndata: {"message": "rate limited"}\n\n'
    with LocalServer(lambda r: Reply(chunks=[body])) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0)(FORMATTED)
    assert str(info.value) == f"OpenAI-compatible reply from {server.url}/v1/chat/completions: error reported after HTTP 200: rate limited"
    assert info.value.retryable is False


# --- NDJSON (Ollama's native API) --------------------------------------------------------


def ollama_line(text: str, done: bool) -> bytes:
    line = {"model": "m", "message": {"role": "assistant", "content": text}, "done": done}
    if done:
        line.update(done_reason="stop", prompt_eval_count=3, eval_count=2)
    return json.dumps(line).encode()


def test_an_ndjson_stream_whose_last_line_has_no_newline_is_whole():
    """The last NDJSON line is read though no newline ends it: its ``done: true`` makes the reply whole."""
    body = ollama_line("Hel", False) + b"\n" + ollama_line("lo", True)
    with LocalServer(lambda r: Reply(chunks=[body], headers=NDJSON)) as server:
        reply, deltas = streamed(OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0))
    assert reply.content == [TextContent("Hello")] and deltas == [("text", "Hel"), ("text", "lo")]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (3, 2)


def test_ndjson_bytes_that_are_not_utf8_are_read_as_replacement_characters():
    """A byte that is not UTF-8 inside an NDJSON line, ended or last, becomes U+FFFD; the reply is still read."""
    first, last = ollama_line("Hel@", False), ollama_line("lo@", True)
    body = first.replace(b"@", b"\xff") + b"\n" + last.replace(b"@", b"\xfe")
    with LocalServer(lambda r: Reply(chunks=[body], headers=NDJSON)) as server:
        reply, deltas = streamed(OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0))
    assert reply.content == [TextContent("Hel\ufffdlo\ufffd")] and deltas == [("text", "Hel\ufffd"), ("text", "lo\ufffd")]


def test_an_ndjson_line_exactly_max_event_bytes_long_is_read():
    """``max_event_bytes`` is the most one line may hold: a line of exactly that many bytes is read."""
    first, last = ollama_line("Hello", False), ollama_line("", True)
    cap = max(len(first), len(last))
    with LocalServer(lambda r: Reply(chunks=[first + b"\n" + last + b"\n"], headers=NDJSON)) as server:
        reply = OpenAIClient(f"{server.url}/v1", "gpt", stream=True, max_retries=0, max_event_bytes=cap)(FORMATTED)
    assert reply.content == [TextContent("Hello")]


# --- a whole reply --------------------------------------------------------------------


def test_a_whole_reply_over_max_event_bytes_names_that_cap():
    """A whole reply is one event: past ``max_event_bytes`` (the smaller cap) it is an LLMError naming that cap, not max_reply_bytes."""
    body = {"model": "m", "choices": [{"message": {"content": "x" * 500}, "finish_reason": "stop"}]}
    with LocalServer(lambda r: Reply(body=body)) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "gpt", max_retries=0, max_event_bytes=100, max_reply_bytes=1000)(FORMATTED)
    assert str(info.value) == f"OpenAI-compatible reply from {server.url}/v1/chat/completions: the reply exceeds 100 bytes (max_event_bytes=100); it was not read further"


def test_a_client_with_no_caps_reads_a_whole_reply():
    """``max_event_bytes=None`` and ``max_reply_bytes=None`` (no cap at all) read a whole reply."""
    body = {"model": "m", "choices": [{"message": {"content": "Hello"}, "finish_reason": "stop"}]}
    with LocalServer(lambda r: Reply(body=body)) as server:
        reply = OpenAIClient(f"{server.url}/v1", "gpt", max_retries=0, max_event_bytes=None, max_reply_bytes=None)(FORMATTED)
    assert reply.content == [TextContent("Hello")]


def test_a_usage_count_that_is_not_ascii_digits_is_an_llm_error_naming_the_field():
    """A usage count "²" (``str.isdigit`` says yes, ``int`` refuses it) is an LLMError naming the usage field, as
    any count that is not a whole number is (decision 14), never a bare ValueError out of the client."""
    body = {"model": "m", "choices": [{"message": {"content": "Hello"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": "\u00b2"}}
    with LocalServer(lambda r: Reply(body=body)) as server:
        with pytest.raises(LLMError) as info:
            OpenAIClient(f"{server.url}/v1", "gpt", max_retries=0)(FORMATTED)
    assert str(info.value) == f"OpenAI-compatible reply from {server.url}/v1/chat/completions: usage field 'prompt_tokens' is not a token count: '\u00b2'"


def test_a_value_error_the_reader_did_not_foresee_is_a_reply_error_saying_not_a_reply():
    """Decision 14's safety net (``_client._reading``, around the parser and the stream accumulator): a plain
    ValueError out of a reading step becomes a ReplyError (an LLMError once the client labels it) saying "not a
    reply" and why; a ReplyError passes as it is, and a step that succeeds gives its value."""
    from yiemagent.llm._client import _reading
    from yiemagent.llm._wire import ReplyError

    with pytest.raises(ReplyError) as info:
        _reading(int, "x")
    assert str(info.value) == "not a reply: invalid literal for int() with base 10: 'x'"
    assert info.value.__cause__ is None and info.value.__suppress_context__
    refusal = ReplyError("the body has no choices")
    def refuse(value):
        raise refusal
    with pytest.raises(ReplyError) as info:
        _reading(refuse, None)
    assert info.value is refusal
    assert _reading(int, "12") == 12


def anthropic_stream_with_usage(usage: dict[str, Any]) -> bytes:
    """A Messages API stream of one text block whose ``message_delta`` carries ``usage``."""
    events = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage},
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


STREAMS_WITH_A_BAD_COUNT = {
    "openai": (lambda url: OpenAIClient(f"{url}/v1", "gpt", stream=True, max_retries=0), "/v1/chat/completions", sse({**text_chunk("Hello", "stop"), "usage": {"prompt_tokens": "\u00b2"}})),
    "anthropic": (lambda url: AnthropicClient("claude", "k", base_url=url, stream=True, max_retries=0), "/v1/messages", anthropic_stream_with_usage({"output_tokens": "\u00b2"})),
}


@pytest.mark.parametrize("provider", sorted(STREAMS_WITH_A_BAD_COUNT))
def test_a_streamed_usage_count_that_is_not_ascii_digits_is_an_llm_error_naming_the_field(provider):
    """Decision 14, streamed: a stream whose usage count is "²" is an LLMError naming the field, as a whole reply's
    is; before, a plain ValueError came out of the client bare."""
    make_client, path, body = STREAMS_WITH_A_BAD_COUNT[provider]
    with LocalServer(lambda r: Reply(chunks=[body])) as server:
        with pytest.raises(LLMError) as info:
            make_client(server.url)(FORMATTED)
    label = "OpenAI-compatible" if provider == "openai" else "Anthropic"
    field = "prompt_tokens" if provider == "openai" else "output_tokens"
    assert str(info.value) == f"{label} reply from {server.url}{path}: usage field {field!r} is not a token count: '\u00b2'"
