"""Hostile history files and session rows, and messages that hold what JSON cannot (review).

A file or a row is read as MessageFormatError naming where, never another exception; a
message whose details contain themselves, or nest past Python's recursion limit, is stored.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from yiemagent import MessageFormatError, SQLiteSession, load_history, save_history
from yiemagent.messages import TextContent, ToolResultMessage, UserMessage

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


@pytest.mark.parametrize("body", [TOOL % DEEP, TOOL % DEEPISH, USER % ('{"x": 1}', "[]")], ids=["too-deep", "details-too-deep", "role-not-text"])
def test_a_hostile_session_row_is_a_message_format_error_naming_the_row(tmp_path, body):
    path = tmp_path / "s.db"
    with SQLiteSession(path, "s") as session:
        session.append(UserMessage([TextContent("hi")]))
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO yiemagent_messages (session_id, body) VALUES (?, ?)", ("s", body))
    with SQLiteSession(path, "s") as session, pytest.raises(MessageFormatError, match="row 2"):
        session.messages()


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
    save_history([message], tmp_path / "h.json")
    with SQLiteSession(tmp_path / "s.db", "s") as session:
        session.append(message)
        stored = session.messages()[0]
    loaded = load_history(tmp_path / "h.json")[0]
    assert loaded.content == stored.content == [TextContent("ok")]
    assert "contains itself" in json.dumps(loaded.details) or "levels deep" in json.dumps(loaded.details)
    assert loaded.details == stored.details


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_detail_whose_repr_raises_is_stored_as_a_note_saying_so(tmp_path):
    message = ToolResultMessage(tool_call_id="c", tool_name="t", content=[], details={"x": BadRepr()}, is_error=False)
    save_history([message], tmp_path / "h.json")
    assert load_history(tmp_path / "h.json")[0].details == {"x": "<BadRepr whose repr raised RuntimeError>"}


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
