"""Decision 15 piece by piece: what yiemagent/normalize.py fixes, what it refuses and the text it says it with.

tests/faults/test_hostile_replies.py and test_faults.py prove the whole promise (whatever
comes in, the next round can be sent); these pin down each repair as the caller and the
model see it: the error text a caller reads, what the history holds afterwards, what the
next request sends.
"""

from __future__ import annotations

import logging
from datetime import datetime
from enum import IntEnum
from http import HTTPStatus

import pytest

from helpers import WAIT, StrictLLM, call, calls_reply, make_agent, make_tool
from yiemagent import (
    AgentToolResult,
    ApprovalMessage,
    AssistantMessage,
    CompactionMessage,
    ImageContent,
    LLMUsage,
    MessageFormatError,
    TextContent,
    ToolResultMessage,
    UserMessage,
    add_message,
    run_agent,
    take_response,
)
from yiemagent.normalize import CheckedReply, normalize_content, normalize_message, normalize_reply, normalize_tool_result
from yiemagent.types import MessageContent

NAN = float("nan")


def run_once(reply, *tools):
    """(history, requests) of one run whose LLM answers ``reply``, then "done"."""
    llm = StrictLLM(reply)
    with make_agent(llm, *tools) as agent:
        run_agent(agent, "go")
        take_response(agent, timeout=WAIT)
        return agent.history(), llm.requests


def reply_kept(reply):
    """The message ``normalize_reply`` lets into the history."""
    checked = normalize_reply(reply)
    assert checked.error is None, checked.error
    return checked.message


# --- replies refused whole (decision 11) ---------------------------------------------


def test_a_reply_of_no_usable_type_is_refused_naming_its_type():
    """A reply that is not an AssistantMessage, or whose content is no list, is refused with no calls and a text naming the type."""
    assert normalize_reply(42) == CheckedReply(None, [], "llm_call returned int; expected an AssistantMessage")
    assert normalize_reply(AssistantMessage({"text": "hi"})) == CheckedReply(
        None, [], "llm_call returned an AssistantMessage whose content is dict; expected a list"
    )
    with make_agent(StrictLLM(AssistantMessage(42))) as agent:
        run_agent(agent, "go")
        response = take_response(agent, timeout=WAIT)
        with pytest.raises(MessageFormatError, match=r"^llm_call returned an AssistantMessage whose content is int; expected a list$"):
            add_message(agent, AssistantMessage(42))
    assert (response.stop_reason, response.error_message) == ("error", "llm_call returned an AssistantMessage whose content is int; expected a list")


# --- replies repaired ------------------------------------------------------------------


def test_a_reply_content_given_as_a_str_or_a_tuple_becomes_a_list_of_blocks():
    """A str content becomes one text block holding it; a tuple the list of its blocks."""
    assert reply_kept(AssistantMessage("just text")).content == [TextContent("just text")]
    assert reply_kept(AssistantMessage((TextContent("a"), TextContent("b")))).content == [TextContent("a"), TextContent("b")]


def test_reply_fields_of_the_wrong_type_are_repaired():
    """A text field that is not a str becomes its str() (a lone surrogate U+FFFD), a usage that is not an LLMUsage None,
    a timestamp that is not a datetime the time the reply arrived."""
    before = datetime.now().astimezone()
    message = reply_kept(AssistantMessage([TextContent("hi")], model=42, stop_reason="stop\ud800", usage={"input_tokens": 3}, timestamp="yesterday"))
    after = datetime.now().astimezone()
    assert (message.model, message.stop_reason, message.usage) == ("42", "stop\ufffd", None)
    assert before <= message.timestamp <= after


class Celsius(float):
    """A number type of a caller's own, whose str() is not its repr()."""

    def __str__(self) -> str:
        return f"{float(self)} °C"


class Huge(IntEnum):
    AT_LIMIT = 2**1999  # 2000 bits: written by str()
    PAST_LIMIT = 2**2000  # 2001 bits: by a bounded repr


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "None"),
        (True, "True"),
        (HTTPStatus.OK, "200"),
        (Celsius(21.5), "21.5 °C"),
        (Huge.AT_LIMIT, str(2**1999)),
        (Huge.PAST_LIMIT, repr(Huge.PAST_LIMIT)),
        (10**3000, str(10**3000)[:2000] + "... [1001 more characters cut]"),
        (10**5000, "<int object>"),
    ],
    ids=["None", "bool", "an IntEnum", "a float subclass", "an int of 2000 bits", "an int of 2001 bits", "3001 digits", "past the digit limit"],
)
def test_a_text_that_is_not_a_str_becomes_its_str_or_a_bounded_repr(value, text):
    """TextContent(x) with x not a str: the text becomes str(x); an int over 2000 bits its repr cut at 2000 characters
    (str() of an int past Python's digit limit raises)."""
    assert reply_kept(AssistantMessage([TextContent(value)])).content == [TextContent(text)]


class Chart(MessageContent):
    """A content type of a caller's own; ``to_dict`` gives what it was made with."""

    def __init__(self, data):
        self.data = data

    def to_dict(self, encode_json=False):
        if isinstance(self.data, Exception):
            raise self.data
        return self.data


def test_blocks_that_cannot_be_sent_again_become_notes_saying_where_and_why():
    """Each block that cannot be sent is replaced by a text note naming its place in the content and the reason."""
    chart = Chart({"type": "chart", "points": [1, 2]})
    content = [
        "a str \ud800",
        {"type": "thinking", "x": {"a": NAN}},
        {1, 2},
        ImageContent("AAAA", 5),
        ImageContent("ÄÖ", "image/png"),
        chart,
        Chart({"type": "chart", "points": [NAN]}),
        Chart(RuntimeError("no data")),
    ]
    assert reply_kept(AssistantMessage(content)).content == [
        TextContent("a str \ufffd"),
        TextContent("[a content block was dropped: content/1/x/a is nan, which JSON cannot carry]"),
        TextContent("[a set was dropped: it is not a content block (content/2)]"),
        TextContent("[an image was dropped: its data or mime_type is not text (content/3)]"),
        TextContent("[an image (image/png) was dropped: its data is not valid base64 (content/4)]"),
        chart,
        TextContent("[a Chart block was dropped: content/6/points/0 is nan, which JSON cannot carry]"),
        TextContent("[a Chart block was dropped: no data]"),
    ]


def test_a_normalised_reply_is_logged(caplog):
    """A reply that had to change is logged at INFO on yiemagent.normalize; one that did not is not."""
    with caplog.at_level(logging.INFO, logger="yiemagent.normalize"):
        reply_kept(AssistantMessage([TextContent("clean")]))
        reply_kept(AssistantMessage("text"))
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("yiemagent.normalize", "INFO", "an LLM reply was normalised before entering the history (decision 15)")
    ]


# --- tool calls: what the history keeps --------------------------------------------------


def test_calls_whose_arguments_are_not_json_are_rebuilt_in_their_own_form_with_empty_arguments():
    """Arguments that are not strict JSON: the history keeps each call in its own form (flat or nested) with {} as
    arguments, beside the other blocks in their places, and the model reads an error result for each."""
    reply = AssistantMessage(
        [
            TextContent("checking"),
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "work", "arguments": '{"x": NaN}'}}]},
            {"type": "tool_call", "id": "c2", "name": "work", "arguments": {"x": NAN}},
        ],
        stop_reason="tool_use",
    )
    history, requests = run_once(reply, make_tool("work"))
    assert history[1].content == [
        TextContent("checking"),
        {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "work", "arguments": {}}}]},
        {"type": "tool_call", "id": "c2", "name": "work", "arguments": {}},
    ]
    results = [m for m in history if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in results] == [("c1", True), ("c2", True)]
    assert [c["function"]["arguments"] for c in requests[1]["messages"][2]["tool_calls"]] == ["{}", "{}"]


def test_a_tool_calls_block_that_holds_no_list_keeps_its_place_with_no_calls():
    """A "tool_calls" block whose tool_calls is no list holds no call: rebuilt, it stays in its place, empty."""
    reply = AssistantMessage([{"type": "tool_calls", "tool_calls": 5}, {"type": "tool_call", "id": "c1", "name": "work", "arguments": {"x": NAN}}])
    assert reply_kept(reply).content == [
        {"type": "tool_calls", "tool_calls": []},
        {"type": "tool_call", "id": "c1", "name": "work", "arguments": {}},
    ]


def test_a_reply_whose_calls_are_already_canonical_is_kept_as_it_is():
    """Calls whose ids, names and JSON-string arguments are those they run with: the history keeps the reply object itself."""
    reply = AssistantMessage(
        [
            TextContent("two calls"),
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "work", "arguments": '{"n": 1}'}}]},
            {"type": "tool_call", "id": "c2", "name": "work", "arguments": '{"n": 2}'},
        ],
        stop_reason="tool_use",
    )
    history, _ = run_once(reply, make_tool("work"))
    assert history[1] is reply


@pytest.mark.parametrize(
    ("block", "kept"),
    [
        (
            {"type": "tool_call", "id": "c1", "name": "work", "arguments": {"t": (1, 2)}},
            {"type": "tool_call", "id": "c1", "name": "work", "arguments": {"t": [1, 2]}},
        ),
        (
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "work", "arguments": {"t": (1, 2)}}}]},
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "work", "arguments": {"t": [1, 2]}}}]},
        ),
        (
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "work"}, "arguments": {"t": (1, 2)}}]},
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "work", "arguments": {"t": [1, 2]}}}]},
        ),
        (
            {"type": "tool_call", "id": "c1", "name": "work", "arguments": "{}", "extra": {1, 2}},
            {"type": "tool_call", "id": "c1", "name": "work", "arguments": {}},
        ),
    ],
    ids=["flat", "nested", "arguments beside function", "an extra key that is not JSON"],
)
def test_a_call_that_had_to_be_copied_is_kept_as_the_copy_it_ran_with(block, kept):
    """Arguments the check had to copy (a tuple became a list), or a block that is not plain JSON: the history holds
    the call exactly as it ran, in canonical form."""
    message = reply_kept(AssistantMessage([block]))
    assert message.content == [kept]
    message.to_json()


def test_renamed_duplicate_ids_are_what_the_history_keeps():
    """Two calls of one reply with one id: the history's block carries the ids the results answer ("dup", "dup_2")."""
    history, _ = run_once(calls_reply(call("dup", "work", "{}"), call("dup", "work", "{}")), make_tool("work"))
    assert [c["id"] for c in history[1].content[0]["tool_calls"]] == ["dup", "dup_2"]
    assert [m.tool_call_id for m in history if isinstance(m, ToolResultMessage)] == ["dup", "dup_2"]


# --- tool results ----------------------------------------------------------------------


def test_a_tool_block_that_cannot_be_sent_reaches_the_model_as_a_note_naming_the_tool():
    """A tool result holding an image of bytes: the model reads a note naming the result's tool and the block's place."""
    _, requests = run_once(calls_reply(call("c1", "bad", {})), make_tool("bad", lambda i, a, s, p: AgentToolResult([ImageContent(b"\x89PNG", "image/png")])))
    assert requests[1]["messages"][-1]["content"] == "[an image was dropped: its data or mime_type is not text (result of 'bad'/0)]"


def test_a_tool_result_whose_content_is_no_list_becomes_an_error_result_saying_so():
    """normalize_tool_result of content that is no list: an error result whose one note names the tool and shows the value, cut at 80 characters."""
    message = normalize_tool_result(ToolResultMessage("c1", "fetch", {"body": "x" * 200}))
    cut = repr({"body": "x" * 200})
    assert message.is_error is True
    assert message.content == [
        TextContent(f"[the tool's content was dropped: result of 'fetch' is dict: {cut[:80]}... [{len(cut) - 80} more characters cut]; expected a list of content blocks]")
    ]
    with pytest.raises(MessageFormatError, match=r"^content is int: 42; expected a list of content blocks$"):
        normalize_content(42)


# --- a caller's messages ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (UserMessage(42), "UserMessage content is int; expected a list of content blocks or a str"),
        (UserMessage(None), "UserMessage content is NoneType; expected a list of content blocks or a str"),
        (
            UserMessage([TextContent("ok"), TextContent(["x" * 100])]),
            f"UserMessage content[1] is TextContent({repr(['x' * 100])[:60]}... [{len(repr(['x' * 100])) - 60} more characters cut]); its text must be a str",
        ),
        (UserMessage([TextContent("ok"), {"type": "x", "v": NAN}]), "UserMessage content[1]/v is nan, which JSON cannot carry"),
        (UserMessage([TextContent("ok"), {1, 2}]), "UserMessage content[1] is set; expected a content block"),
        (ToolResultMessage("c1", "work", 42), "ToolResultMessage content is int; expected a list of content blocks"),
        (ApprovalMessage(7, "work", "deferred"), "ApprovalMessage tool_call_id is int; expected a str"),
        (ApprovalMessage("c1", "work", "deferred", reason=None), "ApprovalMessage reason is NoneType; expected a str"),
        (
            ApprovalMessage("c1", "work", "x" * 100),
            f"ApprovalMessage decision is {'x' * 40!r}... [60 more characters cut]; expected one of ('deferred', 'approved', 'rejected', 'resumed')",
        ),
        (ApprovalMessage("c1", "work", "deferred", arguments=[1]), "ApprovalMessage arguments are list; expected a dict"),
        (ApprovalMessage("c1", "work", "deferred", arguments={"x": NAN}), "ApprovalMessage arguments/x is nan, which JSON cannot carry"),
    ],
    ids=[
        "user content int",
        "user content None",
        "TextContent of a list",
        "a part holding NaN",
        "a set",
        "tool result content int",
        "approval id int",
        "approval reason None",
        "unknown decision",
        "approval arguments a list",
        "approval arguments holding NaN",
    ],
)
def test_a_message_that_cannot_be_stored_or_sent_is_refused_saying_why(message, error):
    """add_message refuses a caller's message that could not be sent or stored again; the text names the field and its value."""
    with make_agent(StrictLLM()) as agent:
        with pytest.raises(MessageFormatError) as caught:
            add_message(agent, message)
        assert str(caught.value) == error
        assert agent.history() == []


def test_a_value_that_is_not_a_message_is_refused_naming_its_type():
    """normalize_message of something that is no message names its type and the five it takes."""
    with pytest.raises(MessageFormatError, match=r"^dict is not a UserMessage, AssistantMessage, ToolResultMessage, ApprovalMessage or CompactionMessage$"):
        normalize_message({"role": "user", "content": "hi"})


def test_what_a_caller_adds_is_stored_repaired():
    """add_message stores a str block as text, an image it cannot send as a note naming where, a tool result's usage of
    the wrong type as None, approval arguments as plain JSON."""
    with make_agent(StrictLLM()) as agent:
        add_message(agent, UserMessage(["plain", ImageContent(b"\x89PNG", "image/png")]))
        add_message(agent, ToolResultMessage("c9", "work", [TextContent("ok")], usage={"input_tokens": 1}))
        add_message(agent, ApprovalMessage("c9", "work", "deferred", arguments={"t": (1, 2)}))
        user, result, approval = agent.history()
    assert user.content == [TextContent("plain"), TextContent("[an image was dropped: its data or mime_type is not text (UserMessage content/1)]")]
    assert result.usage is None
    assert approval.arguments == {"t": [1, 2]}


@pytest.mark.parametrize(
    "message",
    [
        UserMessage([TextContent("hi")]),
        ToolResultMessage("c1", "work", [TextContent("ok")], usage=LLMUsage(1, 2, 0, 0, 3)),
        ApprovalMessage("c1", "work", "approved", arguments={"city": "Tokyo"}),
    ],
    ids=["user", "tool result", "approval"],
)
def test_a_message_that_needs_no_change_is_the_very_message_given(message):
    """Nothing to change: normalize_message returns the object it was given (no copy enters the history)."""
    assert normalize_message(message) is message


def _entry(call_id: str, **extra):
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}, **extra}


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "tool_calls", "tool_calls": [_entry("c"), _entry("c")]}],
        [{"type": "tool_calls", "tool_calls": [_entry("")]}],
        [{"type": "tool_calls", "tool_calls": [_entry("c")], "index": 0}],
        [{"type": "tool_calls", "tool_calls": [_entry("c", index=0)]}],
        [{"type": "tool_calls", "tool_calls": [{**_entry("c"), "type": "custom"}]}],
        [{"type": "other", "tool_calls": [_entry("c")]}],
        [{"type": "tool_calls", "tool_calls": [_entry("c")], "index": NAN}],
        [{"type": "tool_calls", "tool_calls": [_entry("c", index=NAN)]}],
        [{"type": "tool_calls", "tool_calls": [{**_entry("c"), "function": {"name": "f", "arguments": "{}", "index": NAN}}]}],
        [{"type": "tool_calls", "tool_calls": ["abc", ["a", "b", "c"]]}],
        [{"type": "tool_calls", "tool_calls": [_entry(7), _entry(None)]}],
    ],
    ids=[
        "duplicate-ids", "empty-id", "block-extra-key", "entry-extra-key", "entry-not-function", "block-not-tool-calls",
        "block-extra-nan", "entry-extra-nan", "function-extra-nan", "entries-not-objects", "ids-not-text",
    ],
)
def test_a_reply_off_the_servers_usual_form_gets_the_full_checks_message_and_calls(content):
    """A reply whose tool-call blocks are not of the usual form (a repeated, empty or non-text id, an extra key, one JSON
    cannot carry, another type, an entry that is no object) is checked block by block: normalize_reply gives what the full
    check gives, never the reply kept as it came."""
    import copy
    import json

    from yiemagent.normalize import _checked_reply

    reply = AssistantMessage(content, stop_reason="tool_calls")
    checked, full = normalize_reply(copy.deepcopy(reply)), _checked_reply(copy.deepcopy(reply))
    assert (checked.message, checked.calls, checked.error) == (full.message, full.calls, full.error)
    assert checked.message is not None
    json.dumps([b for b in checked.message.content if isinstance(b, dict)], allow_nan=False)  # it can be sent again


def test_an_image_with_a_bad_media_type_is_dropped_naming_it_cleaned_and_cut_and_a_good_one_is_kept(caplog):
    """An image whose mime_type is no media type becomes a note naming it cleaned and cut at 80 characters, a valid image is kept, and a dropped citation's log line names its place."""
    good = ImageContent("AAAA", "image/png")
    text = TextContent("t", [{"a": float("nan")}, {"b": 1}])
    with caplog.at_level(logging.INFO, logger="yiemagent.normalize"):
        content = normalize_content([ImageContent("AAAA", "image/\ud800 x"), ImageContent("AAAA", "x" * 100 + "\ud800"), good, text])
    assert content[:3] == [
        TextContent("[an image was dropped: its mime_type 'image/\ufffd x' is not a media type such as image/png (content/0)]"),
        TextContent("[an image was dropped: its mime_type '" + "x" * 80 + "'... [21 more characters cut] is not a media type such as image/png (content/1)]"),
        good,
    ]
    assert content[2] is good and content[3] == TextContent("t", [{"b": 1}])
    assert "a citation was dropped: content/3/citations/0/a is nan, which JSON cannot carry" in caplog.messages


def test_a_timestamp_text_that_is_not_iso_8601_is_named_cut_at_60_characters():
    """A stored message whose timestamp text is not ISO 8601 is refused with the text shown cut at 60 characters."""
    with pytest.raises(MessageFormatError) as error:
        normalize_message(UserMessage("hi", timestamp="y" * 70))
    assert str(error.value) == "UserMessage timestamp '" + "y" * 60 + "'... [10 more characters cut] is not ISO 8601"


def test_a_text_whose_citations_can_all_be_sent_again_is_kept_as_the_same_object():
    """A text whose every citation is a JSON object is kept as it is, its citations list too (no copy per round)."""
    text = TextContent("t", [{"url": "https://example.com", "start_index": 0}])
    content = [text, ImageContent("AAAA", "image/png")]
    kept = normalize_content(content)
    assert kept is content and kept[0] is text and kept[0].citations is text.citations


def test_a_content_of_texts_one_holding_a_citation_json_cannot_carry_drops_that_citation():
    """A content list of texts alone still has its citations checked: one JSON cannot carry is dropped, not kept."""
    content = [TextContent("t", [{"a": float("nan")}, {"b": 1}]), TextContent("u", [{"c": 2}])]
    assert normalize_content(content) == [TextContent("t", [{"b": 1}]), TextContent("u", [{"c": 2}])]


def test_a_compaction_message_is_kept_as_given_its_lone_surrogates_replaced_and_a_bad_field_named():
    """A summary that needs no change is the very message given, one holding a lone surrogate gets U+FFFD, and a summary
    that is no str or a `through` that is no int of at least 0 is refused naming it."""
    kept = CompactionMessage("the first ten messages", 0)
    assert normalize_message(kept) is kept
    fixed = normalize_message(CompactionMessage("bad \ud800 summary", 3))
    assert isinstance(fixed, CompactionMessage) and (fixed.summary, fixed.through) == ("bad \ufffd summary", 3)
    with pytest.raises(MessageFormatError) as error:
        normalize_message(CompactionMessage(42, 3))
    assert str(error.value) == "CompactionMessage summary is int; expected a str"
    for through, shown in [(-1, "-1"), (True, "True"), ("x" * 50, "'" + "x" * 40 + "'... [10 more characters cut]")]:
        with pytest.raises(MessageFormatError) as error:
            normalize_message(CompactionMessage("s", through))
        assert str(error.value) == f"CompactionMessage through is {shown}; expected an int of at least 0"


def test_a_reply_whose_call_holds_a_clean_arguments_object_is_kept_as_the_very_message():
    """A reply whose tool call carries its arguments as a JSON object (not text) that needs no change is kept as given, extra keys too."""
    entry = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"city": "Tokyo"}}, "index": 0}
    reply = AssistantMessage([{"type": "tool_calls", "tool_calls": [entry]}], stop_reason="tool_calls")
    checked = normalize_reply(reply)
    assert checked.message is reply and checked.message.content[0]["tool_calls"][0] is entry
    assert [(c.id, c.name, c.arguments) for c in checked.calls] == [("c1", "f", {"city": "Tokyo"})]


def test_a_timestamp_that_is_neither_a_datetime_nor_text_is_named_by_its_type():
    """A message whose timestamp is neither a datetime nor ISO 8601 text is refused naming the message and the timestamp's type."""
    with pytest.raises(MessageFormatError) as error:
        normalize_message(UserMessage("hi", timestamp=5))
    assert str(error.value) == "UserMessage timestamp is int; expected a datetime or ISO 8601 text"


def test_an_approvals_arguments_holding_a_lone_surrogate_are_refused_naming_the_place():
    """An approval step's arguments are those an approved call runs with: a lone surrogate is refused naming its place, never made U+FFFD."""
    with pytest.raises(MessageFormatError) as error:
        normalize_message(ApprovalMessage("c1", "work", "approved", arguments={"city": "\ud800"}))
    assert str(error.value) == "ApprovalMessage arguments/city holds a lone surrogate (U+D800) at position 0, which UTF-8 cannot encode"


def test_a_content_given_as_text_becomes_one_clean_text_block():
    """normalize_content makes a str content one text block, a lone surrogate in it U+FFFD."""
    assert normalize_content("hi") == [TextContent("hi")]
    assert normalize_content("a\ud800") == [TextContent("a\ufffd")]


def test_a_timestamp_given_as_iso_8601_text_becomes_the_datetime_it_names():
    """A message whose timestamp is ISO 8601 text (as a stored form holds it) gets the datetime that text names, its content kept."""
    message = normalize_message(UserMessage([TextContent("hi")], timestamp="2026-12-06T10:00:00+00:00"))
    assert isinstance(message, UserMessage) and message.content == [TextContent("hi")]
    assert message.timestamp == datetime.fromisoformat("2026-12-06T10:00:00+00:00")
