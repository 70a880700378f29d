"""The LLM clients against a real local server (docs/conformance.md): every failure an LLMError, nothing garbled, nothing invented (decision 14), the deadline, capped error bodies."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from helpers import FIXTURES, WAIT, EventRecorder, check_a_cut_reply_is_answered_not_run, make_tool, text_result
from localserver import LocalServer, Reply
from yiemagent import LLMError, ToolStore, YiemAgent, extract_tool_calls, register_tool, run_agent, take_response
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.events import stream_to

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
SSE = {"Content-Type": "text/event-stream"}


def openai(server, **kwargs):
    kwargs.setdefault("backoff_factor", 0.001)
    return OpenAIClient(f"{server.url}/v1", "m", **kwargs)


def anthropic(server, **kwargs):
    kwargs.setdefault("backoff_factor", 0.001)
    return AnthropicClient("m", "key-0123456789", base_url=server.url, **kwargs)


def sequence(*replies: Reply):
    queue = list(replies)
    return lambda request: queue.pop(0) if len(queue) > 1 else queue[0]


def sse(*payloads, done: bool = False) -> bytes:
    """Data-only events (OpenAI style); ``done`` adds ``data: [DONE]``."""
    body = "".join(f"data: {json.dumps(p, ensure_ascii=False)}\n\n" for p in payloads)
    return (body + ("data: [DONE]\n\n" if done else "")).encode()


def chunk(content=None, finish=None, **delta):
    if content is not None:
        delta["content"] = content
    return {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def anthropic_events(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def anthropic_sse(events) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


# --- 1. SSE decoded right ------------------------------------------------------------


@pytest.mark.spec("14")
def test_event_stream_without_charset_is_read_as_utf8():
    """A text/event-stream without a charset (OpenRouter, Groq) is UTF-8: "—" and U+2028 inside JSON text arrive intact."""
    text = "a — b\u2028c\u0085d"
    body = sse(chunk(text[:3]), chunk(text[3:], "stop"), done=True)
    with LocalServer(lambda r: Reply(chunks=[body[:9], body[9:]], headers=SSE)) as server:
        message = openai(server, stream=True)(FORMATTED)
    assert message.content[0].text == text


# --- 2. the event cap ----------------------------------------------------------------


@pytest.mark.spec("14")
def test_one_event_over_the_cap_is_an_llm_error():
    """An event larger than max_event_bytes ends the call with an LLMError saying so, not unbounded memory."""
    body = sse(chunk("x" * 5000, "stop"), done=True)
    with LocalServer(lambda r: Reply(chunks=[body[i : i + 512] for i in range(0, len(body), 512)], headers=SSE)) as server:
        with pytest.raises(LLMError, match="exceeds 1000 bytes") as info:
            openai(server, stream=True, max_event_bytes=1000)(FORMATTED)
    assert info.value.retryable is False and len(server.requests) == 1


# --- 3. errors typed -----------------------------------------------------------------


@pytest.mark.spec("14")
def test_openrouter_error_chunk_in_a_200_stream_is_an_llm_error():
    """OpenRouter's mid-stream error object (beside id, model, choices) raises with its words and code, not a reply."""
    body = (FIXTURES / "openrouter-stream-midstream-error.sse").read_bytes()
    deltas = []
    with LocalServer(lambda r: Reply(chunks=[body], headers=SSE)) as server:
        with stream_to(lambda kind, text: deltas.append(text)):
            with pytest.raises(LLMError, match="Provider disconnected unexpectedly") as info:
                openai(server, stream=True)(FORMATTED)
    assert info.value.status == 502 and info.value.retryable
    assert "".join(deltas) == "The tallest building"
    assert len(server.requests) == 1, "deltas were shown: a retry would show them twice"


@pytest.mark.spec("14")
def test_error_chunk_before_any_delta_is_retried():
    """With nothing shown yet, a retryable error inside a 200 stream is retried; the next reply is returned."""
    error = {"id": "g", "model": "m", "choices": [], "error": {"code": 503, "message": "no provider available"}}
    good = sse(chunk("ok", "stop"), done=True)
    with LocalServer(sequence(Reply(chunks=[sse(error)], headers=SSE), Reply(chunks=[good], headers=SSE))) as server:
        message = openai(server, stream=True)(FORMATTED)
    assert message.content[0].text == "ok" and len(server.requests) == 2


@pytest.mark.spec("14")
def test_anthropic_error_event_is_an_llm_error_with_its_status():
    """Anthropic's `event: error` overloaded_error after HTTP 200 is an LLMError with status 529, retryable."""
    body = (FIXTURES / "anthropic-stream-error-overloaded.sse").read_bytes()
    with LocalServer(lambda r: Reply(chunks=[body], headers=SSE)) as server:
        with pytest.raises(LLMError, match="Overloaded") as info:
            anthropic(server, stream=True, max_retries=0)(FORMATTED)
    assert info.value.status == 529 and info.value.retryable


@pytest.mark.spec("14")
def test_cut_chunked_body_is_a_retryable_llm_error_with_its_cause():
    """A chunked body cut short (requests/urllib3 raise their own errors) is an LLMError, retried, naming the cause."""
    whole = json.dumps({"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}]}).encode()
    with LocalServer(lambda r: Reply(chunks=[whole[:20]], cut=True, headers={"Content-Type": "application/json"})) as server:
        with pytest.raises(LLMError, match="broke off") as info:
            openai(server, max_retries=1)(FORMATTED)
    assert info.value.retryable and info.value.status == 200 and len(server.requests) == 2
    assert info.value.__cause__ is not None


@pytest.mark.spec("14")
@pytest.mark.parametrize("value", ["nan", "inf", "-5", "soon"])
def test_unusable_retry_after_ms_falls_back_to_backoff(value):
    """A retry-after-ms that is not a finite, non-negative number is ignored: the 429 is retried with backoff."""
    with LocalServer(sequence(Reply(status=429, headers={"retry-after-ms": value}, body={}), Reply(body=chunk_reply("ok")))) as server:
        assert openai(server)(FORMATTED).content[0].text == "ok"
    assert len(server.requests) == 2


def chunk_reply(text, usage=None):
    body = {"model": "m", "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return body


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "raw, why",
    [("1e400", "'prompt_tokens' is not a token count: <the number 1e400, which does not fit a float>"), ("-3", None), ("true", None), ("2.5", None), ('"many"', None), ("NaN", "NaN is not JSON")],
)
def test_absurd_usage_count_is_an_llm_error(raw, why):
    """A usage count that is not a whole number of tokens (negative, bool, fraction, text) is an LLMError naming the field; NaN is not JSON, refused first (loads_json); 1e400 is JSON that no float holds."""
    body = json.dumps(chunk_reply("ok")).replace('"choices"', f'"usage": {{"prompt_tokens": {raw}, "completion_tokens": 1}}, "choices"')
    with LocalServer(lambda r: Reply(body=body.encode(), headers={"Content-Type": "application/json"})) as server:
        with pytest.raises(LLMError, match=why or "'prompt_tokens' is not a token count") as info:
            openai(server)(FORMATTED)
    assert info.value.retryable is False and info.value.status == 200


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "make, body",
    [
        (anthropic, {"content": [1], "stop_reason": "end_turn"}),
        (openai, {"choices": [{"message": {"content": None, "tool_calls": ["get_weather"]}, "finish_reason": "tool_calls"}]}),
        (openai, {"choices": [{"message": {"content": None, "tool_calls": {"id": "x"}}, "finish_reason": "tool_calls"}]}),
        (openai, [{"choices": []}]),
    ],
    ids=["anthropic-content-int", "tool-call-string", "tool-calls-object", "body-list"],
)
def test_body_that_is_not_the_protocol_is_an_llm_error(make, body):
    """Content [1], a tool_calls entry that is a string, tool_calls that are not a list, a list body: an LLMError naming what came."""
    with LocalServer(lambda r: Reply(body=body)) as server:
        with pytest.raises(LLMError, match="is not a|not a list") as info:
            make(server)(FORMATTED)
    assert info.value.retryable is False and info.value.status == 200 and len(server.requests) == 1


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "payload",
    [[{"choices": []}], {"choices": [{"delta": {"tool_calls": ["x"]}}]}, {"choices": "none"}, {"choices": [{"delta": {"tool_calls": [{"index": [0]}]}}]}],
    ids=["event-list", "fragment-string", "choices-string", "index-list"],
)
def test_stream_event_that_is_not_the_protocol_is_an_llm_error(payload):
    """A stream event that is a JSON list, a tool_calls fragment that is a string, choices that are not a list: an LLMError."""
    with LocalServer(lambda r: Reply(chunks=[sse(payload, done=True)], headers=SSE)) as server:
        with pytest.raises(LLMError) as info:
            openai(server, stream=True)(FORMATTED)
    assert info.value.retryable is False and "stream" in str(info.value)


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "event",
    [[{"type": "message_start"}], {"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta", "text": "x"}}, {"type": "content_block_start", "index": 0, "content_block": "text"}],
    ids=["event-list", "unknown-index", "block-string"],
)
def test_anthropic_stream_event_that_is_not_the_protocol_is_an_llm_error(event):
    """An Anthropic stream event that is a list, names a block never started, or carries a block that is not an object: an LLMError."""
    start = {"type": "message_start", "message": {"model": "m"}}
    body = f"event: message_start\ndata: {json.dumps(start)}\n\nevent: x\ndata: {json.dumps(event)}\n\n".encode()
    with LocalServer(lambda r: Reply(chunks=[body], headers=SSE)) as server:
        with pytest.raises(LLMError, match="not a JSON object|unknown content block") as info:
            anthropic(server, stream=True)(FORMATTED)
    assert info.value.retryable is False and len(server.requests) == 1


@pytest.mark.spec("14")
def test_finish_reason_error_without_an_error_object_is_an_llm_error():
    """A stream whose finish_reason is "error" (and no error object) is a retryable LLMError, not a reply."""
    with LocalServer(lambda r: Reply(chunks=[sse(chunk("par"), chunk("", "error"), done=True)], headers=SSE)) as server:
        with pytest.raises(LLMError, match="finish_reason 'error'") as info:
            openai(server, stream=True, max_retries=0)(FORMATTED)
    assert info.value.retryable


@pytest.mark.spec("14")
def test_usage_counts_as_digit_strings_or_whole_floats_are_counts():
    """Lenient where it is safe: "12" and 12.0 are 12 tokens."""
    body = chunk_reply("ok", {"prompt_tokens": "12", "completion_tokens": 3.0})
    with LocalServer(lambda r: Reply(body=body)) as server:
        usage = openai(server)(FORMATTED).usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (12, 3, 15)


@pytest.mark.spec("14")
def test_ollama_native_tool_call_that_is_not_an_object_is_an_llm_error():
    """An NDJSON (Ollama native) message whose tool_calls entry is a string is an LLMError, not an AttributeError."""
    line = json.dumps({"message": {"role": "assistant", "content": "", "tool_calls": ["get_weather"]}, "done": True}).encode() + b"\n"
    with LocalServer(lambda r: Reply(chunks=[line], headers={"Content-Type": "application/x-ndjson"})) as server:
        with pytest.raises(LLMError, match="tool_calls entry is not a JSON object"):
            openai(server, stream=True)(FORMATTED)


# --- 4. decision 14: no partial reply, no invented arguments -------------------------------


@pytest.mark.spec("14")
def test_openai_stream_ending_without_finish_reason_or_done_is_an_error():
    """A stream that closes with neither finish_reason nor [DONE] is a retryable LLMError, never its partial text as a reply."""
    with LocalServer(lambda r: Reply(chunks=[sse(chunk("Half an ans"))], headers=SSE)) as server:
        with pytest.raises(LLMError, match="ended before the reply was whole") as info:
            openai(server, stream=True, max_retries=1)(FORMATTED)
    assert info.value.retryable and len(server.requests) == 2


@pytest.mark.spec("14")
def test_stream_with_finish_reason_but_no_done_is_whole():
    """Servers that send a finish_reason and close without [DONE] give a whole reply."""
    with LocalServer(lambda r: Reply(chunks=[sse(chunk("All of it", "stop"))], headers=SSE)) as server:
        assert openai(server, stream=True)(FORMATTED).content[0].text == "All of it"


@pytest.mark.spec("14")
def test_html_page_answering_a_stream_request_is_an_error():
    """A 200 text/html page (a proxy, a login portal) answering a stream request is an LLMError naming it, not an empty reply."""
    page = b"<html><body>Please sign in</body></html>"
    with LocalServer(lambda r: Reply(body=page, headers={"Content-Type": "text/html; charset=utf-8"})) as server:
        with pytest.raises(LLMError, match="text/html") as info:
            openai(server, stream=True)(FORMATTED)
    assert "Please sign in" in str(info.value) and info.value.status == 200 and not info.value.retryable


@pytest.mark.spec("14")
def test_json_reply_to_a_stream_request_is_read_and_emitted():
    """A server that ignores "stream" and answers one JSON body gives that reply; its text reaches the listener whole."""
    deltas = []
    with LocalServer(lambda r: Reply(body=chunk_reply("whole"))) as server:
        with stream_to(lambda kind, text: deltas.append((kind, text))):
            message = openai(server, stream=True)(FORMATTED)
    assert message.content[0].text == "whole" and deltas == [("text", "whole")]


@pytest.mark.spec("14")
def test_event_stream_answering_a_plain_request_is_read_as_a_stream():
    """A server that streams though not asked to (text/event-stream to a plain request) gives the whole reply, not a "not JSON" error."""
    with LocalServer(lambda r: Reply(chunks=[sse(chunk("stre"), chunk("amed", "stop"), done=True)], headers=SSE)) as server:
        message = openai(server)(FORMATTED)
    assert message.content[0].text == "streamed" and "stream" not in server.requests[0].json()


def cut_inside_tool_use() -> list[dict]:
    events = anthropic_events("anthropic-stream-tool-use.jsonl")
    last = max(i for i, e in enumerate(events) if e.get("delta", {}).get("type") == "input_json_delta")
    return events[:last]


@pytest.mark.spec("14")
@pytest.mark.parametrize("cut", [False, True], ids=["closed", "connection-cut"])
def test_anthropic_stream_cut_inside_tool_use_runs_no_tool(cut):
    """An Anthropic stream that ends inside a tool_use input is an LLMError; the agent runs no tool with invented arguments."""
    ran = []
    store = ToolStore("cut")
    register_tool(store, make_tool("json", lambda call_id, args, *rest: ran.append(args) or text_result("done"), schema={"type": "object"}))
    with LocalServer(lambda r: Reply(chunks=[anthropic_sse(cut_inside_tool_use())], cut=cut, headers=SSE)) as server:
        client = anthropic(server, stream=True, max_retries=0)
        with pytest.raises(LLMError, match="tool_use block 'json'" if not cut else "broke off|tool_use") as info:
            client(FORMATTED)
        with YiemAgent(llm_call=client, agent_event_sink=EventRecorder(), tool_store=store) as agent:
            run_agent(agent, "go")
            response = take_response(agent, timeout=WAIT)
    assert info.value.retryable
    assert ran == [] and response.stop_reason == "error"
    assert not any(m.role == "tool" for m in agent.history())


@pytest.mark.spec("14")
@pytest.mark.parametrize("partial", ['{"elements": [tru', "[1, 2]"], ids=["broken-json", "not-an-object"])
def test_anthropic_tool_input_that_is_not_json_is_not_replaced_by_empty_arguments(partial):
    """A whole tool_use whose input is not a JSON object keeps its text: the call gets an error result, not a run with {}."""
    events = [e for e in anthropic_events("anthropic-stream-tool-use.jsonl") if e.get("delta", {}).get("type") != "input_json_delta"]
    at = next(i for i, e in enumerate(events) if e["type"] == "content_block_stop" and e["index"] == 0)
    events.insert(at, {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": partial}})
    with LocalServer(lambda r: Reply(chunks=[anthropic_sse(events)], headers=SSE)) as server:
        message = anthropic(server, stream=True)(FORMATTED)
    call = next(b for b in message.content if isinstance(b, dict) and b.get("type") == "tool_call")
    assert call["arguments"] == partial


# --- 5. the deadline -------------------------------------------------------------------


@pytest.mark.spec("14")
def test_deadline_ends_a_trickling_stream():
    """A server that sends a keep-alive byte every 50 ms (each read within timeout) is cut off at deadline_s."""
    release = threading.Event()
    trickle = [lambda: release.wait(0.05), b": .\n"] * 200  # 10 s of trickling unless the client leaves
    chunks = [sse(chunk("start")), *trickle, sse(chunk("end", "stop"), done=True)]
    try:
        with LocalServer(lambda r: Reply(chunks=chunks, headers=SSE)) as server:
            with pytest.raises(LLMError, match=r"deadline_s=0\.5") as info:
                openai(server, stream=True, timeout=5, deadline_s=0.5, max_retries=0)(FORMATTED)
    finally:
        release.set()
    assert info.value.retryable and info.value.status is None


@pytest.mark.spec("14")
def test_deadline_covers_waiting_for_headers():
    """A server that holds its headers back longer than deadline_s ends the call at the deadline."""
    hold = threading.Event()
    try:
        with LocalServer(lambda r: Reply(body=chunk_reply("late"), before=lambda: hold.wait(WAIT))) as server:
            with pytest.raises(LLMError, match=r"deadline_s=0\.3"):
                openai(server, timeout=5, deadline_s=0.3, max_retries=0)(FORMATTED)
    finally:
        hold.set()


@pytest.mark.spec("14")
def test_a_retry_wait_past_the_deadline_is_not_taken():
    """A Retry-After that would end after the deadline fails at once, saying so."""
    with LocalServer(sequence(Reply(status=503, headers={"Retry-After": "5"}, body={}), Reply(body=chunk_reply("ok")))) as server:
        with pytest.raises(LLMError, match="would pass the call's deadline_s=1"):
            openai(server, deadline_s=1)(FORMATTED)
    assert len(server.requests) == 1


def test_default_deadline_is_ten_minutes_and_none_disables_it():
    """deadline_s defaults to 600 s on both clients; None means no overall limit."""
    assert OpenAIClient("http://127.0.0.1:9/v1", "m").deadline_s == 600 == AnthropicClient("m").deadline_s
    assert OpenAIClient("http://127.0.0.1:9/v1", "m", deadline_s=None).deadline_s is None


# --- 6. error bodies read with a cap ----------------------------------------------------


@pytest.mark.spec("14")
def test_error_body_is_read_only_up_to_the_cap():
    """A 500 with a huge body: the error is raised after the first 64 KiB, without waiting for the rest."""
    release, finished = threading.Event(), threading.Event()
    head = json.dumps({"error": {"message": "boom " + "x" * 70000}}).encode()
    chunks = [head, lambda: release.wait(WAIT), b"y" * 1_000_000, finished.set]
    try:
        with LocalServer(lambda r: Reply(status=500, chunks=chunks, headers={"Content-Type": "application/json"})) as server:
            with pytest.raises(LLMError, match="API error 500") as info:
                openai(server, max_retries=0)(FORMATTED)
            assert not finished.is_set(), "the client waited for the whole error body"
    finally:
        release.set()
    assert len(str(info.value)) < 2000


@pytest.mark.spec("14")
def test_connection_is_kept_alive_between_whole_replies():
    """A whole reply read to its end returns the connection to the pool: the next round reuses it (no new TLS handshake)."""
    with LocalServer(lambda r: Reply(body=chunk_reply("ok"))) as server:
        client = openai(server)
        client(FORMATTED)
        client(FORMATTED)
    assert server.requests[0].client_port == server.requests[1].client_port


# --- decision 10 on the wire: a reply cut at the token limit runs none of its calls --------

CUT_CALL = {"id": "call_1", "type": "function", "function": {"name": "json", "arguments": '{"x": 1}'}}


def openai_cut_reply(stream: bool) -> Reply:
    if not stream:
        return Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [CUT_CALL]}, "finish_reason": "length"}]})
    return Reply(chunks=[sse(chunk(tool_calls=[{"index": 0, **CUT_CALL}]), chunk(finish="length"), done=True)], headers=SSE)


def anthropic_cut_reply(stream: bool) -> Reply:
    block = {"type": "tool_use", "id": "toolu_1", "name": "json", "input": {"x": 1}}
    if not stream:
        return Reply(body={"type": "message", "role": "assistant", "model": "m", "content": [block], "stop_reason": "max_tokens"})
    events = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"x": 1}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    return Reply(chunks=[anthropic_sse(events)], headers=SSE)


def final_reply(provider: str, stream: bool) -> Reply:
    if provider == "anthropic":
        return Reply(body={"type": "message", "role": "assistant", "content": [{"type": "text", "text": "re-issued"}], "stop_reason": "end_turn"})
    return Reply(chunks=[sse(chunk("re-issued", "stop"), done=True)], headers=SSE) if stream else Reply(body=chunk_reply("re-issued"))


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_reply_cut_at_the_token_limit_keeps_stop_reason_length_and_its_calls_are_not_run(provider, stream):
    """finish_reason "length" (OpenAI) or stop_reason "max_tokens" (Anthropic) with whole-looking tool calls: the reply's stop_reason is "length", not "tool_use", and the agent answers the calls with an error instead of running them (decision 10)."""
    cut = openai_cut_reply(stream) if provider == "openai" else anthropic_cut_reply(stream)
    with LocalServer(sequence(cut, cut, final_reply(provider, stream))) as server:
        client = (openai if provider == "openai" else anthropic)(server, stream=stream, max_retries=0)
        message = client(FORMATTED)
        assert message.stop_reason == "length"
        assert [b.get("type") for b in message.content if isinstance(b, dict)] == ["tool_calls" if provider == "openai" else "tool_call"]
        check_a_cut_reply_is_answered_not_run(client)


@pytest.mark.spec("14")
@pytest.mark.parametrize("cut", [False, True], ids=["closed", "connection-cut"])
def test_anthropic_stream_ending_without_message_stop_is_an_error(cut):
    """Every block stopped, the stop reason sent, but no message_stop: a retryable LLMError, never the text so far as a reply (decision 14)."""
    events = [e for e in anthropic_events("anthropic-stream-tool-use.jsonl") if e["type"] != "message_stop"]
    assert [e["type"] for e in events][-1] == "message_delta"
    with LocalServer(lambda r: Reply(chunks=[anthropic_sse(events)], cut=cut, headers=SSE)) as server:
        with pytest.raises(LLMError, match="before message_stop" if not cut else "before message_stop|broke off") as info:
            anthropic(server, stream=True, max_retries=1)(FORMATTED)
    assert info.value.retryable and len(server.requests) == 2


@pytest.mark.spec("14")
def test_anthropic_stream_with_message_stop_is_whole():
    """The same stream with its message_stop is one whole reply (the check above refuses only the cut one)."""
    events = anthropic_events("anthropic-stream-tool-use.jsonl")
    with LocalServer(lambda r: Reply(chunks=[anthropic_sse(events)], headers=SSE)) as server:
        message = anthropic(server, stream=True, max_retries=0)(FORMATTED)
    assert message.stop_reason == "tool_use" and extract_tool_calls(message)[0]
