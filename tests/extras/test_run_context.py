"""A context for tools: ``YiemAgent(deps=...)``, ``RunContext``, ``current_run_context()`` (beyond the spec, docs/api.md "A context for tools, async tools")."""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import json
import threading
from typing import Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies

from helpers import ASSISTANT, SEQUENTIAL, WAIT, context_with, make_agent, make_tool, text_result
from yiemagent import (
    AgentTool,
    AgentToolCall,
    AgentToolResult,
    AssistantMessage,
    RunContext,
    TextContent,
    ToolDefinitionError,
    ToolResultMessage,
    UserMessage,
    ask,
    current_run_context,
    execute_tool_calls,
    shutdown,
    tool,
)
from yiemagent.llm.scripted import ScriptedLLM, tool_call_reply
from yiemagent.types import LLMUsage, MessagesSnapshot, call_context, enter_run_context, leave_run_context, run_context


def test_a_tool_parameter_annotated_run_context_receives_it_and_is_not_in_the_schema():
    """deps, run id, round, usage, the messages snapshot and the call id reach the function."""
    seen: list[RunContext] = []

    @tool
    def lookup(key: str, ctx: RunContext) -> str:
        """Look a key up in the deps."""
        seen.append(ctx)
        return ctx.deps[key]

    assert "ctx" not in lookup.input_schema["properties"]
    first = AssistantMessage(tool_call_reply(("c1", "lookup", '{"key": "a"}')).content, stop_reason="tool_use", usage=LLMUsage(5, 2))
    llm = ScriptedLLM([first, "done"])
    agent = make_agent(llm, lookup, builtin_tools=False, deps={"a": "alpha"})
    try:
        assert ask(agent, "look", timeout=WAIT).text == "done"
    finally:
        shutdown(agent, timeout=WAIT)
    (ctx,) = seen
    assert (ctx.deps, ctx.run_id, ctx.round, ctx.tool_call_id) == ({"a": "alpha"}, 1, 1, "c1")
    assert ctx.usage.input_tokens == 5 and ctx.usage.output_tokens == 2
    assert isinstance(ctx.messages, tuple) and ctx.messages[-1].content == first.content
    assert llm.requests[1]["messages"][-1]["content"] == "alpha"


def test_the_model_cannot_send_the_run_context_parameter():
    """An argument named like the RunContext parameter is refused: it is not the model's."""

    @tool
    def f(ctx: Optional[RunContext], x: int = 0) -> str:
        return "ran"

    with pytest.raises(Exception, match="ctx"):
        f.execute("c1", {"ctx": {}}, None, lambda p: None)
    assert f.execute("c1", {}, None, lambda p: None).content[0].text == "ran"  # outside a run: None


def test_hooks_and_parallel_tools_see_their_own_call_in_current_run_context():
    """before/after hooks and each tool of a parallel batch (on pool threads) see the RunContext of their own call."""
    barrier = threading.Barrier(2, timeout=WAIT)
    seen: dict[str, list] = {"before": [], "after": [], "tool": []}

    @tool(parallel=True)
    def work(n: int) -> str:
        barrier.wait()  # both calls at once, on two threads
        ctx = current_run_context()
        seen["tool"].append((ctx.tool_call_id, ctx.deps, threading.current_thread().name))
        return str(n)

    def before(context, signal):
        seen["before"].append(current_run_context().tool_call_id)

    def after(context, signal):
        seen["after"].append(current_run_context().tool_call_id)

    llm = ScriptedLLM([tool_call_reply(("a", "work", '{"n": 1}'), ("b", "work", '{"n": 2}')), "ok"])
    agent = make_agent(llm, work, builtin_tools=False, deps="D", before_tool_call=before, after_tool_call=after, parallel_tool_execute=True)
    try:
        ask(agent, "go", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert sorted(seen["before"]) == ["a", "b"] and sorted(seen["after"]) == ["a", "b"]
    assert sorted((i, d) for i, d, _ in seen["tool"]) == [("a", "D"), ("b", "D")]
    assert current_run_context() is None  # nothing leaks into the caller's thread


def test_a_tool_with_timeout_s_sees_the_run_context_on_its_own_thread():
    """A call on the thread of timeout_s sees its RunContext too."""

    @tool(timeout_s=WAIT)
    def where(ctx: RunContext) -> str:
        return f"{ctx.tool_call_id}:{ctx.round}"

    llm = ScriptedLLM([tool_call_reply(("t1", "where", "{}")), "ok"])
    agent = make_agent(llm, where, builtin_tools=False)
    try:
        ask(agent, "go", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert llm.requests[1]["messages"][-1]["content"] == "t1:1"


def test_a_run_context_parameter_with_another_annotation_kind_is_model_input():
    """Only the annotation RunContext (or Optional of it) is injected; a list of them is refused as a tool argument."""
    with pytest.raises(ToolDefinitionError):

        @tool
        def g(ctxs: list[RunContext]) -> str:
            return ""


class CountedCopies:
    """A typed answer's value kept in the history, which counts its deep copies (a RunContext snapshot copies such an object)."""

    copies = 0

    def __deepcopy__(self, memo):
        CountedCopies.copies += 1
        return CountedCopies()


def _history_with_a_counted_answer() -> list:
    return [UserMessage([TextContent("q")]), AssistantMessage([TextContent("{}")], stop_reason="stop", output=CountedCopies())]


def test_a_tool_cannot_change_the_history_through_the_run_contexts_messages():
    """Appending to a snapshot message's content, or changing a tool call's dict, raises TypeError naming the snapshot; the history is unchanged."""
    refused: list[str] = []

    @tool
    def tamper(ctx: RunContext) -> str:
        """Try to change what the run showed."""
        for change in (
            lambda: ctx.messages[0].content.append(TextContent("injected")),
            lambda: ctx.messages[1].content[0]["tool_calls"][0].update(id="forged"),
            lambda: ctx.messages[1].content[0]["tool_calls"].clear(),
        ):
            try:
                change()
            except TypeError as exc:
                refused.append(str(exc))
        return "tried"

    llm = ScriptedLLM([tool_call_reply(("t1", "tamper", "{}")), "ok", "again"])
    agent = make_agent(llm, tamper, builtin_tools=False)
    try:
        ask(agent, "hello", timeout=WAIT)
        history = agent.history()
        ask(agent, "more", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert len(refused) == 3 and all("RunContext.messages is a read-only snapshot" in r for r in refused)
    assert history[0].content == [TextContent("hello")]
    assert history[1].content[0]["tool_calls"][0]["id"] == "t1"
    assert llm.requests[2]["messages"][1] == {"role": "user", "content": "hello"}


def test_the_snapshot_equals_the_history_and_its_copies_are_the_callers_to_change():
    """The snapshot's messages equal the history's (==, json); list(), dict() and copy.deepcopy of its parts are plain and changeable."""
    seen: list[RunContext] = []

    @tool
    def look(ctx: RunContext) -> str:
        """Look at the run."""
        seen.append(ctx)
        return "seen"

    llm = ScriptedLLM([tool_call_reply(("t1", "look", '{}')), "ok"])
    agent = make_agent(llm, look, builtin_tools=False)
    try:
        ask(agent, "hello", timeout=WAIT)
        history = agent.history()
    finally:
        shutdown(agent, timeout=WAIT)
    (ctx,) = seen
    assert list(ctx.messages) == history[:2] and ctx.messages is ctx.messages
    assert dataclasses.replace(ctx, deps="E").messages == ctx.messages and "messages" not in repr(ctx)
    assert json.dumps(ctx.messages[1].content) == json.dumps(history[1].content)
    mine = copy.deepcopy(ctx.messages[1].content)
    mine[0]["tool_calls"].append({"id": "x"})
    content = list(ctx.messages[0].content)
    content.append(TextContent("mine"))
    assert history[1].content[0]["tool_calls"][-1]["id"] == "t1" and len(history[0].content) == 1


def test_a_dataclass_class_held_by_a_message_is_shared_by_the_snapshot():
    """A message field holding a dataclass class (not an instance) reads in the snapshot as that class, not an AttributeError."""
    seen: list[RunContext] = []

    @tool
    def look(ctx: RunContext) -> str:
        """Look at the run."""
        seen.append(ctx)
        return str(len(ctx.messages))

    earlier = AssistantMessage([TextContent("earlier")], output=LLMUsage)
    llm = ScriptedLLM([tool_call_reply(("t1", "look", "{}")), "ok"])
    agent = make_agent(llm, look, builtin_tools=False, messages=[UserMessage([TextContent("first")]), earlier])
    try:
        assert ask(agent, "look", timeout=WAIT).text == "ok"
    finally:
        shutdown(agent, timeout=WAIT)
    (ctx,) = seen
    assert ctx.messages[1].output is LLMUsage and llm.requests[1]["messages"][-1]["content"] == "4"


def test_the_snapshot_is_copied_only_when_read_and_once_per_batch():
    """A batch whose tools never read RunContext.messages copies nothing; two calls reading it share one copy."""
    readers: list[tuple] = []

    @tool
    def quiet(ctx: RunContext) -> str:
        """Use only the deps."""
        return str(ctx.deps)

    @tool(parallel=True)
    def reader(ctx: RunContext) -> str:
        """Read the history."""
        readers.append(ctx.messages)
        return str(len(ctx.messages))

    CountedCopies.copies = 0
    script = [tool_call_reply(("q1", "quiet", "{}")), '"a"', tool_call_reply(("r1", "reader", "{}"), ("r2", "reader", "{}")), '"b"']
    llm = ScriptedLLM(script)
    agent = make_agent(llm, quiet, reader, builtin_tools=False, deps="D", messages=_history_with_a_counted_answer(), parallel_tool_execute=True)
    try:
        ask(agent, "one", timeout=WAIT)
        assert CountedCopies.copies == 0
        ask(agent, "two", timeout=WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    assert CountedCopies.copies == 1
    assert len(readers) == 2 and readers[0] is readers[1]


def test_a_snapshot_read_after_its_batch_ended_is_the_history_the_batch_started_from():
    """A tool that first asks for its RunContext after its batch ended (abandoned by timeout_s, the run gone on) sees the history as its batch started, with a hook or without."""
    assert _roles_seen_late(hooked=False) == ["user", "assistant"]
    assert _roles_seen_late(hooked=True) == ["user", "assistant"]


def _roles_seen_late(hooked: bool) -> list:
    """The roles of RunContext.messages, read by a call's tool once the run it timed out of has ended."""
    gate, done, seen = threading.Event(), threading.Event(), []

    def late(tool_call_id, args, signal, on_partial_result):
        gate.wait(WAIT)
        seen.extend(m.role for m in current_run_context().messages)
        done.set()
        return AgentToolResult([TextContent("late")])

    slow = AgentTool("late", "Late", "Answers after its timeout.", {"type": "object"}, late, timeout_s=0.05)
    llm = ScriptedLLM([tool_call_reply(("s1", "late", "{}")), "done"])
    hooks = {"before_tool_call": lambda ctx, signal: None} if hooked else {}
    agent = make_agent(llm, slow, builtin_tools=False, **hooks)
    try:
        ask(agent, "go", timeout=WAIT)
        assert len(agent.state.messages) == 4  # the question, the call, its timeout's result, the answer
        gate.set()
        assert done.wait(WAIT)
    finally:
        shutdown(agent, timeout=WAIT)
    return seen



@pytest.mark.parametrize("parallel", [False, True])
def test_a_thread_started_with_a_copy_of_a_calls_context_gets_its_own_batchs_context_after_the_next_batch_began(parallel):
    """A thread a tool starts with a copy of its call's context, asking first while the next batch's tool runs, gets its own call's RunContext: its round, usage, call id and the history its batch started from."""
    second_running, answered = threading.Event(), threading.Event()
    seen: dict[str, RunContext] = {}

    def first(tool_call_id, args, signal, on_partial_result):
        context = contextvars.copy_context()  # the tool never asks itself: the thread is the first to

        def later():
            assert second_running.wait(WAIT)
            seen["late"] = current_run_context()
            answered.set()

        threading.Thread(target=context.run, args=(later,)).start()
        return text_result("one")

    def second(tool_call_id, args, signal, on_partial_result):
        second_running.set()
        assert answered.wait(WAIT)  # the first batch's thread asked while this batch runs
        seen["second"] = current_run_context()
        return text_result("two")

    replies = [
        AssistantMessage(tool_call_reply(("c1", "first", "{}")).content, stop_reason="tool_use", usage=LLMUsage(3, 1)),
        AssistantMessage(tool_call_reply(("c2", "second", "{}")).content, stop_reason="tool_use", usage=LLMUsage(4, 1)),
        "done",
    ]
    tools = [make_tool("first", first, parallel=parallel), make_tool("second", second, parallel=parallel)]
    agent = make_agent(ScriptedLLM(replies), *tools, builtin_tools=False, deps="D", parallel_tool_execute=parallel)
    try:
        assert ask(agent, "go", timeout=WAIT).text == "done"
    finally:
        shutdown(agent, timeout=WAIT)
    late, second_ctx = seen["late"], seen["second"]
    assert (late.deps, late.run_id, late.round, late.usage, late.tool_call_id) == ("D", 1, 1, LLMUsage(3, 1), "c1")
    assert [m.role for m in late.messages] == ["user", "assistant"]
    assert (second_ctx.round, second_ctx.usage, second_ctx.tool_call_id) == (2, LLMUsage(7, 2), "c2")
    assert [m.role for m in second_ctx.messages] == ["user", "assistant", "tool", "assistant"]


def test_an_event_sink_called_during_a_batch_outside_its_calls_sees_no_run_context():
    """A batch's start and end events reach the sink outside the call's scope: current_run_context() is None there, as anywhere but a call's tools and hooks."""
    in_sink: list = []
    in_tool: list = []

    def sink(event):
        if type(event).__name__ in ("ToolExecStartEvent", "ToolExecEndEvent"):
            in_sink.append(current_run_context())

    def look(tool_call_id, args, signal, on_partial_result):
        in_tool.append(current_run_context().tool_call_id)
        return text_result("ok")

    agent = make_agent(ScriptedLLM([tool_call_reply(("c1", "look", "{}")), "done"]), make_tool("look", look), builtin_tools=False, sink=sink)
    try:
        assert ask(agent, "go", timeout=WAIT).text == "done"
    finally:
        shutdown(agent, timeout=WAIT)
    assert in_sink == [None, None] and in_tool == ["c1"]


def _containers(value, found):
    """Every list and dict inside ``value`` (a message's fields, the values of its dicts and lists)."""
    if isinstance(value, (list, dict)):
        found.append(value)
        for item in value.values() if isinstance(value, dict) else value:
            _containers(item, found)
    elif isinstance(value, tuple):
        for item in value:
            _containers(item, found)
    return found


@settings(max_examples=60, deadline=None)
@given(st.lists(strategies.messages, min_size=1, max_size=4))
def test_any_snapshot_equals_its_messages_and_refuses_every_change_inside_them(messages):
    """Property: a RunContext over any messages shows equal messages, to_dict alike, and each list and dict in them refuses a change."""
    ctx = RunContext(None, 1, 1, LLMUsage(), messages, None)
    assert list(ctx.messages) == messages
    assert [m.to_dict() for m in ctx.messages] == [m.to_dict() for m in messages]
    for message in ctx.messages:
        for container in _containers([getattr(message, f.name) for f in dataclasses.fields(message)], [])[1:]:
            with pytest.raises(TypeError, match="read-only snapshot"):
                container.clear()
    assert [m.to_dict() for m in messages] == [m.to_dict() for m in ctx.messages]


def test_a_context_entered_by_hand_is_current_and_each_call_of_it_gets_its_own_id():
    """enter_run_context(ctx) makes ctx current until leave_run_context; call_context inside it gives ctx with that call's id, and run_context(None) none."""
    ctx = RunContext("D", 3, 2, LLMUsage(1, 2), [], None)
    token = enter_run_context(ctx)
    try:
        assert current_run_context() is ctx
        with call_context("c1"):
            inner = current_run_context()
        assert (inner.deps, inner.run_id, inner.round, inner.usage, inner.tool_call_id) == ("D", 3, 2, LLMUsage(1, 2), "c1")
        with run_context(None):
            assert current_run_context() is None
    finally:
        leave_run_context(token)
    assert current_run_context() is None


def test_a_tool_run_by_a_batch_outside_any_run_sees_no_run_context():
    """execute_tool_calls called by an application outside a run gives its tools current_run_context() None, not an error."""
    seen: list[Optional[RunContext]] = []

    def execute(tool_call_id, args, signal, on_partial_result):
        seen.append(current_run_context())
        return text_result("ok")

    batch = execute_tool_calls(context_with(make_tool("look", execute)), ASSISTANT, [AgentToolCall("c1", "look", {})], SEQUENTIAL, None, None)
    assert seen == [None] and [m.content[0].text for m in batch.messages] == ["ok"]


def test_the_snapshot_shares_what_cannot_change_and_freezes_containers_inside_tuples():
    """A frozen dataclass of plain values (a usage) is the history's own object in the snapshot, a frozen one holding a list a copy; dicts and lists inside a tuple refuse changes too."""

    @dataclasses.dataclass(frozen=True)
    class Holder:
        items: list

    usage, holder = LLMUsage(3, 4), Holder([1])
    message = ToolResultMessage("c1", "t", [TextContent("r")], details=({"k": [1]}, [2]), usage=usage)
    answer = AssistantMessage([TextContent("a")], output=holder)
    ctx = RunContext(None, 1, 1, LLMUsage(), [message, answer], None)
    shown, shown_answer = ctx.messages
    assert shown.usage is usage and shown_answer.output == holder and shown_answer.output is not holder
    for container in (shown.details[0], shown.details[0]["k"], shown.details[1]):
        with pytest.raises(TypeError, match="read-only snapshot"):
            container.clear()
    assert message.details == ({"k": [1]}, [2])


def test_a_snapshot_holds_the_messages_it_was_given_then_and_shows_other_items_as_they_are():
    """A MessagesSnapshot leaves out what was appended to its sequence after it was made; an item that is not a message
    dataclass is shown as it is; RunContext.messages read on the class is an AttributeError naming it."""
    history = [UserMessage([TextContent("q")])]
    snapshot = MessagesSnapshot(history)
    history.append(UserMessage([TextContent("later")]))
    assert RunContext(None, 1, 1, LLMUsage(), snapshot, None).messages == (history[0],)
    assert RunContext(None, 1, 1, LLMUsage(), ["a note"], None).messages == ("a note",)
    with pytest.raises(AttributeError, match="^messages$"):
        RunContext.messages  # noqa: B018
