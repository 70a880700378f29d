"""Reasoning kept and sent back where required (docs/streaming.md "Reasoning sent back"), and usage by decision 13 on each provider's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import FIXTURES, EventRecorder, make_tool, text_result
from localserver import LocalServer, Reply
from yiemagent import LLMUsage, ToolStore, YiemAgent, register_tool, run_agent, take_response
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm._wire import message_text
from yiemagent.events import stream_to

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
SSE = {"Content-Type": "text/event-stream"}


def load(name):
    return json.loads((FIXTURES / name).read_text())


def sse_of(name: str) -> bytes:
    """A fixture as an event stream (``.jsonl``: one data payload per line, Anthropic events typed)."""
    text = (FIXTURES / name).read_text()
    if name.endswith(".sse"):
        return text.encode()
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    typed = name.startswith("anthropic-")
    return "".join((f"event: {e['type']}\n" if typed else "") + f"data: {json.dumps(e)}\n\n" for e in events).encode()


def serve(name: str):
    if name.endswith(".json"):
        return lambda r: Reply(body=load(name))
    return lambda r: Reply(chunks=[sse_of(name)], headers=SSE)


def call(name: str, **kwargs):
    with LocalServer(serve(name)) as server:
        if name.startswith("anthropic-"):
            client = AnthropicClient("m", "k", base_url=server.url, stream=not name.endswith(".json"), **kwargs)
        else:
            client = OpenAIClient(f"{server.url}/v1", "m", stream=not name.endswith(".json"), **kwargs)
        return client(FORMATTED)


def thinking_blocks(message):
    return [b for b in message.content if isinstance(b, dict) and b.get("type") == "thinking"]


# --- reasoning --------------------------------------------------------------------------


@pytest.mark.spec("14")
def test_streamed_anthropic_thinking_keeps_its_signature():
    """signature_delta completes the streamed thinking block: the signature Anthropic requires back is kept."""
    message = call("anthropic-stream-thinking-tool-use.sse")
    (block,) = thinking_blocks(message)
    assert block["signature"] == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    assert block["thinking"] == "The user wants the weather in Paris; I should call get_weather."
    assert message.stop_reason == "tool_use"


@pytest.mark.spec("14")
def test_signed_thinking_goes_back_before_the_tool_result():
    """In a streamed extended-thinking conversation with a tool, round 2 sends the signed thinking block first in the assistant turn."""
    final = {"type": "message", "content": [{"type": "text", "text": "Sunny in Paris."}], "stop_reason": "end_turn", "model": "m"}
    replies = iter([Reply(chunks=[sse_of("anthropic-stream-thinking-tool-use.sse")], headers=SSE), Reply(body=final)])
    store = ToolStore("weather")
    register_tool(store, make_tool("get_weather", lambda *a: text_result("sunny")))
    with LocalServer(lambda r: next(replies)) as server:
        client = AnthropicClient("m", "k", base_url=server.url, stream=True)
        with YiemAgent(llm_call=client, agent_event_sink=EventRecorder(), tool_store=store) as agent:
            run_agent(agent, "Weather in Paris?")
            response = take_response(agent, timeout=10)
    assert response.content[0].text == "Sunny in Paris."
    assistant = server.requests[1].json()["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "The user wants the weather in Paris; I should call get_weather.",
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
    }
    assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "tool_use"]
    assert server.requests[1].json()["messages"][2]["content"][0]["type"] == "tool_result"


@pytest.mark.spec("14")
def test_unsigned_thinking_is_not_sent_to_anthropic_nor_any_thinking_to_openai():
    """Unsigned thinking (another provider's) is not sent to Anthropic, redacted_thinking is; OpenAIClient never sends thinking blocks."""
    formatted = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a", "thinking_blocks": [{"type": "thinking", "thinking": "t"}, {"type": "redacted_thinking", "data": "EmwKAhgB"}]},
            {"role": "user", "content": "more"},
        ]
    }
    with LocalServer(lambda r: Reply(body={"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"})) as server:
        AnthropicClient("m", "k", base_url=server.url)(formatted)
    with LocalServer(lambda r: Reply(body={"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})) as openai_server:
        OpenAIClient(f"{openai_server.url}/v1", "m")(formatted)
    assert server.requests[0].json()["messages"][1]["content"] == [{"type": "redacted_thinking", "data": "EmwKAhgB"}, {"type": "text", "text": "a"}]
    assert "thinking_blocks" not in openai_server.requests[0].json()["messages"][1]


@pytest.mark.spec("14")
@pytest.mark.parametrize("name", ["mistral-magistral-thinking.json", "mistral-magistral-stream-thinking.sse"])
def test_mistral_thinking_parts_are_kept_apart_from_the_text(name):
    """Mistral's {"type": "thinking"} content parts, streamed or not, become the thinking block; the text stays text."""
    message = call(name)
    assert message_text(message, "thinking").startswith("John has 4 sisters")
    assert message_text(message, "text").startswith("John has ") and "4 sisters" not in message_text(message, "text")


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "name, start",
    [("deepseek-reasoner-response.json", "9.11 and 9.8"), ("xai-reasoning-response.json", "Let me calculate"), ("groq-stream-error-event.sse", None)],
)
def test_openai_style_reasoning_is_kept(name, start):
    """reasoning_content (DeepSeek, xAI) and reasoning (Groq's stream) are kept as the thinking block."""
    if start is None:
        body = (FIXTURES / name).read_bytes().split(b"event: error")[0] + b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'
        with LocalServer(lambda r: Reply(chunks=[body], headers=SSE)) as server:
            message = OpenAIClient(f"{server.url}/v1", "m", stream=True)(FORMATTED)
        assert message_text(message, "thinking").startswith("We need to call the tool")
    else:
        assert message_text(call(name), "thinking").startswith(start)


# --- usage by decision 13 ----------------------------------------------------------------

USAGE = {
    # name: (input, output, cache_read, cache_write, reasoning)
    "openai-reasoning-usage.json": (75, 1186, 64, 0, 1024),
    "deepseek-reasoner-response.json": (16, 270, 0, 0, 212),
    "xai-reasoning-response.json": (23, 309, 0, 0, 300),
    "mistral-magistral-thinking.json": (30, 150, 0, 0, 0),
    "anthropic-usage-cache.json": (21 + 188086, 393, 0, 188086, 0),
    "anthropic-stream-thinking-tool-use.sse": (12 + 2048, 89, 2048, 0, 0),
    "anthropic-parallel-tool-use.json": (423, 202, 0, 0, 0),
    "groq-stream-tool-call.sse": (304, 49, 0, 0, 23),
    "mistral-stream-incremental-empty-name.jsonl": (171, 14, 128, 0, 0),
    "openai-stream-tool-call.sse": (53, 15, 0, 0, 0),
}


@pytest.mark.spec("14")
@pytest.mark.parametrize("name", sorted(USAGE))
def test_usage_follows_decision_13(name):
    """Input counts cached tokens, output counts reasoning, total is their sum, on each provider's recorded shape."""
    inputs, outputs, cache_read, cache_write, reasoning = USAGE[name]
    usage = call(name).usage
    assert usage == LLMUsage(inputs, outputs, cache_read, cache_write, inputs + outputs, reasoning)


# --- deltas of recorded streams ---------------------------------------------------------------


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "name",
    ["anthropic-stream-thinking-tool-use.sse", "mistral-magistral-stream-thinking.sse", "openai-stream-tool-call.sse", "anthropic-stream-tool-use.jsonl", "groq-stream-tool-call.sse"],
)
def test_recorded_stream_deltas_join_to_the_reply_and_carry_no_tool_call(name):
    """Each kind's deltas joined equal that kind's text in the reply; tool-call arguments never arrive as a delta."""
    deltas = []
    with stream_to(lambda kind, text: deltas.append((kind, text))):
        message = call(name)
    # the reply's text holds no tool-call arguments, so an argument fragment emitted as a delta would break the equality
    for kind in ("text", "thinking"):
        assert "".join(t for k, t in deltas if k == kind) == message_text(message, kind)
    assert {k for k, _ in deltas} <= {"text", "thinking"}
    assert any(isinstance(b, dict) and b.get("type") in ("tool_call", "tool_calls") for b in message.content) or name.startswith("mistral")
