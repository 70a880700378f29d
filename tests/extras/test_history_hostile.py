"""Hostile history files and session rows, and messages that hold what JSON cannot (review).

A file or a row is read as MessageFormatError naming where, never another exception; a
message whose details contain themselves, or nest past Python's recursion limit, is stored.
"""

from __future__ import annotations

import json
import sqlite3
from collections import OrderedDict, namedtuple
from datetime import date, datetime, time, timezone, tzinfo
from enum import IntEnum

import pytest
from hypothesis import given

import strategies
from helpers import make_tool
from yiemagent import AgentToolResult, MessageFormatError, SQLiteSession, load_history, run_agent, save_history, shutdown, take_response
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.history import _json
from yiemagent.types import AssistantMessage, ImageContent, LLMUsage, MessageContent, TextContent, ToolResultMessage, UserMessage

STAMP = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than json's own limit
DEEPISH = "[" * 900 + "]" * 900  # json reads it; decoding it recursively does not fit the stack


def document(*messages: str) -> str:
    return '{"format": "yiemagent-history", "version": 1, "messages": [%s]}' % ", ".join(messages)


TOOL = '{"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "is_error": false, "details": %s}'
USER = '{"role": %s, "content": %s}'
HOSTILE = {
    "document-too-deep": '{"format": "yiemagent-history", "version": 1, "messages": %s}' % DEEP,
    "details-too-deep": document(TOOL % DEEPISH),
    "role-not-text": document(USER % ('["user"]', "[]")),
    "image-data-not-text": document(USER % ('"user"', '[{"type": "image", "data": 5, "mime_type": []}]')),
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_load_history_of_a_hostile_file_is_a_message_format_error(tmp_path, text):
    """RecursionError and TypeError escaped; an image with data 5 loaded and went to the provider as 'data:[];base64,5'."""
    path = tmp_path / "history.json"
    path.write_text(text)
    with pytest.raises(MessageFormatError, match="history.json"):
        load_history(path)


@pytest.mark.parametrize(
    "body",
    [TOOL % DEEP, TOOL % DEEPISH, USER % ('{"x": 1}', "[]"), USER % ('"user"', '["hi", 5, {"type": "weird"}]')],
    ids=["too-deep", "details-too-deep", "role-not-text", "content-not-blocks"],
)
def test_a_hostile_session_row_is_a_message_format_error_naming_the_row(tmp_path, body):
    path = tmp_path / "s.db"
    with SQLiteSession(path, "s") as session:
        session.append(UserMessage([TextContent("hi")]))
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES (?, ?)", ("s", body))
    with SQLiteSession(path, "s") as session, pytest.raises(MessageFormatError, match="row 2"):
        session.messages()


def answered(result: ToolResultMessage) -> list:
    """``result`` after the call it answers: a tool result alone is an orphan, left out on load (decision 17)."""
    return [tool_call_reply((result.tool_call_id, result.tool_name, {})), result]


def self_containing() -> dict:
    details: dict = {"name": "loop", "items": []}
    details["items"].append(details)
    return details


def deeply_nested(depth: int = 5000) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("details", [self_containing(), deeply_nested()], ids=["contains-itself", "nested-5000"])
def test_a_message_whose_details_json_cannot_hold_is_still_stored(tmp_path, details):
    """encode_value recursed without end: save_history raised RecursionError and the session could not store the message."""
    message = ToolResultMessage(tool_call_id="c", tool_name="t", content=[TextContent("ok")], details=details, is_error=False)
    save_history(answered(message), tmp_path / "h.json")
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        session.append(message)
        stored = session.messages()[0]
    loaded = load_history(tmp_path / "h.json")[1]
    assert loaded.content == stored.content == [TextContent("ok")]
    assert "contains itself" in json.dumps(loaded.details) or "levels deep" in json.dumps(loaded.details)
    assert loaded.details == stored.details


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_each_note_says_why_the_value_was_not_kept_and_a_value_met_twice_is_kept_twice(tmp_path):
    """A container inside itself is a note naming its type; the same list held in two places (not inside itself) is stored in both."""
    shared = [1, 2]
    message = ToolResultMessage("c", "t", [], {"loop": self_containing(), "a": shared, "b": [shared]})
    save_history(answered(message), tmp_path / "h.json")
    details = load_history(tmp_path / "h.json")[1].details
    assert details["loop"] == {"name": "loop", "items": ["<the enclosing dict, which contains itself>"]}
    assert details["a"] == [1, 2] and details["b"] == [[1, 2]]


def test_a_value_nested_deeper_than_the_bound_is_a_note_at_exactly_that_depth(tmp_path, monkeypatch):
    """Containers at depths 0 to MAX_DEPTH - 1 (details itself is depth 0) are stored; the one at MAX_DEPTH is a note saying so."""
    monkeypatch.setattr(_json, "MAX_DEPTH", 3)  # the real bound (200) works the same, deeper than a test needs to go
    message = ToolResultMessage("c", "t", [], {"v": [[("x", ["y"])]], "w": [[1]]})
    save_history(answered(message), tmp_path / "h.json")
    assert load_history(tmp_path / "h.json")[1].details == {"v": [["<a tuple nested more than 3 levels deep>"]], "w": [[1]]}


def test_ints_of_more_than_1920_bits_are_written_in_hex_and_the_rest_as_numbers(tmp_path):
    """docs/sessions.md "The JSON form": an int of 1,920 bits is a plain JSON number, in details or as a usage count; one of 1,921 bits (either sign) the 'int' tag."""
    widest, wider = 2**1920 - 1, 2**1920
    details = {"plain": [widest, -widest], "tagged": [wider, -wider], "cost": LLMUsage(widest)}
    save_history(answered(ToolResultMessage("c", "t", [], details, LLMUsage(widest))), tmp_path / "h.json")
    written = json.loads((tmp_path / "h.json").read_text())["messages"][1]
    assert written["details"]["plain"] == [widest, -widest] and written["usage"]["input_tokens"] == widest
    assert written["details"]["tagged"] == [{"$type": "int", "hex": hex(wider)}, {"$type": "int", "hex": hex(-wider)}]
    loaded = load_history(tmp_path / "h.json")[1]
    assert loaded.details == details and loaded.usage == LLMUsage(widest)


def test_a_typed_answer_json_cannot_hold_is_stored_as_details_are(tmp_path):
    """An AssistantMessage whose output has no JSON form (bytes, a set of them) is stored with the tags of details and loads back equal."""
    reply = AssistantMessage([TextContent("done")], timestamp=STAMP, output={"raw": b"\x00", "seen": {b"a"}})
    save_history([reply], tmp_path / "h.json")
    assert exact(load_history(tmp_path / "h.json")[0].output) == exact(reply.output)


def test_a_detail_whose_repr_raises_is_stored_as_a_note_saying_so(tmp_path):
    message = ToolResultMessage(tool_call_id="c", tool_name="t", content=[], details={"x": BadRepr()}, is_error=False)
    save_history(answered(message), tmp_path / "h.json")
    assert load_history(tmp_path / "h.json")[1].details == {"x": "<BadRepr whose repr raised RuntimeError>"}


def test_a_history_file_that_is_not_utf8_is_a_message_format_error(tmp_path):
    """It was read as text before the try: UnicodeDecodeError escaped load_history."""
    path = tmp_path / "history.json"
    path.write_bytes(b'{"format": "yiemagent-history", "version": 1, "messages": ["\xff"]}')
    with pytest.raises(MessageFormatError, match="history.json"):
        load_history(path)


def test_a_session_row_whose_text_is_not_utf8_is_a_message_format_error_naming_the_row(tmp_path):
    """sqlite3 failed to decode the TEXT while fetching: an OperationalError naming no row."""
    path = tmp_path / "s.db"
    with SQLiteSession(path, "s") as session:
        session.append(UserMessage([TextContent("hi")]))
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES ('s', CAST(x'ff' AS TEXT))")
    with SQLiteSession(path, "s") as session, pytest.raises(MessageFormatError, match="row 2"):
        session.messages()


# --- storing is total: any str, any int, any key (docs/sessions.md "The JSON form") -------


def exact(value):
    """``value`` as nested tuples naming every type, so that 1 and True, [1] and (1,), 0.0 and -0.0 differ."""
    if isinstance(value, dict):
        return ("dict", tuple((exact(k), exact(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(exact(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, frozenset(exact(v) for v in value))
    if isinstance(value, (datetime, date, time)):
        return (type(value).__name__, value.isoformat())
    if isinstance(value, int) and not isinstance(value, bool):
        return (type(value).__name__, hex(value))  # repr of an int past 4,300 digits raises
    return (type(value).__name__, repr(value))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A directory and an SQLite session shared by a property's examples (cleared by each)."""
    where = tmp_path_factory.mktemp("total")
    with SQLiteSession(where / "s.db", "p", synchronous="OFF") as session:
        yield where, session


@given(strategies.any_details)
def test_any_details_are_stored_and_come_back_exactly(store, details):
    """Property: details with lone surrogates, ints past 4,300 digits and keys of any type never make save_history or SQLiteSession.append raise, and load back exactly."""
    where, session = store
    message = ToolResultMessage("c", "t", [TextContent("ok")], details, is_error=False)
    save_history(answered(message), where / "h.json")
    session.clear()
    session.append(message)
    for loaded in (load_history(where / "h.json")[1], session.messages()[0]):
        assert loaded == message and exact(loaded.details) == exact(details)


HOSTILE_DETAILS = {
    "lone-surrogate-value": {"text": "\ud800"},
    "lone-surrogate-key": {"\udfff": 1, "ok": "naïve"},
    "int-past-the-limit": {"n": 10**5000, "m": -(10**4301) + 7},
    "keys-of-other-types": {1: "one", (2, "b"): "pair", None: "none", frozenset({"x"}): "set", 10**5000: "huge"},
}


@pytest.mark.parametrize("details", HOSTILE_DETAILS.values(), ids=HOSTILE_DETAILS.keys())
def test_details_json_cannot_write_are_stored_by_both_stores(tmp_path, details):
    """save_history raised UnicodeEncodeError or ValueError; SQLiteSession.append the same: both store and load them back."""
    message = ToolResultMessage("c", "t", [TextContent("ok")], details, is_error=False)
    save_history(answered(message), tmp_path / "h.json")
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        session.append(message)
        assert exact(session.messages()[0].details) == exact(details)
    assert exact(load_history(tmp_path / "h.json")[1].details) == exact(details)


def test_a_document_is_utf8_and_ascii_only_when_it_holds_a_lone_surrogate(tmp_path):
    """Non-ASCII text is written as UTF-8; only a document holding a lone surrogate is escaped to ASCII (and reads back the same), laid out as any other (indented one space a level)."""
    plain, odd = tmp_path / "plain.json", tmp_path / "odd.json"
    save_history([UserMessage([TextContent("naïve ✓")])], plain)
    save_history(answered(ToolResultMessage("c", "t", [TextContent("naïve")], {"s": "\ud800"})), odd)
    assert "naïve ✓" in plain.read_text(encoding="utf-8")
    assert odd.read_bytes().isascii() and b"\\ud800" in odd.read_bytes()
    assert odd.read_text().startswith('{\n "format": "yiemagent-history",\n "version": 1,\n "messages": [\n  {\n')
    assert load_history(odd)[1].details == {"s": "\ud800"} and load_history(odd)[1].content == [TextContent("naïve")]


def test_a_detail_whose_own_methods_raise_is_stored_as_its_repr(tmp_path):
    """A datetime whose tzinfo raises, a TextContent whose text is not a str: stored as their repr, not an exception."""

    class BadZone(tzinfo):
        def utcoffset(self, dt):
            raise RuntimeError("no offset")

        def __repr__(self) -> str:
            return "BadZone()"

    details = {"when": datetime(2024, 1, 1, tzinfo=BadZone()), "block": TextContent(5)}
    save_history(answered(ToolResultMessage("c", "t", [], details)), tmp_path / "h.json")
    back = load_history(tmp_path / "h.json")[1].details
    assert back == {"when": repr(details["when"]), "block": repr(details["block"])}


def test_content_and_usage_inside_details_come_back_as_those_objects(tmp_path):
    """docs/sessions.md's table: a TextContent, an ImageContent and an LLMUsage held in details are stored tagged and load as the very objects."""
    details = {"said": TextContent("hi"), "shown": [ImageContent("aGk=", "image/png")], "cost": LLMUsage(1, 2, 3, 4, 5)}
    save_history(answered(ToolResultMessage("c", "t", [], details)), tmp_path / "h.json")
    assert exact(load_history(tmp_path / "h.json")[1].details) == exact(details)


DROPPED_IMAGE = "[an image was dropped: its data or mime_type is not text (content/0)]"
MENDED = {
    "str-block": (ToolResultMessage("c", "t", ["hi"], timestamp=STAMP), ToolResultMessage("c", "t", [TextContent("hi")], timestamp=STAMP)),
    "no-content": (ToolResultMessage("c", "t", None, timestamp=STAMP), ToolResultMessage("c", "t", [], timestamp=STAMP)),  # type: ignore[arg-type]
    "text-not-str": (ToolResultMessage("c", "t", [TextContent(5)], timestamp=STAMP), ToolResultMessage("c", "t", [TextContent("5")], timestamp=STAMP)),
    "image-data-not-str": (AssistantMessage([ImageContent(5, "image/png")], timestamp=STAMP), AssistantMessage([TextContent(DROPPED_IMAGE)], timestamp=STAMP)),
    "image-type-not-str": (AssistantMessage([ImageContent("aGk=", 5)], timestamp=STAMP), AssistantMessage([TextContent(DROPPED_IMAGE)], timestamp=STAMP)),
    "usage-a-dict": (ToolResultMessage("c", "t", [], usage={"input_tokens": 1}, timestamp=STAMP), ToolResultMessage("c", "t", [], timestamp=STAMP)),
    "usage-a-str": (AssistantMessage([], usage="many", timestamp=STAMP), AssistantMessage([], timestamp=STAMP)),
    "texts-not-str": (
        AssistantMessage([], api=1, provider=2, model=3, stop_reason=4, error_message=5, timestamp=STAMP),
        AssistantMessage([], api="1", provider="2", model="3", stop_reason="4", error_message="5", timestamp=STAMP),
    ),
}


@pytest.mark.parametrize("message, held", MENDED.values(), ids=MENDED.keys())
def test_a_reply_or_result_an_agent_would_mend_is_stored_mended_and_loads_again(tmp_path, message, held):
    """A tool result or reply built by hand with fields of the wrong type is stored as the agent would hold it (normalize_message): stored as it was, the row would not load (an image with data 5 did not)."""
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        session.append(message)
        assert session.messages() == [held]


class Sound(MessageContent):
    """A content type of the caller's own (normalize.py keeps one whose ``to_dict`` is plain JSON)."""

    def __init__(self, data: object) -> None:
        self.data = data

    def to_dict(self) -> dict:
        return {"type": "sound", "data": self.data}


def test_a_block_of_the_callers_own_type_is_stored_as_the_agent_holds_it(tmp_path):
    """One whose to_dict holds bytes made save_history and SQLiteSession.append raise TypeError; now it is dropped with a note, as the agent drops it, and one that is plain JSON is kept."""
    message = ToolResultMessage("c", "t", [Sound("AAA="), Sound(b"\x00")], timestamp=STAMP)
    save_history(answered(message), tmp_path / "h.json")
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        session.append(message)
        stored = session.messages()[0]
    loaded = load_history(tmp_path / "h.json")[1]
    assert loaded == stored and loaded.content[0] == {"type": "sound", "data": "AAA="}
    assert loaded.content[1] == TextContent("[a Sound block was dropped: result of 't'/1/data is a bytes, which is not a JSON value]")


def test_a_reply_whose_timestamp_is_not_a_datetime_is_stored_with_the_time_it_was_stored(tmp_path):
    """The check gives a reply without a datetime timestamp the current time, as a run does: stored as "yesterday", the row would not load."""
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        before = datetime.now(timezone.utc)
        session.append(AssistantMessage([TextContent("hi")], model="m", timestamp="yesterday"))  # type: ignore[arg-type]
        after = datetime.now(timezone.utc)
        [loaded] = session.messages()
    assert loaded.content == [TextContent("hi")] and loaded.model == "m" and before <= loaded.timestamp <= after


OTHER_FORMS = {
    "bytearray": (bytearray(b"\x00\x01"), b"\x00\x01"),
    "int-enum": (IntEnum("Level", "LOW")["LOW"], 1),
    "ordered-dict": (OrderedDict(a=1), {"a": 1}),
    "named-tuple": (namedtuple("Point", "x y")(1, 2), (1, 2)),
}


@pytest.mark.parametrize("value, back", OTHER_FORMS.values(), ids=OTHER_FORMS.keys())
def test_the_values_docs_list_come_back_in_their_base_form(tmp_path, value, back):
    """docs/sessions.md's table of values that come back in another form: each comes back as it says."""
    save_history(answered(ToolResultMessage("c", "t", [], {"v": value})), tmp_path / "h.json")
    assert exact(load_history(tmp_path / "h.json")[1].details["v"]) == exact(back)


def test_a_usage_whose_counts_are_not_ints_is_stored_as_none_with_a_warning(tmp_path, caplog):
    """A tool's LLMUsage(1.5) was written as is and the file then refused to load ('usage.input_tokens' must be int)."""
    message = ToolResultMessage("c", "t", [TextContent("ok")], {}, LLMUsage(1.5))
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        save_history(answered(message), tmp_path / "h.json")
    assert load_history(tmp_path / "h.json")[1].usage is None
    assert [r.getMessage() for r in caplog.records] == [f"a tool message's usage {LLMUsage(1.5)!r} has counts that are not ints; stored without its usage"]


def test_an_agent_with_a_session_keeps_a_tool_result_whose_details_json_cannot_write(agents, tmp_path):
    """The run ended "error" and the session lost the tool result for good; now the run ends well and a reloaded agent has the result, details exact."""
    details = {"\ud800": "lone", "n": 10**5000, (1, "k"): {"s": "\udfff"}}
    odd = make_tool("odd", lambda *a: AgentToolResult([TextContent("done")], details))
    first = agents(ScriptedLLM([tool_call_reply(("c1", "odd", {})), "finished"]), [odd], session=SQLiteSession(tmp_path / "s.db", "x"))
    run_agent(first, "go")
    response = take_response(first, timeout=10)
    assert (response.stop_reason, response.error_message) == ("stop", None)
    save_history(first.history(), tmp_path / "h.json")
    shutdown(first, timeout=10)
    again = agents(ScriptedLLM([]), [odd], session=SQLiteSession(tmp_path / "s.db", "x"))
    for history in (again.history(), load_history(tmp_path / "h.json")):
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
        assert history[2].tool_call_id == "c1" and exact(history[2].details) == exact(details)
