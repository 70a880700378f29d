"""The cached fast path of format_msg_for_llm (docs/performance.md "What is cached") against the plain reference formatter.

Spec §14 (formatMsgForLLM); docs/performance.md says what is cached and what invalidates it.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import pickle
import sys
import threading
import weakref
from collections.abc import Iterator
from datetime import timedelta, timezone
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import WAIT, make_agent, make_tool
from reference_format import reference_format
from strategies import wire_histories, wire_messages
from yiemagent import (
    AgentContext,
    AgentMessage,
    AgentState,
    AssistantMessage,
    ImageContent,
    TextContent,
    ToolResultMessage,
    ToolStore,
    UserMessage,
    YiemAgent,
    format_msg_for_llm,
    prepare_context,
    register_tool,
    run_agent,
    take_response,
)
from yiemagent import extraction, formatting
from yiemagent.extraction import extract_tool_calls
import yiemagent._format_cache as format_cache
from yiemagent._format_cache import APPENDING_METHODS, EDITING_METHODS, History, HistorySnapshot
from yiemagent._format_cache import FrozenDict, FrozenList, freeze
from yiemagent.llm import ScriptedLLM
from yiemagent.normalize import normalize_reply
from yiemagent.llm.anthropic import build_anthropic_request
from yiemagent.llm.openai import build_openai_request
from yiemagent.llm.scripted import tool_call_reply



def tools() -> dict[str, Any]:
    store = ToolStore("cache")
    register_tool(store, make_tool("getWeather", schema={"type": "object", "properties": {"city": {"type": "string"}}}))
    return store.tools


TOOLS = tools()


def context(messages: list[Any], system_prompt: str = "You are a test.") -> AgentContext:
    """The context of a round: the default prepare_context's snapshot for a History, the list itself otherwise."""
    if isinstance(messages, History):
        return prepare_context(AgentState(system_prompt, None, TOOLS, messages), None)
    return AgentContext(system_prompt, messages, TOOLS)


def assert_same_request(messages: list[Any], system_prompt: str = "You are a test.") -> dict[str, Any]:
    """The fast path and the reference agree: equal, same JSON bytes, same container kinds."""
    fast = format_msg_for_llm(context(messages, system_prompt), None)
    reference = reference_format(context(list(messages), system_prompt), None)
    assert json.dumps(fast, ensure_ascii=False) == json.dumps(reference, ensure_ascii=False)
    assert fast == reference
    assert shape(fast) == shape(reference)
    return fast


def shape(value: Any) -> Any:
    """The container kinds of a value (a read-only dict counts as a dict), to compare structure too."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def twin(msg: Any) -> Any:
    """A message equal (==) to ``msg`` whose JSON differs: True->1, dict keys reversed, another UTC offset."""

    def change(value: Any) -> Any:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, dict):
            return {k: change(value[k]) for k in reversed(list(value))}
        if isinstance(value, list):
            return [change(v) for v in value]
        return value

    fields: dict[str, Any] = {
        "content": [change(b) if isinstance(b, dict) else b for b in msg.content],
        "timestamp": msg.timestamp.astimezone(timezone(timedelta(hours=-3))),
    }
    if isinstance(msg, ToolResultMessage):
        fields["is_error"] = int(msg.is_error)
    return dataclasses.replace(msg, **fields)


@dataclasses.dataclass(frozen=True)
class Note(AgentMessage):
    """A kind of message the formatter does not know: left out of requests."""

    text: str


class SlottedNote:
    """A stray entry with no ``__dict__`` (a hook's): nothing can be cached on it.

    Not an ``AgentMessage``: every one of those has a ``__dict__``, from ``DataClassJsonMixin``."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Record(NamedTuple):
    """The record of the latest request a History keeps (_format_cache's plain tuple), by name."""

    edits: int
    length: int
    wires: list[Any]
    size: int


def record_of(history: History) -> Record:
    """The record of the latest request made from ``history``."""
    return Record(*getattr(history, format_cache._LATEST_ATTR))


def tool_use() -> list[Any]:
    """One turn of real tool use, as new message objects (nothing cached yet)."""
    return [
        UserMessage([TextContent("weather in Tokyo?")]),
        tool_call_reply(("call_1", "getWeather", '{"city": "Tokyo"}')),
        ToolResultMessage("call_1", "getWeather", [TextContent("Sunny, 22°C")]),
        AssistantMessage([TextContent("It is sunny.")], stop_reason="stop"),
    ]


@pytest.mark.spec("14")
@given(wire_histories, st.text(max_size=10), st.booleans())
def test_fast_path_equals_the_reference_formatter(history, system_prompt, as_history):
    """Any history, both §7 formats, string and dict arguments, images, errors: byte for byte the reference's request."""
    history = History(history) if as_history else list(history)
    assert_same_request(history, system_prompt)
    assert_same_request(history, system_prompt)  # the second call answers from the caches


# The shapes a round makes, whose read-only wire formatting builds directly (formatting._message_to_openai):
# text-only tool results, replies of text and tool_calls blocks; and their near misses, which must not take it.
_texts = st.lists(st.builds(TextContent, st.text(max_size=6)), max_size=3)
_entries = st.lists(
    st.fixed_dictionaries(
        {"id": st.text(max_size=4), "type": st.just("function"), "function": st.fixed_dictionaries({"name": st.text(max_size=4), "arguments": st.sampled_from(['{"city": "Tokyo"}', "{}", "", "[1]", "{bad"])})},
        optional={"extra_content": st.none() | st.just({"google": {"thought_signature": "x"}})},
    ),
    max_size=3,
)
_round_replies = st.builds(
    AssistantMessage,
    st.lists(st.builds(TextContent, st.text(max_size=6)) | _entries.map(lambda e: {"type": "tool_calls", "tool_calls": e}), max_size=3),
    stop_reason=st.sampled_from(["stop", "tool_calls"]),
)
_round_results = st.builds(ToolResultMessage, st.text(max_size=4), st.text(max_size=4), _texts, is_error=st.booleans())


def built_at_once(message: Any) -> bool:
    """The formatter built the message's wire read-only at once (the shapes a round makes), not a plain dict the cache freezes."""
    return type(formatting._message_to_openai(message)) is FrozenDict


@pytest.mark.spec("14")
@given(st.lists(_round_replies | _round_results, max_size=6), st.booleans())
def test_the_wires_a_round_builds_read_only_equal_the_reference(history, read):
    """Text-only tool results and replies of text and tool calls, whose wire is built read-only at once: byte for byte the formatter's own."""
    if read:  # each reply read by normalize_reply first, as a run does: the wire is built from the calls it kept
        history = [normalize_reply(m).message or m if isinstance(m, AssistantMessage) else m for m in history]
    for message in history:
        extra = any("extra_content" in e for b in message.content if isinstance(b, dict) for e in b["tool_calls"])
        wire = formatting._message_to_openai(message)
        assert built_at_once(message) != extra  # a call's extra goes back beside it: that reply takes the long way
        if not extra:
            plain = (formatting.assistant_message_to_openai if isinstance(message, AssistantMessage) else formatting.tool_result_message_to_openai)(message)
            assert json.dumps(wire, ensure_ascii=False) == json.dumps(plain, ensure_ascii=False)
            assert shape(wire) == shape(plain) and shape(wire) == shape(freeze(plain))
            assert read_only_throughout(wire)
    # the reference formatter predates a call's extra_content (reasoning_echo): the rest, byte for byte
    assert_same_request([m for m in history if built_at_once(m) or isinstance(m, ToolResultMessage)])


def read_only_throughout(value: Any) -> bool:
    """Every dict and list inside ``value`` is the read-only kind (FrozenDict, FrozenList)."""
    if isinstance(value, dict):
        return type(value) is FrozenDict and all(read_only_throughout(v) for v in value.values())
    if isinstance(value, list):
        return type(value) is FrozenList and all(read_only_throughout(v) for v in value)
    return True


_CALLS_BLOCK = {"type": "tool_calls", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "getWeather", "arguments": "{}"}}]}
_CITATION = {"type": "char_location", "cited_text": "sunny", "document_index": 0}


@pytest.mark.spec("14")
@pytest.mark.parametrize(
    "message",
    [
        ToolResultMessage(["c1"], "getWeather", [TextContent("Sunny")]),  # type: ignore[arg-type]
        ToolResultMessage("c1", ["getWeather"], [TextContent("Sunny")]),  # type: ignore[arg-type]
        ToolResultMessage("c1", "getWeather", [TextContent("Sunny")], is_error=[True]),  # type: ignore[arg-type]
        AssistantMessage([TextContent("It is sunny.", citations=[_CITATION]), _CALLS_BLOCK], stop_reason="tool_calls"),
        AssistantMessage([TextContent("Looking."), {"type": "server_tool_use", "tool_calls": [{"id": "s1"}]}, _CALLS_BLOCK], stop_reason="tool_calls"),
    ],
    ids=["list-id", "list-name", "list-is_error", "citations", "other-block-with-tool_calls"],
)
def test_a_message_just_off_a_rounds_shapes_gets_the_formatters_own_wire_read_only_throughout(message):
    """A tool result with a non-str id, name or is_error, a reply with citations or another block holding a tool_calls list: the formatter's own wire, read-only all the way down."""
    plain = (formatting.assistant_message_to_openai if isinstance(message, AssistantMessage) else formatting.tool_result_message_to_openai)(message)
    wire = format_msg_for_llm(AgentContext("", [message], {}), None)["messages"][0]
    assert json.dumps(wire, ensure_ascii=False) == json.dumps(plain, ensure_ascii=False)
    assert read_only_throughout(wire)


# Every way to change a History (each mutator, slice assignment, replacing the list) and
# a hook changing the round's snapshot. Indexes are taken modulo the length.
EDITS = st.one_of(
    st.tuples(st.just("append"), wire_messages),
    st.tuples(st.just("extend"), st.lists(wire_messages, max_size=3)),
    st.tuples(st.just("+="), st.lists(wire_messages, max_size=3)),
    st.tuples(st.just("insert"), st.integers(0, 20), wire_messages),
    st.tuples(st.just("replace"), st.integers(0, 20), wire_messages),
    st.tuples(st.just("twin"), st.integers(0, 20)),
    st.tuples(st.just("copy"), st.integers(0, 20)),
    st.tuples(st.just("del"), st.integers(0, 20)),
    st.tuples(st.just("del slice"), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("set slice"), st.integers(0, 20), st.integers(0, 20), st.lists(wire_messages, max_size=3)),
    st.tuples(st.just("pop"), st.integers(0, 20)),
    st.tuples(st.just("pop last")),
    st.tuples(st.just("remove"), st.integers(0, 20)),
    st.tuples(st.just("move"), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("repeat"), st.integers(0, 20)),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("sort")),
    st.tuples(st.just("*="), st.integers(0, 2)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("__init__"), st.lists(wire_messages, max_size=3)),
    st.tuples(st.just("new plain list")),
    st.tuples(st.just("new History")),
)
HOOK_EDITS = st.sampled_from([None, "append", "drop first", "set first", "reverse", "replace"])


def apply(history: list[Any], edit: tuple[Any, ...]) -> list[Any]:
    """Apply one edit; returns the history (a new list for the two "new" edits)."""
    kind, *args = edit
    at = args[0] % len(history) if history and args and isinstance(args[0], int) else 0
    if kind == "append":
        history.append(args[0])
    elif kind == "extend":
        history.extend(args[0])
    elif kind == "+=":
        history += args[0]
    elif kind == "insert":
        history.insert(at, args[1])
    elif kind == "set slice":
        history[args[0] : args[1]] = args[2]
    elif kind == "del slice":
        del history[args[0] : args[1]]
    elif kind == "*=":
        history *= args[0]
    elif kind == "clear":
        history.clear()
    elif kind == "__init__":
        history.__init__(args[0])  # type: ignore[misc]
    elif kind == "new plain list":
        return list(history)
    elif kind == "new History":
        return History(history)
    elif kind == "sort":
        history.sort(key=lambda m: m.role)
    elif not history:
        return history
    elif kind == "replace":
        history[at] = args[1]
    elif kind == "twin":
        history[at] = twin(history[at])
    elif kind == "copy":
        history[at] = copy.deepcopy(history[at])
    elif kind == "del":
        del history[at]
    elif kind == "pop":
        history.pop(at)
    elif kind == "pop last":
        history.pop()
    elif kind == "remove":
        history.remove(history[at])
    elif kind == "move":
        history.insert(args[1] % len(history), history.pop(at))
    elif kind == "repeat":
        history.append(history[at])
    elif kind == "reverse":
        history.reverse()
    return history


def hook(ctx: AgentContext, edit: Any) -> None:
    """What a custom prepare_context might do to the default's snapshot."""
    messages = ctx.messages
    if edit == "append":
        messages.append(UserMessage([TextContent("Remember: be brief.")]))
    elif edit == "drop first" and messages:
        del messages[0]
    elif edit == "set first" and messages:
        messages[0] = twin(messages[0])
    elif edit == "reverse":
        messages.reverse()
    elif edit == "replace":
        ctx.messages = messages[1:] + [UserMessage([TextContent("a summary")])]


@given(wire_histories, st.lists(st.tuples(EDITS, HOOK_EDITS), max_size=8))
def test_every_request_after_any_edit_equals_the_reference(history, steps):
    """Every History mutator, slice assignment, replacing the list (plain or History), a hook changing the snapshot: each next request is exact."""
    history = History(history)
    assert_same_request(history)
    for edit, hook_edit in steps:
        history = apply(history, edit)
        ctx = context(history)
        hook(ctx, hook_edit)
        fast = format_msg_for_llm(ctx, None)
        assert json.dumps(fast) == json.dumps(reference_format(context(list(ctx.messages)), None))
        assert_same_request(history)  # and the round after, without the hook


@dataclasses.dataclass(frozen=True)
class CitedReply(AssistantMessage):
    """A caller's own kind of reply: an AssistantMessage subclass."""


@dataclasses.dataclass(frozen=True)
class LoggedResult(ToolResultMessage):
    """A caller's own kind of tool result: a ToolResultMessage subclass."""


def test_a_subclass_of_a_message_kind_is_formatted_as_its_kind():
    """A reply or a tool result of a subclass (not the exact classes the read-only path takes) gets the formatter's own wire for its kind, as the reference's."""
    reply = tool_use()[1]
    history = [
        tool_use()[0],
        CitedReply(reply.content, stop_reason="tool_calls"),
        LoggedResult("call_1", "getWeather", [TextContent("Sunny, 22°C")]),
        CitedReply([TextContent("It is sunny.")], stop_reason="stop"),
    ]
    request = assert_same_request(history)
    assert [m["role"] for m in request["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert request["messages"][3]["content"] == "Sunny, 22°C" and read_only_throughout(request["messages"][2])


def test_history_counts_every_list_method_that_changes_what_it_holds():
    """Each editing method bumps `edits` (by 2), each appending one keeps it; no list method is left unsorted."""
    public = {n for n in dir(list) if not n.startswith("_")}
    in_place = {n for n in dir(list) if n in ("__init__", "__setitem__", "__delitem__") or n.startswith("__i") and n not in ("__init_subclass__", "__iter__")}
    reading = {"copy", "count", "index"}
    assert public | in_place == set(EDITING_METHODS) | set(APPENDING_METHODS) | reading  # a new list method fails here
    calls = {
        "__init__": lambda h: h.__init__([3, 1]), "__setitem__": lambda h: h.__setitem__(0, 9),
        "__delitem__": lambda h: h.__delitem__(0), "__imul__": lambda h: h.__imul__(1), "insert": lambda h: h.insert(0, 5),
        "pop": lambda h: h.pop(), "remove": lambda h: h.remove(1), "clear": lambda h: h.clear(),
        "sort": lambda h: h.sort(), "reverse": lambda h: h.reverse(),
        "append": lambda h: h.append(4), "extend": lambda h: h.extend([4]), "__iadd__": lambda h: h.__iadd__([4]),
    }
    for name, call in calls.items():
        history = History([1, 2, 3])
        before = history.edits
        call(history)
        assert history.edits == before + (2 if name in EDITING_METHODS else 0), name
        assert type(history) is History, name
    history = History([1, 2, 3])
    before = history.edits
    history[1:1] = []  # a slice assignment counts, even one that changes nothing
    history *= 1
    assert history.edits == before + 4 and type(history) is History


def test_a_failed_edit_still_counts():
    """An edit that raises (remove of a missing item, a sort whose key fails) counts: it may have changed part."""
    history = History([3, 1, 2])
    before = history.edits
    with pytest.raises(ValueError):
        history.remove(7)
    with pytest.raises(ZeroDivisionError):
        history.sort(key=lambda x: 1 / (x - 1))
    assert history.edits == before + 4 and history.edits % 2 == 0


def test_a_snapshot_has_a_lineage_until_it_is_changed_in_any_way():
    """prepare_context's snapshot records its source, edit count and length; any change to it, appends too, does what it
    does to a list and drops that."""
    history = History(tool_use())
    snapshot = HistorySnapshot(history)
    assert snapshot == history and snapshot.lineage == (history, history.edits, 4)
    assert snapshot.lineage.source is history
    assert HistorySnapshot(list(history)).lineage is None  # a plain list has no lineage to record
    changes = [
        lambda s: s.append(s[0]), lambda s: s.extend([]), lambda s: s.__iadd__([]), lambda s: s.__imul__(1),
        lambda s: s.__setitem__(0, s[0]), lambda s: s.__delitem__(0), lambda s: s.insert(0, s[0]), lambda s: s.pop(),
        lambda s: s.remove(s[0]), lambda s: s.clear(), lambda s: s.sort(key=lambda x: -x), lambda s: s.sort(reverse=True),
        lambda s: s.reverse(), lambda s: s.__init__([]),
    ]
    for change in changes:
        snapshot, plain = HistorySnapshot(History([1, 3, 2])), [1, 3, 2]
        change(snapshot)
        change(plain)
        assert snapshot.lineage is None and snapshot == plain, change
    again = HistorySnapshot(list(history))
    again.__init__(history)  # re-filled from a History: the lineage of what it now holds
    assert again.lineage == (history, history.edits, 4)


def test_a_snapshot_whose_refilling_fails_claims_no_lineage():
    """A snapshot filled again from an iterable that raises keeps no lineage (it is dropped first), so no request reuses a record for it."""
    history = History(tool_use())
    snapshot = HistorySnapshot(history)

    def failing() -> Any:
        yield history[0]
        raise RuntimeError("the source failed")

    with pytest.raises(RuntimeError, match="the source failed"):
        snapshot.__init__(failing())  # type: ignore[misc]
    assert snapshot.lineage is None
    assert json.dumps(format_msg_for_llm(AgentContext("You are a test.", snapshot, TOOLS), None)) == json.dumps(reference_format(context(list(snapshot)), None))


def test_help_on_the_history_and_its_snapshot_says_what_each_change_does_to_the_cache():
    """`help(agent.state.messages)` shows, for each method that changes the list, that it counts as an edit (History)
    or drops the lineage (HistorySnapshot), beside the list method it calls."""
    for name in EDITING_METHODS:
        assert getattr(History, name).__doc__ == f"``list.{name}``, counted as an edit (it may change what is already in the list).", name
    for name in (*EDITING_METHODS[1:], *APPENDING_METHODS):
        assert getattr(HistorySnapshot, name).__doc__.startswith(f"``list.{name}``; the snapshot no longer is a prefix of its source"), name


class Watcher:
    """An item whose == runs while a list method is under way, to look at the list mid-change."""

    def __init__(self, look: Any) -> None:
        self.look = look

    def __eq__(self, other: Any) -> bool:
        self.look()
        return self is other

    def __lt__(self, other: Any) -> bool:
        self.look()
        return id(self) < id(other)


def test_a_snapshot_taken_while_its_source_is_being_edited_has_no_lineage():
    """A snapshot copied during an edit (here from inside sort's comparisons) does not claim the source's lineage."""
    history = History()
    seen = []
    history.extend(Watcher(lambda: seen.append(HistorySnapshot(history).lineage)) for _ in range(3))
    history.sort()
    history.remove(history[-1])
    assert len(seen) > 2 and all(lineage is None for lineage in seen)
    assert HistorySnapshot(history).lineage is not None


def test_a_snapshot_whose_copy_spans_an_edit_has_no_lineage():
    """The edit count is read before and after copying: an edit in between (here by a finalizer the collector runs inside the copy) drops the lineage."""
    history = History(tool_use())
    edited_in: list[int] = []
    kept: list[Any] = []

    class Cycle:
        """Garbage in a cycle whose finalizer edits the history once it runs inside ``snapshot``'s copy; until then it leaves new garbage,
        and live objects enough that the collector's count is past its threshold at the next allocation of a tracked object."""

        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            caller = sys._getframe(1)
            if not edited_in and caller.f_code is format_cache.snapshot.__code__ and "before" in caller.f_locals:
                history.reverse()
                edited_in.append(caller.f_lineno)
            if not edited_in:
                Cycle()
                kept.extend([[], [], []])

    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1)  # a collection at nearly every allocation of a tracked object: the copy's iterator is one
    try:
        Cycle()
        copied = HistorySnapshot(history)
    finally:
        gc.set_threshold(*threshold)
    assert edited_in and copied.lineage is None
    assert HistorySnapshot(history).lineage is not None


class NewestFirst(History):
    """A History subclass that iterates its messages newest first: its own ``__iter__`` gives other items than the list holds."""

    def __iter__(self) -> Iterator[Any]:
        return iter(self[::-1])


class UnknownLength(History):
    """A History subclass whose ``__len__`` fails: Python code of its own, which copying the list's items never needs."""

    def __len__(self) -> int:
        raise RuntimeError("this history has no length")


@pytest.mark.parametrize("kind", [NewestFirst, UnknownLength])
def test_a_snapshot_of_a_history_subclass_holds_the_lists_items_and_its_requests_are_exact(kind):
    """A History subclass's own __iter__ or __len__ never makes the snapshot: it holds the items as the list holds them, and each request formats them exactly."""
    messages = tool_use()
    history = kind()
    for count, message in enumerate(messages, 1):
        history.append(message)
        ctx = context(history)
        assert list(ctx.messages) == messages[:count] and ctx.messages.lineage == (history, history.edits, count)
        got = format_msg_for_llm(ctx, None)
        assert json.dumps(got) == json.dumps(reference_format(context(messages[:count]), None))


def test_a_snapshot_changed_while_it_is_formatted_leaves_no_record(monkeypatch):
    """A snapshot changed during formatting (here while a message is converted): no record of that request is kept; the next is exact."""
    history = History(tool_use())
    ctx = context(history)
    original = formatting._message_to_openai

    def converting(msg: Any) -> Any:
        if msg is history[-1]:
            ctx.messages.append(UserMessage([TextContent("late")]))
        return original(msg)

    monkeypatch.setattr(formatting, "_message_to_openai", converting)
    format_msg_for_llm(ctx, None)
    assert ctx.messages[-1].content[0].text == "late" and not hasattr(history, format_cache._LATEST_ATTR)
    monkeypatch.undo()
    assert_same_request(history)
    assert record_of(history).length == 4


@pytest.mark.parametrize(
    "copier, kind",
    [
        (copy.copy, History), (copy.deepcopy, History), (lambda h: pickle.loads(pickle.dumps(h)), History),
        (list, list), (lambda h: h[:], list), (lambda h: h.copy(), list), (lambda h: h + [], list),
    ],
    ids=["copy.copy", "copy.deepcopy", "pickle", "list", "slice", "copy-method", "add"],
)
def test_copies_of_a_history_are_fresh_and_copies_of_a_snapshot_plain(copier, kind):
    """A History's copies are a fresh History (nothing cached on it) or a plain list; a snapshot's copies are plain lists."""
    history = History(tool_use())
    history[0] = history[0]
    format_msg_for_llm(context(history), None)
    copied = copier(history)
    assert type(copied) is kind and copied == history
    assert hasattr(history, format_cache._LATEST_ATTR) and not hasattr(copied, format_cache._LATEST_ATTR)
    snapshot = HistorySnapshot(history)
    assert type(copier(snapshot)) is list and copier(snapshot) == history


def test_deepcopy_of_a_history_or_snapshot_with_one_of_its_messages_keeps_them_one_object():
    """As for a plain list: `copy.deepcopy((history, history[-1]))` copies that message once, so the copied history
    holds the very copy beside it (a deep copy of a state that keeps the history and its last reply, say)."""
    history = History(tool_use())
    for messages in (history, HistorySnapshot(history)):
        copied, last = copy.deepcopy((messages, messages[-1]))
        assert copied[-1] is last and copied == messages and last is not messages[-1]


def test_an_equal_message_that_serialises_otherwise_gets_its_own_wire():
    """The cache goes by identity, not ==: a twin holding 1 for True and other key order is sent as it is."""
    reply = AssistantMessage([{"type": "tool_call", "name": "t", "arguments": {"flag": True, "a": 1}}])
    result = ToolResultMessage("c", "t", [TextContent("ok")], is_error=False)
    history = [UserMessage([TextContent("q")]), reply, result, AssistantMessage([TextContent("done")])]
    first = assert_same_request(history)
    history[1], history[2] = twin(reply), twin(result)  # the last message, which remembers the request, stays
    assert history[1:3] == [reply, result]
    second = assert_same_request(history)
    assert second["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"a": 1, "flag": 1}'
    assert second["messages"][2]["tool_calls"][0]["id"] != first["messages"][2]["tool_calls"][0]["id"]
    assert json.dumps(second["messages"][3]["is_error"]) == "0"


def record_calls(monkeypatch: pytest.MonkeyPatch, name: str, module: Any = formatting) -> list[Any]:
    """Replace ``module.<name>`` by a wrapper recording the message each call gets."""
    calls: list[Any] = []
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda msg, *rest: calls.append(msg) or original(msg, *rest))
    return calls


def test_each_message_is_converted_once(monkeypatch):
    """A message's tool calls are extracted and serialised on its first request only, whatever happens to the list; a message not sent is looked at once too."""
    turn = tool_use() + [Note("aside")]
    history = list(turn)
    converted = record_calls(monkeypatch, "_message_to_openai")
    format_msg_for_llm(context(history), None)
    history.append(UserMessage([TextContent("and in Osaka?")]))
    history.reverse()
    format_msg_for_llm(context(history), None)
    assert [id(m) for m in converted] == [id(m) for m in turn + [history[0]]]


def record_parsing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The JSON texts extraction parses from now on (its ``loads_json``), in order."""
    parsed: list[str] = []
    real = extraction.loads_json
    monkeypatch.setattr(extraction, "loads_json", lambda text, *rest, **kw: parsed.append(text) or real(text, *rest, **kw))
    return parsed


def test_the_calls_read_while_a_messages_wire_is_first_made_stay_with_it(monkeypatch):
    """A reply formatted before anything read its calls keeps them with its wire: reading them afterwards parses no argument again."""
    reply = tool_use()[1]
    parsed = record_parsing(monkeypatch)
    format_msg_for_llm(context([reply]), None)
    assert parsed == ['{"city": "Tokyo"}']
    has_calls, calls, _ = extract_tool_calls(reply)
    assert has_calls and [(c.id, c.arguments) for c in calls] == [("call_1", {"city": "Tokyo"})]
    assert parsed == ['{"city": "Tokyo"}']


def test_a_deep_copy_of_a_reply_parses_its_arguments_once_however_often_its_calls_are_read(monkeypatch):
    """A reply's deep copy starts with an empty cache and keeps the calls its first read parsed: reading them again or formatting it parses nothing more."""
    original = tool_use()[1]
    extract_tool_calls(original)  # the original's cache holds its calls; the copy's starts empty
    reply = copy.deepcopy(original)
    parsed = record_parsing(monkeypatch)
    for _ in range(2):
        _, calls, _ = extract_tool_calls(reply)
        assert [(c.id, c.arguments) for c in calls] == [("call_1", {"city": "Tokyo"})]
    assert format_msg_for_llm(context([reply]), None)["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Tokyo"}'
    assert parsed == ['{"city": "Tokyo"}']


def test_a_request_after_appending_looks_only_at_the_new_messages(monkeypatch):
    """The previous request's wires are reused as they are: only the appended messages are looked at."""
    history = History(UserMessage([TextContent(f"q{i}")]) for i in range(50))
    first = format_msg_for_llm(context(history), None)
    new = tool_use()[1:3]
    history += new
    looked_at = record_calls(monkeypatch, "_wire_of", format_cache)
    second = format_msg_for_llm(context(history), None)
    assert looked_at == new
    assert all(a is b for a, b in zip(first["messages"][1:], second["messages"][1:51]))


def test_a_request_from_an_unchanged_history_reuses_every_wire_and_looks_at_no_message(monkeypatch):
    """Formatting again with nothing appended (a new snapshot, or the same context twice): the record's wires, as they are."""
    history = History(tool_use())
    ctx = context(history)
    first = format_msg_for_llm(ctx, None)
    looked_at = record_calls(monkeypatch, "_wire_of", format_cache)
    again = [format_msg_for_llm(context(history), None), format_msg_for_llm(ctx, None)]
    assert looked_at == []
    for request in again:
        assert request == first == reference_format(context(list(history)), None)
        assert all(a is b for a, b in zip(first["messages"][1:], request["messages"][1:], strict=True))


def test_a_round_appends_its_new_wires_to_the_records_list_instead_of_copying_it():
    """The next request's record keeps the previous record's list with the new wires appended (one copy of the history's wires a round: into the request), and each request is exact."""
    history = History(tool_use())
    format_msg_for_llm(context(history), None)
    shared = record_of(history).wires
    for message in tool_use()[1:3] + [Note("aside")] + tool_use()[:2]:
        history.append(message)
        request = assert_same_request(history)
        record = record_of(history)
        assert record.wires is shared and record.size == len(request["messages"]) - 1 and record.length == len(history)
        assert shared[: record.size] == request["messages"][1:] and all(a is b for a, b in zip(shared, request["messages"][1:]))


def test_changing_the_returned_messages_list_leaves_the_record_as_it_was():
    """An llm_call that clears, appends to or reorders the request's messages list changes nothing the next request from the same history reuses."""
    history = History(tool_use())
    for change in (list.clear, lambda m: m.append({"role": "user", "content": "extra"}), list.reverse, lambda m: m.__delitem__(slice(1, None))):
        change(format_msg_for_llm(context(history), None)["messages"])
        history.append(tool_use()[0])
        assert_same_request(history)


def test_a_request_made_while_another_from_the_same_history_is_being_formatted_is_exact(monkeypatch):
    """A request from a shorter snapshot made in the middle of another one (it appends to the record's list first): both exact, and so is every request after them."""
    history = History(tool_use())
    format_msg_for_llm(context(history), None)
    history += tool_use()[:2]
    shorter = context(history)
    history += [UserMessage([TextContent("and in Osaka?")]), tool_call_reply(("call_2", "getWeather", '{"city": "Osaka"}'))]
    outer = context(history)
    original = formatting._message_to_openai
    inner: list[Any] = []

    def converting(msg: Any) -> Any:
        if not inner:  # once, while the outer request converts its first new message
            inner.append(None)
            inner[0] = format_msg_for_llm(shorter, None)
        return original(msg)

    monkeypatch.setattr(formatting, "_message_to_openai", converting)
    got = format_msg_for_llm(outer, None)
    monkeypatch.undo()
    assert json.dumps(got) == json.dumps(reference_format(context(list(outer.messages)), None))
    assert json.dumps(inner[0]) == json.dumps(reference_format(context(list(shorter.messages)), None))
    for _ in range(2):
        assert_same_request(history)
        history.append(tool_use()[2])


def test_a_record_whose_list_grew_past_its_count_gives_only_its_own_wires():
    """Wires appended to a record's list by a request that then kept its own copy (a concurrent one's): the next request takes only the wires the record counts, and keeps a list of its own."""
    history = History(tool_use())
    format_msg_for_llm(context(history), None)
    record = record_of(history)
    record.wires.append(FrozenDict(role="user", content="another request's"))
    history.append(tool_use()[0])
    assert_same_request(history)
    assert record_of(history).wires is not record.wires
    history.append(tool_use()[0])
    assert_same_request(history)


@pytest.mark.parametrize("how", ["edited", "plain list", "hook appended", "shorter"])
def test_without_a_matching_lineage_every_message_is_looked_up(monkeypatch, how):
    """After an edit, from a plain list, from a changed snapshot, or for a shorter snapshot: each message's own cache, exactly."""
    history = History(tool_use())
    format_msg_for_llm(context(history), None)
    ctx = context(history)
    if how == "edited":
        history[0] = history[0]
        ctx = context(history)
    elif how == "plain list":
        ctx = context(list(history))
    elif how == "hook appended":
        ctx.messages.append(history[0])
    else:
        history.append(history[0])
        format_msg_for_llm(context(history), None)  # the record is now one longer than ctx
    looked_at = record_calls(monkeypatch, "_wire_of", format_cache)
    format_msg_for_llm(ctx, None)
    assert [id(m) for m in looked_at] == [id(m) for m in ctx.messages]
    assert_same_request(list(ctx.messages))


def test_history_message_dicts_are_read_only_and_the_rest_is_fresh():
    """Changing a history message's dict raises TypeError naming the fix; the request's own dict, lists, system and tool dicts are the caller's."""
    formatted = format_msg_for_llm(context(tool_use()), None)
    system, user, assistant, result, _answer = formatted["messages"]
    for change in (
        lambda: user.__setitem__("content", "changed"),
        lambda: result.pop("is_error"),
        lambda: result.update(content="x"),
        lambda: assistant["tool_calls"].append({}),
        lambda: assistant["tool_calls"][0]["function"].__setitem__("arguments", "{}"),
    ):
        with pytest.raises(TypeError, match="read-only.*docs/performance.md"):
            change()
    formatted["temperature"] = 0
    formatted["messages"].append({"role": "user", "content": "extra"})
    system["content"] = "changed"
    formatted["tools"][0]["function"]["name"] = "changed"
    assert_same_request(tool_use())


def test_a_raw_user_part_is_copied_not_shared_with_the_message():
    """A part kept as given (an image by URL) goes out as a read-only copy: the message's own dict is not exposed."""
    part = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    msg = UserMessage([TextContent("what is this?"), part])
    wire = format_msg_for_llm(context([msg]), None)["messages"][1]
    assert wire["content"][1] == part and wire["content"][1] is not part
    assert isinstance(wire["content"][1]["image_url"], FrozenDict)


@pytest.mark.parametrize(
    "copier, deep",
    [
        (dict, False),
        (lambda d: {**d}, False),
        (lambda d: d.copy(), False),
        (copy.copy, False),
        (copy.deepcopy, True),
        (lambda d: pickle.loads(pickle.dumps(d)), True),
    ],
    ids=["dict", "unpack", "copy-method", "copy.copy", "copy.deepcopy", "pickle"],
)
def test_every_copy_of_a_read_only_dict_is_plain_and_editable(copier, deep):
    """dict(), {**d}, .copy(), copy.copy give an editable plain dict; copy.deepcopy and pickle plain all the way down."""
    wire = format_msg_for_llm(context(tool_use()), None)["messages"][2]
    copied = copier(wire)
    assert type(copied) is dict and copied == wire
    copied["content"] = "mine"
    if deep:
        copied["tool_calls"].append({})
        copied["tool_calls"][0]["function"]["arguments"] = "{}"
    else:
        assert copied["tool_calls"] is wire["tool_calls"]  # a shallow copy shares the read-only insides
    assert wire["content"] == "" and len(wire["tool_calls"]) == 1
    assert wire["tool_calls"][0]["function"]["arguments"] == '{"city": "Tokyo"}'


def test_deepcopy_of_a_read_only_dict_with_parts_of_it_keeps_them_one_object():
    """As for plain containers: a message's dict deep-copied together with a part of it (a content part, its
    image_url) copies each part once, so the copied message holds the very copies beside it."""
    msg = UserMessage([TextContent("what is this?"), {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}])
    wire = format_msg_for_llm(context([msg]), None)["messages"][1]
    copied, part, url = copy.deepcopy((wire, wire["content"][1], wire["content"][1]["image_url"]))
    assert copied["content"][1] is part and part["image_url"] is url
    assert copied == wire and type(part) is dict and type(url) is dict


def test_frozen_containers_refuse_every_change_and_serialise_like_plain_ones():
    """Every mutating method of the read-only dict and list raises; json, == and copies see plain containers."""
    value = {"a": [1, {"b": (2, [3])}], "c": "d"}
    frozen = freeze(value)
    assert frozen == value and json.dumps(frozen) == json.dumps(value)
    assert isinstance(frozen, FrozenDict) and isinstance(frozen["a"], FrozenList) and isinstance(frozen["a"][1]["b"][1], FrozenList)
    d, lst = frozen, frozen["a"]
    for change in (
        lambda: d.__setitem__("x", 1), lambda: d.__delitem__("c"), lambda: d.clear(), lambda: d.pop("c"),
        lambda: d.popitem(), lambda: d.setdefault("x", 1), lambda: d.update(x=1), lambda: d.__ior__({"x": 1}),
        lambda: lst.__setitem__(0, 2), lambda: lst.__delitem__(0), lambda: lst.append(1), lambda: lst.extend([1]),
        lambda: lst.insert(0, 1), lambda: lst.pop(), lambda: lst.remove(1), lambda: lst.clear(), lambda: lst.sort(),
        lambda: lst.reverse(), lambda: lst.__iadd__([1]), lambda: lst.__imul__(2),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert frozen == value
    assert type(copy.deepcopy(frozen)["a"]) is list and type(pickle.loads(pickle.dumps(frozen))["a"]) is list
    assert type(copy.copy(lst)) is list and type(lst[:]) is list


class _DictKind(dict):
    """A dict subclass inside a value to freeze (an ``OrderedDict``, say): read through its own items."""


class _OwnReadOnlyDict(FrozenDict):
    why_read_only = "a read-only dict of the caller's kind"


class _OwnReadOnlyList(FrozenList):
    why_read_only = "a read-only list of the caller's kind"


FREEZABLE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3)
    | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=2), children, max_size=3)
    | st.dictionaries(st.text(max_size=2), children, max_size=3).map(_DictKind),
    max_leaves=12,
)


@given(FREEZABLE, st.booleans())
def test_freeze_makes_every_dict_and_list_inside_a_new_read_only_one_of_the_kinds_asked(value, own_kinds):
    """freeze gives an equal value whose every dict and list, inside tuples and dict subclasses too, is a new read-only one of the kinds asked; the rest is kept."""
    kinds = (_OwnReadOnlyDict, _OwnReadOnlyList) if own_kinds else (FrozenDict, FrozenList)
    frozen = freeze(value, kinds) if own_kinds else freeze(value)
    assert frozen == value

    def check(original: Any, made: Any) -> None:
        if isinstance(original, (dict, list)):
            assert type(made) is kinds[isinstance(original, list)] and made is not original
            for key in range(len(original)) if isinstance(original, list) else original:
                check(original[key], made[key])
        elif isinstance(original, tuple):
            assert type(made) is tuple and len(made) == len(original)
            for a, b in zip(original, made, strict=True):
                check(a, b)
        else:
            assert made is original

    check(value, frozen)


def test_copies_of_a_message_carry_no_cache_and_its_value_is_untouched():
    """The cache is not part of a message: to_dict, ==, deepcopy and pickle see only the fields; copies compute their own wire."""
    msg = tool_use()[1]
    before = msg.to_dict()
    wire = format_msg_for_llm(context([msg]), None)["messages"][1]
    assert msg.to_dict() == before and AssistantMessage.from_dict(before) == msg
    for clone in (copy.deepcopy(msg), pickle.loads(pickle.dumps(msg))):
        assert clone == msg
        clone_wire = format_msg_for_llm(context([clone]), None)["messages"][1]
        assert clone_wire == wire and clone_wire is not wire and isinstance(clone_wire, FrozenDict)


def test_unknown_message_kinds_are_left_out_cached_or_not():
    """A message kind the formatter does not know is not sent, whether or not it can hold a cache."""
    first, *_, last = tool_use()
    history = [first, Note("aside"), SlottedNote("aside"), last]
    assert not hasattr(history[2], "__dict__")
    for _ in range(2):
        formatted = assert_same_request(history)
        assert [m["role"] for m in formatted["messages"]] == ["system", "user", "assistant"]


def test_the_cache_lives_and_dies_with_the_message():
    """Nothing outside the history and its messages keeps them alive: once the history is dropped, it and its messages are freed."""
    history = History([UserMessage([TextContent(f"q{i}")]) for i in range(3)] + [tool_call_reply(("c", "t", {}))])
    format_msg_for_llm(context(history), None)
    history.append(UserMessage([TextContent("more")]))
    ctx = context(history)
    format_msg_for_llm(ctx, None)
    refs = [weakref.ref(m) for m in history] + [weakref.ref(history)]
    del history, ctx
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_threads_formatting_one_history_at_once_all_get_the_exact_request():
    """Several threads formatting the same (growing) history at once: every request is the reference's."""
    history = tool_use()
    expected = {n: json.dumps(reference_format(context(history + [history[0]] * (n - 4)), None)) for n in range(4, 9)}
    barrier = threading.Barrier(4)
    failures = []

    def worker() -> None:
        barrier.wait()
        for _ in range(50):
            for n in range(4, 9):
                got = json.dumps(format_msg_for_llm(context(history + [history[0]] * (n - 4)), None))
                if got != expected[n]:
                    failures.append(n)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not failures and not any(t.is_alive() for t in threads)


def test_threads_formatting_snapshots_of_one_growing_history_all_get_the_exact_request():
    """Threads formatting snapshots of one History taken as it grew (one edit count, one record, its list extended by whoever comes first): every request is its snapshot's."""
    history = History(tool_use())
    snapshots = []
    for message in tool_use() * 2:
        snapshots.append(context(history).messages)
        history.append(message)
    expected = [json.dumps(reference_format(context(list(s)), None)) for s in snapshots]
    barrier = threading.Barrier(4)
    failures = []

    def worker(offset: int) -> None:
        barrier.wait()
        for i in range(400):
            at = (i * (offset + 1) + offset) % len(snapshots)
            if json.dumps(format_msg_for_llm(AgentContext("You are a test.", snapshots[at], TOOLS), None)) != expected[at]:
                failures.append(at)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    run_switching_often(threads)  # between reading a record and appending to its list too
    assert not failures and not any(t.is_alive() for t in threads)


def run_switching_often(threads: list[threading.Thread]) -> None:
    """Start the threads and wait for them, switching between threads as often as the interpreter can."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT * 6)
    finally:
        sys.setswitchinterval(interval)


def test_threads_snapshotting_a_history_while_one_thread_edits_it_all_get_exact_requests():
    """One writer appends to and reorders a History while four threads take snapshots and format them: every request is its snapshot's."""
    history = History(tool_use())
    extra = tool_use()
    stop = threading.Event()
    failures = []

    def writer() -> None:
        for i in range(400):
            history.append(extra[i % 4])
            if i % 3 == 0:
                history.reverse()
            if len(history) > 24:
                del history[:8]
        stop.set()

    def reader() -> None:
        while not stop.is_set():
            ctx = context(history)
            got = json.dumps(format_msg_for_llm(ctx, None))
            if got != json.dumps(reference_format(context(list(ctx.messages)), None)):
                failures.append(list(ctx.messages))

    threads = [threading.Thread(target=reader) for _ in range(4)] + [threading.Thread(target=writer)]
    run_switching_often(threads)  # inside the edits too
    assert not failures and not any(t.is_alive() for t in threads)


def test_clients_take_the_read_only_request_and_send_the_same_bytes():
    """The OpenAI and Anthropic clients build the same body from the cached request as from the reference's, changing nothing."""
    history = tool_use() + [UserMessage([TextContent("look"), ImageContent("AAAA", "image/png")])]
    fast = format_msg_for_llm(context(history), None)
    reference = reference_format(context(history), None)
    assert json.dumps(build_openai_request(fast, "m")) == json.dumps(build_openai_request(reference, "m"))
    assert json.dumps(build_anthropic_request(fast, "m", 100)) == json.dumps(build_anthropic_request(reference, "m", 100))
    assert fast == reference


def ask(agent: YiemAgent, text: str) -> AssistantMessage:
    run_agent(agent, text)
    response = take_response(agent, timeout=WAIT)
    assert agent.wait_until_idle(WAIT)
    return response


def reference_of(agent: YiemAgent, history: list[Any]) -> str:
    return json.dumps(reference_format(AgentContext(agent.state.system_prompt, history, agent.state.tools), None))


@pytest.mark.parametrize("edit", ["replace", "remove", "reorder", "twin", "new list", "new list, then appended", "slice assignment"])
def test_editing_state_messages_while_idle_gives_an_exact_next_request(edit):
    """Between runs the caller replaces, removes, reorders messages or swaps in a new list: the next request is exact."""
    llm = ScriptedLLM(["first", "between", "second"])
    with make_agent(llm, messages=tool_use()) as agent:
        ask(agent, "one")
        messages = agent.state.messages
        if edit == "replace":
            messages[1] = tool_call_reply(("call_1", "getWeather", {"city": "Osaka"}))
        elif edit == "remove":
            del messages[0]
        elif edit == "reorder":
            messages[0], messages[-1] = messages[-1], messages[0]
        elif edit == "twin":
            messages[2] = twin(messages[2])  # is_error 0 instead of False: equal, but sent otherwise
        elif edit == "slice assignment":
            messages[:] = reversed(messages)
        else:
            agent.state.messages = list(reversed(messages))  # kept as given: the caller's list
        if edit == "new list, then appended":
            ask(agent, "between")
            agent.state.messages.append(UserMessage([TextContent("appended by the caller")]))
        edited = list(agent.state.messages)
        ask(agent, "two")
        assert json.dumps(llm.requests[-1]) == reference_of(agent, edited + [agent.history()[-2]])
        assert type(agent.state.messages) is (list if edit.startswith("new list") else History)


def test_a_custom_prepare_context_with_the_default_format_sends_exact_requests():
    """A prepare_context that injects a fresh reminder and drops the oldest message each round: every request is exact."""
    sent = []

    def inject(state: AgentState, sink: Any) -> AgentContext:
        ctx = prepare_context(state, sink)
        ctx.messages = ctx.messages[1:] + [UserMessage([TextContent("Remember: be brief.")])]
        sent.append(list(ctx.messages))
        return ctx

    llm = ScriptedLLM([tool_call_reply(("c1", "getWeather", {"city": "Tokyo"})), "done", "again"])
    with make_agent(llm, messages=tool_use(), prepare_context=inject) as agent:
        ask(agent, "weather?")
        ask(agent, "more?")
    assert len(llm.requests) == 3
    for request, history in zip(llm.requests, sent):
        assert json.dumps(request) == reference_of(agent, history)


def test_a_custom_format_that_replaces_a_message_dict_works_one_that_edits_in_place_fails_naming_why():
    """Wrapping the default: replacing a dict works as before; editing one in place ends the run with an error naming the fix."""

    def replacing(ctx: AgentContext, sink: Any) -> dict[str, Any]:
        formatted = format_msg_for_llm(ctx, sink)
        formatted["messages"] = [{**m, "content": m["content"].upper()} if m["role"] == "user" else m for m in formatted["messages"]]
        return formatted

    def editing(ctx: AgentContext, sink: Any) -> dict[str, Any]:
        formatted = format_msg_for_llm(ctx, sink)
        formatted["messages"][-1]["content"] = "changed"
        return formatted

    llm = ScriptedLLM(["ok"])
    with make_agent(llm, format_msg_for_llm=replacing) as agent:
        assert ask(agent, "shout").content[0].text == "ok"
        assert llm.requests[0]["messages"][-1] == {"role": "user", "content": "SHOUT"}
        assert format_msg_for_llm(prepare_context(agent.state, None), None)["messages"][1]["content"] == "shout"
    with make_agent(ScriptedLLM(["unused"]), format_msg_for_llm=editing) as agent:
        response = ask(agent, "edit")
    assert response.stop_reason == "error"
    assert "TypeError" in response.error_message and "read-only" in response.error_message
