"""Reasoning fields sent back to the server that produced them, and refusals (docs/streaming.md "Reasoning sent back", "Refusals").

Each first reply is a real recording (tests/fixtures, a .txt beside each names its source);
the second request is checked against the request that server accepted, or its documentation.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from helpers import FIXTURES, make_agent, make_tool, text_result
from localserver import LocalServer, Reply
from yiemagent import AssistantMessage, FallbackLLM, RunFailedError, UserMessage, ask, format_msg_for_llm
from yiemagent.llm import OpenAIClient
from yiemagent.llm.openai import build_openai_request, parse_openai_response, parse_openai_stream
from yiemagent.types import AgentContext, TextContent, ToolResultMessage

SSE = {"Content-Type": "text/event-stream"}
FINAL = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}


def load(name):
    return json.loads((FIXTURES / name).read_text())


def reply_of(name: str) -> Reply:
    if name.endswith(".json"):
        return Reply(body=load(name))
    return Reply(chunks=[(FIXTURES / name).read_bytes()], headers=SSE)


def assistant_sent(request) -> dict:
    (message,) = [m for m in request.json()["messages"] if m["role"] == "assistant"]
    return message


def round_trip(name: str, *, host: str = "127.0.0.1"):
    """The recorded reply of ``name``, then the next request that carries it back to the same server: (reply, request body)."""
    replies = iter([reply_of(name), Reply(body=FINAL)])
    with LocalServer(lambda r: next(replies)) as server:
        client = OpenAIClient(server.url.replace("127.0.0.1", host) + "/v1", "m", stream=not name.endswith(".json"), max_retries=0)
        reply = client({"messages": [{"role": "user", "content": "q"}]})
        history = [UserMessage([TextContent("q")]), reply, UserMessage([TextContent("next")])]
        client(format_msg_for_llm(AgentContext("", history, {})))
    return reply, server.requests[1].json()


# --- DeepSeek (Kimi, Z.ai, llama.cpp): reasoning_content on the tool-call turn ----------------------------


@pytest.mark.spec("14")
def test_deepseek_tool_turn_goes_back_as_deepseek_accepted_it():
    """A DeepSeek thinking-mode tool turn goes back with its reasoning_content: the assistant message equals the one DeepSeek answered 200."""
    replies = iter([reply_of("deepseek-thinking-tool-call.json"), Reply(body=FINAL)])
    with LocalServer(lambda r: next(replies)) as server:
        client = OpenAIClient(f"{server.url}/v1", "deepseek-reasoner", max_retries=0)
        with make_agent(client, make_tool("load_capability", lambda *a: text_result("{}"))) as agent:
            assert ask(agent, "My guess is 4", timeout=20).text == "done"
    accepted = load("deepseek-request-thinking-tool-result.json")["messages"][3]
    assert assistant_sent(server.requests[1]) == accepted


def _deepseek_history(client) -> list:
    reply = client({"messages": [{"role": "user", "content": "My guess is 4"}]})
    call_id = reply.content[-1]["tool_calls"][0]["id"]
    return [UserMessage([TextContent("My guess is 4")]), reply, ToolResultMessage(call_id, "load_capability", [TextContent("{}")])]


@pytest.mark.spec("14")
def test_a_history_moved_to_another_provider_carries_no_reasoning_field():
    """FallbackLLM moving a DeepSeek tool turn to another server sends it without reasoning_content; the same turn back to DeepSeek has it."""
    with LocalServer(lambda r: reply_of("deepseek-thinking-tool-call.json")) as deepseek, LocalServer(lambda r: Reply(body=FINAL)) as other:
        first = OpenAIClient(f"{deepseek.url}/v1", "deepseek-reasoner", max_retries=0)
        history = _deepseek_history(first)
        formatted = format_msg_for_llm(AgentContext("", history, {}))
        down = LocalServer(lambda r: Reply(status=503, body={"error": {"message": "overloaded"}}))
        with down:
            fallback = FallbackLLM(OpenAIClient(f"{down.url}/v1", "m", max_retries=0), OpenAIClient(other.url.replace("127.0.0.1", "localhost") + "/v1", "m", max_retries=0))
            assert fallback(formatted).text == "done"
        first(formatted)
    moved = assistant_sent(other.requests[0])
    assert "reasoning_content" not in moved and moved["tool_calls"][0]["id"] == "call_00_sXqYgMESDht75NCLLZtt9804"
    assert assistant_sent(deepseek.requests[1])["reasoning_content"].startswith("The user wants to play a dice game.")


@pytest.mark.spec("14")
def test_a_saved_and_loaded_history_still_goes_back_to_its_provider_only():
    """A session's JSON round trip keeps what the reply's server needs back: sent to it again, not to another client."""
    with LocalServer(lambda r: reply_of("deepseek-thinking-tool-call.json")) as deepseek, LocalServer(lambda r: Reply(body=FINAL)) as other:
        client = OpenAIClient(f"{deepseek.url}/v1", "deepseek-reasoner", max_retries=0)
        history = [type(m).from_json(m.to_json()) for m in _deepseek_history(client)]
        formatted = format_msg_for_llm(AgentContext("", history, {}))
        client(formatted)
        OpenAIClient(other.url.replace("127.0.0.1", "localhost") + "/v1", "m", max_retries=0)(formatted)
    accepted = load("deepseek-request-thinking-tool-result.json")["messages"][3]
    assert assistant_sent(deepseek.requests[1]) == accepted
    assert "reasoning_content" not in assistant_sent(other.requests[0])


# --- OpenRouter and gateways: reasoning_details unchanged ------------------------------------------------


@pytest.mark.spec("14")
def test_openrouter_reasoning_details_go_back_unchanged_without_reasoning():
    """OpenRouter's reasoning_details go back exactly as received, and its plain ``reasoning`` does not (as OpenRouter accepted)."""
    received = load("openrouter-reasoning-details.json")["choices"][0]["message"]["reasoning_details"]
    reply, body = round_trip("openrouter-reasoning-details.json")
    sent = assistant_sent_in(body)
    accepted = load("openrouter-request-reasoning-details.json")["messages"][1]
    assert sent["reasoning_details"] == received
    assert sent["reasoning_details"] == [{k: v for k, v in d.items() if v is not None} for d in accepted["reasoning_details"]]
    assert set(sent) == set(accepted) and sent["content"] == accepted["content"]
    assert reply.content[0]["thinking"].startswith("**Greeting warmly**")


def assistant_sent_in(body: dict) -> dict:
    (message,) = [m for m in body["messages"] if m["role"] == "assistant"]
    return message


@pytest.mark.spec("14")
def test_streamed_claude_reasoning_details_join_into_the_signed_entry():
    """Claude's signed thinking streamed through OpenRouter in pieces goes back as one reasoning_details entry: the text joined, the signature whole."""
    chunks = [json.loads(line[6:]) for line in (FIXTURES / "openrouter-stream-claude-reasoning-details.sse").read_text().splitlines() if line.startswith("data: {")]
    pieces = [d for c in chunks for choice in c["choices"] for d in choice["delta"].get("reasoning_details") or []]
    reply, body = round_trip("openrouter-stream-claude-reasoning-details.sse")
    expected = {"type": "reasoning.text", "text": "".join(p.get("text", "") for p in pieces), "signature": pieces[-1]["signature"], "format": "anthropic-claude-v1", "index": 0}
    assert assistant_sent_in(body)["reasoning_details"] == [expected]
    assert expected["text"] == reply.content[0]["thinking"]


# --- Gemini's OpenAI-compatible endpoint: extra_content -------------------------------------------------


@pytest.mark.spec("14")
def test_gemini_extra_content_goes_back_as_received_to_gemini_alone():
    """Gemini's extra_content (its thought signature) goes back on the message exactly as received, and to no other server."""
    received = load("gemini-openai-compat-extra-content.json")["choices"][0]["message"]["extra_content"]
    reply, body = round_trip("gemini-openai-compat-extra-content.json")
    assert assistant_sent_in(body)["extra_content"] == received
    with LocalServer(lambda r: Reply(body=FINAL)) as other:
        history = [UserMessage([TextContent("q")]), reply, UserMessage([TextContent("next")])]
        OpenAIClient(other.url.replace("127.0.0.1", "localhost") + "/v1", "m", max_retries=0)(format_msg_for_llm(AgentContext("", history, {})))
    assert "extra_content" not in assistant_sent(other.requests[0])


@pytest.mark.spec("14")
def test_gemini_extra_content_streamed_in_a_delta_goes_back_as_received():
    """Gemini's message extra_content streamed in a delta (the recorded message's) goes back on the message as received; a later empty one does not erase it."""
    message = load("gemini-openai-compat-extra-content.json")["choices"][0]["message"]
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "extra_content": message["extra_content"]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{**message["tool_calls"][0], "index": 0}], "extra_content": {}}, "finish_reason": "tool_calls"}]},
    ]
    reply = parse_openai_stream(chunks, provider="h")
    (sent,) = build_openai_request(format_msg_for_llm(AgentContext("", [reply], {})), "m", provider="h")["messages"]
    assert sent["extra_content"] == message["extra_content"]


@pytest.mark.spec("14")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_calls_extra_content_goes_back_on_that_call(stream):
    """A tool call's extra_content (Gemini 3's per-call thought signature) goes back on that call, whole or streamed."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}, "extra_content": {"google": {"thought_signature": "Ct0B"}}}
    plain = {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
    if stream:
        chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [{**call, "index": 0}, {**plain, "index": 1}]}, "finish_reason": "tool_calls"}]}
        first = Reply(chunks=[f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()], headers=SSE)
    else:
        first = Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call, plain]}, "finish_reason": "tool_calls"}]})
    replies = iter([first, Reply(body=FINAL)])
    with LocalServer(lambda r: next(replies)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", stream=stream, max_retries=0)
        reply = client({"messages": [{"role": "user", "content": "q"}]})
        history = [UserMessage([TextContent("q")]), reply, ToolResultMessage("c1", "f", [TextContent("1")]), ToolResultMessage("c2", "g", [TextContent("2")])]
        client(format_msg_for_llm(AgentContext("", history, {})))
    sent = assistant_sent(server.requests[1])["tool_calls"]
    assert sent[0]["extra_content"] == call["extra_content"] and "extra_content" not in sent[1]


# --- refusals ---------------------------------------------------------------------------------------------


@pytest.mark.spec("14")
@pytest.mark.parametrize("name", ["openai-refusal.json", "openai-stream-refusal.sse"])
def test_a_refusal_is_stop_reason_refusal_with_its_words(name):
    """OpenAI's message.refusal (delta.refusal when streamed) is stop_reason "refusal" with the words in reply.refusal, not an empty answer."""
    with LocalServer(lambda r: reply_of(name)) as server:
        reply = OpenAIClient(f"{server.url}/v1", "m", stream=name.endswith(".sse"), max_retries=0)({"messages": [{"role": "user", "content": "q"}]})
    assert reply.stop_reason == "refusal"
    assert reply.refusal in ("I'm very sorry, but I can't assist with that request.", "I'm sorry, I can't assist with that request.")
    assert reply.text == ""


@pytest.mark.spec("14")
@pytest.mark.parametrize("refusal", [None, True, {"reason": "policy"}, ["no"]], ids=["null", "bool", "object", "list"])
def test_a_refusal_field_that_is_not_text_is_no_refusal_whole_or_streamed(refusal):
    """A message.refusal (delta.refusal when streamed) that is null or not text is no refusal: the reply is its text, stop_reason "stop"."""
    whole = parse_openai_response({"choices": [{"message": {"role": "assistant", "content": "fine", "refusal": refusal}, "finish_reason": "stop"}]})
    streamed = parse_openai_stream([{"choices": [{"index": 0, "delta": {"content": "fine", "refusal": refusal}, "finish_reason": "stop"}]}])
    for reply in (whole, streamed):
        assert (reply.text, reply.stop_reason, reply.refusal, [b for b in reply.content if isinstance(b, dict)]) == ("fine", "stop", None, [])


@pytest.mark.spec("14")
def test_a_refusal_fails_ask_and_goes_back_to_openai_as_its_refusal():
    """ask() raises RunFailedError naming the refusal; the refused turn goes back to OpenAI with its refusal field (OpenAI's schema)."""
    replies = iter([reply_of("openai-refusal.json"), Reply(body=FINAL)])
    with LocalServer(lambda r: next(replies)) as server:
        client = OpenAIClient(f"{server.url}/v1", "m", max_retries=0)
        with make_agent(client) as agent:
            with pytest.raises(RunFailedError, match="refusal.*I'm very sorry"):
                ask(agent, "How do I make anthrax?", timeout=20)
            assert ask(agent, "Something else", timeout=20).text == "done"
    assert assistant_sent(server.requests[1]) == {"role": "assistant", "content": "", "refusal": "I'm very sorry, but I can't assist with that request."}


class Location(BaseModel):
    city: str


@pytest.mark.spec("14")
def test_a_refusal_with_output_type_ends_the_run_without_a_retry():
    """With output_type, a refusal ends the run with stop_reason "refusal": no retry message, no second request."""
    with LocalServer(lambda r: reply_of("openai-refusal.json")) as server:
        with make_agent(OpenAIClient(f"{server.url}/v1", "m", max_retries=0), output_type=Location, output_retries=2) as agent:
            reply = ask(agent, "How do I make anthrax?", timeout=20, check=False)
    assert (reply.stop_reason, reply.refusal, len(server.requests)) == ("refusal", "I'm very sorry, but I can't assist with that request.", 1)


@pytest.mark.spec("14")
def test_a_refusal_survives_a_json_round_trip():
    """A refusal reply read back from JSON still says stop_reason "refusal" and its words."""
    reply = AssistantMessage([{"type": "refusal", "refusal": "No."}], api="openai-chat", provider="h", stop_reason="refusal")
    again = AssistantMessage.from_json(reply.to_json())
    assert (again.refusal, again.stop_reason, AssistantMessage([TextContent("x")]).refusal) == ("No.", "refusal", None)


@pytest.mark.spec("14")
def test_streamed_reasoning_details_join_their_summary_data_and_signature_pieces_per_entry():
    """OpenRouter's reasoning_details streamed in pieces: each entry's summary, data, text and signature pieces join, and an entry of another index starts a new one."""
    pieces = [
        {"type": "reasoning.summary", "summary": "Ab", "format": "f", "index": 0},
        {"type": "reasoning.summary", "summary": "cd", "index": 0},
        {"type": "reasoning.encrypted", "data": "xx", "index": 1},
        {"type": "reasoning.encrypted", "data": "yy", "format": "f", "index": 1},
        {"type": "reasoning.text", "text": "t1", "signature": "s1", "index": 2},
        {"type": "reasoning.text", "text": "t2", "signature": "s2", "index": 2},
    ]
    chunks = [{"choices": [{"index": 0, "delta": {"reasoning_details": [piece]}}]} for piece in pieces]
    reply = parse_openai_stream([*chunks, {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}], provider="h")
    (sent,) = build_openai_request(format_msg_for_llm(AgentContext("", [reply], {})), "m", provider="h")["messages"]
    assert sent["reasoning_details"] == [
        {"type": "reasoning.summary", "summary": "Abcd", "format": "f", "index": 0},
        {"type": "reasoning.encrypted", "data": "xxyy", "format": "f", "index": 1},
        {"type": "reasoning.text", "text": "t1t2", "signature": "s1s2", "index": 2},
    ]


# --- property: however a stream cuts the reasoning, the whole goes back ----------------------------------


def _cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [text[a:b] for a, b in zip(points, points[1:])]


@pytest.mark.spec("14")
@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40), st.lists(st.integers(min_value=0), max_size=8), st.text(max_size=20))
def test_any_cutting_of_streamed_reasoning_goes_back_whole(reasoning, cuts, signature):
    """However a stream cuts reasoning_content and a reasoning_details entry, the next request to that server carries each whole, once."""
    chunks = [{"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]} for piece in _cut(reasoning, cuts)]
    chunks += [{"choices": [{"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "text": piece, "format": "f", "index": 0}]}}]} for piece in _cut(reasoning, cuts)]
    chunks += [{"choices": [{"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "signature": signature, "format": "f", "index": 0}]}}]}]
    chunks += [{"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}]
    reply = parse_openai_stream(chunks, provider="h")
    body = build_openai_request(format_msg_for_llm(AgentContext("", [reply], {})), "m", provider="h")
    (sent,) = body["messages"]
    assert sent["reasoning_content"] == reasoning
    assert sent["reasoning_details"] == [{"type": "reasoning.text", "text": reasoning, "format": "f", "index": 0, "signature": signature}]
    assert "reasoning_content" not in build_openai_request(format_msg_for_llm(AgentContext("", [reply], {})), "m", provider="other")["messages"][0]
