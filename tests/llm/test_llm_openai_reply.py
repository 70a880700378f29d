"""Reading an OpenAI chat-completions reply, whole and streamed (spec §14 llmCall, decisions 13 and 14).

What a reply's ``stop_reason``, ``api``, ``provider``, ``model`` and ``usage`` say, for the
shapes servers send (tests/fixtures/README.md); and the errors a malformed reply raises,
each naming what was wrong. The parsers are the public ``parse_openai_response``,
``parse_openai_stream`` and ``OpenAIStream``; where the client's reading of the stream
matters (when it stops), a real ``http.server`` on 127.0.0.1 sends the bytes.
"""

from __future__ import annotations

import json

import pytest

from helpers import FIXTURES
from localserver import LocalServer, Reply
from yiemagent import LLMUsage, extract_tool_calls
from yiemagent.events import stream_to
from yiemagent.llm import OpenAIClient
from yiemagent.llm._wire import ReplyError, message_text
from yiemagent.llm.openai import OpenAIStream, parse_openai_response, parse_openai_stream

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
SSE = {"Content-Type": "text/event-stream"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def whole(message: dict, finish=None, **body) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", **message}}
    if finish is not None:
        choice["finish_reason"] = finish
    return {"choices": [choice], **body}


def chunk(delta: dict, finish=None, index=0, **body) -> dict:
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish}], **body}


def streamed(message: dict, finish=None) -> list[dict]:
    """The chunks a server streams for ``message``: its text, its calls (one fragment each), then the finish."""
    chunks = []
    if message.get("content"):
        chunks.append(chunk({"role": "assistant", "content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": i, **call}]}))
    chunks.append(chunk({}, finish))
    return chunks


def sse(*events) -> bytes:
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def read_stream(body: bytes):
    with LocalServer(lambda request: Reply(chunks=[body], headers=SSE)) as server:
        return OpenAIClient(f"{server.url}/v1", "m", stream=True, max_retries=0)(FORMATTED)


def fed(stream: OpenAIStream, chunks) -> OpenAIStream:
    for c in chunks:
        stream.add(c)
    return stream


def calls_of(message):
    has, calls, _ = extract_tool_calls(message)
    assert has == bool(calls)
    return [(c.type, c.name, c.arguments) for c in calls]


# --- stop_reason -----------------------------------------------------------------------------

STOP_REASONS = [
    # (finish_reason, with tool calls?, stop_reason)
    ("stop", False, "stop"),
    (None, False, "stop"),  # no finish_reason at all (llama.cpp's older servers, proxies): a plain end
    ("end_turn", False, "stop"),
    ("something_new", False, "stop"),
    ("tool_calls", False, "stop"),  # "tool_calls" but no call came: nothing to run, so not a tool turn
    ("length", False, "length"),
    ("max_tokens", False, "length"),
    ("content_filter", False, "content_filter"),
    ("stop", True, "tool_use"),  # a turn with calls is a tool turn whatever finish_reason says
    (None, True, "tool_use"),
    ("length", True, "length"),  # calls cut at the limit are not a tool turn (decision 10)
]


@pytest.mark.spec("14")
@pytest.mark.parametrize("finish, with_calls, stop_reason", STOP_REASONS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_finish_reason_becomes_the_stop_reason_the_run_acts_on(stream, finish, with_calls, stop_reason):
    """Each finish_reason, with and without tool calls, whole and streamed: the same stop_reason."""
    message = {"content": "Hi.", **({"tool_calls": [CALL]} if with_calls else {})}
    reply = parse_openai_stream(streamed(message, finish)) if stream else parse_openai_response(whole(message, finish))
    assert reply.stop_reason == stop_reason
    assert calls_of(reply) == ([("function", "get_weather", {"city": "Paris"})] if with_calls else [])


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_finish_reason_that_is_not_a_string_is_a_plain_stop(stream):
    """A finish_reason object (no server's, but the parsers are lenient) is read as no finish_reason: "stop"."""
    odd = {"type": "stop"}
    reply = parse_openai_stream(streamed({"content": "Hi."}, odd)) if stream else parse_openai_response(whole({"content": "Hi."}, odd))
    assert reply.stop_reason == "stop" and reply.text == "Hi."


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_ollama_native_reply_cut_at_the_limit_says_length(stream):
    """Ollama's /api/chat gives done_reason, not finish_reason: "length" there is a cut reply too."""
    counts = {"prompt_eval_count": 12, "eval_count": 5}
    if stream:
        reply = parse_openai_stream(
            [
                {"model": "llama3.2", "message": {"role": "assistant", "content": "Once upon"}, "done": False},
                {"model": "llama3.2", "message": {"role": "assistant", "content": " a"}, "done_reason": "length", "done": True, **counts},
            ]
        )
    else:
        reply = parse_openai_response({"model": "llama3.2", "message": {"role": "assistant", "content": "Once upon a"}, "done_reason": "length", "done": True, **counts})
    assert (reply.stop_reason, reply.text, reply.usage) == ("length", "Once upon a", LLMUsage(12, 5, 0, 0, 17, 0))


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_finish_reason_error_without_an_error_object_is_a_retryable_failure(stream):
    """OpenRouter's mid-stream failure can come as finish_reason "error" alone: no reply, a retryable error saying so."""
    with pytest.raises(ReplyError, match="^finish_reason 'error' with no error object$") as info:
        if stream:
            parse_openai_stream(streamed({"content": "Hal"}, "error"))
        else:
            parse_openai_response(whole({"content": "Hal"}, "error"))
    assert info.value.retryable


# --- api, provider, model --------------------------------------------------------------------


@pytest.mark.spec("14")
def test_a_reply_names_its_api_and_the_provider_it_was_read_for():
    """api is "openai-chat"; provider is the one given, "openai" when none is; whole and streamed alike."""
    body, chunks = whole({"content": "Hi."}, "stop"), streamed({"content": "Hi."}, "stop")
    readers = {
        "whole": (lambda: parse_openai_response(body), lambda: parse_openai_response(body, "groq")),
        "parse_openai_stream": (lambda: parse_openai_stream(chunks), lambda: parse_openai_stream(chunks, "groq")),
        "OpenAIStream": (lambda: fed(OpenAIStream(), chunks).finish(), lambda: fed(OpenAIStream("groq"), chunks).finish()),
    }
    for name, (default, given) in readers.items():
        assert (default().api, default().provider, given().provider) == ("openai-chat", "openai", "groq"), name


@pytest.mark.spec("14")
def test_the_model_of_a_recorded_stream_is_the_replys_model():
    """OpenAI's recorded tool-call stream names its model on every chunk: the reply carries it."""
    reply = read_stream((FIXTURES / "openai-stream-tool-call.sse").read_bytes())
    assert reply.model == "gpt-4o-mini-2024-07-18"
    assert calls_of(reply) == [("function", "get_capital", {"country": "UK"})]


@pytest.mark.spec("14")
def test_a_model_named_only_on_the_text_chunks_is_kept_to_the_end():
    """The finish chunk without a model does not forget the one the text chunks named."""
    chunks = [chunk({"content": "Hel"}, model="m-1"), chunk({"content": "lo"}, model="m-1"), chunk({}, "stop")]
    reply = parse_openai_stream(chunks)
    assert (reply.model, reply.text) == ("m-1", "Hello")


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_reply_without_a_model_or_with_one_that_is_not_text_has_none(stream):
    """No model named, or a number or an object in its place: the reply's model is None, not "" or the object."""
    for model in ({}, {"model": 5}, {"model": {"id": "m"}}):
        if stream:
            reply = parse_openai_stream([{**c, **model} for c in streamed({"content": "Hi."}, "stop")])
        else:
            reply = parse_openai_response(whole({"content": "Hi."}, "stop", **model))
        assert reply.model is None, model


# --- usage (decision 13) -------------------------------------------------------------------------


@pytest.mark.spec("14")
def test_a_stream_that_reported_no_usage_has_none():
    """No usage chunk came (stream_options not asked): the reply's usage is None, not a made-up zero or ""."""
    assert parse_openai_stream(streamed({"content": "Hi."}, "stop")).usage is None


USAGES = {
    # what the server reported -> LLMUsage(input, output, cache_read, cache_write, total, reasoning)
    "reasoning at the top level": ({"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40, "reasoning_tokens": 20}, LLMUsage(10, 30, 0, 0, 40, 20)),
    "reasoning at the top level, left out of completion": (
        {"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 60, "reasoning_tokens": 20},
        LLMUsage(10, 50, 0, 0, 60, 20),
    ),
    "DeepSeek's cache hits without prompt_tokens_details": (
        {"prompt_tokens": 875, "completion_tokens": 79, "total_tokens": 954, "prompt_cache_hit_tokens": 640, "prompt_cache_miss_tokens": 235},
        LLMUsage(875, 79, 640, 0, 954, 0),
    ),
    "OpenRouter's cache writes": (
        {"prompt_tokens": 2000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 1800}},
        LLMUsage(2000, 10, 0, 1800, 2010, 0),
    ),
    "cache writes named cache_creation_tokens": (
        {"prompt_tokens": 2000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 100, "cache_creation_tokens": 1700}},
        LLMUsage(2000, 10, 100, 1700, 2010, 0),
    ),
}


@pytest.mark.spec("14")
@pytest.mark.parametrize("shape", sorted(USAGES))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_usage_of_each_shape_follows_decision_13(stream, shape):
    """Reasoning and cache counts wherever a server puts them; total is input + output."""
    usage, expected = USAGES[shape]
    if stream:
        reply = parse_openai_stream([*streamed({"content": "Hi."}, "stop"), {"choices": [], "usage": usage}])
    else:
        reply = parse_openai_response(whole({"content": "Hi."}, "stop", usage=usage))
    assert reply.usage == expected


@pytest.mark.spec("14")
def test_usage_sent_on_a_text_chunk_is_read():
    """vLLM's continuous usage stats ride on text chunks: the usage of the last one counts."""
    chunks = [
        chunk({"content": "Hel"}, usage={"prompt_tokens": 7, "completion_tokens": 1}),
        chunk({"content": "lo"}, usage={"prompt_tokens": 7, "completion_tokens": 2}),
        chunk({}, "stop"),
    ]
    reply = parse_openai_stream(chunks)
    assert (reply.text, reply.usage) == ("Hello", LLMUsage(7, 2, 0, 0, 9, 0))


# --- streams: choices, fragments, the end ----------------------------------------------------


@pytest.mark.spec("14")
def test_with_n_2_the_second_choices_chunks_are_left_out_as_a_whole_reply_leaves_them():
    """OpenAI streams n=2 as one choice per chunk, index 0 and 1 interleaved: only choice 0 is read and shown."""
    events = []
    for first, second in [("Hel", "Bon"), ("lo", "jour")]:
        events += [chunk({"content": first}, index=0), chunk({"content": second}, index=1)]
    events += [chunk({}, "stop", index=0), chunk({}, "stop", index=1)]
    shown = []
    with stream_to(lambda kind, text: shown.append(text)):
        reply = read_stream(sse(*events))
    assert "".join(shown) == message_text(reply, "text") == "Hello"


@pytest.mark.spec("14")
def test_an_event_without_choices_does_not_end_the_stream():
    """A choice-less event (a proxy's keep-alive object, an early usage report) is read, and the text after it still arrives."""
    events = [{"object": "chat.completion.chunk", "model": "m"}, chunk({"content": "Hel"}), {"usage": {"prompt_tokens": 3, "completion_tokens": 2}}, chunk({"content": "lo"}), chunk({}, "stop")]
    reply = read_stream(sse(*events))
    assert (reply.text, reply.stop_reason, reply.usage) == ("Hello", "stop", LLMUsage(3, 2, 0, 0, 5, 0))


@pytest.mark.spec("14")
def test_streamed_fragments_without_an_index_are_calls_in_the_order_they_came():
    """Some servers leave out index when each fragment is a whole call: each is a call of its own."""
    fragments = [{"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}} for i, city in enumerate(["Paris", "Rome"])]
    reply = parse_openai_stream([chunk({"tool_calls": [f]}) for f in fragments] + [chunk({}, "tool_calls")])
    assert calls_of(reply) == [("function", "get_weather", {"city": "Paris"}), ("function", "get_weather", {"city": "Rome"})]


@pytest.mark.spec("14")
def test_a_first_fragment_with_only_the_id_starts_the_call():
    """The id may come alone, the function in the next fragments."""
    fragments = [{"index": 0, "id": "call_9", "type": "function"}, {"index": 0, "function": {"name": "get_weather"}}, {"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]
    reply = parse_openai_stream([chunk({"tool_calls": [f]}) for f in fragments] + [chunk({}, "tool_calls")])
    assert calls_of(reply) == [("function", "get_weather", {"city": "Oslo"})]
    assert extract_tool_calls(reply)[1][0].id == "call_9"


@pytest.mark.spec("7")
def test_a_streamed_custom_call_whose_fragments_never_say_custom_is_still_one():
    """A custom fragment ({"custom": {...}}) makes a custom call even when no fragment carries "type": "custom"."""
    fragments = [{"index": 0, "id": "call_c", "custom": {"name": "code_exec"}}, {"index": 0, "custom": {"input": "print(1)"}}]
    reply = parse_openai_stream([chunk({"tool_calls": [f]}) for f in fragments] + [chunk({}, "tool_calls")])
    assert calls_of(reply) == [("custom", "code_exec", {"input": "print(1)"})]


@pytest.mark.spec("14")
def test_ollama_native_calls_are_numbered_by_their_place_in_the_stream():
    """Native calls come whole, in any chunk; each is a call of its own, whatever index a call carries."""
    def native(*cities):
        tool_calls = [{"index": 0, "function": {"name": "get_weather", "arguments": {"city": c}}} for c in cities]
        return {"model": "llama3.2", "message": {"role": "assistant", "content": "", "tool_calls": tool_calls}, "done": False}

    end = {"model": "llama3.2", "message": {"role": "assistant", "content": ""}, "done_reason": "stop", "done": True}
    reply = parse_openai_stream([native("Tokyo"), native("Paris", "Rome"), end])
    assert calls_of(reply) == [("function", "get_weather", {"city": c}) for c in ("Tokyo", "Paris", "Rome")]
    assert reply.stop_reason == "tool_use"


@pytest.mark.spec("14")
def test_chunks_taken_as_the_whole_stream_need_no_finish_reason():
    """parse_openai_stream and OpenAIStream.finish() (done defaults to True) take the chunks as all there was."""
    chunks = [chunk({"content": "Hel"}), chunk({"content": "lo"})]
    assert parse_openai_stream(chunks).text == fed(OpenAIStream(), chunks).finish().text == "Hello"


@pytest.mark.spec("14")
def test_a_stream_cut_before_its_end_and_one_without_any_choice_say_so():
    """Decision 14: no finish_reason and no [DONE] is a cut stream; [DONE] alone carried no reply. Both retryable."""
    with pytest.raises(ReplyError, match=r"^the stream ended before the reply was whole \(no finish_reason, no \[DONE\]\)") as cut:
        fed(OpenAIStream(), [chunk({"content": "Hel"})]).finish(done=False)
    with pytest.raises(ReplyError, match="^the stream ended without any choice: it carried no reply$") as empty:
        OpenAIStream().finish()
    assert cut.value.retryable and empty.value.retryable


# --- malformed replies: errors that name what was wrong --------------------------------------

MALFORMED_STREAMS = {
    "an event that is not an object": (["Hello"], "^a stream event is not a JSON object but str"),
    "choices that are not a list": ([{"choices": "Hello"}], "^a stream event's choices are not a list but str"),
    "a choice that is not an object": ([{"choices": ["Hello"]}], "^a stream choice is not a JSON object but str"),
    "a second choice that is not an object": ([{"choices": [{"index": 0, "delta": {"content": "Hi"}}, "Hello"]}], "^a stream choice is not a JSON object but str"),
    "a delta that is not an object": ([chunk("Hello")], "^a stream delta is not a JSON object but str"),
    "tool_calls that are not a list": ([chunk({"tool_calls": "get_weather"})], "^a stream delta's tool_calls are not a list but str"),
    "a fragment that is not an object": ([chunk({"tool_calls": ["get_weather"]})], "^a streamed tool_calls fragment is not a JSON object but str"),
    "a function_call that is not an object": ([chunk({"function_call": "get_weather"})], "^a streamed function_call is not a JSON object but str"),
}


@pytest.mark.spec("14")
@pytest.mark.parametrize("case", sorted(MALFORMED_STREAMS))
def test_a_malformed_stream_is_an_error_naming_what_is_wrong(case):
    chunks, message = MALFORMED_STREAMS[case]
    with pytest.raises(ReplyError, match=message):
        parse_openai_stream([*chunks, chunk({}, "stop")])


MALFORMED_REPLIES = {
    "a body that is not an object": (["Hello"], "^the reply is not a JSON object but list"),
    "no choices": ({"choices": []}, r"^the body has no choices\[0\]\.message$"),
    "a choice that is not an object": ({"choices": ["Hello"]}, r"^the body has no choices\[0\]\.message$"),
    "a message that is not an object": ({"choices": [{"message": "Hello"}]}, r"^the body has no choices\[0\]\.message$"),
    "tool_calls that are not a list": (whole({"tool_calls": "get_weather"}, "tool_calls"), "^the tool_calls are not a list but str$"),
}


@pytest.mark.spec("14")
@pytest.mark.parametrize("case", sorted(MALFORMED_REPLIES))
def test_a_malformed_reply_is_an_error_naming_what_is_wrong(case):
    body, message = MALFORMED_REPLIES[case]
    with pytest.raises(ReplyError, match=message):
        parse_openai_response(body)


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_ollama_native_tool_calls_that_are_not_a_list_are_an_error_not_dropped(stream):
    """Decision 14: a native reply whose tool_calls is an object cannot be read whole; streamed, it is not read as a reply without calls."""
    message = {"role": "assistant", "content": "", "tool_calls": {"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}}
    with pytest.raises(ReplyError, match="^the tool_calls are not a list but dict$"):
        if stream:
            parse_openai_stream([{"model": "llama3.2", "message": message, "done": False}, {"model": "llama3.2", "message": {"role": "assistant", "content": ""}, "done_reason": "stop", "done": True}])
        else:
            parse_openai_response({"model": "llama3.2", "message": message, "done_reason": "stop", "done": True})
