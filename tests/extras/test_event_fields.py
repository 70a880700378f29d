"""What the events carry for a tracer (docs/events.md, docs/tracing.md): when each happened, what a round
asked for and sent, and the kind of a round's failure."""

from __future__ import annotations

import threading
import time

import pytest

from helpers import WAIT, EventRecorder, make_tool, text_result
from yiemagent import (
    AgentRunEndEvent,
    AgentRunStartEvent,
    AssistantMessage,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    LLMError,
    LLMModel,
    LLMUsage,
    TextContent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
    abort,
    run_agent,
    take_response,
    tee,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

REPLY = AssistantMessage([])
RESULT = text_result("x")

EVENTS = [
    lambda: ToolExecStartEvent("c1", "t", {}),
    lambda: ToolExecUpdateEvent("c1", "t", {}, 1),
    lambda: ToolExecEndEvent("c1", "t", RESULT, False),
    lambda: AgentRunStartEvent(1, 1),
    lambda: AgentRunEndEvent(1, REPLY, 0, 0.0),
    lambda: LLMCallStartEvent(1, 1, 0),
    lambda: LLMCallEndEvent(1, 1, 0.0, None, None, None),
    lambda: LLMDeltaEvent(1, 1, "text", "x"),
]


@pytest.mark.parametrize("make", EVENTS)
def test_every_event_carries_when_it_was_made_and_leaves_it_out_of_equality_and_repr(make):
    """time_ns is time.time_ns() at construction; two events saying the same are equal whenever made, and repr omits it."""
    before = time.time_ns()
    first = make()
    after = time.time_ns()
    assert before <= first.time_ns <= after
    second = make()
    assert first == second and "time_ns" not in repr(first)


def test_parallel_calls_keep_their_own_end_times_though_the_sink_receives_them_late(agents):
    """A call's end event is stamped when the call ended, in its thread, not when a busy sink gets to it."""
    b_in_sink, a_done = threading.Event(), threading.Event()
    a_returned: list[int] = []

    def slow_a(tool_call_id, args, signal, on_partial_result):
        assert b_in_sink.wait(WAIT)  # B has ended and its end event is in the sink
        a_returned.append(time.time_ns())
        a_done.set()
        return text_result("a")

    def blocker(event):  # holds the sink (the emitter's lock) while A ends: A's end event waits for it
        if isinstance(event, ToolExecEndEvent) and event.tool_call_id == "b":
            b_in_sink.set()
            assert a_done.wait(WAIT)

    received: dict[str, int] = {}
    recorder = EventRecorder()

    def stamp(event):
        if isinstance(event, ToolExecEndEvent):
            received[event.tool_call_id] = time.time_ns()

    tools = [make_tool("a", slow_a, parallel=True), make_tool("b", lambda *a: text_result("b"), parallel=True)]
    agent = agents(
        ScriptedLLM([tool_call_reply(("a", "a", {}), ("b", "b", {})), "done"]), tools,
        agent_event_sink=tee(blocker, stamp, recorder), parallel_tool_execute=True,
    )
    run_agent(agent, "go")
    take_response(agent, timeout=WAIT)
    ends = {e.tool_call_id: e for e in recorder.of_type(ToolExecEndEvent)}
    assert ends["b"].time_ns < a_returned[0] <= ends["a"].time_ns  # B ended before A returned ...
    assert received["a"] > a_returned[0] and received["b"] > ends["b"].time_ns  # ... though each reached the sink later


def test_a_round_start_names_the_model_and_provider_and_carries_the_context_it_sent(agents):
    """LLMCallStartEvent says the model and provider the agent knows (its LLMModel first) and the AgentContext formatted."""
    recorder = EventRecorder()

    class Client(ScriptedLLM):
        model = "client-model"
        provider = "api.example.com"

    agent = agents(Client(["one", "two"]), agent_event_sink=recorder, system_prompt="be brief")
    run_agent(agent, "hi")
    take_response(agent, timeout=WAIT)
    (start,) = recorder.of_type(LLMCallStartEvent)
    assert (start.model, start.provider) == ("client-model", "api.example.com")
    assert start.context.system_prompt == "be brief"
    assert [m.content for m in start.context.messages] == [[TextContent("hi")]]

    recorder.events.clear()
    agent.state.model = LLMModel("configured", provider="anthropic")
    run_agent(agent, "again")
    take_response(agent, timeout=WAIT)
    (start,) = recorder.of_type(LLMCallStartEvent)
    assert (start.model, start.provider) == ("configured", "anthropic")


def test_a_round_start_says_none_when_nothing_names_the_model(agents):
    """An llm_call with no model or provider attribute (or one that raises when read) gives None."""
    recorder = EventRecorder()

    class Odd:
        @property
        def model(self):
            raise RuntimeError("no model here")

        provider = 42  # not a str

        def __call__(self, formatted):
            return AssistantMessage([TextContent("ok")])

    agent = agents(Odd(), agent_event_sink=recorder)
    run_agent(agent, "hi")
    assert take_response(agent, timeout=WAIT).content == [TextContent("ok")]
    (start,) = recorder.of_type(LLMCallStartEvent)
    assert (start.model, start.provider) == (None, None)


@pytest.mark.parametrize(
    "reply, error_type",
    [
        (AssistantMessage([TextContent("fine")]), None),
        (LLMError("HTTP 500 from the server"), "LLMError"),
        (TimeoutError("slow"), "TimeoutError"),
        (lambda formatted: "not a message", "invalid_reply"),
    ],
)
def test_a_round_end_names_the_kind_of_failure(agents, reply, error_type):
    """error_type is the class of what llm_call raised, "invalid_reply" for a reply decision 15 refuses, None on success (and then the reply is the event's response)."""
    recorder = EventRecorder()
    agent = agents(ScriptedLLM([reply]), agent_event_sink=recorder)
    run_agent(agent, "hi")
    take_response(agent, timeout=WAIT)
    (end,) = recorder.of_type(LLMCallEndEvent)
    assert end.error_type == error_type
    assert (end.error is None) == (error_type is None)
    assert (end.response.content if end.response is not None else None) == ([TextContent("fine")] if error_type is None else None)


def test_a_round_the_run_was_aborted_during_ends_with_error_type_aborted(agents):
    """An abort during llm_call: the round's end event has error_type "aborted"."""
    recorder = EventRecorder()
    entered, release = threading.Event(), threading.Event()

    def llm(formatted):
        entered.set()
        assert release.wait(WAIT)
        return AssistantMessage([TextContent("late")], usage=LLMUsage(1, 1, total_tokens=2))

    agent = agents(llm, agent_event_sink=recorder)
    run_agent(agent, "hi")
    assert entered.wait(WAIT)
    abort(agent, "stop now")
    release.set()
    assert take_response(agent, timeout=WAIT).stop_reason == "aborted"
    (end,) = recorder.of_type(LLMCallEndEvent)
    assert (end.error_type, end.response) == ("aborted", None)
