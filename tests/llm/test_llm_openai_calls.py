"""OpenAI custom tool calls (gpt-5) and legacy function_call replies (gpt-3.5-0613): read as tool calls, sent back as they came.

docs/failures.md "OpenAI custom and legacy calls". The replies are tests/fixtures files
(each .txt says where it came from), served by a real ``http.server`` on 127.0.0.1; the
requests the client sends back are validated against OpenAI's own schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from helpers import FIXTURES, WAIT, check_wire, make_tool, text_result
from localserver import LocalServer, Reply
from yiemagent import ToolResultMessage, YiemAgent, extract_tool_calls, run_agent, take_response
from yiemagent.llm import OpenAIClient
from yiemagent.llm.anthropic import build_anthropic_request

FORMATTED = {"messages": [{"role": "user", "content": "hi"}]}
SSE = {"Content-Type": "text/event-stream"}
FINAL = {"choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}


def schema(name: str) -> jsonschema.Draft202012Validator:
    doc = json.loads((FIXTURES / "openai-chat-completions.schema.json").read_text())
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": doc["$defs"]})


def reply_of(name: str) -> Reply:
    text = (FIXTURES / name).read_text()
    return Reply(body=text.encode(), headers=SSE) if name.endswith(".sse") else Reply(body=json.loads(text))


def read(name: str):
    with LocalServer(lambda request: reply_of(name)) as server:
        return OpenAIClient(server.url, "m", max_retries=0, stream=name.endswith(".sse"))(FORMATTED)


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "name, command",
    [("openai-custom-tool-call.json", 'print("hello")'), ("openai-stream-custom-tool-call.sse", 'print("hello")\nreturn 42')],
    ids=["whole", "streamed"],
)
def test_a_custom_tool_call_is_read_with_its_name_and_its_free_text_input(name, command):
    """gpt-5's {"type": "custom", "custom": {"name", "input"}}: a call of type "custom" whose tool gets {"input": text}, beside the function call."""
    message = read(name)
    has, calls, _ = extract_tool_calls(message)
    assert has and message.stop_reason == "tool_use"
    assert [(c.type, c.name, c.arguments, c.arguments_error) for c in calls] == [
        ("custom", "code_exec", {"input": command}, None),
        ("function", "get_weather", {"city": "SF"}, None),
    ]
    assert calls[0].id.startswith("call_custom_")


def test_the_custom_fixture_is_a_response_openais_schema_accepts():
    """The hand-written SDK data has the shape OpenAI's schema gives a custom call (ChatCompletionMessageCustomToolCall)."""
    schema("CreateChatCompletionResponse").validate(json.loads((FIXTURES / "openai-custom-tool-call.json").read_text()))


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "name, tool, arguments",
    [
        ("openai-legacy-function-call.json", "get_current_weather", {"location": "Boston, MA"}),
        ("openai-stream-legacy-function-call.sse", "test-tool", {"value": "Sparkle Day"}),
    ],
    ids=["whole", "streamed"],
)
def test_a_legacy_function_call_reply_is_a_tool_call_not_an_empty_stop(name, tool, arguments):
    """message.function_call (and delta.function_call, even with finish_reason "stop"): one call of type "function_call" with a stable synthetic id."""
    message = read(name)
    has, calls, _ = extract_tool_calls(message)
    assert has and message.stop_reason == "tool_use"
    assert [(c.type, c.name, c.arguments, c.arguments_error) for c in calls] == [("function_call", tool, arguments, None)]
    assert len(calls[0].id) == 9 and calls[0].id == extract_tool_calls(message)[1][0].id


MIRRORED_CALL = {"id": "call_1", "type": "function", "function": {"name": "getWeather", "arguments": '{"city": "Paris"}'}}
MIRROR = {"name": "getWeather", "arguments": '{"city": "Paris"}'}


def sse(*chunks: dict) -> Reply:
    return Reply(body=b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n", headers=SSE)


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "reply",
    [
        Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [MIRRORED_CALL], "function_call": MIRROR}, "finish_reason": "tool_calls"}]}),
        sse(
            {"choices": [{"delta": {"role": "assistant", "tool_calls": [{"index": 0, **MIRRORED_CALL}], "function_call": MIRROR}}]},
            {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        ),
    ],
    ids=["whole", "streamed"],
)
def test_a_function_call_that_mirrors_tool_calls_is_not_a_second_call(reply):
    """llama-cpp-python sends the first tool call again as function_call: with tool_calls present, function_call is not a call of its own."""
    with LocalServer(lambda request: reply) as server:
        message = OpenAIClient(server.url, "m", max_retries=0, stream=reply.headers == SSE)(FORMATTED)
    assert [(c.id, c.type, c.name, c.arguments) for c in extract_tool_calls(message)[1]] == [("call_1", "function", "getWeather", {"city": "Paris"})]


def run_with(first: str, *tool_names: str):
    """One agent run against a server that answers ``first``, then "done"; returns (the second request, what the tools got)."""
    got = []

    def tool_named(name):
        return make_tool(name, lambda i, a, s, p: (got.append((name, a)), text_result(f"{name} ok"))[1])

    def respond(request):
        return reply_of(first) if len(server.requests) == 1 else Reply(body=FINAL)

    with LocalServer(respond) as server:
        client = OpenAIClient(server.url, "m", max_retries=0, stream=first.endswith(".sse"))
        with YiemAgent(llm_call=client, agent_event_sink=lambda e: None, builtin_tools=False) as agent:
            for name in tool_names:
                agent.tool_store.tools[name] = tool_named(name)
            run_agent(agent, "go")
            assert take_response(agent, timeout=WAIT).stop_reason == "stop"
            assert all(not m.is_error for m in agent.state.messages if isinstance(m, ToolResultMessage))
        second = server.requests[1].json()
    schema("CreateChatCompletionRequest").validate(second)
    return second, got


@pytest.mark.spec("7")
@pytest.mark.parametrize("name", ["openai-custom-tool-call.json", "openai-stream-custom-tool-call.sse"], ids=["whole", "streamed"])
def test_a_custom_call_goes_back_as_a_custom_call_and_its_tool_got_the_text(name):
    """The next request carries the custom call as OpenAI sent it ({"type": "custom", "custom": {"name", "input"}}), answered by a tool message."""
    second, got = run_with(name, "code_exec", "get_weather")
    assistant = second["messages"][-3]
    custom, function = assistant["tool_calls"]
    assert custom["type"] == "custom" and set(custom) == {"id", "type", "custom"}
    assert custom["custom"]["name"] == "code_exec" and custom["custom"]["input"].startswith('print("hel')
    assert function["type"] == "function" and json.loads(function["function"]["arguments"]) == {"city": "SF"}
    assert [m["role"] for m in second["messages"][-2:]] == ["tool", "tool"]
    assert [m["tool_call_id"] for m in second["messages"][-2:]] == [custom["id"], function["id"]]
    assert got[0] == ("code_exec", {"input": custom["custom"]["input"]})


@pytest.mark.spec("7")
@pytest.mark.parametrize(
    "name, tool",
    [("openai-legacy-function-call.json", "get_current_weather"), ("openai-stream-legacy-function-call.sse", "test-tool")],
    ids=["whole", "streamed"],
)
def test_a_legacy_call_goes_back_as_function_call_answered_by_a_function_message(name, tool):
    """The next request carries assistant function_call (no tool_calls) and a role "function" message with the tool's name, as legacy servers expect."""
    second, got = run_with(name, tool)
    assistant, result = second["messages"][-2:]
    assert "tool_calls" not in assistant and assistant["content"] == ""
    assert assistant["function_call"]["name"] == tool and set(assistant["function_call"]) == {"name", "arguments"}
    assert result == {"role": "function", "name": tool, "content": f"{tool} ok"}
    assert [n for n, _ in got] == [tool]


def test_custom_and_legacy_calls_reach_anthropic_as_tool_use_blocks():
    """A history made with OpenAI (a FallbackLLM switching provider) goes to Anthropic as tool_use blocks: the custom input as {"input": text}."""
    formatted = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "custom", "function": {"name": "code_exec", "arguments": '{"input": "ls -l"}'}},
                {"id": "c2", "type": "function_call", "function": {"name": "get_weather", "arguments": '{"city": "SF"}'}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "code_exec"},
            {"role": "tool", "tool_call_id": "c2", "content": "sunny", "name": "get_weather"},
        ]
    }
    check_wire(formatted)
    body = build_anthropic_request(formatted, "m", 100)
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "code_exec", "input": {"input": "ls -l"}},
        {"type": "tool_use", "id": "c2", "name": "get_weather", "input": {"city": "SF"}},
    ]


def test_a_custom_tool_declared_by_a_format_hook_reaches_openai_as_it_is():
    """format_msg_for_llm sends function tools; a hook that puts a {"type": "custom"} tool in "tools" gets it sent unchanged."""
    custom_tool = {"type": "custom", "custom": {"name": "code_exec", "description": "Runs Python", "format": {"type": "text"}}}
    with LocalServer(lambda request: Reply(body=FINAL)) as server:
        OpenAIClient(server.url, "gpt-5", max_retries=0)({**FORMATTED, "tools": [custom_tool]})
        sent = server.requests[0].json()
    schema("CreateChatCompletionRequest").validate(sent)
    assert sent["tools"] == [custom_tool]
