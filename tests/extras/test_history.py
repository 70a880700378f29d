"""History beyond a run: save_history / load_history, add_message, mending tool results (docs/sessions.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from datetime import date, datetime, time, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies
from helpers import WAIT, blocking_tool, make_tool, text_result
from yiemagent import (
    AgentClosedError,
    ApprovalMessage,
    AssistantMessage,
    ImageContent,
    LLMUsage,
    MessageFormatError,
    SQLiteSession,
    TextContent,
    ToolResultMessage,
    UserMessage,
    add_message,
    continue_agent,
    format_msg_for_llm,
    load_history,
    prepare_context,
    run_agent,
    save_history,
    shutdown,
    take_response,
)
from yiemagent.history._json import message_from_json, message_to_json
from yiemagent.history import LOST_RESULT_MESSAGE, complete_tool_calls
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.normalize import normalize_message

STAMP = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))


def every_kind() -> list:
    """A conversation with one message of each type, images, raw tool-call blocks of both forms and details beyond JSON."""
    return [
        UserMessage([TextContent("hi"), ImageContent("aGk=", "image/png")], STAMP),
        tool_call_reply(("c1", "book", {"when": "tomorrow"})),
        ToolResultMessage(
            "c1",
            "book",
            [TextContent("booked")],
            {"at": STAMP, "day": date(2024, 5, 2), "slot": time(9, 30), "raw": b"\x00\xff", "pair": (1, "a"), "tags": {"x"}, "by_id": {7: "seven"}, "$type": "kept"},
            LLMUsage(1, 1),
            ["newTool"],
            True,
            STAMP,
        ),
        AssistantMessage([{"type": "tool_call", "id": "c2", "name": "x", "arguments": {"a": [1, 2]}}], usage=LLMUsage(3, 4, 1, 0, 7, 2)),
        ToolResultMessage("c2", "x", [TextContent("done")], timestamp=STAMP),
    ]


@pytest.mark.spec("19")
def test_every_message_kind_round_trips_through_a_file(tmp_path):
    """Timestamps (with their offset), images, raw tool-call blocks and details holding datetimes, bytes, tuples, sets and int keys come back equal."""
    path = tmp_path / "history.json"
    messages = every_kind()
    save_history(messages, path)
    back = load_history(path)
    assert back == messages
    assert back[2].details["at"].utcoffset() == timedelta(hours=2) and isinstance(back[2].details["pair"], tuple)
    assert isinstance(back[0].content[1], ImageContent)


@given(strategies.stored_messages)
def test_any_message_round_trips_through_its_json_form(message):
    """Property: whatever a message holds, the JSON form save_history and SQLiteSession write brings it back equal to what an agent holds (normalize_message)."""
    text = message_to_json(message)
    assert message_from_json(text, "here") == normalize_message(message)
    assert json.loads(text)["role"] == message.role  # plain JSON, readable by anything


def test_a_messages_json_form_is_compact_utf8_text():
    """message_to_json writes no space after a comma or colon and non-ASCII text as UTF-8, not as escapes."""
    message = ToolResultMessage("c1", "t", [TextContent("déjà vu")], {"n": [1, 2]}, timestamp=STAMP)
    assert message_to_json(message) == (
        '{"role":"tool","tool_call_id":"c1","tool_name":"t","content":[{"text":"déjà vu","type":"text"}],"details":{"n":[1,2]},'
        '"usage":null,"added_tool_names":null,"is_error":false,"timestamp":"2024-05-01T12:30:15.123456+02:00"}'
    ).encode("utf-8")


def test_the_document_is_versioned_json(tmp_path):
    """The file is one JSON document naming its format and version, indented one space a level (a diff of two saves shows the fields that changed); timestamps are ISO 8601 strings."""
    path = tmp_path / "h.json"
    save_history(every_kind()[:1], path)
    assert path.read_text(encoding="utf-8").startswith('{\n "format": "yiemagent-history",\n "version": 1,\n "messages": [\n  {\n')
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["format"] == "yiemagent-history" and document["version"] == 1
    assert document["messages"][0]["timestamp"] == "2024-05-01T12:30:15.123456+02:00"


def test_a_reply_without_a_typed_answer_is_written_without_an_output_field(tmp_path):
    """The form of a reply stays what it was before typed answers (docs/api.md): 'output' is written only when there is one."""
    path = tmp_path / "h.json"
    save_history([AssistantMessage([TextContent("hi")], timestamp=STAMP), AssistantMessage([TextContent("{}")], timestamp=STAMP, output={})], path)
    plain, typed = json.loads(path.read_text(encoding="utf-8"))["messages"]
    assert list(plain) == ["role", "content", "api", "provider", "model", "usage", "stop_reason", "error_message", "timestamp"]
    assert plain["role"] == "assistant" and typed["output"] == {}


def test_a_timestamp_given_as_iso_text_is_stored_and_loads_as_that_datetime(tmp_path):
    """A message built from the caller's own JSON, its timestamp an ISO 8601 str, is written with it and loads with the datetime it names."""
    save_history([UserMessage([TextContent("hi")], "2024-05-01T12:30:15.123456+02:00")], tmp_path / "h.json")  # type: ignore[arg-type]
    assert load_history(tmp_path / "h.json") == [UserMessage([TextContent("hi")], STAMP)]


def test_a_save_reaches_the_disk_before_it_replaces_the_old_file(tmp_path, monkeypatch):
    """The temporary (.h.json.xxxxxxxx.tmp beside the file) is fsynced whole before the rename, and the directory after it: a power cut leaves the old file or the new one."""
    path = tmp_path / "h.json"
    save_history(every_kind()[:1], path)
    old = path.read_bytes()
    steps, temporaries = [], []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        kind = "directory" if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")) else "file"
        steps.append((kind, os.fstat(fd).st_size if kind == "file" else None, path.read_bytes() == old))
        real_fsync(fd)

    def replace(source, target):
        steps.append(("replace", os.path.getsize(source), path.read_bytes() == old))
        temporaries.append(Path(source))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    save_history(every_kind(), path)
    size = path.stat().st_size
    assert size > len(old)
    assert steps == [("file", size, True), ("replace", size, True), ("directory", None, False)]
    [temporary] = temporaries  # beside the file (a rename within one directory), shaped as the cleaning looks for
    assert temporary.parent == tmp_path and re.fullmatch(r"\.h\.json\.[a-z0-9_]{8}\.tmp", temporary.name)


def test_an_object_beyond_the_table_is_kept_as_its_repr(tmp_path):
    """A detail no tag covers is stored as its repr, so saving never fails whatever a tool returned."""

    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque 1>"

    path = tmp_path / "h.json"
    save_history([tool_call_reply(("c", "t", {})), ToolResultMessage("c", "t", [], {"thing": Opaque()})], path)
    assert load_history(path)[1].details == {"thing": "<Opaque 1>"}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    """Atomic: when the final rename fails, the target is as it was and no temporary file is left."""
    target = tmp_path / "h.json"
    target.mkdir()  # os.replace of a file onto a directory fails
    with pytest.raises(OSError):
        save_history(every_kind(), target)
    assert list(tmp_path.iterdir()) == [target] and target.is_dir()


def test_saving_replaces_the_whole_file(tmp_path):
    """A second save replaces the first document: a shorter history leaves nothing of the longer one."""
    path = tmp_path / "h.json"
    save_history(every_kind(), path)
    save_history(every_kind()[:1], path)
    assert load_history(path) == every_kind()[:1]  # the first message's timestamp is fixed (STAMP)
    assert [p.name for p in tmp_path.iterdir()] == ["h.json"]


def test_saving_a_message_no_agent_would_take_names_it_and_writes_nothing(tmp_path):
    """A UserMessage whose content holds an int would not load again: save_history refuses it, naming the entry and the block."""
    with pytest.raises(MessageFormatError, match=r"messages\[1\]: UserMessage content\[1\] is int"):
        save_history([UserMessage([]), UserMessage([TextContent("a"), 5])], tmp_path / "h.json")
    assert not (tmp_path / "h.json").exists()


def test_a_str_block_is_saved_as_a_text_block(tmp_path):
    """A UserMessage holding a bare str is saved as the agent would hold it, one text block, so it loads again."""
    save_history([UserMessage(["hi"], STAMP)], tmp_path / "h.json")
    assert load_history(tmp_path / "h.json") == [UserMessage([TextContent("hi")], STAMP)]


def test_saving_a_non_message_names_it_and_writes_nothing(tmp_path):
    """An entry that is not an AgentMessage raises MessageFormatError naming its index; no file appears."""
    with pytest.raises(MessageFormatError, match=r"messages\[1\] is dict"):
        save_history([UserMessage([]), {"role": "user"}], tmp_path / "h.json")
    assert not (tmp_path / "h.json").exists()


def _document(*messages) -> str:
    return json.dumps({"format": "yiemagent-history", "version": 1, "messages": list(messages)})


GOOD = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": "2024-01-01T00:00:00+00:00"}
APPROVED = {"role": "approval", "tool_call_id": "c", "tool_name": "t", "decision": "approved", "arguments": {}, "reason": "ok"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{not json", r"is not JSON"),
        (json.dumps({"messages": []}), r"is not a yiemagent history"),
        (json.dumps({"format": "yiemagent-history", "version": 99, "messages": []}), r"has version 99"),
        (json.dumps({"format": "yiemagent-history", "messages": []}), r"has version None; this yiemagent reads version 1"),
        (json.dumps({"format": "yiemagent-history", "version": "1", "messages": []}), r"has version '1'"),
        (json.dumps({"format": "yiemagent-history", "version": 1, "messages": {}}), r"'messages' is dict"),
        (_document(GOOD, "text"), r"messages\[1\]: is str"),
        (_document(GOOD, {**GOOD, "role": "system"}), r"messages\[1\]: has role 'system'"),
        (_document({**GOOD, "content": 5}), r"messages\[0\]: 'content' must be list, got int"),
        (_document(GOOD, {"role": "tool", "tool_name": "t", "content": []}), r"messages\[1\]: has no 'tool_call_id'"),
        (_document({**GOOD, "timestamp": "yesterday"}), r"messages\[0\]: a 'timestamp' value that is not ISO 8601"),
        (_document({**GOOD, "timestamp": 5}), r"messages\[0\]: a 'timestamp' value that is not ISO 8601: 5 \(a 'timestamp' value must be str, got int\)"),
        (_document({"role": "assistant", "content": [], "usage": "many"}), r"messages\[0\]: 'usage' must be dict, got str"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "tuple", "items": 5}}), r"messages\[0\]: a 'tuple' value whose 'items' is not a list$"),
        (_document({**GOOD, "colour": "red"}), r"messages\[0\]: has unknown fields \['colour'\]"),
        (_document({**GOOD, "content": [{"type": "text"}]}), r"messages\[0\]: content\[0\] is a 'text' block"),
        (_document({"role": "assistant", "content": [], "usage": {"input_tokens": "3"}}), r"messages\[0\]: 'usage.input_tokens' must be int"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "teapot"}}), r"unknown tagged value 'teapot'"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "is_error": "no"}), r"'is_error' must be bool"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "bytes", "base64": "%%"}}), r"'bytes' value without valid base64"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "map", "items": [[1]]}}), r"'map' value whose 'items' is not a list of \[key, value\] pairs"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "map", "items": [[[1], 2]]}}), r"cannot be hashed"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "date", "value": "soon"}}), r"'date' value that is not ISO 8601"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "int", "hex": "0xzz"}}), r"'int' value that is not hex"),
        (_document({**GOOD, "content": ["hi", 5, {"type": "weird"}]}), r"messages\[0\]: content\[0\] is str 'hi'; expected a content block"),
        (_document({**GOOD, "content": ["a" * 100]}), r"messages\[0\]: content\[0\] is str 'a{60}'\.\.\. \[40 more characters cut\]; expected a content block"),
        (_document({**GOOD, "content": [{"type": "image", "data": "aGk="}]}), r"messages\[0\]: content\[0\] is a 'image' block with missing or wrong fields"),
        (_document({**GOOD, "content": [{"type": "image", "data": "aGk=", "mime_type": 5}]}), r"messages\[0\]: content\[0\] is a 'image' block with missing or wrong fields"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": 5, "content": []}), r"messages\[0\]: 'tool_name' must be str, got int"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "added_tool_names": "x"}), r"messages\[0\]: 'added_tool_names' must be list, got str"),
        (_document({**APPROVED, "decision": 5}), r"messages\[0\]: 'decision' must be str, got int"),
        (_document({**APPROVED, "reason": 5}), r"messages\[0\]: 'reason' must be str, got int"),
        (_document({"role": "compaction", "summary": 5, "through": 1}), r"messages\[0\]: 'summary' must be str, got int"),
        (_document({"role": "compaction", "summary": "s", "through": "1"}), r"messages\[0\]: 'through' must be int, got str"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "int", "hex": 5}}), r"messages\[0\]: an 'int' value's 'hex' must be str, got int"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "repr", "value": 5}}), r"messages\[0\]: a 'repr' value must be str, got int"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": "content", "value": {"type": "weird"}}}), r"a 'content' value that is not a text or image block: \{'type': 'weird'\}"),
        (_document({"role": "tool", "tool_call_id": "c", "tool_name": "t", "content": [], "details": {"$type": list(range(100))}}), r"unknown tagged value '\[0, 1, 2, .{70}\.\.\. \[310 more characters cut\]'; expected one of"),
        (_document(GOOD, {**GOOD, "content": [{"type": "text", "text": "a"}, 5]}), r"messages\[1\]: content\[1\] is int 5; expected a content block"),
        (_document({"role": "assistant", "content": [[1]]}), r"messages\[0\]: content\[0\] is list"),
        (_document({**GOOD, "content": [{"type": "weird", "v": float("nan")}]}), r"messages\[0\]: UserMessage content\[0\]/v is nan"),
    ],
)
def test_a_bad_file_raises_message_format_error_naming_the_entry(tmp_path, text, expected):
    """load_history rejects each kind of bad file with MessageFormatError naming the file and the entry."""
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MessageFormatError, match=expected) as caught:
        load_history(path)
    assert "bad.json" in str(caught.value)


# --- mending tool calls without results ---------------------------------------------


def test_complete_tool_calls_answers_each_missing_call_after_the_batch():
    """Calls without a result get an error result after the batch's own results, in call order; answered calls are untouched."""
    reply = tool_call_reply(("a", "t", {}), ("b", "t", {}), ("c", "u", {}))
    history = [UserMessage([TextContent("go")]), reply, ToolResultMessage("b", "t", [TextContent("ok")])]
    mended, added, moved, dropped = complete_tool_calls(history)
    assert [(m.role, getattr(m, "tool_call_id", None)) for m in mended] == [("user", None), ("assistant", None), ("tool", "b"), ("tool", "a"), ("tool", "c")]
    assert [i for i, _ in added] == [3, 4] and all(m.is_error and m.content[0].text == LOST_RESULT_MESSAGE for _, m in added)
    assert added[1][1].tool_name == "u" and added[0][1].timestamp == reply.timestamp and moved == dropped == []
    assert all(m.details == {} for _, m in added)  # an error result like any other, as _failures makes them


def test_complete_tool_calls_leaves_a_whole_history_alone(caplog):
    """A history where every call has its result comes back unchanged, with nothing added, moved or dropped, and no warning."""
    history = every_kind()
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        assert complete_tool_calls(history) == (history, [], [], [])
    assert caplog.records == []


def test_orphan_and_duplicate_results_are_dropped_with_a_warning_naming_where(caplog):
    """A result that answers no call of its batch, one after a user message, a second result for one call: left out, the first result kept, and a warning says so."""
    first = ToolResultMessage("a", "t", [TextContent("first")])
    history = [
        ToolResultMessage("z", "t", [TextContent("before any call")]),
        tool_call_reply(("a", "t", {})),
        first,
        ToolResultMessage("a", "t", [TextContent("second")]),
        ToolResultMessage("x", "t", [TextContent("no such call")]),
        UserMessage([TextContent("next")]),
        ToolResultMessage("y", "t", [TextContent("after a user message")]),
    ]
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        mended, added, moved, dropped = complete_tool_calls(history, "here")
    assert mended == [history[1], first, history[5]] and added == moved == []
    assert [(i, why) for i, _, why in dropped] == [(0, "orphan"), (3, "duplicate"), (4, "orphan"), (6, "orphan")]
    assert caplog.records[0].levelname == "WARNING" and caplog.records[0].getMessage().startswith("here: mended to be valid to send")
    assert "3 result(s) without a call in their batch left out ('z', 'x', 'y')" in caplog.text
    assert "1 result(s) answering a call already answered left out ('a')" in caplog.text


def test_the_warning_names_at_most_five_ids_of_each_kind_and_counts_the_rest(caplog):
    """Seven orphans and six unanswered calls: each list in the warning names five ids, then "and N more"; the parts are joined by "; "."""
    history = [ToolResultMessage(f"o{i}", "t", []) for i in range(7)]
    history.append(tool_call_reply(*[(f"c{i}", "t", {}) for i in range(6)]))
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        complete_tool_calls(history, "here")
    [record] = caplog.records
    assert record.getMessage() == (
        "here: mended to be valid to send: "
        "6 tool call(s) without a result answered with an error result ('c0', 'c1', 'c2', 'c3', 'c4' and 1 more); "
        "7 result(s) without a call in their batch left out ('o0', 'o1', 'o2', 'o3', 'o4' and 2 more)"
    )


def test_the_warning_says_a_history_when_no_place_is_named(caplog):
    """complete_tool_calls(history) without ``where``: the warning begins "a history: "."""
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        complete_tool_calls([ToolResultMessage("o", "t", [])])
    assert caplog.records[0].getMessage().startswith("a history: mended to be valid to send: 1 result(s) without a call")


def test_a_result_moved_back_from_after_another_message_is_not_seen_twice_and_what_follows_is_kept():
    """A call's result pushed past a user message moves back to its call; the messages after its old place stay, in order."""
    result = ToolResultMessage("a", "t", [TextContent("late")])
    history = [tool_call_reply(("a", "t", {})), UserMessage([TextContent("between")]), result, UserMessage([TextContent("after")]), tool_call_reply(("b", "t", {}))]
    mended, added, moved, dropped = complete_tool_calls(history)
    assert mended[:4] == [history[0], result, history[1], history[3]] and mended[4] is history[4]
    assert moved == [(2, 1)] and dropped == [] and [r.tool_call_id for _, r in added] == ["b"]


def test_five_ids_are_named_without_a_count_of_more(caplog):
    """Exactly five results moved: all five named, no "and 0 more"."""
    history = [tool_call_reply(*[(f"c{i}", "t", {}) for i in range(5)]), UserMessage([TextContent("between")])]
    history += [ToolResultMessage(f"c{i}", "t", []) for i in range(5)]
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        complete_tool_calls(history, "here")
    assert caplog.records[0].getMessage() == "here: mended to be valid to send: 5 result(s) moved after their call ('c0', 'c1', 'c2', 'c3', 'c4')"


def test_a_result_found_later_is_moved_after_its_call_but_never_past_a_call_of_the_same_id():
    """A result another writer's messages pushed away from its call moves back; one beyond a later call of the same id belongs to that call."""
    own = ToolResultMessage("a", "t", [TextContent("a's result")])
    reused = tool_call_reply(("r", "t", {}))
    history = [
        tool_call_reply(("a", "t", {})),
        UserMessage([TextContent("another writer")]),
        tool_call_reply(("b", "t", {})),
        own,
        ToolResultMessage("b", "t", [TextContent("b's result")]),
        tool_call_reply(("r", "t", {})),
        UserMessage([TextContent("between")]),
        reused,
        ToolResultMessage("r", "t", [TextContent("the later r's result")]),
    ]
    mended, added, moved, dropped = complete_tool_calls(history)
    assert [getattr(m, "tool_call_id", None) or m.role for m in mended] == ["assistant", "a", "user", "assistant", "b", "assistant", "r", "user", "assistant", "r"]
    assert mended[1] is own and moved == [(3, 1)] and dropped == []
    assert [(i, r.tool_call_id, r.is_error) for i, r in added] == [(6, "r", True)] and mended[9] is history[8]


def approval(call_id: str, decision: str) -> ApprovalMessage:
    return ApprovalMessage(call_id, "t", decision)


def test_a_deferred_call_of_the_last_batch_waits_and_the_calls_after_it_are_still_answered():
    """Decision 18: the last batch's calls a, b deferred and undecided wait without a result; c, not deferred and unanswered, gets the error result."""
    history = [tool_call_reply(("a", "t", {}), ("b", "t", {}), ("c", "t", {})), approval("a", "deferred"), approval("b", "approved")]
    mended, added, moved, dropped = complete_tool_calls(history)
    assert mended[:3] == history and [(r.tool_call_id, r.is_error) for _, r in added] == [("c", True)] and moved == dropped == []


def test_a_deferred_call_whose_result_came_later_takes_it_instead_of_waiting():
    """A deferred call of the last batch whose result was stored after another message (a second writer) is answered by that result, moved back."""
    result = ToolResultMessage("a", "t", [TextContent("ran")])
    history = [tool_call_reply(("a", "t", {})), approval("a", "deferred"), UserMessage([TextContent("between")]), result]
    mended, added, moved, dropped = complete_tool_calls(history)
    assert mended == [history[0], history[1], result, history[2]] and moved == [(3, 2)] and added == dropped == []


@pytest.mark.parametrize("after", ["approved", "deferred", "rejected"])
def test_a_call_once_resumed_is_lost_without_a_result_whatever_step_follows(after):
    """"resumed" means the call started: without a result it is answered as lost, even when a later step names another decision."""
    history = [tool_call_reply(("a", "t", {})), approval("a", "approved"), approval("a", "resumed"), approval("a", after)]
    mended, added, moved, dropped = complete_tool_calls(history)
    assert mended[:4] == history and [(r.tool_call_id, r.content[0].text) for _, r in added] == [("a", LOST_RESULT_MESSAGE)]


def test_a_call_deferred_then_approved_and_not_resumed_still_waits():
    """The latest step counts: deferred then approved (not yet started) waits for continue_agent, with no result."""
    history = [tool_call_reply(("a", "t", {})), approval("a", "deferred"), approval("a", "approved")]
    assert complete_tool_calls(history) == (history, [], [], [])


def test_mending_is_idempotent():
    """Mending a mended history changes nothing."""
    history = [tool_call_reply(("a", "t", {}), ("b", "t", {})), UserMessage([]), ToolResultMessage("a", "t", []), ToolResultMessage("a", "t", [])]
    once = complete_tool_calls(history).messages
    assert complete_tool_calls(once) == (once, [], [], [])


def test_load_history_sends_a_mended_history_with_a_warning_naming_the_file(tmp_path, caplog):
    """A file holding an orphan result and an unanswered call loads valid to send, and the warning names the file."""
    path = tmp_path / "h.json"
    save_history([ToolResultMessage("x", "t", []), tool_call_reply(("a", "t", {}))], path)
    with caplog.at_level("WARNING", logger="yiemagent.history"):
        loaded = load_history(path)
    assert [(m.role, getattr(m, "tool_call_id", None), getattr(m, "is_error", None)) for m in loaded] == [("assistant", None, None), ("tool", "a", True)]
    assert f"history file {str(path)!r}: mended to be valid to send" in caplog.text


# --- add_message ----------------------------------------------------------------------


def test_add_message_while_idle_appends_without_starting_a_run(agents):
    """Idle: the message is in the history at once and no LLM round runs."""
    llm = ScriptedLLM([])
    agent = agents(llm)
    note = UserMessage([TextContent("for the record")])
    add_message(agent, note)
    assert agent.history() == [note]
    assert agent.wait_until_idle(WAIT) and llm.requests == [] and agent.output_channel.empty()


@pytest.mark.spec("10")
def test_hand_off_result_added_later_then_continue(agents):
    """Spec §10 hand-off: a terminating tool hands off, the external result comes in with add_message, continue_agent answers from it."""
    hand_off = make_tool("escalate", lambda *a: text_result("Handed to a human agent, ticket 7", terminate=True))
    llm = ScriptedLLM([tool_call_reply(("c1", "escalate", {})), "Your refund is approved."])
    agent = agents(llm, [hand_off])
    run_agent(agent, "refund order 42")
    assert take_response(agent, timeout=WAIT).stop_reason == "tool_use_terminated"
    add_message(agent, UserMessage([TextContent("[ticket 7] refund approved")]))
    continue_agent(agent)
    assert take_response(agent, timeout=WAIT).content[0].text == "Your refund is approved."
    sent = llm.requests[1]["messages"]
    assert sent[-1] == {"role": "user", "content": "[ticket 7] refund approved"} and sent[-2]["role"] == "tool"


def test_add_message_during_a_run_joins_at_its_next_round(agents):
    """Active run: the message is not in the history until the run's next LLM round, which sees it after the tool results."""
    slow, in_tool, release = blocking_tool("slow", WAIT)
    llm = ScriptedLLM([tool_call_reply(("c1", "slow", {})), "final"])
    agent = agents(llm, [slow])
    run_agent(agent, "go")
    assert in_tool.wait(WAIT)
    add_message(agent, UserMessage([TextContent("meanwhile")]))
    assert [m.role for m in agent.history()] == ["user", "assistant"]
    release.set()
    assert take_response(agent, timeout=WAIT).content[0].text == "final"
    assert [m["role"] for m in llm.requests[1]["messages"]][-3:] == ["assistant", "tool", "user"]
    assert llm.requests[1]["messages"][-1]["content"] == "meanwhile"


def test_add_message_during_the_last_round_is_appended_when_the_run_ends(agents):
    """A message added while the run's final LLM call is in flight is appended after the reply, before the agent is idle, and starts no run."""
    in_llm, release = threading.Event(), threading.Event()

    def answer(formatted):
        in_llm.set()
        release.wait(WAIT)
        return AssistantMessage([TextContent("final")], stop_reason="stop")

    llm = ScriptedLLM([answer])
    agent = agents(llm)
    run_agent(agent, "go")
    assert in_llm.wait(WAIT)
    note = UserMessage([TextContent("late")])
    add_message(agent, note)
    release.set()
    assert take_response(agent, timeout=WAIT).content[0].text == "final"
    assert agent.wait_until_idle(WAIT)
    assert [m.role for m in agent.history()] == ["user", "assistant", "user"] and agent.history()[-1] is note
    assert len(llm.requests) == 1


def test_add_message_from_many_threads_loses_nothing(agents):
    """Thread-safe: messages added from eight threads at once are all in the history."""
    agent = agents(ScriptedLLM([]))
    barrier = threading.Barrier(8)

    def add(n):
        barrier.wait(WAIT)
        for i in range(25):
            add_message(agent, UserMessage([TextContent(f"{n}-{i}")]))

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    texts = [m.content[0].text for m in agent.history()]
    assert sorted(texts) == sorted(f"{n}-{i}" for n in range(8) for i in range(25))
    for n in range(8):  # each thread's messages in the order it added them
        assert [t for t in texts if t.startswith(f"{n}-")] == [f"{n}-{i}" for i in range(25)]


def test_add_message_refuses_what_is_not_a_message_and_a_closed_agent(agents):
    """A dict raises MessageFormatError; after shutdown add_message raises AgentClosedError."""
    agent = agents(ScriptedLLM([]))
    with pytest.raises(MessageFormatError, match="got dict"):
        add_message(agent, {"role": "user", "content": "x"})
    shutdown(agent, timeout=WAIT)
    with pytest.raises(AgentClosedError) as raised:
        add_message(agent, UserMessage([]))
    assert str(raised.value) == "the agent has been shut down; it takes no more messages"


def test_add_message_checks_the_message_before_it_enters_the_history(agents):
    """Decision 15: add_message refuses a message that cannot be sent again, and a str content becomes a text block."""
    agent = agents(ScriptedLLM([]))
    with pytest.raises(MessageFormatError, match="must be a str"):
        add_message(agent, UserMessage([TextContent(42)]))
    add_message(agent, UserMessage("handed back"))
    assert agent.history() == [UserMessage([TextContent("handed back")], timestamp=agent.history()[0].timestamp)]


NOT_A_TIMESTAMP = [
    (None, "timestamp is NoneType; expected a datetime or ISO 8601 text"),
    ("yesterday", "timestamp 'yesterday' is not ISO 8601"),
    (date(2026, 12, 5), "timestamp is date; expected a datetime or ISO 8601 text"),
    (1764918000, "timestamp is int; expected a datetime or ISO 8601 text"),
]


@pytest.mark.parametrize("stamp, refusal", NOT_A_TIMESTAMP)
def test_a_message_whose_timestamp_is_not_a_datetime_is_refused_before_it_is_stored(agents, tmp_path, stamp, refusal):
    """Decision 15: a user message, tool result or approval step whose timestamp is neither a datetime nor
    ISO 8601 text is refused with MessageFormatError naming the field (a reply's is replaced, normalize_reply);
    stored as it was, its session or file would never load again. The history and session stay as they were."""
    session = SQLiteSession(tmp_path / "s.db", "s")
    agent = agents(ScriptedLLM(["ok"]), session=session)
    for message in (
        UserMessage([TextContent("hi")], timestamp=stamp),
        ToolResultMessage("c1", "t", [TextContent("r")], timestamp=stamp),
        ApprovalMessage("c1", "t", "approved", timestamp=stamp),
    ):
        with pytest.raises(MessageFormatError, match=f"^{type(message).__name__} {re.escape(refusal)}$"):
            add_message(agent, message)
    with pytest.raises(MessageFormatError, match="^UserMessage timestamp"):
        run_agent(agent, UserMessage([TextContent("hi")], timestamp=stamp))
    with pytest.raises(MessageFormatError, match=r"^messages\[0\]: UserMessage timestamp"):
        save_history([UserMessage([TextContent("hi")], timestamp=stamp)], tmp_path / "h.json")
    assert agent.history() == [] and session.messages() == [] and not (tmp_path / "h.json").exists()


@pytest.mark.parametrize("stamp, refusal", NOT_A_TIMESTAMP)
def test_a_store_refuses_each_message_whose_timestamp_the_agent_refuses_and_writes_nothing(tmp_path, stamp, refusal):
    """docs/sessions.md: save_history and SQLiteSession.append refuse a user message, tool result or approval step whose
    timestamp is neither a datetime nor ISO 8601 text as the agent does, naming the field: written, it would never load again."""
    session = SQLiteSession(tmp_path / "s.db", "s")
    try:
        for message in (
            UserMessage([TextContent("hi")], timestamp=stamp),
            ToolResultMessage("c1", "t", [TextContent("r")], timestamp=stamp),
            ApprovalMessage("c1", "t", "approved", timestamp=stamp),
        ):
            kind = type(message).__name__
            with pytest.raises(MessageFormatError, match=f"^messages\\[0\\]: {kind} {re.escape(refusal)}$"):
                save_history([message], tmp_path / "h.json")
            with pytest.raises(MessageFormatError, match=f"{kind} {re.escape(refusal)}$"):
                session.append(message)
            with pytest.raises(MessageFormatError, match=f"^{kind} {re.escape(refusal)}$"):
                message_to_json(message)
        assert session.messages() == [] and not (tmp_path / "h.json").exists()
    finally:
        session.close()


def test_a_timestamp_given_as_iso_text_enters_the_history_as_the_datetime_it_names(agents, tmp_path):
    """ISO 8601 text is read as the JSON form reads it: the history, its session and a reloaded agent hold that datetime."""
    session = SQLiteSession(tmp_path / "s.db", "s")
    agent = agents(ScriptedLLM(["ok"]), session=session)
    add_message(agent, UserMessage([TextContent("hi")], timestamp="2024-05-01T12:30:15.123456+02:00"))  # type: ignore[arg-type]
    assert agent.history() == session.messages() == [UserMessage([TextContent("hi")], STAMP)]


def test_a_saved_agent_history_starts_a_new_agent(agents, tmp_path):
    """save_history(agent.history()) then YiemAgent(messages=load_history(...)): the next LLM round sees the whole conversation."""
    first = agents(ScriptedLLM([tool_call_reply(("c1", "echo", {"x": 1})), "one"]), [make_tool("echo")])
    run_agent(first, "hello")
    take_response(first, timeout=WAIT)
    save_history(first.history(), tmp_path / "h.json")
    llm = ScriptedLLM(["two"])
    second = agents(llm, [make_tool("echo")], messages=load_history(tmp_path / "h.json"))
    run_agent(second, "again")
    take_response(second, timeout=WAIT)
    earlier = format_msg_for_llm(prepare_context(first.state, None), None)["messages"]
    assert llm.requests[0]["messages"][:-1] == earlier
    assert [m["role"] for m in earlier] == ["system", "user", "assistant", "tool", "assistant"]


# --- temporaries a killed save leaves (docs/sessions.md "The JSON form") ---------------------

SAVER = """
import os, sys
from yiemagent import TextContent, UserMessage, save_history
real, calls = os.fsync, []

def stuck(fd):   # the first fsync is the temporary's: stop there, the document half written
    calls.append(fd)
    if len(calls) == 1:
        print("ready", flush=True)
        sys.stdin.readline()
    real(fd)

os.fsync = stuck
save_history([UserMessage([TextContent("from the child")])], sys.argv[1])
"""


def saver_in_the_middle(path):
    """A child process stopped inside save_history(path), its temporary written and locked."""
    child = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    return child


def temporaries(directory, name="h.json"):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(f".{name}.") and p.name.endswith(".tmp"))


def age(path, seconds=60):
    """Make ``path`` look ``seconds`` old, as a temporary found a while after its saver stopped is."""
    when = path.stat().st_mtime - seconds
    os.utime(path, (when, when))


def test_the_next_save_removes_the_temporary_a_killed_save_left_and_only_that_files(tmp_path):
    """A save SIGKILLed mid-write leaves .h.json.*.tmp: the next save of h.json removes it, and leaves other files' temporaries."""
    path = tmp_path / "h.json"
    child = saver_in_the_middle(path)
    child.kill()
    assert child.wait(timeout=WAIT) == -signal.SIGKILL
    child.stdout.close(), child.stdin.close(), child.stderr.close()
    [left] = temporaries(tmp_path)
    age(tmp_path / left)
    others = [tmp_path / ".h.json.bak.abcdefgh.tmp", tmp_path / ".other.json.abcdefgh.tmp", tmp_path / ".h.json.notes.tmp"]
    for other in others:
        other.write_bytes(b"{")
        age(other)
    history = every_kind()
    save_history(history, path)
    assert temporaries(tmp_path) == [".h.json.bak.abcdefgh.tmp", ".h.json.notes.tmp"] and all(o.exists() for o in others)
    assert load_history(path) == history


def test_a_save_in_progress_keeps_its_temporary_while_another_save_cleans(tmp_path):
    """A live saver's temporary, however old it looks, is locked: another save leaves it, and the live save then completes."""
    path = tmp_path / "h.json"
    child = saver_in_the_middle(path)
    try:
        [live] = temporaries(tmp_path)
        age(tmp_path / live)
        save_history(every_kind(), path)
        assert temporaries(tmp_path) == [live]
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(timeout=WAIT) == 0, child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close(), child.stderr.close()
    assert temporaries(tmp_path) == [] and load_history(path)[0].content == [TextContent("from the child")]


def test_an_unlocked_temporary_younger_than_the_grace_is_left(tmp_path):
    """A temporary a moment old may be a save between creating and locking it: left until it is STALE_AFTER_S old."""
    from yiemagent.history._locked_files import STALE_AFTER_S

    fresh = tmp_path / ".h.json.abcdefgh.tmp"
    fresh.write_bytes(b"{")
    save_history([], tmp_path / "h.json")
    assert temporaries(tmp_path) == [fresh.name]
    age(fresh, STALE_AFTER_S + 1)
    save_history([], tmp_path / "h.json")
    assert temporaries(tmp_path) == []


def test_a_stale_temporary_is_removed_with_an_info_record_and_young_ones_around_it_do_not_stop_the_cleaning(tmp_path, caplog):
    """Among young temporaries (and a directory of that shape), each stale one is removed, and an INFO record names it and the file saved."""
    young = [tmp_path / f".h.json.young{i:03d}.tmp" for i in range(12)]
    for path in young:
        path.write_bytes(b"{")
    (tmp_path / ".h.json.adirect.tmp").mkdir()
    age(tmp_path / ".h.json.adirect.tmp")
    stale = [tmp_path / ".h.json.stale000.tmp", tmp_path / ".h.json.stale001.tmp"]
    for path in stale:
        path.write_bytes(b"{")
        age(path)
    with caplog.at_level("INFO", logger="yiemagent.history"):
        save_history([], tmp_path / "h.json")
    assert temporaries(tmp_path) == sorted([p.name for p in young] + [".h.json.adirect.tmp"])
    assert sorted(r.getMessage() for r in caplog.records) == [f"removed {p}, left by a save of h.json that did not finish" for p in stale]


def test_a_symlink_shaped_like_a_temporary_is_never_followed_or_removed(tmp_path):
    """A stale-looking symlink named like a temporary, pointing at a file elsewhere: the link and its target stay."""
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    link = tmp_path / ".h.json.symlink0.tmp"
    link.symlink_to(target)
    age(target)
    save_history([], tmp_path / "h.json")
    assert link.is_symlink() and target.read_text() == "keep me"


def test_a_subclass_of_user_message_between_a_batch_and_its_results_is_repaired_as_a_user_message_is():
    """The repair reads message kinds by isinstance: a user message of an application's own subclass before the results gets them moved after the call too."""
    import dataclasses

    from yiemagent import AssistantMessage as _Assistant, TextContent as _Text, ToolResultMessage as _Result, UserMessage as _User
    from yiemagent.history import complete_tool_calls
    from yiemagent.llm.scripted import tool_call_reply

    @dataclasses.dataclass(frozen=True)
    class Note(_User):
        pass

    question, batch = _User([_Text("weather?")]), tool_call_reply(("c1", "getWeather", {"city": "Paris"}))
    result = _Result("c1", "getWeather", [_Text("Sunny")], {})
    for between in (_User([_Text("and tomorrow?")]), Note([_Text("and tomorrow?")])):
        repair = complete_tool_calls([question, batch, between, result])
        assert repair.messages == [question, batch, result, between] and repair.moved == [(3, 2)] and repair.added == []
    assert isinstance(batch, _Assistant)


def test_a_batch_in_an_assistant_message_of_an_applications_subclass_is_read_as_any_batch():
    """An assistant message of a subclass, with its calls answered right after it, is whole: nothing is changed."""
    import dataclasses

    from yiemagent import AssistantMessage as _Assistant, TextContent as _Text, ToolResultMessage as _Result, UserMessage as _User
    from yiemagent.history import complete_tool_calls

    @dataclasses.dataclass(frozen=True)
    class Reply(_Assistant):
        pass

    block = {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "getWeather", "arguments": "{}"}}]}
    history = [_User([_Text("weather?")]), Reply([block], stop_reason="tool_use"), _Result("c1", "getWeather", [_Text("Sunny")], {}), _User([_Text("thanks")])]
    repair = complete_tool_calls(history)
    assert repair.messages == history and (repair.added, repair.moved, repair.dropped) == ([], [], [])


def test_a_session_of_the_applications_own_has_its_calls_read_by_extraction_even_one_without_an_id():
    """A session whose reader is not a shipped one returns messages unchecked: their calls are extracted (a call without an id gets its synthetic one) and answered."""
    from yiemagent import AssistantMessage as _Assistant, TextContent as _Text, ToolResultMessage as _Result, UserMessage as _User
    from yiemagent.extraction import extract_tool_calls
    from yiemagent.history.files import LOST_RESULT_MESSAGE, history_from_session

    class ListSession:  # any object with messages/append/clear is a session
        def __init__(self, messages):
            self.stored = list(messages)

        def messages(self):
            return list(self.stored)

        def append(self, message):
            self.stored.append(message)

        def clear(self):
            self.stored.clear()

    cut = _Assistant([{"type": "tool_calls", "tool_calls": [{"type": "function", "function": {"name": "getWeather", "arguments": "{}"}}]}], stop_reason="tool_use")
    session = ListSession([_User([_Text("weather?")]), cut])
    history = history_from_session(session)
    [call] = extract_tool_calls(cut)[1]
    assert isinstance(history[-1], _Result) and history[-1].tool_call_id == call.id and history[-1].content == [_Text(LOST_RESULT_MESSAGE)]
    assert session.stored[-1] is history[-1]  # appended, so the session is whole again
