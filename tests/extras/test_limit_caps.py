"""Limits that are caps (decision 20; docs/api.md "Limits that are caps"): max_tool_calls, max_requests, and the
token limits checked before a request; nothing beyond a limit is run or sent."""

from __future__ import annotations

import re
import threading
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import SCHEMA_CITY, WAIT, make_tool, text_result
from yiemagent import (
    AgentContext,
    AgentLoopConfig,
    AgentToolCall,
    AssistantMessage,
    LLMCallStartEvent,
    LLMUsage,
    TextContent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolResultMessage,
    UsageLimits,
    UserMessage,
    approve,
    continue_agent,
    count_tokens,
    run_agent,
    take_response,
)
from yiemagent.batch import ToolCallAllowance, execute_tool_calls_within
from yiemagent.history import complete_tool_calls
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply


class Counter:
    """A tool's execute that counts the calls it ran (from any thread) and the ids it ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards ran
        self.ran: list[str] = []

    def __call__(self, tool_call_id, args, signal, on_partial_result):
        with self.lock:
            self.ran.append(tool_call_id)
        return text_result("paid")


def calls(n: int, name: str = "pay", prefix: str = "c") -> AssistantMessage:
    return tool_call_reply(*[(f"{prefix}{i}", name, {"i": i}) for i in range(n)])


def answered_once(agent, ids: list[str]) -> None:
    """Every call has exactly one result in the history, and one start and one end event (decision 1)."""
    history = agent.history()
    assert sorted(m.tool_call_id for m in history if isinstance(m, ToolResultMessage)) == sorted(ids)
    assert complete_tool_calls(history)[1] == []
    events = agent.agent_event_sink.events
    for kind in (ToolExecStartEvent, ToolExecEndEvent):
        assert sorted(e.tool_call_id for e in events if isinstance(e, kind)) == sorted(ids)


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_max_tool_calls_runs_no_call_beyond_the_cap_in_one_batch(agents, parallel):
    """max_tool_calls=3 with six calls in one batch runs the first three only; the others get an error naming the
    limit, and the run ends usage_limit after the batch, naming the limit."""
    paid = Counter()
    llm = ScriptedLLM([calls(6), "never asked"])
    agent = agents(
        llm, [make_tool("pay", paid, parallel=parallel)], usage_limits=UsageLimits(max_tool_calls=3), parallel_tool_execute=parallel
    )
    run_agent(agent, "pay six times")
    response = take_response(agent, timeout=WAIT)
    assert sorted(paid.ran) == ["c0", "c1", "c2"]
    assert response.stop_reason == "usage_limit"
    assert response.error_message.startswith("the run reached its usage limit max_tool_calls=3 (3 tool calls run, 3 refused)")
    assert len(llm.requests) == 1
    results = {m.tool_call_id: m for m in agent.history() if isinstance(m, ToolResultMessage)}
    assert [results[f"c{i}"].is_error for i in range(6)] == [False] * 3 + [True] * 3
    assert all("max_tool_calls=3" in results[f"c{i}"].content[0].text for i in range(3, 6))
    answered_once(agent, [f"c{i}" for i in range(6)])


def test_max_tool_calls_counts_across_the_rounds_of_a_run_and_is_per_run(agents):
    """Two calls per round with max_tool_calls=3: the second round runs one and refuses one; continue_agent has a fresh allowance."""
    paid = Counter()
    llm = ScriptedLLM([calls(2, prefix="a"), calls(2, prefix="b"), calls(2, prefix="d"), "done"])
    agent = agents(llm, [make_tool("pay", paid)], usage_limits=UsageLimits(max_tool_calls=3))
    run_agent(agent, "pay")
    response = take_response(agent, timeout=WAIT)
    assert paid.ran == ["a0", "a1", "b0"] and len(llm.requests) == 2
    assert "max_tool_calls=3 (3 tool calls run, 1 refused)" in response.error_message
    continue_agent(agent)
    assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    assert paid.ran == ["a0", "a1", "b0", "d0", "d1"]


def test_a_run_that_reaches_max_tool_calls_exactly_goes_on(agents):
    """Reaching the cap refuses nothing: the run goes on, and the model may answer without more calls."""
    paid = Counter()
    llm = ScriptedLLM([calls(3), "done"])
    agent = agents(llm, [make_tool("pay", paid)], usage_limits=UsageLimits(max_tool_calls=3))
    run_agent(agent, "pay")
    assert take_response(agent, timeout=WAIT).stop_reason == "stop" and len(paid.ran) == 3


def test_calls_that_never_run_do_not_count_against_max_tool_calls(agents):
    """An unknown tool, invalid arguments and a call blocked by before_tool_call never run, so they use none of the cap."""
    paid = Counter()
    reply = tool_call_reply(
        ("u", "no_such_tool", {}),
        ("v", "city", {}),  # required "city" missing
        ("b", "pay", {"block": True}),
        ("p0", "pay", {}),
        ("p1", "pay", {}),
        ("p2", "pay", {}),
    )

    def before(ctx, signal):
        return {"block": True, "reason": "blocked"} if ctx.args.get("block") else None

    llm = ScriptedLLM([reply, "never asked"])
    agent = agents(
        llm,
        [make_tool("pay", paid), make_tool("city", paid, schema=SCHEMA_CITY)],
        usage_limits=UsageLimits(max_tool_calls=2),
        before_tool_call=before,
    )
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert paid.ran == ["p0", "p1"]
    assert "max_tool_calls=2 (2 tool calls run, 1 refused)" in response.error_message
    answered_once(agent, ["u", "v", "b", "p0", "p1", "p2"])


def test_a_call_deferred_for_approval_counts_and_runs_once_approved(agents):
    """A deferred call counts against the cap of the run that deferred it (it runs once approved); a call past the cap is
    refused without asking anyone, and the approved call runs in the next run."""
    paid = Counter()

    def before(ctx, signal):
        return {"defer": True, "reason": "costly"} if ctx.tool_call.id == "c0" else None

    llm = ScriptedLLM([calls(3), "done"])
    agent = agents(llm, [make_tool("pay", paid)], usage_limits=UsageLimits(max_tool_calls=2), before_tool_call=before)
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "awaiting_approval"
    assert paid.ran == ["c1"]  # c0 waits, c1 ran, c2 was past the cap
    refused = [m for m in agent.history() if isinstance(m, ToolResultMessage) and m.tool_call_id == "c2"]
    assert refused[0].is_error and "max_tool_calls=2" in refused[0].content[0].text
    approve(agent, "c0")
    continue_agent(agent)
    assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    assert paid.ran == ["c1", "c0"]


# --- the batch's decision, over batch sizes and caps ---------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(["run", "unknown", "invalid"]), max_size=8),
    cap=st.integers(0, 9),
    used=st.integers(0, 3),
    parallel=st.booleans(),
)
def test_a_batch_runs_min_of_its_allowance_and_the_calls_that_would_run(kinds, cap, used, parallel):
    """Whatever the batch and the cap: the calls executed are the first min(left, would run) of the calls that would run,
    in call order; once the cap is reached every later call is refused; every call gets one result, one start and one end event."""
    paid = Counter()
    tool = make_tool("pay", paid, parallel=True, schema=SCHEMA_CITY)
    tool_calls = []
    for i, kind in enumerate(kinds):
        name = "missing" if kind == "unknown" else "pay"
        tool_calls.append(AgentToolCall(f"c{i}", name, {} if kind == "invalid" else {"city": "x"}))
    events = []
    allowance = ToolCallAllowance(cap, used=min(used, cap))
    config = AgentLoopConfig(tool_execution="parallel" if parallel else "sequential")
    batch = execute_tool_calls_within(allowance, AgentContext("", [], {"pay": tool}), None, tool_calls, config, None, events.append)
    would_run = [c.id for c, kind in zip(tool_calls, kinds) if kind == "run"]
    left = cap - min(used, cap)
    assert sorted(paid.ran, key=lambda i: int(i[1:])) == would_run[:left]
    assert allowance.used == min(used, cap) + min(left, len(would_run))
    refused, room = 0, left  # once the cap is reached, every later call is refused unprepared, whatever it is
    for kind in kinds:
        refused += room == 0
        room -= room > 0 and kind == "run"
    assert allowance.refused == refused
    assert [m.tool_call_id for m in batch.messages] == [c.id for c in tool_calls]
    for kind in (ToolExecStartEvent, ToolExecEndEvent):
        assert sorted(e.tool_call_id for e in events if isinstance(e, kind)) == sorted(c.id for c in tool_calls)


# --- max_requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [0, 1, 2])
def test_max_requests_sends_no_request_beyond_the_cap(agents, cap):
    """A model that keeps calling tools gets exactly max_requests LLM requests; the run ends usage_limit naming the limit."""
    llm = ScriptedLLM([calls(1, prefix=f"r{i}_") for i in range(5)])
    agent = agents(llm, [make_tool("pay", Counter())], usage_limits=UsageLimits(max_requests=cap))
    run_agent(agent, "pay")
    response = take_response(agent, timeout=WAIT)
    assert len(llm.requests) == cap
    assert response.stop_reason == "usage_limit"
    assert response.error_message.startswith(f"the run reached its usage limit max_requests={cap} ({cap} LLM requests sent)")
    assert complete_tool_calls(agent.history())[1] == []


# --- token limits before a request ----------------------------------------------------------------

ROUND = LLMUsage(input_tokens=1000, output_tokens=10)


def test_a_request_whose_estimated_input_passes_max_input_tokens_is_not_sent(agents):
    """After a round that used 1000 input tokens, the next request (at least as long) would pass max_input_tokens=1500:
    llm_call never sees it, no LLMCallStartEvent is emitted for it, and the run ends usage_limit naming the limit."""
    llm = ScriptedLLM([replace(calls(1), usage=ROUND), "never asked"])
    agent = agents(llm, [make_tool("pay", Counter())], usage_limits=UsageLimits(max_input_tokens=1500))
    run_agent(agent, "pay")
    response = take_response(agent, timeout=WAIT)
    assert len(llm.requests) == 1
    assert len(agent.agent_event_sink.of_type(LLMCallStartEvent)) == 1
    assert response.stop_reason == "usage_limit"
    found = re.search(r"max_input_tokens=1500 \(1000 input tokens used; the next request's input is about (\d+) tokens\)", response.error_message)
    assert found and 1000 < int(found.group(1)) < 1100  # calibrated: the first reply's 1000, and its call and result estimated
    assert complete_tool_calls(agent.history())[1] == []


@pytest.mark.parametrize("limit", ["max_input_tokens", "max_total_tokens"])
def test_a_first_request_estimated_beyond_a_token_limit_is_not_sent(agents, limit):
    """A first request whose estimate (count_tokens of the system prompt, the message and the tools) passes the limit is never sent."""
    prompt = "You are careful. " * 200
    estimate = count_tokens([], system_prompt=prompt)
    llm = ScriptedLLM(["never asked"])
    agent = agents(llm, system_prompt=prompt, builtin_tools=False, usage_limits=UsageLimits(**{limit: estimate - 1}))
    run_agent(agent, "hello")
    response = take_response(agent, timeout=WAIT)
    assert llm.requests == [] and response.stop_reason == "usage_limit"
    assert f"{limit}={estimate - 1}" in response.error_message


def test_a_request_within_the_token_limits_is_sent(agents):
    """A request whose estimate fits max_input_tokens is sent as usual (the check stops only what would pass the limit)."""
    llm = ScriptedLLM(["fine"])
    limits = UsageLimits(max_input_tokens=200, max_total_tokens=200)
    agent = agents(llm, system_prompt="Be brief.", builtin_tools=False, usage_limits=limits)
    run_agent(agent, "hello")
    assert take_response(agent, timeout=WAIT).stop_reason == "stop" and len(llm.requests) == 1


@pytest.mark.parametrize("limit, what", [("max_input_tokens", "input tokens"), ("max_total_tokens", "tokens in all")])
def test_a_request_estimated_at_its_token_limit_is_sent_and_one_token_less_stops_it_counting_the_tools(agents, limit, what):
    """The estimate counts the system prompt, the messages and the tools; a request estimated at exactly the limit is
    sent, one token below it is not, and the run says it reached the limit, with the counts it compared."""
    pay = make_tool("pay", Counter(), schema=SCHEMA_CITY)
    estimate = count_tokens([UserMessage([TextContent("hello")])], system_prompt="Be brief.", tools=[pay])
    for cap, sent in ((estimate, 1), (estimate - 1, 0)):
        llm = ScriptedLLM(["fine"])
        agent = agents(llm, [pay], system_prompt="Be brief.", builtin_tools=False, usage_limits=UsageLimits(**{limit: cap}))
        run_agent(agent, "hello")
        response = take_response(agent, timeout=WAIT)
        assert len(llm.requests) == sent
        if not sent:
            assert response.stop_reason == "usage_limit"
            assert response.error_message.startswith(
                f"the run reached its usage limit {limit}={cap} (0 {what} used; the next request's input is about {estimate} tokens)"
            )


@pytest.mark.parametrize("reported, sent", [(0, 1), (1, 2), (True, 1), (1.0, 1)], ids=["zero", "one", "bool", "float"])
def test_only_a_reply_that_counted_at_least_one_input_token_calibrates_the_next_estimate(agents, reported, sent):
    """A reply whose usage reports a positive int of input tokens calibrates the next request's estimate (that count plus
    what came after it); one reporting 0, a bool or a float does not, and the whole conversation is estimated instead."""
    prompt = "You are careful. " * 200
    pay = make_tool("pay", Counter())
    first = count_tokens([UserMessage([TextContent("pay")])], system_prompt=prompt, tools=[pay])
    llm = ScriptedLLM([replace(calls(1), usage=LLMUsage(input_tokens=reported, output_tokens=10)), "done"])
    agent = agents(llm, [pay], system_prompt=prompt, builtin_tools=False, usage_limits=UsageLimits(max_input_tokens=first))
    run_agent(agent, "pay")
    response = take_response(agent, timeout=WAIT)
    assert len(llm.requests) == sent  # calibrated: about 1 + the call and its result; else the first request's estimate and more
    assert response.stop_reason == ("stop" if sent == 2 else "usage_limit")


def test_the_typed_answer_tool_does_not_count_against_max_tool_calls(agents):
    """With output_type, the final_result call gives the answer even once max_tool_calls is used up (it runs no user code)."""
    paid = Counter()
    answer = tool_call_reply(("f", "final_result", {"response": 7}))
    llm = ScriptedLLM([calls(1), answer])
    agent = agents(llm, [make_tool("pay", paid)], builtin_tools=False, output_type=int, usage_limits=UsageLimits(max_tool_calls=1))
    run_agent(agent, "pay once, then answer")
    response = take_response(agent, timeout=WAIT)
    assert (response.stop_reason, response.output, paid.ran) == ("stop", 7, ["c0"])
