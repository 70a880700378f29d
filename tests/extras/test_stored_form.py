"""The fast reader of the stored form (history/_stored.py) gives what the reader of record gives (docs/performance.md "Cost at the edges")."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import strategies
from yiemagent import (
    ApprovalMessage,
    AssistantMessage,
    CompactionMessage,
    ImageContent,
    LLMUsage,
    MessageFormatError,
    SQLiteSession,
    TextContent,
    ToolResultMessage,
    UserMessage,
    YiemAgent,
    load_history,
    save_history,
    shutdown,
)
from yiemagent.extraction import MAX_ID_CHARS, MAX_NAME_CHARS, extract_tool_calls
from yiemagent.history import files as history_files
from yiemagent.history import _json as history_json
from yiemagent.history import sessions
from yiemagent.history._json import message_from_data, message_from_json, message_to_data, message_to_row, read_fields
from yiemagent.history._stored import loads_row, read_stored, stored_calls
from yiemagent.normalize import normalize_message
from yiemagent.types import APPROVAL_DECISIONS

STAMP = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=timezone.utc)

ids = st.text(max_size=10) | st.sampled_from(["c1", "c1", "x" * 129, "\ud800"])
names = st.text(max_size=10) | st.sampled_from(["double", "y" * 129, "a\udfffb"])
argument_texts = st.one_of(
    strategies.json_objects.map(json.dumps),
    strategies.json_objects.map(lambda value: json.dumps(json.dumps(value))),  # double-encoded, as some servers send
    st.sampled_from(["", "  ", "null", "not json", "[1]", '{"a": NaN}', '{"a": 1e400}', '{"a": "\\ud800"}', "{\"a\": \"\ud800\"}", '{"a": 1} x']),
)
arguments = strategies.json_objects | argument_texts
canonical_calls = st.lists(st.tuples(ids, names, arguments), max_size=3)


@st.composite
def canonical_replies(draw: st.DrawFn) -> AssistantMessage:
    """A reply as the agent holds one: text, images, tool calls in the nested or the flat form, usage, a typed answer."""
    blocks: list[Any] = []
    for kind in draw(st.lists(st.sampled_from(["text", "image", "nested", "flat"]), max_size=4)):
        if kind == "text":
            blocks.append(draw(strategies.text_content))
        elif kind == "image":
            blocks.append(draw(strategies.image_content))
        elif kind == "nested":
            calls = draw(canonical_calls)
            blocks.append({"type": "tool_calls", "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]})
        else:
            call_id, name, raw = draw(st.tuples(ids, names, arguments))
            blocks.append({"type": "tool_call", "id": call_id, "name": name, "arguments": raw})
    return AssistantMessage(
        blocks,
        api=draw(st.none() | st.text(max_size=6)),
        provider=draw(st.none() | st.text(max_size=6)),
        model=draw(st.none() | st.text(max_size=6)),
        usage=draw(strategies.usages),
        stop_reason=draw(st.none() | st.sampled_from(["stop", "tool_use"])),
        error_message=draw(st.none() | st.text(max_size=6)),
        timestamp=draw(strategies.any_datetimes),
        output=draw(st.none() | strategies.json_values),
    )


approvals = st.builds(
    ApprovalMessage, ids, names, st.sampled_from(APPROVAL_DECISIONS), strategies.json_objects, st.text(max_size=8), strategies.any_datetimes
)
every_kind = strategies.stored_messages | canonical_replies() | approvals


def stored(message: Any) -> Any:
    """``message`` as a store holds it: its JSON form, read back by ``json.loads``."""
    return json.loads(json.dumps(message_to_data(message)))


# What a store written by other means may hold instead: values of the wrong type, lone
# surrogates, tags, ids too long or repeated, unknown roles and decisions, numbers JSON cannot carry.
odd_values = st.sampled_from(
    [None, "", "\ud800", "a\udfffb", 0, -1, 2**2100, 1.5, float("inf"), float("nan"), True, False, [], {}, {"$type": "tuple", "items": [1]},
     {"$type": "bogus"}, "x" * 129, "text", "image", "tool_calls", "tool_call", "function", "custom", "deferred", "user", "assistant", "tool",
     "approval", "compaction", "summary", "through", "2024-01-01T00:00:00", "2024-01-01T00:00:00+02:00", "not a date", [{"type": "text", "text": "t"}], {"type": "thinking"}]
) | strategies.json_values


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, prefix + (index,))
    return found


@st.composite
def mutated(draw: st.DrawFn, data: Any) -> Any:
    """``data`` with one to three changes: a value replaced, a key or item removed, a key added, an item repeated."""
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(data)))
        operation = draw(st.sampled_from(["replace", "remove", "add", "repeat"]))
        if not path:
            if operation == "replace":
                data = copy.deepcopy(draw(odd_values))  # a copy: the pool's lists and dicts must not change between cases
            continue
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        if operation == "replace":
            parent[last] = copy.deepcopy(draw(odd_values))
        elif operation == "remove":
            del parent[last]
        elif operation == "add" and isinstance(parent[last], dict):
            parent[last][draw(st.sampled_from(["extra", "$type", "type", "id", "text", "citations"]))] = copy.deepcopy(draw(odd_values))
        elif operation == "repeat" and isinstance(parent[last], list) and parent[last]:
            parent[last].append(copy.deepcopy(parent[last][0]))
    return data


def stored_row(message: Any) -> Any:
    """``message`` as a session row holds it: its compact form (``message_to_row``: a content of one text block as its text), read back by ``json.loads``."""
    return json.loads(message_to_row(message)[0])


@st.composite
def stored_data(draw: st.DrawFn) -> Any:
    data = draw(st.sampled_from([stored, stored_row]))(draw(every_kind))
    return draw(mutated(data)) if draw(st.booleans()) else data


def general(data: Any) -> Any:
    """The reader of record's answer: the message, or the refusal's text."""
    try:
        return read_fields(copy.deepcopy(data), "row 7")
    except MessageFormatError as exc:
        return str(exc)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stored_data())
def test_the_fast_reader_gives_what_the_reader_of_record_gives(data):
    """Property (differential): for any stored data, valid or mutated, the fast reader gives the same message as the field-by-field reader, or leaves it to it; message_from_data gives that message or the same refusal."""
    expected = general(data)
    fast = read_stored(copy.deepcopy(data))
    event("fast reader" if fast is not None else "refused" if isinstance(expected, str) else "reader of record")
    if fast is not None:
        assert not isinstance(expected, str), expected  # never a message where the reader of record refuses
        assert type(fast) is type(expected) and fast == expected
        # built as __init__ builds it (the formatting cache's slot aside: docs/performance.md "What is cached")
        assert vars(fast).keys() - {"_yiemagent_cache"} == vars(expected).keys() - {"_yiemagent_cache"}
    try:
        message = message_from_data(copy.deepcopy(data), "row 7")
    except MessageFormatError as exc:
        assert str(exc) == expected
    else:
        # a message stored without a timestamp is given the time it is read (and its calls' synthetic ids depend on it)
        assert message == expected if "timestamp" in data else type(message) is type(expected)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stored_data())
def test_a_loaded_message_is_checked_once_and_its_calls_read_from_its_blocks(data):
    """Property: what message_from_data gives is what normalize_message keeps as it is (an agent need not check it again), and stored_calls reads the calls extract_tool_calls finds."""
    try:
        message = message_from_data(data, "row 7")
    except MessageFormatError:
        return
    assert normalize_message(message) == message
    if isinstance(message, AssistantMessage):
        _, calls, _ = extract_tool_calls(message)
        assert stored_calls(message) == [(c.id, c.name) for c in calls]


def agent_holds() -> list[Any]:
    """One message of each kind and form the agent writes."""
    return [
        UserMessage([TextContent("hi"), ImageContent("aGk=", "image/png")], STAMP),
        AssistantMessage(
            [TextContent("let me"), {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "double", "arguments": {"x": [1, {"y": None}]}}}]}],
            model="m",
            usage=LLMUsage(3, 4, 1, 0, 7, 2),
            stop_reason="tool_use",
            timestamp=STAMP,
        ),
        ApprovalMessage("c1", "double", "approved", {"x": 2}, "ok", STAMP),
        ToolResultMessage("c1", "double", [TextContent("4")], {"x": 2, "nested": [1.5, True]}, LLMUsage(1, 1, 0, 0, 2, 0), ["added"], False, STAMP),
        AssistantMessage([{"type": "tool_call", "id": "c2", "name": "t", "arguments": {}}], timestamp=STAMP),
        ToolResultMessage("c2", "t", [], timestamp=STAMP),
        # as OpenAIClient keeps a server's call: the arguments as the text it sent
        AssistantMessage([{"type": "tool_calls", "tool_calls": [{"type": "function", "function": {"name": "t", "arguments": '{"x": 21}'}, "id": "call_9"}]}], timestamp=STAMP),
        ToolResultMessage("call_9", "t", [TextContent("42")], timestamp=STAMP),
        AssistantMessage([TextContent("done")], stop_reason="stop", timestamp=STAMP, output={"answer": 4}),
    ]


@pytest.mark.parametrize("form", [stored, stored_row])
@pytest.mark.parametrize("index", range(9))
def test_each_form_the_agent_writes_takes_the_fast_reader(index, form):
    """A message of each kind and form the agent writes, as a history file or a session row stores it (one text block as its text), is read in one pass, equal to the reader of record's."""
    data = form(agent_holds()[index])
    message = read_stored(data)
    assert message is not None and message == read_fields(form(agent_holds()[index]), "here") == agent_holds()[index]


def every_field_set() -> list[Any]:
    """A message of each kind with every field set: non-ASCII text in each str and key, images, call ids of one and of MAX_ID_CHARS characters, a name of MAX_NAME_CHARS, values nested and scalar."""
    arguments = {"clé": ["é", 1, 1.5, None, True, {"ü": "☃ 👋"}]}
    return [
        UserMessage([TextContent("héllo 👋"), ImageContent("aGk=", "image/png")], STAMP),
        AssistantMessage(
            [
                TextContent("ça va"),
                ImageContent("aGk=", "image/png"),
                {"type": "tool_calls", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "n" * MAX_NAME_CHARS, "arguments": arguments}}]},
                {"type": "tool_call", "id": "i" * MAX_ID_CHARS, "name": "outil", "arguments": {}},
            ],
            api="ápi",
            provider="prövider",
            model="mödel",
            usage=LLMUsage(3, 4, 1, 0, 7, 2),
            stop_reason="stop",
            error_message="érreur",
            timestamp=STAMP,
            output={"réponse": "oui"},
        ),
        ToolResultMessage("a", "outil", [TextContent("résultat")], {"détail": ["é", {"b": None}]}, LLMUsage(1, 1, 0, 0, 2, 0), ["nouvél"], True, STAMP),
        ApprovalMessage("a", "outil", "rejected", arguments, "raison é", STAMP),
        AssistantMessage([TextContent("42")], timestamp=STAMP, output=42),  # a typed answer that is a number
    ]


@pytest.mark.parametrize("index", range(5))
def test_every_field_set_and_any_text_the_check_keeps_take_the_fast_reader(index):
    """The stored form with every optional field set, non-ASCII text anywhere, and ids and names as long as the check keeps them, is read in one pass, equal to the reader of record's."""
    data = stored(every_field_set()[index])
    message = read_stored(data)
    assert message is not None and message == read_fields(stored(every_field_set()[index]), "here") == every_field_set()[index]


@pytest.mark.parametrize("form", [stored, stored_row])
@pytest.mark.parametrize("message", [CompactionMessage("résumé 👋", 0, STAMP), CompactionMessage("s", 3, STAMP), CompactionMessage("", 2**70, STAMP)])
def test_a_compaction_message_the_agent_writes_takes_the_fast_reader(message, form):
    """A compaction message as a history file or a session row stores it (any summary the check keeps, ``through`` from 0) is read in one pass, equal to the reader of record's."""
    data = form(message)
    fast = read_stored(copy.deepcopy(data))
    assert fast is not None and fast == read_fields(data, "here") == message
    assert vars(fast) == vars(message)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(extra=1),
        lambda d: d.pop("timestamp"),
        lambda d: d.update(timestamp="yesterday"),
        lambda d: d.update(summary="a\udfffb"),
        lambda d: d.update(summary=5),
        lambda d: d.pop("summary"),
        lambda d: d.update(through=-1),
        lambda d: d.update(through=True),
        lambda d: d.update(through="3"),
        lambda d: d.update(through=None),
        lambda d: d.update(through=2.0),
    ],
)
def test_a_compaction_row_the_check_mends_or_refuses_goes_the_long_way(change):
    """A compaction row not in the stored form (an unknown field, a bad or no time, a bad summary, a negative or non-int ``through``) goes to the reader of record, which mends or refuses it."""
    data = stored(CompactionMessage("s", 3, STAMP))
    change(data)
    assert read_stored(copy.deepcopy(data)) is None
    expected = general(data)
    try:
        message = message_from_data(copy.deepcopy(data), "row 7")
    except MessageFormatError as exc:
        assert str(exc) == expected
    else:  # one stored without a time is given the time it is read
        assert message == expected if "timestamp" in data else type(message) is CompactionMessage


def _nested(depth: int, leaf: Any) -> Any:
    """``leaf`` inside ``depth`` containers, a list and an object by turns."""
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"a": leaf}
    return leaf


def _reply(*blocks: Any, **fields: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks), **fields, "timestamp": STAMP.isoformat()}


def _calls(*entries: Any, **more: Any) -> dict[str, Any]:
    return {"type": "tool_calls", "tool_calls": list(entries), **more}


def _call(call_id: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": arguments}}


def _flat(call_id: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": "t", "arguments": arguments}


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"role": "user", "content": [{"type": "text", "text": "a\udfffb"}], "timestamp": STAMP.isoformat()}, UserMessage([TextContent("a\ufffdb")], STAMP)),
        (_reply(model="a\udfffb"), AssistantMessage([], model="a\ufffdb", timestamp=STAMP)),
        (_reply(_calls(_call("c1", [1]))), AssistantMessage([_calls(_call("c1", {}))], timestamp=STAMP)),
        (_reply(_calls(_call("c1", 5))), AssistantMessage([_calls(_call("c1", {}))], timestamp=STAMP)),
        (_reply(_calls(_call("c1", {"x": float("nan")}))), AssistantMessage([_calls(_call("c1", {}))], timestamp=STAMP)),
        (_reply(_calls(_call("c1", {"x": [1, float("nan")]}))), AssistantMessage([_calls(_call("c1", {}))], timestamp=STAMP)),
        (_reply(_calls(_call("c1", {"x": _nested(41, [float("nan")])}))), AssistantMessage([_calls(_call("c1", {}))], timestamp=STAMP)),
        (_reply(_calls(_call("c1", {"x": _nested(70, 1)}))), AssistantMessage([_calls(_call("c1", {}))], timestamp=STAMP)),
        (_reply(_calls(_call("c1", {}), _call("c1", {}), extra=1)), AssistantMessage([_calls(_call("c1", {}), _call("c1_2", {}))], timestamp=STAMP)),
        (_reply(_calls(_call("c1", {"x": {"$type": "tuple", "items": [1]}}))), AssistantMessage([_calls(_call("c1", {"x": [1]}))], timestamp=STAMP)),
        (_reply(_flat("c1", [1])), AssistantMessage([_flat("c1", {})], timestamp=STAMP)),
        (_reply(_flat("c1", {}), _flat("c1", {})), AssistantMessage([_flat("c1", {}), _flat("c1_2", {})], timestamp=STAMP)),
        (_reply({"type": "text", "text": "a\udfffb"}), AssistantMessage([TextContent("a\ufffdb")], timestamp=STAMP)),
        (_reply({"type": "text", "text": "a", "citations": [1]}), AssistantMessage([{"type": "text", "text": "a", "citations": [1]}], timestamp=STAMP)),
        (
            {"role": "tool", "tool_call_id": "c1", "tool_name": "t", "content": [], "details": _nested(42, {"$type": "tuple", "items": [1]}), "timestamp": STAMP.isoformat()},
            ToolResultMessage("c1", "t", [], _nested(42, (1,)), timestamp=STAMP),
        ),
        (_reply({"type": "tool_calls", "tool_calls": None}), AssistantMessage([{"type": "tool_calls", "tool_calls": None}], timestamp=STAMP)),
        (_reply(_calls(5)), AssistantMessage([_calls(5)], timestamp=STAMP)),
    ],
)
def test_a_row_the_check_mends_loads_mended(row, expected):
    """A row written by other means that the check mends (a lone surrogate, arguments JSON cannot carry or nested too deeply, a repeated call id, in a nested or a flat call) loads as the check leaves it, a tagged value deep down as the value it tags, a text block with more than its text as it is; one whose calls cannot be read keeps them as they are."""
    message = message_from_data(copy.deepcopy(row), "row 7")
    assert message == read_fields(copy.deepcopy(row), "row 7") == expected


@pytest.mark.parametrize(
    "change, refusal",
    [
        (lambda d: d.update(role="robot"), "row 7: has role 'robot'"),
        (lambda d: d.pop("content"), "row 7: has no 'content'"),
        (lambda d: d.update(extra=1), "row 7: has unknown fields ['extra']"),
        (lambda d: d.update(timestamp="yesterday"), "row 7: a 'timestamp' value that is not ISO 8601"),
        (lambda d: d["content"].append(5), "row 7: content[2] is int 5"),
        (lambda d: d["content"].append({"type": "text", "text": 5}), "row 7: content[2] is a 'text' block with missing or wrong fields"),
        (lambda d: d["content"].append({"type": "text", "text": "a", "$type": "bogus"}), "row 7: unknown tagged value 'bogus'"),
        (lambda d: d["content"].append({"type": "weird", "x": float("nan")}), "row 7: UserMessage content[2]/x is nan"),
        (lambda d: d["content"].append({"type": "image", "data": 5, "mime_type": "image/png"}), "row 7: content[2] is a 'image' block with missing or wrong fields"),
    ],
)
def test_a_user_row_the_check_refuses_is_named_with_its_entry_and_field(change, refusal):
    """A stored user message the check refuses is refused by message_from_data, naming the entry and the field, as before the fast reader."""
    data = stored(agent_holds()[0])
    change(data)
    assert read_stored(data) is None
    with pytest.raises(MessageFormatError) as caught:
        message_from_data(data, "row 7")
    assert str(caught.value).startswith(refusal)


@pytest.mark.parametrize(
    "index, change, refusal",
    [
        (1, lambda d: d.update(usage={"input_tokens": "3"}), "row 7: 'usage.input_tokens' must be int"),
        (1, lambda d: d.update(usage={"coins": 3}), "row 7: 'usage' has unknown counts ['coins']"),
        (1, lambda d: d.update(model=5), "row 7: 'model' must be str"),
        (1, lambda d: d.update(content=5), "row 7: 'content' must be list"),
        (2, lambda d: d.update(decision="maybe"), "row 7: ApprovalMessage decision is 'maybe'"),
        (2, lambda d: d.update(arguments=[1]), "row 7: ApprovalMessage arguments are list"),
        (2, lambda d: d["arguments"].update(x=float("nan")), "row 7: ApprovalMessage arguments/x is nan"),
        (3, lambda d: d.update(is_error="no"), "row 7: 'is_error' must be bool"),
        (3, lambda d: d.update(tool_call_id=None), "row 7: 'tool_call_id' must be str"),
        (3, lambda d: d.update(added_tool_names=[1]), "row 7: 'added_tool_names' items must be str"),
        (3, lambda d: d.update(details={"$type": "int", "hex": "zz"}), "row 7: an 'int' value that is not hex"),
        (3, lambda d: d.pop("tool_name"), "row 7: has no 'tool_name'"),
        (3, lambda d: d.update(details=_nested(800, 1)), "row 7: nested too deeply to read"),
        (3, lambda d: d.update(details={"$type": []}), "row 7: unknown tagged value '[]'"),
        (3, lambda d: d.update(details={"$type": "bytes", "base64": "\ud800"}), "row 7: a 'bytes' value without valid base64"),
        (3, lambda d: d.update(details={"$type": "bytes", "base64": "é"}), "row 7: a 'bytes' value without valid base64"),
    ],
)
def test_a_row_of_another_kind_the_check_refuses_is_named_with_its_entry_and_field(index, change, refusal):
    """A stored reply, approval or tool result that cannot be read is refused naming the entry and the field."""
    data = stored(agent_holds()[index])
    change(data)
    assert read_stored(data) is None
    with pytest.raises(MessageFormatError) as caught:
        message_from_data(data, "row 7")
    assert str(caught.value).startswith(refusal)


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"role": "approval", "tool_call_id": "c1", "tool_name": "double", "decision": "approved"}, ApprovalMessage("c1", "double", "approved", timestamp=STAMP)),
        ({"role": "tool", "tool_call_id": "c1", "tool_name": "double", "content": [{"type": "text", "text": "4"}]}, ToolResultMessage("c1", "double", [TextContent("4")], timestamp=STAMP)),
        ({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}, AssistantMessage([TextContent("hi")], timestamp=STAMP)),
    ],
)
def test_a_row_without_the_fields_that_have_defaults_loads_with_those_defaults(row, expected):
    """A row written by other means with only the fields a message cannot do without (and its time) loads with every other field at its default, as the message's own class gives it."""
    message = message_from_data({**row, "timestamp": STAMP.isoformat()}, "row 7")
    assert message == expected
    assert vars(message) == vars(expected)


def test_a_session_row_the_check_refuses_names_the_session_and_the_row(tmp_path):
    """A row written by other means that the check refuses stops the agent's start, naming the session, the file, the row and the field."""
    path = tmp_path / "s.db"
    with SQLiteSession(path, "s") as session:
        session.append(agent_holds()[0])
        row = stored(agent_holds()[3])
        row["is_error"] = "no"
        session._conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES (?, ?)", ("s", json.dumps(row)))
    with pytest.raises(MessageFormatError, match=r"session 's' in '.*s\.db': row 2: 'is_error' must be bool"):
        YiemAgent(llm_call=lambda f: None, agent_event_sink=None, session=SQLiteSession(path, "s"), builtin_tools=False)


def test_a_history_file_entry_the_check_refuses_names_the_file_and_the_entry(tmp_path):
    """load_history names the file, the entry and the field of a message the check refuses."""
    path = tmp_path / "h.json"
    save_history(agent_holds(), path)
    document = json.loads(path.read_text())
    document["messages"][4]["content"][0]["id"] = 7  # a flat call whose id is not a str: read, then given an id of its own
    document["messages"][2]["decision"] = "maybe"
    path.write_text(json.dumps(document))
    with pytest.raises(MessageFormatError, match=r"history file '.*h\.json': messages\[2\]: ApprovalMessage decision is 'maybe'"):
        load_history(path)


def test_a_history_file_loads_as_the_agent_wrote_it(tmp_path):
    """load_history of what the agent writes gives it back equal, every message through the fast reader."""
    path = tmp_path / "h.json"
    save_history(agent_holds(), path)
    assert load_history(path) == agent_holds()
    assert all(read_stored(entry) is not None for entry in json.loads(path.read_text())["messages"])


def test_only_a_shipped_sessions_own_reader_is_taken_for_checked(tmp_path):
    """An agent skips its own check only for a shipped session's reader: a subclass or an instance replacing messages() is checked by the agent."""

    class Mine(SQLiteSession):
        def messages(self):
            return [UserMessage([TextContent(5)], STAMP)]  # type: ignore[arg-type]

    with SQLiteSession(tmp_path / "a.db", "a") as shipped, Mine(tmp_path / "b.db", "b") as mine, SQLiteSession(tmp_path / "c.db", "c") as patched:
        patched.messages = mine.messages  # type: ignore[method-assign]
        assert sessions.loads_checked(shipped)
        assert not sessions.loads_checked(mine) and not sessions.loads_checked(patched)
        assert not sessions.loads_checked(object())
    with pytest.raises(MessageFormatError, match=r"messages\[0\]: UserMessage content\[0\] is TextContent\(5\)"):
        YiemAgent(llm_call=lambda f: None, agent_event_sink=None, session=Mine(tmp_path / "d.db", "d"), builtin_tools=False)


def test_an_agent_from_a_session_holds_what_the_session_stored(tmp_path):
    """A new agent on a session starts from the very messages the last one stored, each once checked."""
    path = tmp_path / "s.db"
    with SQLiteSession(path, "s") as session:
        for message in agent_holds():
            session.append(message)
    agent = YiemAgent(llm_call=lambda f: None, agent_event_sink=None, session=SQLiteSession(path, "s"), builtin_tools=False)
    try:
        assert agent.history() == agent_holds()
    finally:
        shutdown(agent)


def test_storing_a_reply_or_result_the_agent_holds_does_not_check_it_again(tmp_path, monkeypatch):
    """save_history and SQLiteSession.append store the agent's replies and tool results as they are: the check (normalize_message) they passed is not made again."""
    held = [m for m in agent_holds() if isinstance(m, (AssistantMessage, ToolResultMessage))]

    def checked_again(message: Any) -> Any:
        raise AssertionError(f"checked a second time: {message!r:.60}")

    monkeypatch.setattr(history_json, "normalize_message", checked_again)
    save_history(held, tmp_path / "h.json")
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        for message in held:
            session.append(message)
    monkeypatch.undo()
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        assert session.messages() == held == load_history(tmp_path / "h.json")


def test_loading_what_the_agent_wrote_runs_no_check_but_the_fast_readers(tmp_path, monkeypatch):
    """load_history and SQLiteSession.messages read the agent's own form in one pass: the reader of record's check (normalize_message) never runs."""
    save_history(agent_holds(), tmp_path / "h.json")
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        for message in agent_holds():
            session.append(message)

    def checked(message: Any) -> Any:
        raise AssertionError(f"read the long way: {message!r:.60}")

    monkeypatch.setattr(history_json, "normalize_message", checked)
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        assert session.messages() == agent_holds() == load_history(tmp_path / "h.json")


def test_an_agent_does_not_check_again_what_a_shipped_session_checked(tmp_path, monkeypatch):
    """An agent from an SQLiteSession starts without checking the loaded messages a second time (each is checked once, as it is read)."""
    path = tmp_path / "s.db"
    with SQLiteSession(path, "s") as session:
        for message in agent_holds():
            session.append(message)

    def checked_again(message: Any) -> Any:
        raise AssertionError(f"checked a second time: {message!r:.60}")

    monkeypatch.setattr(history_files, "normalize_message", checked_again)
    agent = YiemAgent(llm_call=lambda f: None, agent_event_sink=None, session=SQLiteSession(path, "s"), builtin_tools=False)
    try:
        assert agent.history() == agent_holds()
    finally:
        shutdown(agent)


row_texts = st.one_of(
    st.builds(lambda value: json.dumps(value, ensure_ascii=False), strategies.json_objects),
    st.builds(lambda value, pad: pad + json.dumps(value) + pad, strategies.json_objects, st.sampled_from(["", " ", "\n", "\t"])),
    st.sampled_from(["{", "}", "{}", "{} {}", "{}x", '{"a": NaN}', '{"a": 1e400}', '{"\\ud800": "\\udfff"}', "{" * 2000 + "}" * 2000, '{"a": [1, 2}', "\ufeff{}"]),
    st.text(max_size=12).map(lambda t: "{" + t + "}"),
)
row_bodies = row_texts | row_texts.map(lambda t: t.encode("utf-8", "surrogatepass")) | row_texts.map(lambda t: t.encode("utf-16")) | row_texts.map(lambda t: t.encode("utf-16-le", "surrogatepass")) | st.binary(max_size=12).map(lambda b: b"{" + b + b"}")


def _outcome(read: Any, body: Any) -> Any:
    try:
        return ("value", read(body))
    except Exception as exc:  # the very error json.loads raises, compared by type and text
        return ("error", type(exc), str(exc))


@given(row_bodies)
def test_reading_a_row_is_json_loads(body):
    """Property: loads_row gives what json.loads gives for any row, str or bytes of any encoding, or raises the very same error."""
    assert _outcome(loads_row, body) == _outcome(json.loads, body)


@pytest.mark.parametrize("body", ["{{}", b"{{}", '{{"a": 1}', b'{{"a": 1}', "{}}", "{} {}", ' {"a": 1}', "\ufeff{}", b"\xef\xbb\xbf{}", b'{"a": "\xed\xa0\x80"}'])
def test_a_row_that_is_not_one_bare_object_is_read_as_json_loads_reads_it(body):
    """A row with more than one object, an object after a stray brace, whitespace or a byte-order mark, or a surrogate written in UTF-8 gives what json.loads gives, or the very same error."""
    assert _outcome(loads_row, body) == _outcome(json.loads, body)


histories = st.lists(
    st.one_of(
        st.builds(lambda ids: AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": i, "type": "function", "function": {"name": "t", "arguments": {}}} for i in ids]}], timestamp=STAMP), st.lists(st.sampled_from("abc"), max_size=3)),
        st.builds(lambda text: AssistantMessage([TextContent(text)], timestamp=STAMP), st.sampled_from(["", "x"])),
        st.builds(lambda i: ToolResultMessage(i, "t", [], timestamp=STAMP), st.sampled_from("abcd")),
        st.builds(lambda i, d: ApprovalMessage(i, "t", d, {}, "", STAMP), st.sampled_from("ab"), st.sampled_from(APPROVAL_DECISIONS)),
        st.just(UserMessage([TextContent("u")], STAMP)),
    ),
    max_size=10,
)


@settings(max_examples=1000)
@given(histories)
def test_the_one_walk_for_a_whole_history_agrees_with_the_repair(history):
    """Property: the one walk that takes a history for whole does so only when the repair would change nothing, also reading the calls of checked messages from their blocks."""
    calls_of = history_files._extracted_calls
    if history_files._whole(history, calls_of):
        assert history_files._walk(history, None, calls_of) == (history, [], [], [])
    assert history_files._mend(history, None, calls_of) == history_files._walk(history, None, calls_of)
    checked = [normalize_message(m) for m in history]  # what stored_calls reads: messages as the check leaves them
    assert history_files._mend(checked, None, stored_calls) == history_files._walk(checked, None, calls_of)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stored_data(), st.sampled_from(["str", "bytes", "padded", "cut"]), st.sampled_from([None, 0, "stale"]))
def test_a_session_reads_its_rows_as_message_from_json_does(data, form, mark):
    """Property: a session's rows read in one loop, unmarked or with a mark not their body's, give what message_from_json gives for each, or its very refusal naming the row."""
    text = json.dumps(data)
    body: Any = {"str": text, "bytes": text.encode("utf-8", "surrogatepass"), "padded": f" {text}\n", "cut": text[:-1]}[form]
    if mark == "stale":  # the mark of the row before an edit
        mark = history_json.row_mark((text + " ").encode("utf-8", "surrogatepass"))
    try:
        expected: Any = message_from_json(body, "session 's' in 'x': row 3")
    except MessageFormatError as exc:
        expected = str(exc)
    try:
        [message] = sessions.messages_from_rows([(3, body, mark)], "session 's' in 'x'")
    except MessageFormatError as exc:
        assert str(exc) == expected
    else:
        assert message == expected if isinstance(data, dict) and "timestamp" in data else type(message) is type(expected)
