"""The client side of streaming (docs/streaming.md): deltas as bytes arrive, abort closes the connection, any chunking joins the same."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localserver import LocalServer, Reply
from strategies import cut, sse_cuts, stream_fragments
from yiemagent import AbortSignal, LLMError
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm._wire import message_text
from yiemagent.events import stream_to
from helpers import FIXTURES, WAIT

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
SSE = {"Content-Type": "text/event-stream"}


def openai_body(fragments) -> bytes:
    """An OpenAI-style stream: one chunk per fragment (reasoning_content or content), then finish_reason and [DONE]."""
    events = [{"model": "m", "choices": [{"index": 0, "delta": {("content" if k == "text" else "reasoning_content"): t}, "finish_reason": None}]} for k, t in fragments]
    events.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def anthropic_body(fragments) -> bytes:
    """A Messages API stream: a new block whenever the kind changes, each fragment one delta."""
    events = [{"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1, "output_tokens": 1}}}]
    index, kind = -1, None
    for k, text in fragments:
        if k != kind:
            if kind is not None:
                events.append({"type": "content_block_stop", "index": index})
            index, kind = index + 1, k
            events.append({"type": "content_block_start", "index": index, "content_block": {"type": k, k: ""}})
        delta = {"type": "text_delta", "text": text} if k == "text" else {"type": "thinking_delta", "thinking": text}
        events.append({"type": "content_block_delta", "index": index, "delta": delta})
    if kind is not None:
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}, {"type": "message_stop"}]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


CLIENTS = {
    "openai": (openai_body, lambda url, **kw: OpenAIClient(f"{url}/v1", "m", **kw)),
    "anthropic": (anthropic_body, lambda url, **kw: AnthropicClient("m", "k", base_url=url, **kw)),
}
FRAGMENTS = [("thinking", "Let me think."), ("text", "Hello"), ("text", ", world")]


def split_after_first_event(body: bytes, first_text: str) -> tuple[bytes, bytes]:
    """``body`` cut just after the event that carries ``first_text``."""
    end = body.index(b"\n\n", body.index(first_text.encode())) + 2
    return body[:end], body[end:]


@pytest.mark.spec("14")
@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_first_delta_arrives_before_the_server_sends_the_rest(provider):
    """The first thinking fragment reaches the listener while the server still holds the rest back (it waits for the listener)."""
    make_body, make_client = CLIENTS[provider]
    first, rest = split_after_first_event(make_body(FRAGMENTS), "Let me think.")
    listener_saw_it, rest_sent = threading.Event(), threading.Event()
    chunks = [first, lambda: listener_saw_it.wait(WAIT), rest_sent.set, rest]
    deltas, rest_was_sent = [], []

    def on_delta(kind, text):
        if not deltas:
            rest_was_sent.append(rest_sent.is_set())
            listener_saw_it.set()
        deltas.append((kind, text))

    with LocalServer(lambda r: Reply(chunks=chunks, headers=SSE)) as server:
        with stream_to(on_delta):
            message = make_client(server.url, stream=True)(FORMATTED)
    assert rest_was_sent == [False], "the first delta came only after the whole stream"
    assert server.requests[0].json()["stream"] is True
    assert deltas[0] == ("thinking", "Let me think.")
    for kind in ("text", "thinking"):
        assert "".join(t for k, t in deltas if k == kind) == message_text(message, kind)


@pytest.mark.spec("14")
@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_abort_during_a_stream_closes_it_and_raises(provider):
    """An abort after the first delta closes the connection at once: an LLMError saying 'aborted', not retryable, the rest never read."""
    make_body, make_client = CLIENTS[provider]
    first, rest = split_after_first_event(make_body(FRAGMENTS), "Let me think.")
    release, rest_sent = threading.Event(), threading.Event()
    signal = AbortSignal()
    chunks = [first, lambda: release.wait(WAIT), rest_sent.set, rest]
    try:
        with LocalServer(lambda r: Reply(chunks=chunks, headers=SSE)) as server:
            with stream_to(lambda kind, text: signal.abort(), signal):
                with pytest.raises(LLMError, match="was aborted") as info:
                    make_client(server.url, stream=True)(FORMATTED)
            assert not rest_sent.is_set(), "the client waited for the server instead of closing"
    finally:
        release.set()
    assert info.value.retryable is False and len(server.requests) == 1


@pytest.mark.spec("14")
def test_abort_while_waiting_for_headers_ends_the_call():
    """An abort while the server has not answered yet (a model thinking) ends a non-streamed call too."""
    received, hold = threading.Event(), threading.Event()
    signal = AbortSignal()

    def before():
        received.set()
        hold.wait(WAIT)

    aborter = threading.Thread(target=lambda: received.wait(WAIT) and signal.abort(), name="test-aborter")
    try:
        with LocalServer(lambda r: Reply(body={"choices": [{"message": {"content": "late"}, "finish_reason": "stop"}]}, before=before)) as server:
            aborter.start()
            with stream_to(lambda kind, text: None, signal):
                with pytest.raises(LLMError, match="was aborted"):
                    OpenAIClient(f"{server.url}/v1", "m", timeout=WAIT)(FORMATTED)
            assert not hold.is_set()
    finally:
        hold.set()
        aborter.join(WAIT)


@pytest.mark.spec("14")
def test_an_already_aborted_signal_sends_nothing():
    """A call made under a signal that already fired ends at once as aborted, before any request goes out."""
    signal = AbortSignal()
    signal.abort()
    with LocalServer(lambda r: Reply(body={"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]})) as server:
        with stream_to(lambda kind, text: None, signal):
            with pytest.raises(LLMError, match="was aborted"):
                OpenAIClient(f"{server.url}/v1", "m")(FORMATTED)
    assert server.requests == []


@pytest.mark.spec("14")
def test_without_stream_true_no_delta_is_emitted():
    """stream=False (the default) asks for no stream and emits nothing."""
    deltas = []
    with LocalServer(lambda r: Reply(body={"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]})) as server:
        with stream_to(lambda kind, text: deltas.append(text)):
            OpenAIClient(f"{server.url}/v1", "m")(FORMATTED)
    assert deltas == [] and "stream" not in server.requests[0].json()


class _Script:
    """What the shared server answers next (set by each hypothesis example). Owned by the test thread; read by the server's."""

    chunks: list = []


@pytest.fixture(scope="module")
def shared_server():
    script = _Script()
    with LocalServer(lambda r: Reply(chunks=list(script.chunks), headers=SSE)) as server:
        yield server, script


@pytest.mark.spec("14")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), fragments=stream_fragments, provider=st.sampled_from(sorted(CLIENTS)))
def test_any_chunking_joins_to_the_final_text(shared_server, data, fragments, provider):
    """Any stream, cut into HTTP chunks at arbitrary byte positions: each kind's deltas joined equal that kind's final text."""
    server, script = shared_server
    make_body, make_client = CLIENTS[provider]
    body = make_body(fragments)
    script.chunks = cut(body, data.draw(sse_cuts(len(body))))
    deltas = []
    with stream_to(lambda kind, text: deltas.append((kind, text))):
        message = make_client(server.url, stream=True)(FORMATTED)
    for kind in ("text", "thinking"):
        expected = "".join(t for k, t in fragments if k == kind)
        joined = "".join(t for k, t in deltas if k == kind)
        assert joined == message_text(message, kind)
        assert joined.replace("\n", "") == expected.replace("\n", "") if provider == "anthropic" else joined == expected


@pytest.mark.spec("14")
def test_ndjson_stream_is_read_line_by_line():
    """An application/x-ndjson stream (Ollama's native API) is read as one event per line, however the lines are cut."""
    from pathlib import Path

    body = (FIXTURES / "ollama-native-stream-tool-call.jsonl").read_bytes()
    with LocalServer(lambda r: Reply(chunks=[body[:37], body[37:120], body[120:]], headers={"Content-Type": "application/x-ndjson"})) as server:
        message = OpenAIClient(f"{server.url}/v1", "m", stream=True)(FORMATTED)
    call = next(b for b in message.content if isinstance(b, dict) and b.get("type") == "tool_calls")["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": {"city": "Tokyo"}} and message.usage.input_tokens == 169


@pytest.mark.spec("14")
def test_ndjson_line_over_the_cap_is_an_llm_error():
    """One NDJSON line longer than max_event_bytes ends the call with an LLMError saying so."""
    line = json.dumps({"message": {"role": "assistant", "content": "x" * 3000}, "done": True}).encode() + b"\n"
    with LocalServer(lambda r: Reply(chunks=[line[:1000], line[1000:]], headers={"Content-Type": "application/x-ndjson"})) as server:
        with pytest.raises(LLMError, match="exceeds 2000 bytes"):
            OpenAIClient(f"{server.url}/v1", "m", stream=True, max_event_bytes=2000)(FORMATTED)


@pytest.mark.spec("14")
def test_a_formatted_dict_saying_stream_false_wins_over_the_client():
    """A round whose formatted dict says "stream": False is not streamed (keys of the formatted dict win), and no stream_options go with it."""
    with LocalServer(lambda r: Reply(body={"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]})) as server:
        OpenAIClient(f"{server.url}/v1", "m", stream=True)({**FORMATTED, "stream": False})
    sent = server.requests[0].json()
    assert sent["stream"] is False and "stream_options" not in sent


_values = st.one_of(st.none(), st.text(max_size=3), st.integers(-1, 1), st.lists(st.none(), max_size=1), st.dictionaries(st.sampled_from(["a"]), st.none(), max_size=1))
_deltas = st.dictionaries(st.sampled_from(["role", "content", "refusal", "reasoning", "tool_calls"]), _values, max_size=3)
_choices = st.fixed_dictionaries({"delta": st.one_of(_deltas, _values)}, optional={"index": st.sampled_from([0, 1, None]), "finish_reason": st.sampled_from([None, "stop"]), "logprobs": st.none()})
_chunks = st.one_of(
    st.builds(lambda text, role: {"choices": [{"delta": {"content": text, **role}}]}, st.text(max_size=3), st.sampled_from([{}, {"role": "assistant"}])),
    st.fixed_dictionaries({"choices": st.lists(_choices, max_size=2)}, optional={"model": st.sampled_from(["m", None]), "id": st.just("x"), "usage": st.none()}),
    _values,
)


def _read(chunks, plain: bool):
    from yiemagent.llm._wire import ReplyError
    from yiemagent.llm.openai import OpenAIStream

    stream, emitted = OpenAIStream(emit=lambda kind, text: emitted.append((kind, text))), []
    if not plain:
        stream._add_plain_text = lambda chunk: False  # the general path alone
    try:
        for chunk in chunks:
            stream.add(chunk)
        message = stream.finish(done=True)
        return emitted, message.content, message.stop_reason, message.model
    except (LLMError, ReplyError) as exc:
        return emitted, type(exc).__name__, str(exc)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_chunks, max_size=4))
def test_the_plain_text_step_reads_every_chunk_as_the_general_path_does(chunks):
    """A chunk the one-step reading of a text delta takes gives the same text, events, errors and message as the full reading."""
    assert _read(chunks, plain=True) == _read(chunks, plain=False)
