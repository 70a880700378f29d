"""agent_tool: a sub-agent as a tool — its text the result, its usage the parent's, its events SubAgentEvents, no thread left."""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace

import pytest

from helpers import WAIT, EventRecorder, make_agent
from yiemagent import (
    AbortSignal,
    AgentRunEndEvent,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    LLMCallStartEvent,
    LLMUsage,
    SubAgentEvent,
    TextContent,
    ToolDefinitionError,
    ToolError,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolResultMessage,
    abort,
    agent_tool,
    ask,
    run_agent,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.tools.agent_tool import MAX_DEPTH
from yiemagent.streaming import current_abort_signal

_ids = itertools.count()


def answering(text: str, usage: LLMUsage = LLMUsage(10, 2, total_tokens=12)) -> AssistantMessage:
    return AssistantMessage([TextContent(text)], stop_reason="stop", model="sub", usage=usage)


def sub_agents(made: list, llm_for):
    """A make_agent that builds sub-agents with session ids "sub-N", remembered in ``made``."""

    def make():
        agent = make_agent(llm_for(), builtin_tools=False, session_id=f"sub-{next(_ids)}")
        made.append(agent)
        return agent

    return make


def results(agent) -> list[ToolResultMessage]:
    return [m for m in agent.history() if isinstance(m, ToolResultMessage)]


def test_the_sub_agents_final_text_is_the_result_and_its_usage_joins_the_parents(agents):
    """The sub-agent's final text is the call's result; its usage joins the parent run's usage and agent.usage."""
    made: list = []
    tool = agent_tool(sub_agents(made, lambda: ScriptedLLM([answering("the answer is 42")])), name="expert", description="asks an expert")
    parent_round = LLMUsage(100, 5, total_tokens=105)
    llm = ScriptedLLM([replace(tool_call_reply(("c1", "expert", {"task": "what is six times seven?"})), usage=parent_round), answering("done", parent_round)])
    parent = agents(llm, [tool])
    run_agent(parent, "go")
    assert take_response(parent, timeout=WAIT).content[0].text == "done"
    (result,) = results(parent)
    assert result.content[0].text == "the answer is 42" and not result.is_error
    assert result.usage == LLMUsage(10, 2, total_tokens=12) and result.details["sub_agent"] == {"model": "sub", "stop_reason": "stop"}
    end = parent.agent_event_sink.of_type(AgentRunEndEvent)[-1]
    assert end.usage == LLMUsage(210, 12, total_tokens=222) == parent.usage
    assert made[0]._core.state.messages[0].content[0].text == "what is six times seven?"


def test_parallel_sub_agents_events_reach_the_parent_sink_one_at_a_time(agents):
    """Two sub-agents run at once (a barrier proves it); their events reach the parent's sink as SubAgentEvents, never two sink calls at once."""
    both_running = threading.Barrier(2, timeout=WAIT)
    other_inside = threading.Event()
    inside = threading.Lock()

    def barrier_then(text):
        def reply(formatted):
            both_running.wait()
            return answering(text)

        return reply

    recorder = EventRecorder()
    seen_first = threading.Event()

    def sink(event):
        if not inside.acquire(blocking=False):
            other_inside.set()  # another thread is inside the sink right now
            recorder(event)
            return
        try:
            recorder(event)
            if isinstance(event, SubAgentEvent) and isinstance(event.event, LLMCallStartEvent) and not seen_first.is_set():
                seen_first.set()
                other_inside.wait(0.5)  # a window for the other sub-agent's events: serialised, none can enter
        finally:
            inside.release()

    texts = iter(["billing says: refund", "tech says: reboot"])
    tool = agent_tool(sub_agents([], lambda: ScriptedLLM([barrier_then(next(texts))])), name="specialist", description="a specialist")
    llm = ScriptedLLM([tool_call_reply(("a", "specialist", {"task": "billing"}), ("b", "specialist", {"task": "tech"})), answering("triaged")])
    parent = agents(llm, [tool], agent_event_sink=sink, parallel_tool_execute=True)
    run_agent(parent, "help")
    assert take_response(parent, timeout=WAIT).content[0].text == "triaged"
    assert not other_inside.is_set() and recorder.overlaps == 0
    assert sorted(r.content[0].text for r in results(parent)) == ["billing says: refund", "tech says: reboot"]
    for call_id in ("a", "b"):
        events = recorder.for_call(call_id)
        assert isinstance(events[0], ToolExecStartEvent) and isinstance(events[-1], ToolExecEndEvent)
        inner = [e.event for e in events if isinstance(e, SubAgentEvent)]
        assert isinstance(inner[-1], AgentRunEndEvent) and any(isinstance(e, LLMCallStartEvent) for e in inner)


def test_aborting_the_parent_aborts_the_sub_run(agents):
    """abort() on the parent fires the sub-run's signal: the sub-agent's LLM call sees it and the sub-run ends aborted."""
    started, seen = threading.Event(), []

    def wait_for_abort(formatted):
        started.set()
        signal = current_abort_signal()
        seen.append(signal.wait(WAIT))
        return answering("too late")

    made: list = []
    tool = agent_tool(sub_agents(made, lambda: ScriptedLLM([wait_for_abort])), name="slow", description="slow")
    parent = agents(ScriptedLLM([tool_call_reply(("c", "slow", {"task": "take your time"}))]), [tool])
    run_agent(parent, "go")
    assert started.wait(WAIT)
    abort(parent, "user pressed stop")
    response = take_response(parent, timeout=WAIT)
    assert response.stop_reason == "aborted" and seen == [True]
    (result,) = results(parent)
    assert result.is_error and "stop_reason 'aborted': user pressed stop" in result.content[0].text  # the parent's reason, passed on
    assert made[0].closing


def test_a_failed_sub_run_is_an_error_result_and_the_parent_goes_on(agents):
    """A sub-run that fails (its model raises) gives the call an error result naming why; the parent's run answers."""
    tool = agent_tool(sub_agents([], lambda: ScriptedLLM([])), name="broken", description="broken")
    llm = ScriptedLLM([tool_call_reply(("c", "broken", {"task": "x"})), answering("sorry, the expert failed")])
    parent = agents(llm, [tool])
    run_agent(parent, "go")
    assert take_response(parent, timeout=WAIT).content[0].text == "sorry, the expert failed"
    (result,) = results(parent)
    assert result.is_error and "agent tool 'broken': the sub-agent's run ended with stop_reason 'error'" in result.content[0].text
    assert "script ran out" in result.content[0].text


def test_sub_agents_are_shut_down_after_their_call_with_no_thread_left(agents):
    """After each call its sub-agent is shut down and none of its threads is alive."""
    made: list = []
    tool = agent_tool(sub_agents(made, lambda: ScriptedLLM([answering("one")])), name="helper", description="helps")
    llm = ScriptedLLM([tool_call_reply(("a", "helper", {"task": "1"}), ("b", "helper", {"task": "2"})), answering("done")])
    parent = agents(llm, [tool], parallel_tool_execute=True)
    run_agent(parent, "go")
    take_response(parent, timeout=WAIT)
    assert len(made) == 2 and all(agent.closing for agent in made)
    names = {agent.session_id for agent in made}
    left = [t.name for t in threading.enumerate() if any(name in t.name for name in names)]
    assert left == []


def test_a_timeout_aborts_the_sub_run(agents):
    """timeout_s: a sub-run past it is aborted (its LLM call sees the signal) and the call gets a timeout error."""
    seen = []

    def wait_for_abort(formatted):
        seen.append(current_abort_signal().wait(WAIT))
        return answering("late")

    made: list = []
    tool = agent_tool(sub_agents(made, lambda: ScriptedLLM([wait_for_abort])), name="slow", description="slow", timeout_s=0.2)
    parent = agents(ScriptedLLM([tool_call_reply(("c", "slow", {"task": "x"})), answering("gave up")]), [tool])
    run_agent(parent, "go")
    assert take_response(parent, timeout=WAIT).content[0].text == "gave up"
    (result,) = results(parent)
    assert result.is_error and "timed out" in result.content[0].text
    made[0].wait_until_idle(WAIT)
    assert seen == [True]


def test_a_sub_run_that_ends_after_its_call_timed_out_still_counts_in_the_parent_run(agents):
    """A timed-out call's sub-run ends later (aborted, its round's tokens spent): its event is
    dropped (no event after the call's end), but its usage joins the parent run's, which is
    still going, and so agent.usage."""
    sub_ended = threading.Event()

    def wait_for_abort(formatted):
        current_abort_signal().wait(WAIT)
        return answering("late", LLMUsage(10, 2, total_tokens=12))

    def sub_sink(event):
        if isinstance(event, AgentRunEndEvent):
            sub_ended.set()

    made: list = []

    def make():
        agent = make_agent(ScriptedLLM([wait_for_abort]), builtin_tools=False, sink=sub_sink, session_id=f"sub-{next(_ids)}")
        made.append(agent)
        return agent

    def final_round(formatted):
        assert sub_ended.wait(WAIT)  # the parent's run is still going when the sub-run ends
        return answering("gave up", LLMUsage(100, 5, total_tokens=105))

    tool = agent_tool(make, name="slow", description="slow", timeout_s=0.2)
    parent = agents(ScriptedLLM([replace(tool_call_reply(("c", "slow", {"task": "x"})), usage=LLMUsage(100, 5, total_tokens=105)), final_round]), [tool])
    run_agent(parent, "go")
    assert take_response(parent, timeout=WAIT).content[0].text == "gave up"
    assert results(parent)[0].is_error
    assert not [e for e in parent.agent_event_sink.events if isinstance(e, SubAgentEvent) and isinstance(e.event, AgentRunEndEvent)]
    end = parent.agent_event_sink.of_type(AgentRunEndEvent)[-1]
    assert end.usage == LLMUsage(210, 12, total_tokens=222) == parent.usage


def test_sub_runs_that_end_late_in_a_batch_and_after_it_both_count_in_the_parent_run(agents):
    """A timed-out call's sub-run that ends during its batch is folded into the run's usage after the batch, and the run
    still takes a second one that ends during its next round: the run's usage counts both, not only agent.usage."""
    ended = [threading.Event(), threading.Event()]
    release = threading.Event()

    def first(formatted):
        current_abort_signal().wait(WAIT)
        return answering("late", LLMUsage(10, 2, total_tokens=12))

    def second(formatted):
        current_abort_signal().wait(WAIT)
        release.wait(WAIT)  # ends only once the parent's next round has begun
        return answering("later", LLMUsage(20, 4, total_tokens=24))

    made = itertools.count()

    def make():
        index = next(made)
        sink = lambda event: ended[index].set() if isinstance(event, AgentRunEndEvent) else None  # noqa: E731
        return make_agent(ScriptedLLM([(first, second)[index]]), builtin_tools=False, sink=sink, session_id=f"sub-{next(_ids)}")

    def wait_for_the_first(tool_call_id, args, signal, on_partial_result):
        assert ended[0].wait(WAIT)  # the first sub-run has ended and reported before the batch ends
        return AgentToolResult([TextContent("waited")], {})

    def final_round(formatted):
        release.set()
        assert ended[1].wait(WAIT)  # the parent's run is still going when the second sub-run ends
        return answering("gave up", LLMUsage(100, 5, total_tokens=105))

    slow = agent_tool(make, name="slow", description="slow", timeout_s=0.2)
    wait = AgentTool(name="wait", label="Wait", description="waits", input_schema={"type": "object"}, execute=wait_for_the_first)
    batch = tool_call_reply(("c1", "slow", {"task": "x"}), ("c2", "wait", {}), ("c3", "slow", {"task": "y"}))
    parent = agents(ScriptedLLM([replace(batch, usage=LLMUsage(100, 5, total_tokens=105)), final_round]), [slow, wait])
    run_agent(parent, "go")
    assert take_response(parent, timeout=WAIT).content[0].text == "gave up"
    end = parent.agent_event_sink.of_type(AgentRunEndEvent)[-1]
    assert end.usage == LLMUsage(230, 16, total_tokens=246) == parent.usage


def test_a_sub_run_that_ends_after_the_parent_run_counts_in_agent_usage(agents):
    """A sub-run that outlives the parent's whole run: its tokens are not in that run's usage
    (its end event was already sent) but join agent.usage when it ends."""
    release, sub_ended = threading.Event(), threading.Event()

    def slow_to_stop(formatted):
        current_abort_signal().wait(WAIT)
        release.wait(WAIT)  # ends only when the test says so, long after the abort
        return answering("late", LLMUsage(10, 2, total_tokens=12))

    def sub_sink(event):
        if isinstance(event, AgentRunEndEvent):
            sub_ended.set()

    def make():
        return make_agent(ScriptedLLM([slow_to_stop]), builtin_tools=False, sink=sub_sink, session_id=f"sub-{next(_ids)}")

    tool = agent_tool(make, name="slow", description="slow", timeout_s=0.2)
    parent = agents(ScriptedLLM([tool_call_reply(("c", "slow", {"task": "x"})), answering("gave up", LLMUsage(100, 5, total_tokens=105))]), [tool])
    run_agent(parent, "go")
    assert take_response(parent, timeout=WAIT).content[0].text == "gave up"
    end = parent.agent_event_sink.of_type(AgentRunEndEvent)[-1]
    assert end.usage == LLMUsage(100, 5, total_tokens=105) == parent.usage  # the first round reported none
    release.set()
    assert sub_ended.wait(WAIT)
    assert parent.usage == LLMUsage(110, 7, total_tokens=117)


def test_make_agent_must_give_an_agent(agents):
    """A make_agent that returns something else gives an error result naming what it returned."""
    tool = agent_tool(lambda: "not an agent", name="odd", description="odd")
    parent = agents(ScriptedLLM([tool_call_reply(("c", "odd", {"task": "x"})), answering("ok")]), [tool])
    run_agent(parent, "go")
    take_response(parent, timeout=WAIT)
    (result,) = results(parent)
    assert result.is_error and "returned str" in result.content[0].text


def test_the_sub_agents_own_sink_still_gets_its_events(agents):
    """A sink the sub-agent was made with keeps receiving its events beside the parent's."""
    own = EventRecorder()

    def make():
        return make_agent(ScriptedLLM([answering("hi")]), sink=own, builtin_tools=False)

    tool = agent_tool(make, name="helper", description="helps")
    parent = agents(ScriptedLLM([tool_call_reply(("c", "helper", {"task": "x"})), answering("ok")]), [tool])
    run_agent(parent, "go")
    take_response(parent, timeout=WAIT)
    assert own.of_type(AgentRunEndEvent) and parent.agent_event_sink.of_type(SubAgentEvent)


def test_a_sub_run_that_stops_without_answering_and_says_no_reason_is_an_error_naming_its_stop_reason(agents):
    """A sub-run whose final reply has a stop_reason that is not an answer (here "refusal") and no
    error_message is an error result naming that stop_reason and saying no reason was given."""
    refusal = AssistantMessage([TextContent("I cannot help with that")], stop_reason="refusal", model="sub")
    tool = agent_tool(sub_agents([], lambda: ScriptedLLM([refusal])), name="picky", description="picky")
    parent = agents(ScriptedLLM([tool_call_reply(("c", "picky", {"task": "x"})), answering("ok")]), [tool])
    run_agent(parent, "go")
    take_response(parent, timeout=WAIT)
    (result,) = results(parent)
    assert result.is_error and "the sub-agent's run ended with stop_reason 'refusal': no reason given" in result.content[0].text


def test_a_make_agent_that_is_not_callable_is_refused_naming_the_tool_and_what_it_got():
    """agent_tool checks make_agent when the tool is made: the error names the tool and the type given."""
    with pytest.raises(ToolDefinitionError, match=r"^agent_tool 'expert': make_agent must be callable, got str$"):
        agent_tool("not a factory", name="expert", description="asks an expert")


def test_execute_called_by_hand_without_a_signal_runs_the_sub_agent():
    """execute(tool_call_id, args, signal=None, on_partial_result) by hand: the sub-agent answers and is shut down."""
    made: list = []
    tool = agent_tool(sub_agents(made, lambda: ScriptedLLM([answering("by hand")])), name="helper", description="helps")
    seen: list = []
    result = tool.execute("c1", {"task": "x"}, None, seen.append)
    assert result.content[0].text == "by hand" and result.details["sub_agent"]["stop_reason"] == "stop"
    assert made[0].closing and any(isinstance(e, SubAgentEvent) and isinstance(e.event, AgentRunEndEvent) for e in seen)


def test_a_call_whose_signal_has_already_fired_makes_no_sub_agent():
    """A signal that fired before the call started: the call fails at once, saying so, and make_agent is never called."""
    made: list = []
    tool = agent_tool(sub_agents(made, lambda: ScriptedLLM([answering("never")])), name="helper", description="helps")
    signal = AbortSignal()
    signal.abort("stopped early")
    with pytest.raises(ToolError, match=r"^agent tool 'helper' was aborted before its sub-agent started$"):
        tool.execute("c1", {"task": "x"}, signal, lambda event: None)
    assert made == []


def test_a_signal_that_fires_with_no_reason_aborts_the_sub_run_naming_the_parent_run():
    """A signal fired without a reason still aborts the sub-run; the error says the parent run was aborted."""
    started = threading.Event()

    def wait_for_abort(formatted):
        started.set()
        current_abort_signal().wait(WAIT)
        return answering("late")

    tool = agent_tool(sub_agents([], lambda: ScriptedLLM([wait_for_abort])), name="slow", description="slow")
    signal, raised = AbortSignal(), []

    def call():
        try:
            tool.execute("c1", {"task": "x"}, signal, lambda event: None)
        except ToolError as exc:
            raised.append(str(exc))

    caller = threading.Thread(target=call)
    caller.start()
    assert started.wait(WAIT)
    signal.abort()
    caller.join(WAIT)
    assert raised == ["agent tool 'slow': the sub-agent's run ended with stop_reason 'aborted': the parent run was aborted"]


def relay(formatted) -> AssistantMessage:
    """A reply that answers with what the last tool result said."""
    return answering(formatted["messages"][-1]["content"])


def nesting_tool(name: str, made: list, *, hold_at: int = 0, holding=None, hold=None, **kwargs):
    """An agent_tool whose sub-agents have that same tool: each calls it once, then answers with what it said.

    The sub-agent at level ``hold_at`` sets ``holding`` and waits for ``hold`` before its call.
    """

    def make():
        level = len(made) + 1
        if level > 3 * MAX_DEPTH:  # a safety net: without a bound the chain would grow for ever
            raise RuntimeError("nested without bound")

        def call(formatted) -> AssistantMessage:
            if level == hold_at:
                holding.set()
                assert hold.wait(WAIT)
            return tool_call_reply((f"c{level}", name, {"task": "go deeper"}))

        agent = make_agent(ScriptedLLM([call, relay]), nested, builtin_tools=False, session_id=f"sub-{next(_ids)}")
        made.append(agent)
        return agent

    nested = agent_tool(make, name=name, description="asks itself", **kwargs)
    return nested


def test_an_agent_that_is_its_own_tool_nests_no_deeper_than_max_depth(agents):
    """An agent that is its own agent_tool makes MAX_DEPTH sub-agents; the deepest call is an error naming the bound, and no thread is left."""
    made: list = []
    tool = nesting_tool("recurse", made)
    parent = agents(ScriptedLLM([tool_call_reply(("c0", "recurse", {"task": "go"})), relay]), [tool])
    reply = ask(parent, "go", timeout=WAIT)
    assert len(made) == MAX_DEPTH == 5
    assert "agent tool 'recurse': a sub-agent here would be nested 6 levels deep, past its max_depth of 5" in reply.text
    assert all(agent.closing for agent in made)
    names = {agent.session_id for agent in made}
    assert [t.name for t in threading.enumerate() if any(name in t.name for name in names)] == []


def test_max_depth_is_set_per_tool_and_checked(agents):
    """agent_tool(max_depth=2) nests two levels; a max_depth below 1 is refused when the tool is made, naming it."""
    made: list = []
    parent = agents(ScriptedLLM([tool_call_reply(("c0", "recurse", {"task": "go"})), relay]), [nesting_tool("recurse", made, max_depth=2)])
    assert "nested 3 levels deep, past its max_depth of 2" in ask(parent, "go", timeout=WAIT).text
    assert len(made) == 2
    with pytest.raises(ToolDefinitionError, match=r"^agent_tool 'x': max_depth must be an int of at least 1, got 0$"):
        agent_tool(lambda: None, name="x", description="x", max_depth=0)


def test_max_depth_1_nests_one_level_and_only_an_int_is_a_max_depth(agents):
    """agent_tool(max_depth=1) makes one sub-agent, whose own call is refused with the whole message saying why
    and that no sub-agent was made; a bool or a float max_depth is refused when the tool is made."""
    made: list = []
    parent = agents(ScriptedLLM([tool_call_reply(("c0", "recurse", {"task": "go"})), relay]), [nesting_tool("recurse", made, max_depth=1)])
    assert (
        "agent tool 'recurse': a sub-agent here would be nested 2 levels deep, past its max_depth of 1 "
        "(an agent that is its own tool, or a cycle of agent tools?); no sub-agent was made"
    ) in ask(parent, "go", timeout=WAIT).text
    assert len(made) == 1
    for wrong in (True, 2.0):
        with pytest.raises(ToolDefinitionError, match=rf"^agent_tool 'x': max_depth must be an int of at least 1, got {wrong!r}$"):
            agent_tool(lambda: None, name="x", description="x", max_depth=wrong)


def test_the_depth_is_counted_per_chain_so_unrelated_agents_do_not_limit_each_other(agents):
    """While one chain waits at its deepest level, an unrelated agent still nests to its own full depth."""
    holding, hold = threading.Event(), threading.Event()
    held: list = []
    first = agents(ScriptedLLM([tool_call_reply(("c0", "a", {"task": "go"})), relay]), [nesting_tool("a", held, max_depth=2, hold_at=2, holding=holding, hold=hold)])
    try:
        run_agent(first, "go")
        assert holding.wait(WAIT)  # the first chain is two levels deep now
        made: list = []
        second = agents(ScriptedLLM([tool_call_reply(("c0", "b", {"task": "go"})), relay]), [nesting_tool("b", made, max_depth=2)])
        assert "nested 3 levels deep, past its max_depth of 2" in ask(second, "go", timeout=WAIT).text
        assert len(made) == 2
    finally:
        hold.set()
    assert "nested 3 levels deep" in take_response(first, timeout=WAIT).text and len(held) == 2


def test_a_sub_run_stopped_by_max_rounds_is_an_error_result_not_an_answer(agents):
    """A sub-agent that reaches its max_rounds gives the parent's call an error result naming "max_rounds", not its last text."""

    def make():
        llm = ScriptedLLM([tool_call_reply(("s1", "missing", {}), text="still working")])
        return make_agent(llm, builtin_tools=False, max_rounds=1)

    tool = agent_tool(make, name="busy", description="busy")
    parent = agents(ScriptedLLM([tool_call_reply(("c", "busy", {"task": "x"})), answering("gave up")]), [tool])
    assert ask(parent, "go", timeout=WAIT).text == "gave up"
    (result,) = results(parent)
    assert result.is_error and "the sub-agent's run ended with stop_reason 'max_rounds'" in result.content[0].text


def test_a_sub_agents_own_sub_agent_is_counted_once_in_the_top_run(agents):
    """Usage of a sub-agent's sub-agent reaches the top run inside its parent's sum, and is not added again."""
    leaf = agent_tool(lambda: make_agent(ScriptedLLM([answering("leaf", LLMUsage(1, 1, total_tokens=2))]), builtin_tools=False), name="leaf", description="leaf")
    mid_round = LLMUsage(10, 2, total_tokens=12)

    def make_mid():
        llm = ScriptedLLM([replace(tool_call_reply(("m", "leaf", {"task": "x"})), usage=mid_round), answering("mid", mid_round)])
        return make_agent(llm, leaf, builtin_tools=False)

    mid = agent_tool(make_mid, name="mid", description="mid")
    top_round = LLMUsage(100, 5, total_tokens=105)
    parent = agents(ScriptedLLM([replace(tool_call_reply(("t", "mid", {"task": "x"})), usage=top_round), answering("top", top_round)]), [mid])
    assert ask(parent, "go", timeout=WAIT).text == "top"
    end = parent.agent_event_sink.of_type(AgentRunEndEvent)[-1]
    assert end.usage == LLMUsage(221, 15, total_tokens=236) == parent.usage
    nested = [e for e in parent.agent_event_sink.events if isinstance(e, SubAgentEvent) and isinstance(e.event, SubAgentEvent)]
    assert any(isinstance(e.event.event, AgentRunEndEvent) for e in nested)  # the leaf's end did reach the top sink


def test_an_execute_that_raises_still_shuts_its_sub_agent_down():
    """execute failing after the sub-agent was made (here: no "task" argument, called by hand) raises, and the sub-agent is shut down with no thread left."""
    made: list = []
    tool = agent_tool(sub_agents(made, lambda: ScriptedLLM([answering("never")])), name="helper", description="helps")
    with pytest.raises(KeyError, match="task"):
        tool.execute("c1", {}, None, lambda event: None)
    (agent,) = made
    assert agent.closing
    assert [t.name for t in threading.enumerate() if agent.session_id in t.name] == []
