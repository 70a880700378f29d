"""Hypothesis strategies: JSON values, content, messages, tool calls."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from hypothesis import strategies as st

from yiemagent import AssistantMessage, ImageContent, LLMUsage, TextContent, ToolResultMessage, UserMessage

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)

timestamps = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc)
)
text_content = st.builds(TextContent, st.text())
image_content = st.builds(ImageContent, st.text(alphabet="ABCDEFabcdef0123456789+/=", max_size=40), st.sampled_from(["image/png", "image/jpeg"]))
content = st.lists(text_content | image_content, max_size=4)

tool_call_entries = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=12), "function": st.fixed_dictionaries({"name": st.text(max_size=12), "arguments": json_objects | st.text(max_size=20)})}
)
raw_tool_blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("tool_calls"), "tool_calls": st.lists(tool_call_entries, max_size=3)}),
    st.fixed_dictionaries(
        {"type": st.just("tool_call"), "id": st.text(max_size=12), "name": st.text(max_size=12), "arguments": json_objects}
    ),
)
usages = st.none() | st.builds(LLMUsage, *(st.integers(0, 10**6) for _ in range(5)))

user_messages = st.builds(UserMessage, content, timestamps)
assistant_messages = st.builds(
    AssistantMessage,
    st.lists(text_content | image_content | raw_tool_blocks, max_size=4),
    api=st.none() | st.text(max_size=10),
    provider=st.none() | st.text(max_size=10),
    model=st.none() | st.text(max_size=10),
    usage=usages,
    stop_reason=st.none() | st.sampled_from(["stop", "length", "tool_use", "error", "aborted"]),
    error_message=st.none() | st.text(max_size=20),
    timestamp=timestamps,
)
tool_result_messages = st.builds(
    ToolResultMessage,
    st.text(max_size=12),
    st.text(max_size=12),
    content,
    json_objects,
    usages,
    st.none() | st.lists(st.text(max_size=8), max_size=3),
    st.booleans(),
    timestamps,
)
messages = user_messages | assistant_messages | tool_result_messages

# Batch plans: what each call in a generated batch does. "ok" tools may ask to terminate.
RUNS = ("ok", "ok_terminate", "raises", "wrong_type", "after_raises")  # reach EXECUTE
STOPS = ("unknown", "invalid_args", "before_raises", "blocked", "bad_json")  # end in PREPARE
KINDS = RUNS + STOPS
plans = st.lists(st.sampled_from(KINDS), min_size=0, max_size=10)
modes = st.sampled_from(["sequential", "parallel"])

# Hostile LLM replies (issue 9, decision 15): anything a model or a broken client could return.
class Nested(dict):
    """``{"a": {"a": ...}}`` ``depth`` levels deep, with a short repr (hypothesis prints failing examples)."""

    def __init__(self, depth: int) -> None:
        value: dict = {}
        for _ in range(depth - 1):
            value = {"a": value}
        super().__init__(a=value) if depth else super().__init__()
        self.depth = depth

    def __repr__(self) -> str:
        return f"Nested({self.depth})"


def _nest(depth: int) -> dict:
    return Nested(depth)


def _as_json_text(value: dict) -> str:
    """The arguments as the JSON string OpenAI sends (NaN and all); "{}" when json cannot write them."""
    try:
        return json.dumps(value, default=repr)
    except (RecursionError, ValueError):
        return "{}"


wild_floats = st.floats(allow_nan=True, allow_infinity=True)
huge_strings = st.integers(0, 1_000_000).map(lambda n: "x" * n)
odd_strings = st.text() | huge_strings | st.sampled_from(["", " ", "\ud800", "a\x00b", "get Weather", "getWeather"])
wild_values = st.recursive(
    st.none() | st.booleans() | st.integers() | wild_floats | odd_strings,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
) | st.integers(0, 3000).map(_nest) | st.frozensets(st.integers(), max_size=3).map(set)
wild_arguments = (
    wild_values
    | st.dictionaries(st.text(max_size=8), wild_values, max_size=4)
    | st.dictionaries(st.text(max_size=8), wild_values, max_size=4).map(_as_json_text)
    | st.integers(0, 5000).map(lambda n: "[" * n + "]" * n)
)
wild_ids = st.none() | st.integers() | odd_strings | st.just("same")
wild_names = st.none() | st.integers() | odd_strings
wild_calls = st.fixed_dictionaries(
    {"id": wild_ids, "type": st.just("function"), "function": st.fixed_dictionaries({"name": wild_names, "arguments": wild_arguments})}
) | st.fixed_dictionaries({"type": st.just("tool_call"), "id": wild_ids, "name": wild_names, "arguments": wild_arguments}) | wild_values
wild_blocks = st.one_of(
    st.builds(TextContent, wild_values),
    st.builds(ImageContent, wild_values, wild_values),
    st.fixed_dictionaries({"type": st.just("tool_calls"), "tool_calls": st.lists(wild_calls, max_size=4) | wild_values}),
    wild_calls,
    st.dictionaries(st.text(max_size=8), wild_values, max_size=3),
    wild_values,
)
hostile_replies = st.builds(
    AssistantMessage,
    st.none() | odd_strings | st.lists(wild_blocks, max_size=5) | wild_values,
    api=st.none() | wild_values,
    usage=st.none() | usages | wild_values,
    stop_reason=st.none() | st.sampled_from(["stop", "length", "tool_use", "error", "aborted"]) | wild_values,
    error_message=st.none() | wild_values,
)
