"""Arguments Python's json cannot hold, from every client, streamed and not: an error result the model reads, never a failed LLM call.

docs/failures.md "Arguments a model sends"; decisions 2, 14 and 15. Real bytes from a
real ``http.server`` on 127.0.0.1 (tests/support/localserver.py).
"""

from __future__ import annotations

import json

import pytest

from helpers import WAIT, check_wire, make_tool
from localserver import LocalServer, Reply
from yiemagent import ToolResultMessage, YiemAgent, run_agent, take_response
from yiemagent.llm import AnthropicClient, OpenAIClient
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply

HUGE = "1" * 5000  # past Python's 4,300-digit limit for int(str)
PROBLEM = "arguments/city is an integer of 5000 digits, more than the 4300 digits Python reads"
JSON = {"Content-Type": "application/json"}
FINAL_OPENAI = {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
FINAL_ANTHROPIC = {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}
ARGUMENTS = '{"city": %s}' % HUGE


def sse(events, named=False) -> bytes:
    return "".join((f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n" for e in events).encode()


def openai_reply(stream: bool) -> Reply:
    if stream:
        chunks = [
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "weather", "arguments": ""}}]}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS}}]}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ]
        return Reply(chunks=[sse(chunks) + b"data: [DONE]\n\n"])
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": ARGUMENTS}}
    return Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]})


def ollama_native_reply(stream: bool) -> Reply:
    """Ollama's /api/chat sends arguments as an object: the 5000 digits are a number in the body itself."""
    body = '{"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": %s}}}]}, "done": true}' % HUGE
    if stream:
        return Reply(chunks=[body.encode() + b"\n"], headers={"Content-Type": "application/x-ndjson"})
    return Reply(body=body.encode(), headers=JSON)


def anthropic_reply(stream: bool) -> Reply:
    if stream:
        events = [
            {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "weather", "input": {}}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ARGUMENTS}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
        return Reply(chunks=[sse(events, named=True)])
    body = '{"content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": %s}}], "stop_reason": "tool_use", "model": "m"}' % HUGE
    return Reply(body=body.encode(), headers=JSON)


SERVERS = {
    "openai": (openai_reply, FINAL_OPENAI, lambda url, stream: OpenAIClient(url, "m", max_retries=0, stream=stream)),
    "ollama-native": (ollama_native_reply, FINAL_OPENAI, lambda url, stream: OpenAIClient(url, "m", max_retries=0, stream=stream)),
    "anthropic": (anthropic_reply, FINAL_ANTHROPIC, lambda url, stream: AnthropicClient("m", "k", base_url=url, max_retries=0, stream=stream)),
}


def run_once(llm_call):
    """One run of an agent with a "weather" tool; returns (final reply, tool results, the tool's calls)."""
    ran = []
    tool = make_tool("weather", lambda i, a, s, p: ran.append(a))
    with YiemAgent(llm_call=llm_call, agent_event_sink=lambda e: None, builtin_tools=False) as agent:
        agent.tool_store.tools[tool.name] = tool
        run_agent(agent, "weather?")
        final = take_response(agent, timeout=WAIT)
        results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    return final, results, ran


def assert_answered_with_the_problem(final, results, ran):
    assert final.stop_reason == "stop", final.error_message
    assert [r.is_error for r in results] == [True]
    assert PROBLEM in results[0].content[0].text
    assert ran == []  # the tool never ran with arguments the model did not send (decision 14)


@pytest.mark.spec("7")
def test_scripted_llm_arguments_with_a_5000_digit_integer_are_an_error_result():
    """ScriptedLLM: the call is answered with an error naming arguments/city, and the run goes on to the model's next reply."""
    llm = ScriptedLLM([tool_call_reply(("c1", "weather", ARGUMENTS)), "ok"])
    assert_answered_with_the_problem(*run_once(llm))
    check_wire(llm.requests[1])  # the next request is strict JSON, the call answered
    assert PROBLEM in llm.requests[1]["messages"][-1]["content"]


@pytest.mark.spec("7")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("server", sorted(SERVERS))
def test_a_5000_digit_integer_from_a_server_is_an_error_result_not_a_failed_call(server, stream):
    """OpenAI, Ollama native and Anthropic, whole and streamed: the reply is read, the call gets an error result, the next request is sent."""
    first, final_body, make_client = SERVERS[server]

    def respond(request):
        return first(stream) if len(live.requests) == 1 else Reply(body=final_body)

    with LocalServer(respond) as live:
        assert_answered_with_the_problem(*run_once(make_client(live.url, stream)))
        second = live.requests[1].json()
    assert PROBLEM in json.dumps(second)  # the model reads what was wrong
