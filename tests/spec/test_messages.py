"""Message and content types (spec §19) and their JSON round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given

from strategies import messages
from yiemagent import (
    AssistantMessage,
    ImageContent,
    LLMUsage,
    TextContent,
    ToolResultMessage,
    UserMessage,
    message_from_dict,
)


@pytest.mark.spec("19")
def test_roles_are_fixed_per_type():
    """Each message type carries its role: user, assistant, tool (decision 3)."""
    assert UserMessage([TextContent("hi")]).role == "user"
    assert AssistantMessage([]).role == "assistant"
    assert ToolResultMessage("c1", "getTime", []).role == "tool"


@pytest.mark.spec("19")
def test_content_types_have_their_type_tag():
    """Text and image blocks say what they are, as the OpenAI-style wire form needs."""
    assert TextContent("x").type == "text"
    assert ImageContent("AAAA", "image/png").type == "image"


@pytest.mark.spec("19")
def test_messages_are_immutable():
    """A message cannot be changed after it is made, so a history can share it safely."""
    msg = UserMessage([TextContent("hi")])
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.content = []  # type: ignore[misc]


@pytest.mark.spec("19")
def test_assistant_message_with_raw_tool_call_blocks_round_trips():
    """Raw tool-call blocks of both §7 formats survive to_json/from_json beside text."""
    msg = AssistantMessage(
        [
            TextContent("let me check"),
            {"type": "tool_calls", "tool_calls": [{"id": "call_1", "function": {"name": "getWeather", "arguments": '{"city": "Tokyo"}'}}]},
            {"type": "tool_call", "id": "call_2", "name": "getTime", "arguments": {"timezone": "Asia/Tokyo"}},
        ],
        model="m",
        usage=LLMUsage(1, 2, 0, 0, 3),
        stop_reason="tool_use",
    )
    back = AssistantMessage.from_json(msg.to_json())
    assert back == msg
    assert isinstance(back.content[0], TextContent)


@pytest.mark.spec("19")
@given(messages)
def test_every_message_type_round_trips_through_json(msg):
    """Property: any message, serialised to JSON text and read back, is equal to itself."""
    text = msg.to_json()
    assert type(msg).from_json(text) == msg
    assert message_from_dict(json.loads(text)) == msg


@pytest.mark.spec("19")
def test_message_from_dict_rejects_unknown_role():
    """An unknown role is a clear error naming the role, not a silent guess."""
    with pytest.raises(ValueError, match="'system'"):
        message_from_dict({"role": "system", "content": []})
