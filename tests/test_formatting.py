"""Default context hooks and the OpenAI chat format (spec §14, decisions 5 and 9)."""

from __future__ import annotations

import json

import pytest

from helpers import make_tool
from yiemagent import (
    AgentState,
    AssistantMessage,
    ImageContent,
    MessageFormatError,
    TextContent,
    ToolResultMessage,
    ToolStore,
    UserMessage,
    format_msg_for_llm,
    openai_to_user_message,
    prepare_context,
    register_tool,
)


def state_with(messages, *tools):
    store = ToolStore("f")
    for tool in tools:
        register_tool(store, tool)
    return AgentState("You are a test.", None, store.tools, messages)


@pytest.mark.spec("14")
def test_prepare_context_copies_the_list_and_shares_immutable_messages():
    """The context has its own list (a hook may edit it) holding the same, immutable messages."""
    history = [UserMessage([TextContent("hi")])]
    state = state_with(history)
    ctx = prepare_context(state, None)
    assert ctx.messages == history and ctx.messages is not history
    assert ctx.messages[0] is history[0]
    ctx.messages.append(UserMessage([TextContent("injected")]))
    assert len(state.messages) == 1
    assert ctx.system_prompt == "You are a test." and ctx.tools is state.tools


@pytest.mark.spec("14")
def test_format_has_system_prompt_messages_and_tools():
    """formatMsgForLLM: the system prompt first, then every message, and tool definitions (decision 5)."""
    tool = make_tool("getWeather", schema={"type": "object", "properties": {"city": {"type": "string"}}})
    ctx = prepare_context(state_with([UserMessage([TextContent("What's the weather in Tokyo?")])], tool), None)
    formatted = format_msg_for_llm(ctx, None)
    assert formatted["messages"] == [
        {"role": "system", "content": "You are a test."},
        {"role": "user", "content": "What's the weather in Tokyo?"},
    ]
    assert formatted["tools"] == [
        {"type": "function", "function": {"name": "getWeather", "description": "test tool getWeather", "parameters": tool.input_schema}}
    ]


@pytest.mark.spec("14")
def test_format_leaves_out_empty_system_prompt_and_empty_tools():
    """No system message for an empty prompt, and no "tools" key when there are none."""
    state = state_with([UserMessage([TextContent("x")])])
    state.system_prompt = ""
    assert format_msg_for_llm(prepare_context(state, None), None) == {"messages": [{"role": "user", "content": "x"}]}


@pytest.mark.spec("11")
def test_tool_result_goes_as_a_string_bound_to_its_call():
    """Spec §11/decision 9: a tool result becomes a "tool" message with tool_call_id and string content."""
    msg = ToolResultMessage("call_1", "getWeather", [TextContent("Weather in Tokyo: Sunny, 22°C"), ImageContent("AA==", "image/png")])
    wire = format_msg_for_llm(prepare_context(state_with([msg]), None), None)["messages"][1]
    assert wire["role"] == "tool" and wire["tool_call_id"] == "call_1"
    assert wire["content"] == "Weather in Tokyo: Sunny, 22°C\n[image/png image omitted]"


@pytest.mark.spec("14")
def test_assistant_tool_calls_are_reserialised_as_valid_json_with_stable_ids():
    """Decision 9: arguments go back as valid JSON strings; invalid ones as {}; synthetic ids match extraction."""
    from yiemagent import extract_tool_calls

    reply = AssistantMessage(
        [
            TextContent("checking"),
            {"type": "tool_calls", "tool_calls": [
                {"id": "a", "function": {"name": "getWeather", "arguments": {"city": "Tokyo"}}},
                {"id": "", "function": {"name": "getTime", "arguments": '{"timezone": '}},
            ]},
        ]
    )
    wire = format_msg_for_llm(prepare_context(state_with([reply]), None), None)["messages"][1]
    assert wire["role"] == "assistant" and wire["content"] == "checking"
    first, second = wire["tool_calls"]
    assert first == {"id": "a", "type": "function", "function": {"name": "getWeather", "arguments": '{"city": "Tokyo"}'}}
    assert json.loads(second["function"]["arguments"]) == {}
    assert second["id"] == extract_tool_calls(reply)[1][1].id


@pytest.mark.spec("14")
def test_assistant_content_is_an_empty_string_not_null_beside_tool_calls():
    """Beside tool calls with no text, content is "" (llama.cpp fails on null; OpenAI takes both)."""
    reply = AssistantMessage([{"type": "tool_call", "id": "a", "name": "t", "arguments": {}}])
    assert format_msg_for_llm(prepare_context(state_with([reply]), None), None)["messages"][1]["content"] == ""


@pytest.mark.spec("6")
@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"role": "user", "content": "hi"}, [TextContent("hi")]),
        ("plain", [TextContent("plain")]),
        ({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, [TextContent("a"), TextContent("b")]),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}, [ImageContent("AAAA", "image/png")]),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}, [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]),
    ],
)
def test_openai_to_user_message(raw, expected):
    """OpenAiToUserMessage converts strings, text parts and data-URL images; other parts are kept as given."""
    assert openai_to_user_message(raw).content == expected


@pytest.mark.spec("6")
@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"role": "system", "content": "x"}, "role 'system'"),
        ({"role": "user"}, "no 'content'"),
        ({"role": "user", "content": 5}, "string or a list"),
        (42, "got int"),
        ({"role": "user", "content": [{"type": "text"}]}, "no string 'text'"),
    ],
)
def test_openai_to_user_message_rejects_what_it_cannot_take(raw, fragment):
    """A message that cannot be a user message raises MessageFormatError (a ValueError) saying why."""
    with pytest.raises(MessageFormatError, match=fragment):
        openai_to_user_message(raw)


@pytest.mark.spec("14")
def test_user_message_with_image_goes_as_parts():
    """A user message with an image becomes OpenAI content parts with a data URL."""
    msg = UserMessage([TextContent("what is this?"), ImageContent("AAAA", "image/png")])
    wire = format_msg_for_llm(prepare_context(state_with([msg]), None), None)["messages"][1]
    assert wire["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
