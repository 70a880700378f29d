"""Fault injection: every phase of a run x every kind of failure (docs/failures.md).

Each cell runs one agent through a run in which one phase fails once, then a second
run, and checks: the loop survives, each tool call has exactly one result, a response
arrives, the next run works, nothing sent is lost.
"""

from __future__ import annotations

import threading

import pytest

from helpers import WAIT, check_wire, text_result
from yiemagent import (
    AgentTool,
    AssistantMessage,
    TextContent,
    ToolStore,
    UserMessage,
    YiemAgent,
    abort,
    format_msg_for_llm,
    prepare_context,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)

HANG_S = 0.1  # "hangs up to a timeout": the phase blocks this long, then carries on
TOOL_TIMEOUT_S = 0.05  # the tool's timeout_s: a hanging execute overruns it

TOOL_PHASES = ["prepare_arguments", "validate", "before_tool_call", "execute", "after_tool_call"]
SINK_PHASES = [
    "sink:AgentRunStartEvent",
    "sink:LLMCallStartEvent",
    "sink:LLMCallEndEvent",
    "sink:ToolExecStartEvent",
    "sink:ToolExecUpdateEvent",
    "sink:ToolExecEndEvent",
    "sink:AgentRunEndEvent",
]
RUN_PHASES = ["prepare_context", "format_msg_for_llm", "llm_call", "extraction"]
PHASES = TOOL_PHASES + SINK_PHASES + RUN_PHASES
FAILURES = ["raises", "exits", "wrong_type", "hangs", "aborted"]


class WrongType:
    """What a phase returns when it "returns the wrong type"."""


class Fault:
    """Makes one phase fail once, in one way; every later visit of the phase behaves."""

    def __init__(self, phase: str, failure: str) -> None:
        self.phase = phase
        self.failure = failure
        self.fired = threading.Event()
        self.agent = None

    def hit(self, phase: str) -> bool:
        """Called as each phase begins; fails here if it is the phase's turn. True: return the wrong type."""
        if phase != self.phase or self.fired.is_set():
            return False
        self.fired.set()
        if self.failure == "raises":
            raise RuntimeError(f"injected failure in {phase}")
        if self.failure == "exits":
            raise SystemExit(f"injected exit in {phase}")
        if self.failure == "hangs":
            threading.Event().wait(HANG_S)
        if self.failure == "aborted":
            abort(self.agent, f"aborted during {phase}")
        return self.failure == "wrong_type"


class Exits:
    """A dict key whose repr raises SystemExit: the extraction phase reads it when it reports the bad key."""

    def __repr__(self):
        raise SystemExit("injected exit in extraction")


def hostile_calls(failure: str) -> list:
    """The extraction phase fails on what the model sent: its tool calls, bad in the way ``failure`` says."""
    good = [{"id": f"c{n}", "type": "function", "function": {"name": "work", "arguments": {"n": n}}} for n in (1, 2)]
    bad = {
        "raises": "[" * 5000 + "]" * 5000,  # json.loads raises RecursionError
        "exits": {Exits(): 1},
        "wrong_type": [1, 2],  # arguments that are not an object
        "hangs": {"blob": "x" * 5_000_000},  # slow to read and check
        "aborted": {"n": 0},
    }[failure]
    return [good[0], {"id": "c0", "type": "function", "function": {"name": "work", "arguments": bad}}, 42, good[1]]


def build(fault: Fault) -> YiemAgent:
    def execute(call_id, args, signal, on_partial_result):
        on_partial_result("half way")
        if fault.hit("execute"):
            return WrongType()
        return text_result(f"done {args.get('n')}")

    def prepare_arguments(args):
        return WrongType() if fault.hit("prepare_arguments") else args

    def validate(args):
        return WrongType() if fault.hit("validate") else None

    def before(ctx, signal):
        return WrongType() if fault.hit("before_tool_call") else None

    def after(ctx, signal):
        return WrongType() if fault.hit("after_tool_call") else None

    def sink(event):
        fault.hit(f"sink:{type(event).__name__}")

    def prepare(state, emit):
        return WrongType() if fault.hit("prepare_context") else prepare_context(state, emit)

    def fmt(ctx, emit):
        return WrongType() if fault.hit("format_msg_for_llm") else format_msg_for_llm(ctx, emit)

    def llm(formatted):
        if fault.hit("llm_call"):
            return WrongType()
        check_wire(formatted)
        last = formatted["messages"][-1]
        if last["role"] == "tool":
            return AssistantMessage([TextContent("answer")], stop_reason="stop")
        if last["content"] == "next":
            return AssistantMessage([TextContent("done")], stop_reason="stop")
        calls = [{"id": f"c{n}", "type": "function", "function": {"name": "work", "arguments": {"n": n}}} for n in (1, 2)]
        if fault.phase == "extraction" and not fault.fired.is_set():
            fault.fired.set()
            calls = hostile_calls(fault.failure)
            if fault.failure == "aborted":
                abort(fault.agent, "aborted between the reply and its extraction")
        return AssistantMessage([{"type": "tool_calls", "tool_calls": calls}], stop_reason="tool_use")

    tool = AgentTool(
        "work", "Work", "does work", {"type": "object"}, execute, prepare_arguments, validate, timeout_s=TOOL_TIMEOUT_S if fault.phase == "execute" else None
    )
    if fault.phase == "execute" and fault.failure == "hangs":
        tool = AgentTool("work", "Work", "does work", {"type": "object"}, execute, timeout_s=HANG_S / 2)
    store = ToolStore("matrix")
    register_tool(store, tool)
    agent = YiemAgent(
        llm_call=llm,
        agent_event_sink=sink,
        tool_store=store,
        prepare_context=prepare,
        format_msg_for_llm=fmt,
        before_tool_call=before,
        after_tool_call=after,
    )
    fault.agent = agent
    return agent


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("phase", PHASES)
def test_fault_cell(phase, failure):
    """One phase fails once: the loop survives, every call has one result, a response comes, the next run works, nothing is lost."""
    fault = Fault(phase, failure)
    agent = build(fault)
    try:
        run_agent(agent, "go")
        first = take_response(agent, timeout=WAIT)
        assert isinstance(first, AssistantMessage)
        assert fault.fired.is_set(), "the phase was reached"
        assert agent._core._thread.is_alive(), "the loop survives"
        run_agent(agent, "next")
        second = take_response(agent, timeout=WAIT)
        assert second.content and second.content[0].text == "done", second
        history = agent.history()
        assert [m.content[0].text for m in history if isinstance(m, UserMessage)] == ["go", "next"]
        check_wire(format_msg_for_llm(prepare_context(agent.state)))  # every call answered exactly once
        assert shutdown(agent, timeout=WAIT) == []
    finally:
        shutdown(agent, timeout=WAIT)
