"""A run runs in the context of the call that started it (docs/tracing.md "Trace context").

Tested here with a plain ``contextvars.ContextVar``: whatever the caller of ``run_agent``,
``follow_up`` or ``continue_agent`` set is what the run, its hooks, its tools (sequential
and parallel) and its event sink see; nothing the run sets leaks back or into the next
run. tests/extras/test_otel_spans.py proves the same with a real OpenTelemetry span.
"""

from __future__ import annotations

import contextvars
import linecache
import sys
import threading

from helpers import WAIT, make_tool, text_result
from yiemagent import (
    AgentRunEndEvent,
    AgentRunStartEvent,
    AssistantMessage,
    LLMCallStartEvent,
    TextContent,
    ToolExecEndEvent,
    add_message,
    continue_agent,
    follow_up,
    run_agent,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("test_request_id", default="unset")


def in_context(value: str, fn, *args):
    """``fn(*args)`` in a copy of the current context where ``request_id`` is ``value`` (a caller's own context)."""

    def call():
        request_id.set(value)
        return fn(*args)

    return contextvars.copy_context().run(call)


class Seen:
    """Records ``request_id`` as each part of a run sees it: (where, value)."""

    def __init__(self):
        self.lock = threading.Lock()  # guards values
        self.values: list[tuple[str, str]] = []

    def __call__(self, where: str) -> None:
        with self.lock:
            self.values.append((where, request_id.get()))

    def sink(self, event) -> None:
        self(f"sink:{type(event).__name__}")

    def where(self, value: str) -> set[str]:
        return {w for w, v in self.values if v == value}


def recording_tool(seen: Seen, name: str, parallel: bool):
    def execute(tool_call_id, args, signal, on_partial_result):
        seen(f"tool:{name}")
        return text_result("ok")

    return make_tool(name, execute, parallel=parallel)


def test_every_part_of_a_run_sees_the_context_of_the_run_agent_call(agents):
    """The caller's ContextVar reaches prepare_context, llm_call, both hooks, sequential and parallel tools and the sink."""
    seen = Seen()

    def llm(formatted):
        seen("llm_call")
        return script.pop(0)

    script = [tool_call_reply(("p1", "par", {}), ("p2", "par", {})), tool_call_reply(("s1", "seq", {})), AssistantMessage([TextContent("done")])]

    def prepare_context(state, sink):
        seen("prepare_context")
        from yiemagent import prepare_context as default

        return default(state, sink)

    agent = agents(
        llm,
        [recording_tool(seen, "par", True), recording_tool(seen, "seq", False)],
        agent_event_sink=seen.sink,
        prepare_context=prepare_context,
        before_tool_call=lambda ctx, signal: seen("before_tool_call"),
        after_tool_call=lambda ctx, signal: seen("after_tool_call"),
        parallel_tool_execute=True,
    )
    in_context("request-1", run_agent, agent, "go")
    take_response(agent, timeout=WAIT)

    assert request_id.get() == "unset"  # the caller's own context was not touched
    assert {v for _, v in seen.values} == {"request-1"}
    assert seen.where("request-1") >= {
        "prepare_context", "llm_call", "before_tool_call", "after_tool_call", "tool:par", "tool:seq",
        "sink:AgentRunStartEvent", "sink:LLMCallStartEvent", "sink:ToolExecEndEvent", "sink:AgentRunEndEvent",
    }


def test_each_run_sees_the_context_of_the_call_that_started_it_and_nothing_a_run_set_leaks(agents):
    """Two runs started from two contexts see one each; a value a tool sets is gone for the next run and the caller."""
    seen = Seen()

    def execute(tool_call_id, args, signal, on_partial_result):
        seen("tool")
        request_id.set("set by the tool")
        return text_result("ok")

    llm = ScriptedLLM([tool_call_reply(("c1", "setter", {})), "first", "second"])
    agent = agents(llm, [make_tool("setter", execute)], agent_event_sink=seen.sink)
    in_context("request-1", run_agent, agent, "one")
    take_response(agent, timeout=WAIT)
    agent.wait_until_idle(WAIT)
    in_context("request-2", run_agent, agent, "two")
    take_response(agent, timeout=WAIT)

    starts = [v for w, v in seen.values if w == "sink:AgentRunStartEvent"]
    assert starts == ["request-1", "request-2"]
    assert ("sink:AgentRunEndEvent", "request-1") not in seen.values  # the tool's set held for the rest of run 1 only
    assert [v for w, v in seen.values if w == "sink:AgentRunEndEvent"] == ["set by the tool", "request-2"]
    assert request_id.get() == "unset"


def test_follow_up_and_continue_agent_carry_their_callers_context(agents):
    """A follow-up that starts a run, and continue_agent, each give the run their caller's context."""
    seen = Seen()
    agent = agents(ScriptedLLM(["one", "two"]), agent_event_sink=seen.sink)
    in_context("follow-up", follow_up, agent, "hello")
    take_response(agent, timeout=WAIT)
    agent.wait_until_idle(WAIT)
    add_message(agent, AssistantMessage([TextContent("an external result")]))
    in_context("continue", continue_agent, agent)
    take_response(agent, timeout=WAIT)
    assert [v for w, v in seen.values if w == "sink:AgentRunStartEvent"] == ["follow-up", "continue"]


def test_a_follow_up_the_loop_moves_during_a_run_keeps_its_context_for_the_run_it_starts(agents):
    """Sent while run 1 waits in llm_call, a follow-up is moved to the input by the loop and starts run 2 in its own context."""
    seen = Seen()
    entered, gate = threading.Event(), threading.Event()

    def llm(formatted):
        seen("llm_call")
        entered.set()
        assert gate.wait(WAIT)
        return AssistantMessage([TextContent("reply")])

    agent = agents(llm, agent_event_sink=seen.sink)
    in_context("run-1", run_agent, agent, "first")
    assert entered.wait(WAIT)
    in_context("follow-up", follow_up, agent, "second")
    gate.set()
    take_response(agent, timeout=WAIT)
    take_response(agent, timeout=WAIT)
    assert [v for w, v in seen.values if w == "llm_call"] == ["run-1", "follow-up"]


def test_a_run_that_takes_several_messages_runs_in_the_context_of_the_first(agents):
    """Messages queued together, and one that joins at the next round, are answered in the first message's context."""
    seen = Seen()
    entered, gate = threading.Event(), threading.Event()
    script = [tool_call_reply(("c1", "wait", {})), AssistantMessage([TextContent("done")])]

    def wait(tool_call_id, args, signal, on_partial_result):
        entered.set()
        assert gate.wait(WAIT)
        return text_result("waited")

    def llm(formatted):
        seen("llm_call")
        return script.pop(0)

    agent = agents(llm, [make_tool("wait", wait)], agent_event_sink=seen.sink)
    in_context("first", run_agent, agent, "one")
    assert entered.wait(WAIT)
    in_context("joins-later", run_agent, agent, "two")  # taken by the run at its next round
    gate.set()
    response = take_response(agent, timeout=WAIT)
    assert response.content == [TextContent("done")]
    assert [v for w, v in seen.values if w == "llm_call"] == ["first", "first"]
    events = [(w, v) for w, v in seen.values if w.startswith("sink:")]
    assert {v for _, v in events} == {"first"}
    assert ("sink:" + AgentRunEndEvent.__name__, "first") in events
    assert ("sink:" + ToolExecEndEvent.__name__, "first") in events
    assert ("sink:" + LLMCallStartEvent.__name__, "first") in events
    assert ("sink:" + AgentRunStartEvent.__name__, "first") in events


def test_a_message_put_on_the_input_channel_by_hand_carries_its_senders_context(agents):
    """``agent.input_channel.put`` keeps the putting thread's context too: the mechanism is the channel's, not run_agent's."""
    seen = Seen()
    agent = agents(ScriptedLLM(["ok"]), agent_event_sink=seen.sink)
    in_context("by-hand", agent.input_channel.put, {"role": "user", "content": "hi"})
    take_response(agent, timeout=WAIT)
    assert [v for w, v in seen.values if w == "sink:AgentRunStartEvent"] == ["by-hand"]


def test_a_run_started_inside_another_llm_calls_stream_does_not_stream_into_it(agents):
    """The caller's context is carried, but not its LLM call's stream: a tool's emit_delta and abort signal are not the caller's."""
    from yiemagent import AbortSignal
    from yiemagent.streaming import current_abort_signal, emit_delta, stream_to

    outer_deltas: list = []
    inside: list = []

    def execute(tool_call_id, args, signal, on_partial_result):
        emit_delta("text", "from the inner run's tool")
        inside.append(current_abort_signal())
        return text_result("ok")

    agent = agents(ScriptedLLM([tool_call_reply(("c1", "chatty", {})), "done"]), [make_tool("chatty", execute)])
    with stream_to(lambda kind, text: outer_deltas.append(text), AbortSignal()):
        run_agent(agent, "go")
    take_response(agent, timeout=WAIT)
    assert outer_deltas == [] and inside == [None]


def test_a_run_started_by_a_later_senders_ring_runs_in_the_context_of_the_first_message(agents):
    """A sender stopped between putting its message and ringing leaves the run to the next sender's ring, which starts it
    (state 2, taken by the ringing thread): the run still runs in the context of the first message, not in the ringer's."""
    seen = Seen()

    def llm(formatted):
        seen("llm_call")
        return AssistantMessage([TextContent("done")])

    agent = agents(llm, [])
    assert agent.wait_until_idle(WAIT)
    put_code = type(agent.input_channel).put.__code__
    reached, go_on = threading.Event(), threading.Event()

    def local(frame, event, arg):
        if event == "line" and linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip() == "self.on_change()":
            reached.set()  # the message is in the channel; the sender has not rung
            go_on.wait(WAIT)
        return local

    def first_sender():
        sys.settrace(lambda frame, event, arg: local if frame.f_code is put_code else None)
        try:
            in_context("first", run_agent, agent, "one")
        finally:
            sys.settrace(None)

    sender = threading.Thread(target=first_sender)
    sender.start()
    try:
        assert reached.wait(WAIT)  # "one" is in the input channel; its sender has not rung
        in_context("rings", run_agent, agent, "two")  # the agent sleeps: this thread's ring starts the run
        assert take_response(agent, timeout=WAIT).content == [TextContent("done")]
    finally:
        go_on.set()
        sender.join(WAIT)
    assert agent.wait_until_idle(WAIT)
    assert [v for w, v in seen.values if w == "llm_call"] == ["first"]
    assert [m.content[0].text for m in agent.history() if m.role == "user"] == ["one", "two"]
