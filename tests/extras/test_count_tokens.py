"""count_tokens: the input estimate of a request with no tokenizer download (docs/api.md "Long conversations")."""

from __future__ import annotations

import base64
import json
import math
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import make_tool
from strategies import messages as any_messages
from yiemagent import AssistantMessage, ImageContent, LLMUsage, TextContent, ToolResultMessage, UserMessage, count_tokens
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.tokens import IMAGE_TOKENS_UNKNOWN, estimate_text_tokens

SAMPLES = json.loads((Path(__file__).parents[1] / "support" / "token_counts.json").read_text(encoding="utf-8"))["samples"]

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)


def user(text: str) -> UserMessage:
    return UserMessage([TextContent(text)])


def result(text: str, call_id: str = "c1") -> ToolResultMessage:
    return ToolResultMessage(call_id, "echo", [TextContent(text)], {}, None, None, False)


messages = st.lists(st.one_of(texts.map(user), texts.map(result)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(history=messages, text=texts, more=texts, at=st.integers(0, 10))
def test_count_tokens_grows_with_added_text(history, text, more, at):
    """Adding text to a message, or adding a message, never lowers the estimate."""
    before = count_tokens(history + [user(text)])
    assert count_tokens(history + [user(text + more)]) >= before
    assert count_tokens(history[: at] + [result(more)] + history[at:] + [user(text)]) > before
    assert estimate_text_tokens(text + more) >= estimate_text_tokens(text)


@settings(max_examples=200, deadline=None)
@given(prefix=messages, other_prefix=messages, rest=messages, used=st.integers(0, 10**6), system=texts, reply=texts)
def test_calibrate_takes_the_calibrated_prefix_exactly(prefix, other_prefix, rest, used, system, reply):
    """With calibrate=, the messages before the calibrating reply (and the system prompt and tools) count exactly its
    usage.input_tokens, whatever they are; only the reply and what follows are estimated."""
    cal = AssistantMessage([TextContent(reply)], usage=LLMUsage(input_tokens=used, output_tokens=5))
    tools = [make_tool("echo")]
    counted = count_tokens(prefix + [cal] + rest, system_prompt=system, tools=tools, calibrate=cal)
    assert counted == count_tokens(other_prefix + [cal] + rest, calibrate=cal)
    assert counted == used + count_tokens([cal] + rest) - count_tokens([])


@settings(max_examples=200, deadline=None)
@given(history=st.lists(any_messages, max_size=6), system=texts)
def test_count_tokens_takes_any_history_and_never_raises(history, system):
    """Whatever a history holds (content blocks of every kind, raw tool-call blocks, images that are not images, any usage),
    count_tokens gives an int, and one at least as large with a system prompt and a tool; calibrating on any reply with usage works."""
    counted = count_tokens(history)
    assert isinstance(counted, int) and counted >= 0
    assert count_tokens(history, system_prompt=system, tools=[make_tool("echo")]) >= counted
    for message in history:
        if isinstance(message, AssistantMessage) and message.usage is not None:
            assert count_tokens(history, calibrate=message) >= message.usage.input_tokens


def test_calibrate_must_be_one_of_the_messages_and_have_usage():
    """A calibrating message not in messages, or one with no usage, is refused naming the argument."""
    cal = AssistantMessage([TextContent("hi")], usage=LLMUsage(input_tokens=10))
    with pytest.raises(ValueError, match="calibrate"):
        count_tokens([user("x")], calibrate=cal)
    bare = AssistantMessage([TextContent("hi")])
    with pytest.raises(ValueError, match="calibrate"):
        count_tokens([bare], calibrate=bare)


def test_count_tokens_counts_every_part_of_a_request():
    """The system prompt, tool-call names and arguments, tool results and tool schemas each add to the estimate."""
    base = count_tokens([user("What is the weather?")])
    assert count_tokens([user("What is the weather?")], system_prompt="You are a forecaster for the whole world.") > base
    small = tool_call_reply(("c1", "get_weather", {"city": "Paris"}))
    big = tool_call_reply(("c1", "get_weather", {"city": "Paris", "details": "hourly wind, rain and temperature for a week"}))
    renamed = tool_call_reply(("c1", "get_weather_forecast_for_the_coming_days", {"city": "Paris"}))
    assert count_tokens([small]) < count_tokens([big]) and count_tokens([small]) < count_tokens([renamed])
    assert count_tokens([small, result("sunny")]) < count_tokens([small, result("sunny, 24 degrees, light wind from the west")])
    schema = {"type": "object", "properties": {"city": {"type": "string", "description": "a city name"}}, "required": ["city"]}
    assert count_tokens([], tools=[make_tool("echo")]) < count_tokens([], tools=[make_tool("echo", schema=schema)])


def png(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return base64.b64encode(header + b"\x00" * 16).decode()


def jpeg(width: int, height: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return base64.b64encode(b"\xff\xd8" + app0 + sof0 + b"\xff\xd9").decode()


def gif(width: int, height: int) -> str:
    return base64.b64encode(b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 8).decode()


@pytest.mark.parametrize(
    ("data", "tokens"),
    [
        (png(1000, 1000), math.ceil(1000 * 1000 / 750)),
        (png(200, 150), 40),
        (jpeg(800, 600), 640),
        (gif(300, 300), 120),
        (png(3136, 1000), math.ceil(1568 * 500 / 750)),  # the long edge is scaled to 1568 first
        (png(4000, 4000), 1600),  # at most 1600 tokens
        (base64.b64encode(b"not an image").decode(), IMAGE_TOKENS_UNKNOWN),
    ],
    ids=["png-1000", "png-small", "jpeg", "gif", "png-wide", "png-huge", "unknown"],
)
def test_an_image_costs_what_anthropic_documents_from_its_header(data, tokens):
    """An image costs width*height/750 tokens from its PNG, JPEG or GIF header (scaled to a 1568 long edge, at most 1600); 1600 when unreadable."""
    without = count_tokens([user("look")])
    image = UserMessage([TextContent("look"), ImageContent(data, "image/png")])
    assert count_tokens([image]) - without == tokens


@pytest.mark.parametrize("kind", sorted({s["kind"] for s in SAMPLES}))
def test_the_estimate_is_close_to_real_tokenizers(kind):
    """Against real o200k_base and cl100k_base counts of sample texts (tests/support/token_counts.json), the estimate of
    each kind of text is within -20%..+35% in sum and each sample within -40%..+80% (docs/api.md "count_tokens: how close")."""
    samples = [s for s in SAMPLES if s["kind"] == kind]
    estimates = [estimate_text_tokens(s["text"]) for s in samples]
    for tokenizer in ("o200k_base", "cl100k_base"):
        real = [s[tokenizer] for s in samples]
        assert 0.8 <= sum(estimates) / sum(real) <= 1.35, (tokenizer, sum(estimates), sum(real))
        assert all(0.6 <= e / r <= 1.8 for e, r in zip(estimates, real)), (tokenizer, list(zip(estimates, real)))
