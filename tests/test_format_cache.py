"""The cached fast path of format_msg_for_llm (issue 12) against the plain reference formatter.

Spec §14 (formatMsgForLLM); docs/performance.md says what is cached and what invalidates it.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import pickle
import struct
import subprocess
import sys
import threading
import weakref
from datetime import timedelta, timezone
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import make_tool
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
from yiemagent import _identity, formatting
from yiemagent._frozen import FrozenDict, FrozenList, freeze
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.anthropic import build_anthropic_request
from yiemagent.llm.openai import build_openai_request
from yiemagent.llm.scripted import tool_call_reply

WAIT = 10


def tools() -> dict[str, Any]:
    store = ToolStore("cache")
    register_tool(store, make_tool("getWeather", schema={"type": "object", "properties": {"city": {"type": "string"}}}))
    return store.tools


TOOLS = tools()


def context(messages: list[Any], system_prompt: str = "You are a test.") -> AgentContext:
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


class SlottedNote(AgentMessage):
    """An unknown kind with no ``__dict__``: nothing can be cached on it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def tool_use() -> list[Any]:
    """One turn of real tool use, as new message objects (nothing cached yet)."""
    return [
        UserMessage([TextContent("weather in Tokyo?")]),
        tool_call_reply(("call_1", "getWeather", '{"city": "Tokyo"}')),
        ToolResultMessage("call_1", "getWeather", [TextContent("Sunny, 22°C")]),
        AssistantMessage([TextContent("It is sunny.")], stop_reason="stop"),
    ]


@pytest.mark.spec("14")
@given(wire_histories, st.text(max_size=10))
def test_fast_path_equals_the_reference_formatter(history, system_prompt):
    """Any history, both §7 formats, string and dict arguments, images, errors: byte for byte the reference's request."""
    assert_same_request(history, system_prompt)
    assert_same_request(history, system_prompt)  # the second call answers from the caches


EDITS = st.one_of(
    st.tuples(st.just("append"), wire_messages),
    st.tuples(st.just("insert"), st.integers(0, 20), wire_messages),
    st.tuples(st.just("replace"), st.integers(0, 20), wire_messages),
    st.tuples(st.just("twin"), st.integers(0, 20)),
    st.tuples(st.just("copy"), st.integers(0, 20)),
    st.tuples(st.just("remove"), st.integers(0, 20)),
    st.tuples(st.just("move"), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("repeat"), st.integers(0, 20)),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("truncate"), st.integers(0, 20)),
)


def apply(history: list[Any], edit: tuple[Any, ...]) -> None:
    kind, *args = edit
    at = args[0] % len(history) if history and args and isinstance(args[0], int) else 0
    if kind == "append":
        history.append(args[0])
    elif kind == "insert":
        history.insert(at, args[1])
    elif not history:
        return
    elif kind == "replace":
        history[at] = args[1]
    elif kind == "twin":
        history[at] = twin(history[at])
    elif kind == "copy":
        history[at] = copy.deepcopy(history[at])
    elif kind == "remove":
        del history[at]
    elif kind == "move":
        history.insert(args[1] % len(history), history.pop(at))
    elif kind == "repeat":
        history.append(history[at])
    elif kind == "reverse":
        history.reverse()
    elif kind == "truncate":
        del history[at:]


@given(wire_histories, st.lists(EDITS, max_size=8), st.booleans())
def test_every_request_after_any_edit_equals_the_reference(history, edits, by_pointers):
    """Append, insert, replace, remove, move, reverse, truncate, a message twice, or an equal twin that serialises otherwise: each next request is exact (identity checked by pointer bytes or item by item)."""
    history = list(history)
    with mock.patch.object(_identity, "POINTER_BYTES_IN_USE", by_pointers and _identity.POINTER_BYTES_IN_USE):
        assert_same_request(history)
        for edit in edits:
            apply(history, edit)
            assert_same_request(history)


@pytest.mark.parametrize("by_pointers", [True, False], ids=["pointer bytes", "item by item"])
def test_begins_with_goes_by_identity_not_equality(by_pointers):
    """A list begins with another only if it holds the very same objects first: equal copies do not count."""
    a, b, c = tool_use()[:3]
    twin_b = twin(b)
    with mock.patch.object(_identity, "POINTER_BYTES_IN_USE", by_pointers and _identity.POINTER_BYTES_IN_USE):
        def begins(items, prefix):
            return _identity.begins_with(items, _identity.identity_key(items), prefix, _identity.identity_key(prefix))

        assert begins([a, b, c], [a, b]) and begins([a, b], [a, b]) and begins([a], []) and begins([], [])
        assert twin_b == b and not begins([a, twin_b, c], [a, b])
        assert not begins([a], [a, b]) and not begins([b, a], [a, b]) and not begins([a, c], [a, b])


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="list item pointers are read on CPython only")
def test_on_cpython_the_identity_key_is_the_item_pointers():
    """On CPython the check compares the lists' pointer arrays: the key is the items' ids, packed."""
    items = tool_use()
    assert _identity.POINTER_BYTES_IN_USE
    assert _identity.identity_key(items) == struct.pack(f"{len(items)}P", *map(id, items))
    assert _identity.identity_key([]) == b""


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


def record_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """Replace ``formatting.<name>`` by a wrapper recording the message each call gets."""
    calls: list[Any] = []
    original = getattr(formatting, name)
    monkeypatch.setattr(formatting, name, lambda msg: calls.append(msg) or original(msg))
    return calls


def test_each_message_is_converted_once(monkeypatch):
    """A message's tool calls are extracted and serialised on its first request only, whatever happens to the list."""
    turn = tool_use()
    history = list(turn)
    converted = record_calls(monkeypatch, "_message_to_openai")
    format_msg_for_llm(context(history), None)
    history.append(UserMessage([TextContent("and in Osaka?")]))
    history.reverse()
    format_msg_for_llm(context(history), None)
    assert [id(m) for m in converted] == [id(m) for m in turn + [history[0]]]


def test_a_request_after_appending_looks_only_at_the_new_messages(monkeypatch):
    """The previous request's wires are reused as they are: only the appended messages are looked at."""
    history = [UserMessage([TextContent(f"q{i}")]) for i in range(50)]
    first = format_msg_for_llm(context(history), None)
    new = tool_use()[1:3]
    history += new
    looked_at = record_calls(monkeypatch, "_wire_of")
    second = format_msg_for_llm(context(history), None)
    assert looked_at == new
    assert all(a is b for a, b in zip(first["messages"][1:], second["messages"][1:51]))


def test_more_new_messages_than_the_look_back_are_still_exact():
    """A request after more new messages than the look-back reaches is built from the per-message caches, exactly."""
    history = tool_use()[:1]
    format_msg_for_llm(context(history), None)
    history += [UserMessage([TextContent(f"q{i}")]) for i in range(formatting._LOOK_BACK + 10)]
    assert_same_request(history)


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
    for _ in range(2):
        formatted = assert_same_request(history)
        assert [m["role"] for m in formatted["messages"]] == ["system", "user", "assistant"]


def test_the_cache_lives_and_dies_with_the_message():
    """Nothing outside the messages keeps them alive: once the history is dropped its messages are freed."""
    history = [UserMessage([TextContent(f"q{i}")]) for i in range(3)] + [tool_call_reply(("c", "t", {}))]
    format_msg_for_llm(context(history), None)
    format_msg_for_llm(context(history), None)
    refs = [weakref.ref(m) for m in history]
    del history
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


def test_clients_take_the_read_only_request_and_send_the_same_bytes():
    """The OpenAI and Anthropic clients build the same body from the cached request as from the reference's, changing nothing."""
    history = tool_use() + [UserMessage([TextContent("look"), ImageContent("AAAA", "image/png")])]
    fast = format_msg_for_llm(context(history), None)
    reference = reference_format(context(history), None)
    assert json.dumps(build_openai_request(fast, "m")) == json.dumps(build_openai_request(reference, "m"))
    assert json.dumps(build_anthropic_request(fast, "m", 100)) == json.dumps(build_anthropic_request(reference, "m", 100))
    assert fast == reference


def agent_with(llm: ScriptedLLM, **kwargs: Any) -> YiemAgent:
    return YiemAgent(llm_call=llm, agent_event_sink=None, tool_store=ToolStore("cache-agent"), **kwargs)


def ask(agent: YiemAgent, text: str) -> AssistantMessage:
    run_agent(agent, text)
    response = take_response(agent, timeout=WAIT)
    assert agent.wait_until_idle(WAIT)
    return response


def reference_of(agent: YiemAgent, history: list[Any]) -> str:
    return json.dumps(reference_format(AgentContext(agent.state.system_prompt, history, agent.state.tools), None))


@pytest.mark.parametrize("edit", ["replace", "remove", "reorder", "twin", "new list"])
def test_editing_state_messages_while_idle_gives_an_exact_next_request(edit):
    """Between runs the caller replaces, removes, reorders messages or swaps in a new list: the next request is exact."""
    llm = ScriptedLLM(["first", "second"])
    with agent_with(llm, messages=tool_use()) as agent:
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
        else:
            agent.state.messages = list(reversed(messages))
        edited = list(agent.state.messages)
        ask(agent, "two")
        assert json.dumps(llm.requests[1]) == reference_of(agent, edited + [agent.history()[-2]])


def test_a_custom_prepare_context_with_the_default_format_sends_exact_requests():
    """A prepare_context that injects a fresh reminder and drops the oldest message each round: every request is exact."""
    sent = []

    def inject(state: AgentState, sink: Any) -> AgentContext:
        ctx = prepare_context(state, sink)
        ctx.messages = ctx.messages[1:] + [UserMessage([TextContent("Remember: be brief.")])]
        sent.append(list(ctx.messages))
        return ctx

    llm = ScriptedLLM([tool_call_reply(("c1", "getWeather", {"city": "Tokyo"})), "done", "again"])
    with agent_with(llm, messages=tool_use(), prepare_context=inject) as agent:
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
    with agent_with(llm, format_msg_for_llm=replacing) as agent:
        assert ask(agent, "shout").content[0].text == "ok"
        assert llm.requests[0]["messages"][-1] == {"role": "user", "content": "SHOUT"}
        assert format_msg_for_llm(prepare_context(agent.state, None), None)["messages"][1]["content"] == "shout"
    with agent_with(ScriptedLLM(["unused"]), format_msg_for_llm=editing) as agent:
        response = ask(agent, "edit")
    assert response.stop_reason == "error"
    assert "TypeError" in response.error_message and "read-only" in response.error_message


def test_without_ctypes_yiemagent_imports_and_formats_checking_item_by_item():
    """On a Python without ctypes the package still imports, the check runs item by item, and requests are exact."""
    script = (
        "import sys; sys.modules['ctypes'] = None\n"
        "from yiemagent import _identity, AgentContext, TextContent, UserMessage, format_msg_for_llm\n"
        "history = [UserMessage([TextContent('a')])]\n"
        "first = format_msg_for_llm(AgentContext('', history, {}), None)\n"
        "history.append(UserMessage([TextContent('b')]))\n"
        "second = format_msg_for_llm(AgentContext('', history, {}), None)\n"
        "print(_identity.POINTER_BYTES_IN_USE, [m['content'] for m in second['messages']])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False ['a', 'b']"
