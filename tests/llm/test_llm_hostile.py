"""A hostile server against both clients (review): every failure an LLMError, nothing a reply holds poisons the next request.

Real bytes from a real ``http.server`` on 127.0.0.1 (tests/support/localserver.py); no mocks.
"""

from __future__ import annotations

import json
import gc
import math
import socket
import threading
import traceback
import weakref

import pytest

from hypothesis import given

from localserver import LocalServer, Reply, free_port_url
from strategies import cut, texts_with_keys
from yiemagent import AbortSignal, LLMError, extract_tool_calls
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent._secrets import DeltaMasker, Secrets
from yiemagent.llm._wire import message_text
from yiemagent.events import stream_to
from helpers import WAIT

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
JSON = {"Content-Type": "application/json"}
SSE = {"Content-Type": "text/event-stream"}
DEEP = b"[" * 100_000 + b"]" * 100_000  # deeper than the interpreter's recursion limit


def openai(url: str, **kw) -> OpenAIClient:
    return OpenAIClient(url, "m", "sk-test-0123456789", max_retries=0, **kw)


def anthropic(url: str, **kw) -> AnthropicClient:
    return AnthropicClient("m", "sk-ant-0123456789", base_url=url, max_retries=0, **kw)


def sse(*events) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def call(client, reply: Reply, formatted=FORMATTED):
    with LocalServer(lambda request: reply) as server:
        return client(server.url)(formatted), server.requests


@pytest.mark.parametrize(
    "reply, stream",
    [
        (Reply(body=DEEP, headers=JSON), False),
        (Reply(status=500, body=DEEP, headers=JSON), False),
        (Reply(chunks=[b"data: " + DEEP + b"\n\n"]), True),
    ],
    ids=["reply", "error-body", "stream-event"],
)
def test_json_nested_past_the_recursion_limit_is_an_llm_error(reply, stream):
    """json.loads raises RecursionError (not a ValueError) on such nesting; it escaped client(formatted)."""
    with pytest.raises(LLMError):
        call(lambda url: openai(url, stream=stream), reply)


def test_a_reply_holding_nan_is_an_llm_error_not_a_reply():
    """Python's json reads NaN; a reply carrying it would make every later request unsendable."""
    body = b'{"choices": [{"message": {"content": "x", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"x": NaN}}}]}}]}'
    with pytest.raises(LLMError, match="not JSON"):
        call(openai, Reply(body=body, headers=JSON))


def test_streamed_tool_input_holding_1e400_is_an_error_result_naming_it_never_a_float():
    """1e400 is valid JSON a float cannot hold: the reply is read, the call gets an error naming arguments/x, no infinity is run or sent."""
    events = [
        {"type": "message_start", "message": {"model": "m", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"x": 1e400}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]
    reply, _ = call(lambda url: anthropic(url, stream=True), Reply(chunks=[sse(*events)]))
    arguments = reply.content[0]["arguments"]
    assert not isinstance(arguments["x"], float)
    [tool_call] = extract_tool_calls(reply)[1]
    assert tool_call.arguments == {}
    assert tool_call.arguments_error.startswith("arguments/x is the number 1e400, which does not fit a float")


def test_history_arguments_holding_nan_do_not_make_the_anthropic_request_unsendable():
    """Arguments text with NaN (a model wrote it; json.dumps writes it back) went out as a float NaN: requests refused the body."""
    formatted = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": NaN}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "bad arguments"},
        ]
    }
    body = {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}
    reply, requests = call(anthropic, Reply(body=body), formatted)
    assert reply.content[0].text == "ok"
    sent = json.loads(requests[0].body, parse_constant=lambda name: pytest.fail(f"{name} sent"))
    tool_use = sent["messages"][1]["content"][0]
    assert tool_use["type"] == "tool_use" and not any(isinstance(v, float) and not math.isfinite(v) for v in tool_use["input"].values())


def anthropic_stream(*blocks_and_deltas) -> Reply:
    """A Messages API stream of ``(index, start_block, [delta, ...])`` items, each block stopped after its deltas."""
    events = [{"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}}]
    for index, block, deltas in blocks_and_deltas:
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, {"type": "message_stop"}]
    return Reply(chunks=[sse(*events)])


def streamed(reply: Reply):
    deltas = {"text": [], "thinking": []}
    with stream_to(lambda kind, text: deltas[kind].append(text)):
        message, _ = call(lambda url: anthropic(url, stream=True), reply)
    return message, {kind: "".join(pieces) for kind, pieces in deltas.items()}


def text(t):
    return {"type": "text_delta", "text": t}


def thought(t):
    return {"type": "thinking_delta", "thinking": t}


def test_anthropic_deltas_join_to_the_final_text_with_empty_and_interleaved_blocks():
    """An empty text block is dropped from the reply, so it must not add a "\\n" to the deltas either."""
    message, joined = streamed(
        anthropic_stream(
            (0, {"type": "text", "text": ""}, []),
            (1, {"type": "thinking", "thinking": ""}, [thought("a")]),
            (2, {"type": "text", "text": ""}, [text("Hello")]),
            (3, {"type": "text", "text": ""}, [text("")]),
            (4, {"type": "thinking", "thinking": ""}, []),
            (5, {"type": "text"}, [text("World")]),
            (6, {"type": "thinking"}, [thought("b")]),
        )
    )
    assert message_text(message, "text") == "Hello\nWorld"
    assert joined["text"] == message_text(message, "text")
    assert joined["thinking"] == message_text(message, "thinking") == "a\n\nb"


@pytest.mark.parametrize("start", [{"type": "text", "text": 5}, {"type": "thinking", "thinking": ["x"], "signature": 7}])
def test_anthropic_block_start_with_values_that_are_not_text_is_read_not_a_type_error(start):
    """A start block whose text/thinking/signature is not a string raised TypeError on the first delta."""
    kind = start["type"]
    deltas = [text("x")] if kind == "text" else [thought("x"), {"type": "signature_delta", "signature": "sig"}]
    message, joined = streamed(anthropic_stream((0, start, deltas)))
    assert joined[kind] == message_text(message, kind) == "x"
    if kind == "thinking":
        assert message.content[0]["signature"] == "sig"


@pytest.mark.parametrize(
    "block, delta",
    [
        ({"type": "tool_use", "id": "t", "name": "rm", "input": {}}, text("rm -rf /")),
        ({"type": "thinking", "thinking": ""}, text("shown as text, kept as thinking")),
        ({"type": "text", "text": ""}, {"type": "input_json_delta", "partial_json": '{"path": "/"}'}),
        ({"type": "text", "text": ""}, {"type": "text_delta", "text": 5}),
    ],
    ids=["text-into-tool-use", "text-into-thinking", "json-into-text", "text-not-a-string"],
)
def test_anthropic_delta_that_does_not_match_its_block_is_an_llm_error(block, delta):
    """Such a delta was emitted as text but not kept in the reply (or kept where it did not belong)."""
    shown = []
    with stream_to(lambda kind, t: shown.append(t)), pytest.raises(LLMError, match="block|not text"):
        call(lambda url: anthropic(url, stream=True), anthropic_stream((0, block, [delta])))
    assert "".join(shown) == ""


def test_anthropic_block_started_twice_is_an_llm_error():
    """A second start of one index replaced the first block after its text had been shown."""
    with pytest.raises(LLMError, match="a second time"):
        streamed(anthropic_stream((0, {"type": "text", "text": ""}, [text("A")]), (0, {"type": "text", "text": ""}, [text("B")])))


KEY = "sk-live/ABCDEF+0123456789"  # a "/" and a "+", as in a base64 key


def test_a_key_in_the_url_is_masked_in_the_whole_traceback_of_a_connection_failure():
    """requests' ConnectionError and the urllib3 errors it wraps name the URL, ?key= and all, in their args."""
    client = OpenAIClient(f"{free_port_url()}/v1?key={KEY}", "m", max_retries=0)
    with pytest.raises(LLMError) as info:
        client(FORMATTED)
    printed = "".join(traceback.format_exception(info.value))
    assert "could not connect" in printed and "ConnectionError" in printed
    assert "ABCDEF" not in printed


@pytest.mark.parametrize("escape", [lambda s: s.replace("/", "\\/"), lambda s: s.replace("sk-", "\\u0073k-")], ids=["slash", "unicode"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_key_the_server_echoes_with_json_escapes_is_masked_in_the_reply(escape, stream):
    """The raw text was masked before parsing only: an escaped echo of the key came back whole in the reply."""
    if stream:
        event = {"choices": [{"delta": {"content": f"your key is {KEY}"}, "finish_reason": "stop"}]}
        reply = Reply(chunks=[escape(f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n").encode()])
    else:
        reply = Reply(body=escape(json.dumps({"choices": [{"message": {"content": f"your key is {KEY}"}}]})).encode(), headers=JSON)
    message, _ = call(lambda url: OpenAIClient(url, "m", max_retries=0, headers={"api-key": KEY}, stream=stream), reply)
    assert message_text(message, "text") == "your key is ***"


@pytest.mark.parametrize("cuts", [(7,), (3, 12), tuple(range(1, len(KEY)))], ids=["one-cut", "two-cuts", "every-char"])
def test_a_key_split_across_stream_deltas_is_masked_in_the_deltas_and_the_reply(cuts):
    """Each delta was masked alone: a key sent in pieces reached the sink and the history whole."""
    said = f"the key: {KEY}, again {KEY}."
    start = said.index(KEY)
    bounds = [0, *[start + c for c in cuts], len(said)]
    events = [{"choices": [{"delta": {"content": said[a:b]}}]} for a, b in zip(bounds, bounds[1:])]
    events.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    shown = []
    with stream_to(lambda kind, t: shown.append(t)):
        message, _ = call(lambda url: OpenAIClient(url, "m", KEY, max_retries=0, stream=True), Reply(chunks=[body.encode()]))
    assert "".join(shown) == message_text(message, "text") == "the key: ***, again ***."


class SilentTLSPeer:
    """A TCP server that reads a client's TLS ClientHello and never answers it (no TLS at all)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}/v1"
        self.hello = threading.Event()  # set once the client is inside its handshake
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            connection.recv(65536)  # the ClientHello
            self.hello.set()
            self._done.wait()

    def close(self) -> None:
        self._done.set()
        self._listener.close()


def call_in_thread(client, signal=None):
    """Run ``client(FORMATTED)`` in a thread (inside ``stream_to`` when a signal is given); return the thread and its outcome."""
    outcome: list = []

    def run():
        try:
            if signal is None:
                client(FORMATTED)
            else:
                with stream_to(lambda kind, text: None, signal):
                    client(FORMATTED)
        except BaseException as exc:  # the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_abort_during_a_tls_handshake_the_server_never_answers_ends_the_call_at_once():
    """TLS takes the socket's descriptor over during the handshake: shutting connection.sock down did nothing, so the call waited out `timeout`."""
    peer = SilentTLSPeer()
    try:
        signal = AbortSignal()
        thread, outcome = call_in_thread(OpenAIClient(peer.url, "m", max_retries=0, timeout=600, deadline_s=None), signal)
        assert peer.hello.wait(WAIT)
        signal.abort("user")
        thread.join(WAIT)
        assert not thread.is_alive(), "the aborted call is still in its TLS handshake"
        assert isinstance(outcome[0], LLMError) and "aborted" in str(outcome[0])
    finally:
        peer.close()



@pytest.mark.parametrize(
    "formatted",
    [
        "hello",
        {"messages": None},
        {"messages": ["hello"]},
        {"messages": [{"role": "user", "content": "x"}], "temperature": float("nan")},
        {"messages": [{"role": "user", "content": "x"}], "metadata": {"when": object()}},
    ],
    ids=["a-string", "messages-none", "message-a-string", "nan-option", "object-option"],
)
@pytest.mark.parametrize("make", [openai, anthropic], ids=["openai", "anthropic"])
def test_a_request_that_cannot_be_built_or_encoded_is_an_llm_error_sent_to_no_one(make, formatted):
    """AttributeError/TypeError escaped client(formatted); a NaN option became a retried 'could not connect'."""
    with LocalServer(lambda request: Reply(body={})) as server:
        with pytest.raises(LLMError) as info:
            make(server.url, backoff_factor=0)(formatted)
        assert server.requests == []
    assert info.value.retryable is False and "could not connect" not in str(info.value)


def test_a_lone_surrogate_in_the_history_is_sent_escaped():
    """A model's "\\ud800" (valid JSON text, not encodable as UTF-8) must not make the conversation unsendable."""
    formatted = {"messages": [{"role": "assistant", "content": "broken \ud800 text"}, {"role": "user", "content": "go on"}]}
    reply, requests = call(openai, Reply(body={"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}), formatted)
    assert reply.content[0].text == "ok"
    assert b"\\ud800" in requests[0].body and requests[0].headers["Content-Type"] == "application/json"


def test_the_log_filter_does_not_keep_the_keys_of_clients_that_are_gone():
    """Every client's Secrets were kept for the life of the process: one client per request grew the list (and each log line's scan) without end."""
    client = OpenAIClient("http://127.0.0.1:9/v1", "m", "sk-gone-0123456789")
    secrets = weakref.ref(client._transport.secrets)
    del client
    gc.collect()
    assert secrets() is None


def test_a_tool_use_whose_input_came_whole_in_its_start_block_keeps_it():
    """Without input_json_delta events the input became {}: the tool would run without the arguments the model sent."""
    block = {"type": "tool_use", "id": "t1", "name": "delete", "input": {"path": "/tmp/x"}}
    message, _ = streamed(anthropic_stream((0, block, [])))
    assert message.content[0]["arguments"] == {"path": "/tmp/x"}
    message, _ = streamed(anthropic_stream((0, {**block, "input": {}}, [{"type": "input_json_delta", "partial_json": '{"path": "/y"}'}])))
    assert message.content[0]["arguments"] == {"path": "/y"}


def test_an_openai_stream_with_several_choices_reads_the_first_as_a_whole_reply_does():
    """With n=2 the chunks of both choices were joined into one interleaved text (and emitted so)."""
    events = []
    for first, second in [("Hel", "Bon"), ("lo", "jour")]:
        events.append({"choices": [{"index": 0, "delta": {"content": first}}, {"index": 1, "delta": {"content": second}}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}, {"index": 1, "delta": {}, "finish_reason": "stop"}]})
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    shown = []
    with stream_to(lambda kind, t: shown.append(t)):
        message, _ = call(lambda url: openai(url, stream=True), Reply(chunks=[body.encode()]))
    assert "".join(shown) == message_text(message, "text") == "Hello"


@pytest.mark.parametrize("make", [lambda url, key: anthropic(url).__class__("m", key, base_url=url, max_retries=2), lambda url, key: OpenAIClient(url, "m", max_retries=2, headers={"api-key": key})], ids=["anthropic-key", "header"])
def test_a_key_read_with_its_newline_is_masked_and_the_request_is_not_retried(make):
    """requests refuses the header and quotes it, newline escaped: the key was unmasked (only 'key\\n' was a secret) and 'could not connect' was retried."""
    with LocalServer(lambda request: Reply(body={})) as server:
        with pytest.raises(LLMError) as info:
            make(server.url, KEY + "\n")(FORMATTED)
        assert server.requests == []
    printed = "".join(traceback.format_exception(info.value))
    assert "ABCDEF" not in printed and "is invalid" in printed and info.value.retryable is False


def test_a_base_url_without_a_scheme_fails_at_once_not_after_retries():
    with pytest.raises(LLMError, match="is invalid") as info:
        OpenAIClient("127.0.0.1:9/v1", "m", max_retries=5, backoff_factor=60, deadline_s=1)(FORMATTED)
    assert info.value.retryable is False


@pytest.mark.parametrize("stream", [False, True], ids=["reply", "json-answer-to-a-stream"])
def test_a_whole_json_reply_larger_than_max_event_bytes_is_an_llm_error(stream):
    """A whole reply was read with no cap: an endless body filled the memory until the deadline."""
    big = json.dumps({"choices": [{"message": {"content": "x" * 300_000}, "finish_reason": "stop"}]}).encode()
    reply = Reply(chunks=[big[i : i + 65536] for i in range(0, len(big), 65536)], headers=JSON)
    with pytest.raises(LLMError, match="exceeds 100000 bytes"):
        call(lambda url: openai(url, stream=stream, max_event_bytes=100_000), reply)
    message, _ = call(lambda url: openai(url, stream=stream, max_event_bytes=len(big)), reply)
    assert len(message.content[0].text) == 300_000


@given(data=texts_with_keys(["sk-ABC0123456789", "sk-ABC01234567XY"]))
def test_delta_masker_any_chunking_shows_no_key_and_joins_to_the_masked_text(data):
    """Property: whatever the cuts, the pieces shown join to redact(text), and no run of shown pieces spells a key."""
    text, cuts = data
    secrets = Secrets("sk-ABC0123456789", {"x-api-key": "sk-ABC01234567XY"})
    shown: list[str] = []
    masker = DeltaMasker(secrets, lambda kind, piece: shown.append(piece))
    for piece in cut(text.encode(), cuts):
        masker.emit("text", piece.decode())
    masker.flush()
    assert "".join(shown) == secrets.redact(text)
    assert "sk-ABC0123456789" not in "".join(shown) and "sk-ABC01234567XY" not in "".join(shown)


@pytest.mark.parametrize("make, path", [(openai, "/openai/deployments/d/chat/completions"), (anthropic, "/openai/deployments/d/v1/messages")], ids=["openai", "anthropic"])
def test_a_base_url_with_a_query_gets_the_path_before_the_query(make, path):
    """Azure's base URLs carry ?api-version=…: the path was appended to the query's value."""
    body = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "content": [{"type": "text", "text": "ok"}]}
    with LocalServer(lambda request: Reply(body=body)) as server:
        make(f"{server.url}/openai/deployments/d/?api-version=2024-10-21")(FORMATTED)
    assert server.requests[0].path == path and server.requests[0].query == {"api-version": ["2024-10-21"]}



EMPTY_STREAM = b": keep-alive\n\ndata: [DONE]\n\n"


def test_an_openai_stream_of_done_alone_is_a_retryable_llm_error_not_an_empty_answer():
    """'data: [DONE]' with no chunk before it (a proxy's empty stream) became an empty reply ending the run."""
    with pytest.raises(LLMError, match="without any choice") as info:
        call(lambda url: openai(url, stream=True), Reply(chunks=[EMPTY_STREAM]))
    assert info.value.retryable


def test_an_openai_stream_of_done_alone_is_retried():
    good = b'data: {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    replies = [Reply(chunks=[EMPTY_STREAM]), Reply(chunks=[good])]
    with LocalServer(lambda request: replies.pop(0)) as server:
        message = OpenAIClient(server.url, "m", max_retries=1, backoff_factor=0, stream=True)(FORMATTED)
    assert message.content[0].text == "ok" and len(server.requests) == 2


@pytest.mark.parametrize(
    "make, header",
    [
        (lambda url: AnthropicClient("m", "sk-ant-0123456789", base_url=url, max_retries=0), "x-api-key"),
        (lambda url: OpenAIClient(url, "m", max_retries=0, headers={"api-key": "azure-0123456789"}), "api-key"),
    ],
    ids=["anthropic-x-api-key", "azure-api-key"],
)
@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_is_not_followed_so_the_key_goes_to_no_other_host(make, header, status):
    """requests followed a 307/308 and, though it drops Authorization for another host, sent x-api-key/api-key along."""
    with LocalServer(lambda request: Reply(body={"content": [], "choices": [{"message": {"content": "stolen"}}]})) as other:
        elsewhere = other.url.replace("127.0.0.1", "localhost") + "/collect"
        with LocalServer(lambda request: Reply(status=status, body=b"", headers={"Location": elsewhere})) as server:
            with pytest.raises(LLMError, match="not followed") as info:
                make(server.url)(FORMATTED)
            assert header in {name.lower() for name in server.requests[0].headers}  # the key the other host would get
        assert other.requests == []
    assert info.value.status == status and not info.value.retryable


def test_a_redirect_whose_body_never_ends_is_refused_without_reading_it():
    """requests read a redirect's whole body (to prepare the request it would follow), capped by
    nothing: a 302 whose body never ends held the call until the deadline, and filled memory."""
    released, recorded, read_on = threading.Event(), threading.Event(), []
    endless = [b"x" * 65536, lambda: (read_on.append(released.wait(WAIT)), recorded.set()), b"y"]
    with LocalServer(lambda request: Reply(status=302, headers={"Location": "/elsewhere"}, chunks=endless)) as server:
        try:
            with pytest.raises(LLMError, match="not followed"):
                OpenAIClient(server.url, "m", max_retries=0, deadline_s=None)(FORMATTED)
        finally:
            released.set()
        assert recorded.wait(WAIT)
    assert read_on == [True], "the client waited for the redirect's body"


@pytest.mark.parametrize("block", [{"type": "thinking", "thinking": 5, "signature": "s"}, {"type": "redacted_thinking", "data": ["x"]}], ids=["thinking", "redacted"])
def test_an_anthropic_thinking_block_holding_no_text_is_an_llm_error(block):
    """It was kept and sent back as it was in every later request, which Anthropic refuses: the conversation could not go on."""
    with pytest.raises(LLMError, match="not text"):
        call(anthropic, Reply(body={"content": [block, {"type": "text", "text": "hi"}], "stop_reason": "end_turn"}))
