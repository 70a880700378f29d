"""Hypothesis strategies: JSON values, content, messages, tool calls."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

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

# --- Issue 12: histories for the formatting cache (every message and content kind of spec §7/§19) ---
# Arguments in every form a server sends: a dict, a JSON string, double-encoded, empty, null,
# invalid JSON, JSON that is not an object.
raw_arguments = st.one_of(
    json_objects,
    json_objects.map(json.dumps),
    json_objects.map(lambda o: json.dumps(json.dumps(o))),
    json_values.map(json.dumps),
    st.sampled_from(["", "   ", '{"city": ', "not json", None]),
)
_call_ids = st.none() | st.just("") | st.text(min_size=1, max_size=12)
_flat_call = st.fixed_dictionaries(
    {"name": st.text(max_size=12), "arguments": raw_arguments}, optional={"id": _call_ids, "type": st.just("function")}
)
_nested_call = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({"name": st.text(max_size=12), "arguments": raw_arguments})},
    optional={"id": _call_ids, "type": st.just("function")},
)
_any_call = _flat_call | _nested_call
tool_calls_block = st.fixed_dictionaries({"type": st.just("tool_calls"), "tool_calls": st.lists(_any_call | json_values, max_size=3)})
tool_call_block = _any_call.map(lambda call: {**call, "type": "tool_call"})
text_dicts = st.fixed_dictionaries({"type": st.sampled_from(["text", "thinking"]), "text": st.text(max_size=20)})
user_parts = st.one_of(
    text_content,
    image_content,
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": st.just("https://example.com/a.png")})}),
    json_objects,
)
any_timestamps = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=5, minutes=30))]))
wire_user_messages = st.builds(UserMessage, st.lists(user_parts, max_size=4), any_timestamps)
wire_assistant_messages = st.builds(
    AssistantMessage,
    st.lists(text_content | image_content | tool_calls_block | tool_call_block | text_dicts, max_size=4),
    stop_reason=st.none() | st.sampled_from(["stop", "length", "tool_use"]),
    timestamp=any_timestamps,
)
wire_tool_results = st.builds(
    ToolResultMessage,
    st.text(max_size=12),
    st.text(max_size=12),
    st.lists(text_content | image_content | text_dicts | json_objects, max_size=3),
    is_error=st.booleans(),
    timestamp=any_timestamps,
)
wire_messages = wire_user_messages | wire_assistant_messages | wire_tool_results
wire_histories = st.lists(wire_messages, max_size=12)
