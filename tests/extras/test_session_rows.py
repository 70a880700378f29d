"""Session rows: the compact form, the writer's mark, and rows of the first form (docs/sessions.md "Rows and their mark")."""

from __future__ import annotations

import copy
import json
import logging
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import strategies
from helpers import WAIT
from session_backends import backend, postgres_server  # noqa: F401  fixtures: each backend in turn
from test_stored_form import agent_holds, approvals, canonical_replies, every_field_set
from yiemagent import MessageFormatError, ApprovalMessage, AssistantMessage, CompactionMessage, ImageContent, LLMUsage, SQLiteSession, TextContent, ToolResultMessage, UserMessage, YiemAgent, shutdown
from yiemagent.history._json import message_to_data, message_to_row, read_fields, row_mark
from yiemagent.history import _stored
from yiemagent.history._stored import basic_utc, parse_stamp, read_marked, read_stored

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "session-v1.db"
SECOND_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "session-v2.db"
SCHEMA = 3  # this version's (docs/sessions.md "Rows and their mark")
STAMP = datetime(2026, 12, 6, 9, 2, 4, 633046, tzinfo=timezone.utc)


def first_form_messages() -> list[Any]:
    """The messages of tests/fixtures/session-v1.db: one of each kind and field, as the first form (schema 1) stored them."""
    ahead = timezone(timedelta(hours=5, minutes=30))
    return [
        UserMessage([TextContent("What is the weather in Paris?"), ImageContent("aGk=", "image/png")], STAMP),
        AssistantMessage(
            [{"type": "tool_calls", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}],
            api="openai-completions",
            provider="openai",
            model="gpt-4o",
            usage=LLMUsage(100, 20, 0, 0, 120, 0),
            stop_reason="tool_use",
            timestamp=STAMP,
        ),
        ApprovalMessage("call_0", "get_weather", "approved", {"city": "Paris"}, "", STAMP),
        ToolResultMessage("call_0", "get_weather", [TextContent("Sunny, 22 C")], {}, None, None, False, STAMP),
        AssistantMessage([{"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"q": [1, 2.5, None, True]}}], usage=LLMUsage(5, 6, 1, 2, 11, 3), timestamp=STAMP),
        ToolResultMessage(
            "call_1",
            "lookup",
            [TextContent("found ☃ 👋")],
            {"when": STAMP, "pair": (1, "a"), "raw": b"\x00\xff", 3: "int key"},
            LLMUsage(1, 2, 0, 0, 3, 0),
            ["added_tool"],
            True,
            datetime(2026, 12, 6, 14, 32, 4, tzinfo=ahead),
        ),
        UserMessage([TextContent("naive and old")], datetime(2001, 2, 3, 4, 5, 6)),
        AssistantMessage([TextContent("It is sunny.")], model="gpt-4o", stop_reason="stop", error_message="", timestamp=STAMP, output={"answer": "sunny"}),
        AssistantMessage([TextContent("")], stop_reason="error", error_message="the server said 500", timestamp=STAMP),
    ]


# --- rows of schema 1 -------------------------------------------------------------------------


def test_a_database_of_the_first_form_still_loads_and_takes_new_rows(backend):
    """A database written by schema 1 (tests/fixtures/session-v1.db: rows in the first form, no mark) opens as this schema, every message of it loads as it was stored, and new rows are written beside it, marked."""
    backend.make_first_schema(FIXTURE)
    with backend.open("v1") as session:
        assert session.messages() == first_form_messages()
        session.append(UserMessage([TextContent("after the upgrade")], STAMP))
        assert session.messages() == [*first_form_messages(), UserMessage([TextContent("after the upgrade")], STAMP)]
    rows = backend.rows()
    assert backend.schema_version() == SCHEMA
    assert [mark for _, _, mark in rows[:-1]] == [None] * len(first_form_messages())  # the old rows stay as they were, checked as read
    assert rows[-1][2] == row_mark(rows[-1][1].encode("utf-8"))


def test_the_fixture_holds_the_first_form():
    """tests/fixtures/session-v1.db holds rows as schema 1 wrote them (full field lists, long timestamps), so the test above reads that form and not this version's."""
    with closing(sqlite3.connect(FIXTURE)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        assert [c[1] for c in conn.execute("PRAGMA table_info(yiemagent_messages)")] == ["id", "session_id", "body"]
        bodies = [json.loads(body) for (body,) in conn.execute("SELECT body FROM yiemagent_messages ORDER BY id")]
    assert len(bodies) == len(first_form_messages())
    assert bodies[1]["timestamp"] == "2026-12-06T09:02:04.633046+00:00" and bodies[1]["error_message"] is None
    assert bodies[3]["details"] == {} and bodies[3]["usage"] is None and bodies[3]["is_error"] is False


# --- rows of schema 2 -------------------------------------------------------------------------


def test_a_database_of_the_second_form_reads_as_it_did_marks_and_all(backend, monkeypatch):
    """A database written by schema 2 (tests/fixtures/session-v2.db: compact rows, one text block as a list, marked) opens as this schema, each message loads as it was stored, its marked rows still built without checking them again, and new rows are written beside it in this form."""
    backend.make_second_schema(SECOND_FIXTURE)
    stored = backend.rows()

    def parsed_again(text: Any) -> Any:
        raise AssertionError(f"parsed again: {text!r}")

    monkeypatch.setattr(_stored, "parse_tool_arguments", parsed_again)  # row 2's calls carry a server's text: only the checked reader parses it
    with backend.open("v2") as session:
        assert session.messages() == first_form_messages()
        session.append(UserMessage([TextContent("after the upgrade")], STAMP))
        assert session.messages()[-1] == UserMessage([TextContent("after the upgrade")], STAMP)
    rows = backend.rows()
    assert backend.schema_version() == SCHEMA
    assert rows[:-1] == stored  # the old rows and their marks stay as they were
    assert json.loads(rows[-1][1])["content"] == "after the upgrade" and rows[-1][2] == row_mark(rows[-1][1].encode("utf-8"))


def test_the_second_fixture_holds_the_second_form():
    """tests/fixtures/session-v2.db holds rows as schema 2 wrote them (one text block as a list, marks set), so the test above reads that form and not this version's."""
    with closing(sqlite3.connect(SECOND_FIXTURE)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
        rows = conn.execute("SELECT body, mark FROM yiemagent_messages ORDER BY id").fetchall()
    assert len(rows) == len(first_form_messages())
    assert json.loads(rows[3][0])["content"] == [{"text": "Sunny, 22 C", "type": "text"}]
    assert [mark is not None for _, mark in rows] == [True] * 5 + [False] + [True] * 3  # row 6 holds tagged details
    assert all(mark == row_mark(body.encode("utf-8")) for body, mark in rows if mark is not None)


# --- the compact form and its mark ---------------------------------------------------------------

every_kind = strategies.stored_messages | canonical_replies() | approvals | st.builds(
    lambda message, stamp: UserMessage(message.content, stamp), strategies.user_messages, strategies.any_datetimes
)


def first_form_read(message: Any) -> Any:
    """What the first form of ``message`` loads as: its full JSON form read field by field and checked (the reader of record)."""
    return read_fields(json.loads(json.dumps(message_to_data(message))), "row 1")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(every_kind)
def test_a_row_loads_as_the_first_form_of_its_message_did(message):
    """Property: for a message of any kind, its compact row loads, by every reader, as its first (full) form loaded; a marked row is built by read_marked to that very message."""
    expected = first_form_read(message)
    body, mark = message_to_row(message)
    data = json.loads(body)
    assert read_fields(copy.deepcopy(data), "row 1") == expected
    if mark is not None:
        assert mark == row_mark(body)
        fast = read_marked(copy.deepcopy(data))
        assert type(fast) is type(expected) and fast == expected
        # built as __init__ builds it (the formatting cache's slot aside: docs/performance.md "What is cached")
        assert vars(fast).keys() - {"_yiemagent_cache"} == vars(expected).keys() - {"_yiemagent_cache"}
        assert read_stored(copy.deepcopy(data)) == expected  # marked only what the checking fast reader takes


def test_each_marked_row_the_agent_writes_is_built_as_the_checked_reader_builds_it():
    """Every kind and form the agent writes, read from its marked row by read_marked itself (no fallback to hide a failure): the message the checked reader gives, and its blocks and usage, built as __init__ builds them."""
    holds = agent_holds() + every_field_set() + first_form_messages() + [
        UserMessage([TextContent("one")], STAMP), UserMessage([TextContent("a"), TextContent("b")], STAMP), UserMessage([ImageContent("aGk=", "image/png")], STAMP),
        ToolResultMessage("c1", "t", [TextContent("r"), ImageContent("aGk=", "image/png")], usage=LLMUsage(1, 2, 3, 4, 0, 5), timestamp=STAMP),
        ApprovalMessage("c1", "t", "rejected", timestamp=STAMP),  # its arguments ({}) and reason ("") left out of the row
        CompactionMessage("the summary", 4, STAMP),
    ]
    for message in holds:
        body, mark = message_to_row(message)
        if mark is None:
            continue
        expected = read_fields(json.loads(body), "row 1")
        fast = read_marked(json.loads(body))
        assert type(fast) is type(expected) and fast == expected, body
        assert vars(fast).keys() - {"_yiemagent_cache"} == vars(expected).keys() - {"_yiemagent_cache"}
        for block, want in zip(fast.__dict__.get("content", []), expected.__dict__.get("content", []), strict=True):
            assert type(block) is type(want) and block == want and (not hasattr(want, "__dict__") or isinstance(want, dict) or vars(block) == vars(want)), body
        if getattr(expected, "usage", None) is not None:
            assert vars(fast.usage) == vars(expected.usage), body


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(st.lists(every_kind, max_size=6))
def test_any_messages_come_back_from_a_session_as_their_first_form_did(tmp_path_factory, messages):
    """Property: messages of every kind appended to an SQLiteSession come back as their first form loaded (the round trip of the compact rows, marked or not)."""
    with SQLiteSession(tmp_path_factory.mktemp("rows") / "s.db", "s") as session:
        for message in messages:
            session.append(message)
        assert session.messages() == [first_form_read(m) for m in messages]


def test_the_messages_an_agent_writes_are_marked_and_shorter():
    """Every kind and form the agent writes (its replies with calls as objects or as a server's text, results, approvals, every field set) gets the mark, and its row is shorter than the first form."""
    for message in agent_holds() + every_field_set() + first_form_messages()[:5]:
        body, mark = message_to_row(message)
        assert mark == row_mark(body), body
        assert len(body) < len(json.dumps(message_to_data(message), ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def test_a_row_leaves_out_what_reading_gives_back():
    """The compact form: no field at its default, no zero count, no total that is input + output, a UTC timestamp in ISO 8601's basic form (any other timestamp as isoformat writes it), a content of one text block as its text."""
    reply = AssistantMessage([TextContent("hi")], model="m", usage=LLMUsage(5, 2), timestamp=STAMP)
    result = ToolResultMessage("c1", "t", [TextContent("r")], timestamp=datetime(2001, 2, 3, 4, 5, 6))
    assert json.loads(message_to_row(reply)[0]) == {
        "role": "assistant", "content": "hi", "model": "m", "usage": {"input_tokens": 5, "output_tokens": 2}, "timestamp": "20261206T090204.633046Z"
    }
    assert json.loads(message_to_row(result)[0]) == {"role": "tool", "tool_call_id": "c1", "tool_name": "t", "content": "r", "timestamp": "2001-02-03T04:05:06"}
    two = UserMessage([TextContent("a"), TextContent("b")], STAMP)
    cited = AssistantMessage([TextContent("a", citations=[{"type": "url_citation", "url": "https://example.com"}])], timestamp=STAMP)
    assert json.loads(message_to_row(two)[0])["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]  # more than one block: as they are
    assert json.loads(message_to_row(cited)[0])["content"] == [{"type": "text", "text": "a", "citations": [{"type": "url_citation", "url": "https://example.com"}]}]
    assert json.loads(message_to_row(AssistantMessage([], usage=LLMUsage(5, 2, total_tokens=9), timestamp=STAMP))[0])["usage"] == {"input_tokens": 5, "output_tokens": 2, "total_tokens": 9}


@given(strategies.any_datetimes)
@example(STAMP)  # UTC: the basic form, which the 3.10 reading reads
def test_a_compact_timestamp_names_the_same_time(stamp):
    """Property: a row's timestamp reads back as the datetime stored, whatever its offset (naive, UTC, any other), on this Python and by the 3.10 reading of the basic form."""
    text = json.loads(message_to_row(UserMessage([], stamp))[0])["timestamp"]
    assert parse_stamp(text) == stamp and parse_stamp(text).utcoffset() == stamp.utcoffset()
    if text.endswith("Z"):  # what Python 3.10, whose fromisoformat does not read the basic form, reads
        assert basic_utc(text) == stamp


# --- rows the writer did not mark, or that changed since ----------------------------------------

BAD_ARGUMENTS = [1]  # arguments that are not an object: the check makes them {} (decision 15)


def reply_calling(arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": arguments}}]}], "timestamp": "20261206T090204.633046Z"}


def test_a_marked_row_edited_by_hand_is_checked_again(backend):
    """A row whose body was edited after its writer marked it (bad arguments put in by hand) no longer matches its mark: it is checked as it loads, its arguments mended."""
    with backend.open("s") as session:
        session.append(AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": '{"x": 21}'}}]}], timestamp=STAMP))
    [(row_id, body, mark)] = backend.rows()
    assert mark == row_mark(body.encode("utf-8"))
    backend.set_body(row_id, json.dumps(reply_calling(BAD_ARGUMENTS), separators=(",", ":")))
    with backend.open("s") as session:
        [message] = session.messages()
    assert message.content[0]["tool_calls"][0]["function"]["arguments"] == {}


def test_a_row_of_another_writer_is_checked_even_in_the_new_form(backend):
    """A row in the compact form with bad arguments, inserted without a mark (another program, an older writer), is checked as it loads; so is one whose body is invalid, named with its row."""
    with backend.open("s"):
        pass
    backend.insert_raw("s", json.dumps(reply_calling(BAD_ARGUMENTS), separators=(",", ":")))
    backend.insert_raw("s", json.dumps(reply_calling('{"x": 1}'), separators=(",", ":")))
    with backend.open("s") as session:
        first, second = session.messages()
    assert first.content[0]["tool_calls"][0]["function"]["arguments"] == {}
    assert second.content[0]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'


TWO_IN_ONE = '{"role":"user","content":"a","timestamp":"20261206T090204.633046Z"},{"role":"user","content":"b","timestamp":"20261206T090204.633046Z"}'


@pytest.mark.parametrize("raw", [TWO_IN_ONE.encode(), b'{"role":"user","content":', b'{"role":"user","content":"\xff","timestamp":"20261206T090204.633046Z"}'])
def test_a_forged_mark_on_a_row_that_is_not_one_message_names_the_row(tmp_path, raw):
    """Rows read together (one JSON array) stay one message each: a row given by hand the mark of a body that is two objects, cut short or not UTF-8 is refused naming its row, the rows around it read as stored."""
    path = tmp_path / "s.db"
    with SQLiteSession(path, "s") as session:
        for text in ("first", "second", "third"):
            session.append(UserMessage([TextContent(text)], STAMP))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE yiemagent_messages SET body = CAST(? AS TEXT), mark = ? WHERE id = 2", (raw, row_mark(raw)))
    with SQLiteSession(path, "s") as session, pytest.raises(MessageFormatError, match=r"row 2: not JSON"):
        session.messages()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM yiemagent_messages WHERE id = 2")
    with SQLiteSession(path, "s") as session:
        assert session.messages() == [UserMessage([TextContent("first")], STAMP), UserMessage([TextContent("third")], STAMP)]


@pytest.mark.parametrize(
    "texts",
    [
        [],
        [b'{"a":1}', b'{"b":[2,{"c":null}]}'],
        [b"1", b"2"],  # JSON values that are not objects: each the value itself
        [b"1], [2"],  # an array that closes before the rows end: its one value is no row's
        [b'{"a":1}', b"not json", b'{"b":"\xed\xa0\x80"}'],  # one row not JSON (None), one holding a surrogate written in UTF-8
    ],
)
def test_rows_read_as_one_array_give_what_each_row_read_alone_gives(texts):
    """loads_rows gives, for rows each one JSON value or not JSON at all, what loads_row gives for each row alone (None for a row that is not JSON)."""
    assert _stored.loads_rows(texts) == [_stored._loads_or_none(text) for text in texts]


def test_a_session_of_marked_rows_holding_an_orphan_and_a_duplicate_loads_valid_to_send(backend, caplog):
    """Decision 17 holds for marked rows too: an agent on a session whose own rows hold a result for no call and a second result for one call loads it mended, and says so in a warning."""
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    stored = [
        UserMessage([TextContent("go")], STAMP),
        ToolResultMessage("x", "t", [TextContent("orphan")], timestamp=STAMP),
        AssistantMessage([{"type": "tool_calls", "tool_calls": [call]}], timestamp=STAMP),
        ToolResultMessage("c1", "t", [TextContent("first")], timestamp=STAMP),
        ToolResultMessage("c1", "t", [TextContent("again")], timestamp=STAMP),
    ]
    with backend.open("s") as session:
        for message in stored:
            session.append(message)
    assert all(mark is not None for _, _, mark in backend.rows())
    with caplog.at_level(logging.WARNING, logger="yiemagent.history"):
        agent = YiemAgent(llm_call=lambda f: None, agent_event_sink=None, session=backend.open("s"), builtin_tools=False)
        try:
            assert agent.history() == [stored[0], stored[2], stored[3]]
        finally:
            shutdown(agent)
    assert "mended to be valid to send" in caplog.text and "'x'" in caplog.text


def test_a_marked_row_is_read_without_parsing_its_arguments_again(tmp_path, monkeypatch):
    """Loading a row its writer checked and marked does not parse its calls' arguments again (the checked reader would: parse_tool_arguments)."""
    reply = AssistantMessage([{"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": '{"x": 21}'}}]}], timestamp=STAMP)
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        session.append(reply)

        def parsed_again(text: Any) -> Any:
            raise AssertionError(f"parsed again: {text!r}")

        monkeypatch.setattr(_stored, "parse_tool_arguments", parsed_again)
        assert session.messages() == [reply]


def test_sessions_opening_a_first_form_database_at_once_all_open_it(backend):
    """Eight sessions opening one database of schema 1 at the same moment, each on its own connection, all open it: one upgrades it, the others find it done (no duplicate column, no version left behind)."""
    backend.make_first_schema(FIXTURE)
    barrier = threading.Barrier(8)

    def open_it(_: int) -> Any:
        barrier.wait()
        try:
            with backend.open("v1") as session:
                return len(session.messages())
        except Exception as exc:  # the test reports it
            return exc

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(open_it, range(8), timeout=WAIT))
    assert outcomes == [len(first_form_messages())] * 8
    assert backend.schema_version() == SCHEMA
