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
    assert wire["content"] == "Weather in Tokyo: Sunny, 22°C\n[image 1 (image/png) follows]"
    assert wire["images"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]


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
        ({"content": ["a string part", TextContent("t"), ImageContent("AAAA", "image/png")]}, [TextContent("a string part"), TextContent("t"), ImageContent("AAAA", "image/png")]),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}, [ImageContent("AAAA", "image/png")]),
        ({"content": [{"type": "image_url", "image_url": "data:image/webp;base64,AAAA"}]}, [ImageContent("AAAA", "image/webp")]),
        ({"content": [{"type": "image_url", "image_url": {"url": "data:;base64,AAAA"}}]}, [ImageContent("AAAA", "application/octet-stream")]),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}, [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]),
        ({"content": [{"type": "image_url", "image_url": {"url": "https://x/a;base64,AAAA"}}]}, [{"type": "image_url", "image_url": {"url": "https://x/a;base64,AAAA"}}]),
        ({"content": [{"type": "image_url", "image_url": {"url": "data:image/svg+xml,<svg/>"}}]}, [{"type": "image_url", "image_url": {"url": "data:image/svg+xml,<svg/>"}}]),
        (
            {"content": [
                {"type": "image", "data": "AAAA", "mime_type": "image/jpeg"},
                {"type": "image", "data": "BBBB", "mimeType": "image/gif"},
                {"type": "image", "data": "CCCC"},
            ]},
            [ImageContent("AAAA", "image/jpeg"), ImageContent("BBBB", "image/gif"), ImageContent("CCCC", "image/png")],
        ),
        ({"content": [{"type": "image"}, {"type": "input_audio", "data": "AAAA"}]}, [{"type": "image"}, {"type": "input_audio", "data": "AAAA"}]),
    ],
)
def test_openai_to_user_message(raw, expected):
    """OpenAiToUserMessage converts strings, text parts, our image parts (mime_type, mimeType, else image/png) and
    base64 data-URL images (no media type: application/octet-stream); other parts, other URLs included, are kept as given."""
    assert openai_to_user_message(raw).content == expected


@pytest.mark.spec("6")
@pytest.mark.parametrize(
    "raw, text",
    [
        ({"role": "system", "content": "x"}, "expected a message with role 'user', got role 'system'"),
        ({"role": "user"}, "the user message has no 'content'"),
        ({"role": "user", "content": 5}, "a user message's content must be a string or a list of parts, got int"),
        (42, "a user message must be a dict like {'role': 'user', 'content': ...} or a str, got int"),
        ({"content": ["ok", 5]}, "content part 1 is int; expected a dict such as {'type': 'text', 'text': ...}"),
        ({"role": "user", "content": ["ok", {"type": "text"}]}, "content part 1 has type 'text' but no string 'text'"),
        (
            {"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA!!!!"}}]},
            "image data URL does not hold valid base64: Only base64 data is allowed",
        ),
        (
            {"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA;base64,BBBB"}}]},
            "image data URL does not hold valid base64: Only base64 data is allowed",
        ),
    ],
)
def test_openai_to_user_message_rejects_what_it_cannot_take(raw, text):
    """A message that cannot be a user message raises MessageFormatError (a ValueError) saying why, in these words.

    A data URL's data is everything after its first ";base64,", checked strictly (no character skipped)."""
    with pytest.raises(MessageFormatError) as raised:
        openai_to_user_message(raw)
    assert str(raised.value) == text


@pytest.mark.spec("14")
def test_user_message_with_image_goes_as_parts():
    """A user message with an image becomes OpenAI content parts with a data URL."""
    msg = UserMessage([TextContent("what is this?"), ImageContent("AAAA", "image/png")])
    wire = format_msg_for_llm(prepare_context(state_with([msg]), None), None)["messages"][1]
    assert wire["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "content, wire_content",
    [
        ([], ""),
        ([TextContent("only")], "only"),
        ([TextContent("a"), TextContent("b")], [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
    ],
)
def test_user_message_is_one_string_only_when_it_has_at_most_one_text_block(content, wire_content):
    """No block or one text block goes as a string; two text blocks go as two parts, neither dropped."""
    wire = format_msg_for_llm(prepare_context(state_with([UserMessage(content)]), None), None)["messages"][1]
    assert wire == {"role": "user", "content": wire_content}


@pytest.mark.spec("14")
def test_assistant_thinking_and_redacted_thinking_blocks_go_back_as_thinking_blocks():
    """Both kinds of reasoning block ride along in "thinking_blocks", in order, for providers that need them back."""
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    reply = AssistantMessage([thinking, {"type": "other", "x": 1}, redacted, TextContent("ok")])
    wire = format_msg_for_llm(prepare_context(state_with([reply]), None), None)["messages"][1]
    assert wire["thinking_blocks"] == [thinking, redacted] and wire["content"] == "ok"
    # the block of no known kind puts the whole content, in order, in content_blocks too (docs/streaming.md "Server tools")
    assert wire["content_blocks"] == [thinking, {"type": "other", "x": 1}, redacted, {"type": "text", "text": "ok"}]


@pytest.mark.spec("14")
def test_content_blocks_put_each_call_where_its_block_stood():
    """Each tool-call block gives content_blocks its own calls, in its place: a tool_calls list its
    object entries (a non-object entry and a list that is not a list give none), a tool_call block one."""
    server = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}}
    listed = {"type": "tool_calls", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        "not an object",
        {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}},
    ]}
    reply = AssistantMessage([
        server,
        listed,
        {"type": "tool_calls", "tool_calls": None},  # no list: no call, and none taken from a later block
        TextContent("between"),
        {"type": "tool_call", "id": "c", "name": "t", "arguments": {}},
    ])
    wire = format_msg_for_llm(prepare_context(state_with([reply]), None), None)["messages"][1]
    a, b, c = wire["tool_calls"]
    assert [a["id"], b["id"], c["id"]] == ["a", "b", "c"]
    assert wire["content_blocks"] == [server, a, b, {"type": "text", "text": "between"}, c]


@pytest.mark.spec("14")
def test_a_refusal_goes_back_in_the_reasoning_echo_not_among_the_content_blocks():
    """A refusal beside a server tool's block is sent back as the echo's refusal field, never as a block of content_blocks (docs/streaming.md "Refusals")."""
    server = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}}
    reply = AssistantMessage([server, {"type": "refusal", "refusal": "I can't."}, TextContent("sorry")], stop_reason="refusal")
    wire = format_msg_for_llm(prepare_context(state_with([reply]), None), None)["messages"][1]
    assert wire["content_blocks"] == [server, {"type": "text", "text": "sorry"}]
    assert wire["reasoning_echo"]["fields"] == {"refusal": "I can't."}


@pytest.mark.spec("14")
def test_the_extra_content_of_a_single_tool_call_block_goes_back_in_the_reasoning_echo():
    """A flat tool_call block's extra_content is echoed in its call's place, as a tool_calls entry's is (docs/streaming.md "Reasoning sent back")."""
    extra = {"google": {"thought_signature": "sig"}}
    reply = AssistantMessage([
        {"type": "tool_call", "id": "a", "name": "t", "arguments": {}, "extra_content": extra},
        {"type": "tool_calls", "tool_calls": [{"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
    ], stop_reason="tool_calls")
    wire = format_msg_for_llm(prepare_context(state_with([reply]), None), None)["messages"][1]
    assert [call["id"] for call in wire["tool_calls"]] == ["a", "b"]
    assert wire["reasoning_echo"]["tool_calls"] == [extra, None]
