"""Message and content types (spec §19) and their JSON round trip."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

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
from yiemagent.types import text_of


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


@pytest.mark.spec("19")
def test_dict_blocks_that_are_not_a_plain_text_or_image_come_back_as_the_same_dicts():
    """Rebuilding a message turns only a text block ({"type", "text": str}, with "citations" a list of objects or null) and
    an image block with both "data" and "mime_type" into content objects; a text whose citations are not objects, a text
    whose text is not a string, a block without a type, an image in another shape (Anthropic's "source") or without
    "mime_type", and a block of another type that has "mime_type" stay the dicts they were (types.content_from_dict)."""
    cited = {"type": "text", "text": "Tokyo is sunny.", "citations": [{"url": "https://example.com/w", "cited_text": "sunny"}]}
    kept = [
        {"type": "text", "text": "a", "citations": [1]},
        {"type": "text", "text": None},
        {"text": "a text without a type"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "image", "data": "AAAA"},
        {"type": "document", "mime_type": "application/pdf", "url": "https://example.com/a.pdf"},
    ]
    data = {"role": "assistant", "content": [{"type": "text", "text": "hi"}, cited, *kept, {"type": "image", "data": "AAAA", "mime_type": "image/png"}]}
    back = message_from_dict(data)
    assert back.content == [TextContent("hi"), TextContent(cited["text"], cited["citations"]), *kept, ImageContent("AAAA", "image/png")]
    assert [type(block) for block in back.content] == [TextContent, TextContent, *[dict] * len(kept), ImageContent]
    assert back.to_dict()["content"][:2] == [{"type": "text", "text": "hi"}, cited]


@pytest.mark.spec("10")
def test_text_of_joins_the_text_blocks_with_newlines():
    """text_of (the final response of spec §10, a tool result's text in spans) joins text blocks and dicts with a string
    "text" by a newline, and leaves out images and tool calls."""
    blocks = [
        TextContent("first"),
        ImageContent("AAAA", "image/png"),
        {"type": "text", "text": "second", "citations": []},
        {"type": "tool_call", "id": "c1", "name": "getTime", "arguments": {}},
        TextContent(""),
        TextContent("last"),
    ]
    assert text_of(blocks) == "first\nsecond\n\nlast"
    assert text_of([]) == ""


@pytest.mark.spec("19")
def test_a_timestamp_that_is_already_a_datetime_subclass_is_kept_as_it_is():
    """A message rebuilt from a dict whose timestamp is already a datetime, of a subclass such as pandas' Timestamp or
    pendulum's DateTime, keeps that value (only text is parsed as ISO 8601)."""

    class Moment(datetime):
        pass

    moment = Moment(2026, 12, 5, 12, 0, 1, tzinfo=timezone.utc)
    back = message_from_dict({"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": moment})
    assert back == UserMessage([TextContent("hi")], timestamp=datetime(2026, 12, 5, 12, 0, 1, tzinfo=timezone.utc))
    assert back.timestamp is moment
    text = message_from_dict({"role": "user", "content": [], "timestamp": "2026-12-05T12:00:01+00:00"})
    assert text.timestamp == moment and type(text.timestamp) is datetime


@pytest.mark.spec("19")
def test_a_texts_repr_shows_its_citations_and_a_text_without_any_keeps_its_old_form():
    """repr(TextContent) shows the citations of a cited text (an empty list too: a segment) and leaves them out for a text without any."""
    assert repr(TextContent("hi")) == "TextContent(text='hi', type='text')"
    assert repr(TextContent("hi", [])) == "TextContent(text='hi', citations=[], type='text')"
    assert repr(TextContent("hi", [{"url": "u"}])) == "TextContent(text='hi', citations=[{'url': 'u'}], type='text')"
