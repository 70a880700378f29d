"""Hypothesis strategies: JSON values, content, messages, tool calls, typed annotations for tool()."""

from __future__ import annotations

import base64
import enum
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, make_dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Annotated, Any, Literal, Optional, TypedDict, Union, get_args, get_origin, get_type_hints, is_typeddict
from uuid import UUID

from hypothesis import strategies as st

from yiemagent import AssistantMessage, CompactionMessage, ImageContent, LLMUsage, TextContent, ToolResultMessage, UserMessage

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
image_content = st.builds(ImageContent, st.binary(max_size=30).map(lambda raw: base64.b64encode(raw).decode()), st.sampled_from(["image/png", "image/jpeg"]))
content = st.lists(text_content | image_content, max_size=4)
# the citation objects providers send beside a text (AssistantMessage.citations): OpenAI's url_citation
# annotations (indices anywhere, even past the text) and Anthropic's web_search_result_location
url_citations = st.fixed_dictionaries(
    {"type": st.just("url_citation"), "url_citation": st.fixed_dictionaries({"url": st.text(max_size=12), "title": st.text(max_size=8), "start_index": st.integers(-3, 40), "end_index": st.integers(-3, 40)})}
)
anthropic_citations = st.fixed_dictionaries(
    {"type": st.just("web_search_result_location"), "url": st.text(max_size=12), "title": st.text(max_size=8) | st.none(), "cited_text": st.text(max_size=12), "encrypted_index": st.text(max_size=8)}
)
cited_text_content = st.builds(TextContent, st.text(max_size=30), st.lists(url_citations | anthropic_citations, max_size=3))

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
    st.lists(text_content | cited_text_content | image_content | raw_tool_blocks, max_size=4),
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


# --- typed annotations and their values, for tool() (tests/extras/test_function_tools_properties.py) ---
#
# A TypeSpec is an annotation tool() accepts, a strategy of Python values of that type, the
# JSON a model would send for such a value (written here independently of the library's own
# encoder) and the JSON kinds that JSON can be. Unions are built only from branches whose
# kinds do not overlap, so that which branch a value belongs to is never ambiguous.


@dataclass(frozen=True, repr=False)
class TypeSpec:
    annotation: Any
    values: st.SearchStrategy[Any]
    to_json: Callable[[Any], Any]
    kinds: frozenset[str]
    hashable: bool = True

    def __repr__(self) -> str:  # hypothesis prints the annotation, not the strategies inside
        return f"TypeSpec({self.annotation!r})"


_names = itertools.count()


def _same(value: Any) -> Any:
    return value


def _scalar(annotation: Any, values: st.SearchStrategy[Any], kinds: set[str], to_json: Callable[[Any], Any] = _same) -> TypeSpec:
    return TypeSpec(annotation, values, to_json, frozenset(kinds))


def _literal_specs(choices: list[Any]) -> TypeSpec:
    kinds = {"boolean" if isinstance(c, bool) else "integer" if isinstance(c, int) else "string" for c in choices}
    return _scalar(Literal[tuple(choices)], st.sampled_from(choices), kinds)


def _enum_spec(values: list[str]) -> TypeSpec:
    members = enum.Enum(f"DrawnEnum{next(_names)}", {f"M{i}": v for i, v in enumerate(values)})
    return _scalar(members, st.sampled_from(list(members)), {"string"}, lambda m: m.value)


scalar_type_specs = st.one_of(
    st.just(_scalar(str, st.text(max_size=6), {"string"})),
    st.just(_scalar(int, st.integers(-(2**53), 2**53), {"integer"})),
    st.just(_scalar(float, st.floats(allow_nan=False, allow_infinity=False), {"number", "integer"})),
    st.just(_scalar(bool, st.booleans(), {"boolean"})),
    st.just(_scalar(None, st.none(), {"null"})),
    st.just(_scalar(Union[int, float], st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False), {"number", "integer"})),
    st.just(_scalar(date, st.dates(), {"string"}, date.isoformat)),
    st.just(_scalar(datetime, st.datetimes(timezones=st.none() | st.just(timezone.utc)), {"string"}, datetime.isoformat)),
    st.just(_scalar(UUID, st.uuids(), {"string"}, str)),
    st.lists(st.text(max_size=3) | st.integers(-3, 3) | st.booleans(), min_size=1, max_size=4, unique_by=lambda v: (type(v), v)).map(_literal_specs),
    st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=4, unique=True).map(_enum_spec),
)


def _list_of(item: TypeSpec) -> TypeSpec:
    return TypeSpec(list[item.annotation], st.lists(item.values, max_size=3), lambda v: [item.to_json(x) for x in v], frozenset({"array"}), False)


def _tuple_of(items: list[TypeSpec]) -> TypeSpec:
    values = st.tuples(*(i.values for i in items))
    to_json = lambda v: [i.to_json(x) for i, x in zip(items, v)]  # noqa: E731
    return TypeSpec(tuple[tuple(i.annotation for i in items)], values, to_json, frozenset({"array"}), all(i.hashable for i in items))


def _variadic_tuple_of(item: TypeSpec) -> TypeSpec:
    values = st.lists(item.values, max_size=3).map(tuple)
    return TypeSpec(tuple[item.annotation, ...], values, lambda v: [item.to_json(x) for x in v], frozenset({"array"}), item.hashable)


def _set_of(item: TypeSpec) -> TypeSpec:
    return TypeSpec(set[item.annotation], st.sets(item.values, max_size=3), lambda v: [item.to_json(x) for x in v], frozenset({"array"}), False)


def _dict_of(item: TypeSpec) -> TypeSpec:
    values = st.dictionaries(st.text(max_size=4), item.values, max_size=3)
    return TypeSpec(dict[str, item.annotation], values, lambda v: {k: item.to_json(x) for k, x in v.items()}, frozenset({"object"}), False)


def _optional(item: TypeSpec) -> TypeSpec:
    to_json = lambda v: None if v is None else item.to_json(v)  # noqa: E731
    return TypeSpec(Optional[item.annotation], st.none() | item.values, to_json, item.kinds | {"null"}, item.hashable)


def _union(pair: tuple[TypeSpec, TypeSpec]) -> TypeSpec:
    a, b = pair

    def to_json(v: Any) -> Any:
        return a.to_json(v) if _matches(v, a.annotation) else b.to_json(v)

    return TypeSpec(Union[a.annotation, b.annotation], a.values | b.values, to_json, a.kinds | b.kinds, a.hashable and b.hashable)


def _dataclass_of(fields: list[TypeSpec]) -> TypeSpec:
    cls = make_dataclass(f"Drawn{next(_names)}", [(f"f{i}", f.annotation) for i, f in enumerate(fields)])
    values = st.builds(cls, *(f.values for f in fields))
    to_json = lambda v: {f"f{i}": f.to_json(getattr(v, f"f{i}")) for i, f in enumerate(fields)}  # noqa: E731
    return TypeSpec(cls, values, to_json, frozenset({"object"}), False)


def _typeddict_of(args: tuple[list[TypeSpec], bool]) -> TypeSpec:
    fields, total = args
    cls = TypedDict(f"DrawnTD{next(_names)}", {f"k{i}": f.annotation for i, f in enumerate(fields)}, total=total)  # type: ignore[operator]
    strategies = {f"k{i}": f.values for i, f in enumerate(fields)}
    values = st.fixed_dictionaries(strategies) if total else st.fixed_dictionaries({}, optional=strategies)
    to_json = lambda v: {k: fields[int(k[1:])].to_json(x) for k, x in v.items()}  # noqa: E731
    return TypeSpec(cls, values, to_json, frozenset({"object"}), False)


def _annotated(item: TypeSpec) -> TypeSpec:
    return TypeSpec(Annotated[item.annotation, "a description"], item.values, item.to_json, item.kinds, item.hashable)


def _compound(children: st.SearchStrategy[TypeSpec]) -> st.SearchStrategy[TypeSpec]:
    return st.one_of(
        children.map(_list_of),
        st.lists(children, min_size=1, max_size=3).map(_tuple_of),
        children.map(_variadic_tuple_of),
        scalar_type_specs.map(_set_of),
        children.map(_dict_of),
        children.filter(lambda s: "null" not in s.kinds).map(_optional),
        st.tuples(children, children).filter(lambda p: not p[0].kinds & p[1].kinds).map(_union),
        st.lists(children, min_size=1, max_size=3).map(_dataclass_of),
        st.tuples(st.lists(children, min_size=1, max_size=3), st.booleans()).map(_typeddict_of),
        children.map(_annotated),
    )


type_specs = st.recursive(scalar_type_specs, _compound, max_leaves=6)


def _matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` is exactly of type ``annotation`` (deeply: a list of ints, a dataclass of floats, ...)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _matches(value, args[0])
    if annotation is None or annotation is type(None):
        return value is None
    if annotation in (str, int, float, bool, date, datetime, UUID):
        return type(value) is annotation
    if origin is Literal:
        return any(value == c and type(value) is type(c) for c in args)
    if origin is Union:
        return any(_matches(value, a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return type(value) is annotation
    if origin is list:
        return type(value) is list and all(_matches(v, args[0]) for v in value)
    if origin is set:
        return type(value) is set and all(_matches(v, args[0]) for v in value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return type(value) is tuple and all(_matches(v, args[0]) for v in value)
        return type(value) is tuple and len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args))
    if origin is dict:
        return type(value) is dict and all(type(k) is str and _matches(v, args[1]) for k, v in value.items())
    if is_dataclass(annotation):
        hints = get_type_hints(annotation, include_extras=True)
        return type(value) is annotation and all(_matches(getattr(value, f.name), hints[f.name]) for f in fields(annotation))
    if is_typeddict(annotation):
        hints = get_type_hints(annotation, include_extras=True)
        return type(value) is dict and set(value) <= set(hints) and all(_matches(v, hints[k]) for k, v in value.items())
    raise AssertionError(f"no check for {annotation!r}")


matches_annotation = _matches


# Streaming (issue 14): a reply's thinking and text, each cut into pieces at drawn points,
# the pieces of the two kinds interleaved in a drawn order (each kind's own order kept).
def _cut(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), max_size=len(text) - 1))) if len(text) > 1 else []
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@st.composite
def streamed_replies(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, str]]]:
    """``(thinking, text, deltas)``: the deltas, joined per kind, are the thinking and the text."""
    thinking, text = draw(st.text(max_size=30)), draw(st.text(max_size=60))
    pieces = {"thinking": _cut(draw, thinking), "text": _cut(draw, text)}
    order = draw(st.permutations(["thinking"] * len(pieces["thinking"]) + ["text"] * len(pieces["text"])))
    return thinking, text, [(kind, pieces[kind].pop(0)) for kind in order]

# Values a tool may put in ``details`` beyond JSON (issue 13: save_history / SQLiteSession keep them)
# whole seconds: Python 3.11's datetime.fromisoformat drops a fraction of a second from an
# offset (docs/sessions.md says so); no time zone has one
offsets = st.builds(
    timezone,
    st.integers(min_value=-(23 * 3600 + 59 * 60), max_value=23 * 3600 + 59 * 60).map(lambda s: timedelta(seconds=s)),
)
any_datetimes = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.none() | offsets)
hashable_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | any_datetimes | st.dates() | st.times() | st.binary(max_size=8)
python_values = st.recursive(
    json_scalars | any_datetimes | st.dates() | st.times() | st.binary(max_size=16) | text_content | usages,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.sets(hashable_scalars, max_size=3),
        st.frozensets(hashable_scalars, max_size=3),
        st.dictionaries(st.text(max_size=8) | st.just("$type"), children, max_size=3),
        st.dictionaries(st.integers() | st.tuples(st.integers()), children, max_size=3),
    ),
    max_leaves=10,
)
rich_tool_result_messages = st.builds(
    ToolResultMessage,
    st.text(max_size=12),
    st.text(max_size=12),
    content,
    st.dictionaries(st.text(max_size=8), python_values, max_size=4),
    usages,
    st.none() | st.lists(st.text(max_size=8), max_size=3),
    st.booleans(),
    any_datetimes,
)
# a summary that stands for the oldest messages (docs/sessions.md "Long conversations"): stored and loaded like any message
compaction_messages = st.builds(CompactionMessage, st.text(st.characters(blacklist_categories=())), st.integers(0, 10**6), any_datetimes)
stored_messages = messages | rich_tool_result_messages | compaction_messages

# Details that plain JSON cannot write as they are (docs/sessions.md "The JSON form"): strs
# with lone surrogates (as values and as keys), ints past Python's 4,300-digit int-to-str
# limit, keys that are not strs. NaN is left out: it is stored, but NaN != NaN.
any_strs = st.text(st.characters(blacklist_categories=()), max_size=6) | st.sampled_from(["\ud800", "a\udfffb", "\udc80\ud800", "$type"])
huge_ints = st.builds(lambda digits, sign, low: sign * (10**digits + low), st.integers(4300, 5000), st.sampled_from([1, -1]), st.integers())
any_ints = st.integers() | huge_ints
any_keys = st.one_of(
    any_strs,
    any_ints,
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.tuples(any_strs, any_ints),
    st.frozensets(any_strs | any_ints, max_size=2),
    any_datetimes,
    st.binary(max_size=4),
)
any_details = st.dictionaries(
    any_keys,
    st.recursive(
        st.none() | st.booleans() | any_ints | st.floats(allow_nan=False) | any_strs | st.binary(max_size=6) | any_datetimes | st.dates() | st.times(),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.tuples(children, children),
            st.sets(any_strs | any_ints, max_size=3),
            st.dictionaries(any_keys, children, max_size=3),
        ),
        max_leaves=8,
    ),
    max_size=4,
)

# --- server-sent events (issue 10): events, their wire form, and ways to cut bytes into chunks ---

# Text of one SSE line: any character but CR and LF (U+0085, U+2028, U+2029 and NUL included).
sse_line_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)
sse_events = st.lists(
    st.fixed_dictionaries(
        {
            "event": st.sampled_from(["", "message", "error", "content_block_delta", "ping"]),
            "data": st.lists(sse_line_text, min_size=1, max_size=3),
            "id": st.none() | st.text(st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",)), max_size=5),
        }
    ),
    max_size=6,
)
sse_line_ends = st.sampled_from(["\n", "\r", "\r\n"])


def sse_cuts(size: int):
    """Sorted byte positions at which to cut a body of ``size`` bytes into chunks."""
    return st.lists(st.integers(0, size), max_size=12).map(sorted)


def cut(body: bytes, positions) -> list[bytes]:
    """``body`` cut at ``positions`` (empty pieces dropped)."""
    edges = [0, *positions, len(body)]
    return [body[a:b] for a, b in zip(edges, edges[1:]) if b > a]


# Streamed replies: a list of ("text" | "thinking", fragment) in the order the model sent them.
stream_fragments = st.lists(st.tuples(st.sampled_from(["text", "thinking"]), st.text(min_size=1, max_size=8)), max_size=8)

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
    st.builds(TextContent, wild_values, st.lists(wild_values, max_size=3) | wild_values),  # a text with citations: anything a client could put there
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

# MCP tool names: anything a server may send (MCP allows up to 128 characters; servers send more)
mcp_tool_names = st.lists(st.text(min_size=1, max_size=130), max_size=8, unique=True)
mcp_prefixes = st.none() | st.text(min_size=1, max_size=20)

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


# Text around credentials, cut anywhere: (the words and keys joined, the cut positions).
def texts_with_keys(keys: list[str]) -> st.SearchStrategy[tuple[str, list[int]]]:
    pieces = st.lists(st.sampled_from(keys) | st.text(alphabet="sk-ABC 0123./", max_size=6), max_size=8)
    return pieces.map("".join).flatmap(lambda text: st.tuples(st.just(text), st.lists(st.integers(0, len(text)), max_size=10).map(sorted)))

# --- Tool-call arguments as text (docs/failures.md "Arguments a model sends"): anything a
# model or a server may put in an arguments string, valid JSON or not. JSON objects, with
# pieces that Python's json mishandles spliced in: integers past the 4,300-digit limit,
# 1e400, NaN/Infinity, lone-surrogate escapes, nesting past the recursion limit, text cut
# anywhere, double encoding.
_hostile_json_atoms = st.sampled_from(
    ["1" * 5000, "-" + "9" * 4301, "1e400", "-1e999", "NaN", "Infinity", "-Infinity", '"\\ud800"', '"\\udfff x"', '"\\ud83d\\ude00"', "1" * 4300]
)


def _splice(pair: tuple[dict, str]) -> str:
    obj, atom = pair
    return json.dumps({**obj, "x": "__ATOM__"}).replace('"__ATOM__"', atom)


def _cut_text(pair: tuple[str, int]) -> str:
    text, at = pair
    return text[: at % (len(text) + 1)]


argument_texts = st.one_of(
    st.text(max_size=40),
    json_values.map(json.dumps),
    json_objects.map(json.dumps),
    json_objects.map(lambda o: json.dumps(json.dumps(o))),
    st.tuples(json_objects, _hostile_json_atoms).map(_splice),
    st.tuples(json_objects.map(json.dumps), st.integers(0, 200)).map(_cut_text),
    st.tuples(st.sampled_from(["[", "{\"a\":", "[{\"b\":"]), st.integers(1, 3000)).map(lambda p: p[0] * p[1]),
    st.just('{"k\\ud800": 1}'),
)
