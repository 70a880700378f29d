"""UsageLimits on YiemAgent(usage_limits=): tokens and tool calls capped per run, beside max_rounds."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from helpers import WAIT, make_tool
from yiemagent import AgentRunEndEvent, LLMUsage, TextContent, ToolResultMessage, UsageLimits, continue_agent, run_agent, take_response
from yiemagent.history import complete_tool_calls
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply


def spending(n: int, usage: LLMUsage, calls_per_round: int = 2) -> list:
    """n replies that each call the echo tool ``calls_per_round`` times and report ``usage``."""
    replies = []
    for i in range(n):
        reply = tool_call_reply(*[(f"c{i}_{j}", "echo", {"i": i, "j": j}) for j in range(calls_per_round)])
        replies.append(replace(reply, usage=usage))
    return replies


# the first request of these agents (the default system prompt, "spend", the echo tool) is
# estimated at about 500 tokens (count_tokens), so each round reports a plausible 1000
ROUND = LLMUsage(input_tokens=1000, output_tokens=100)


@pytest.mark.parametrize(
    ("limits", "named", "rounds"),
    [
        (UsageLimits(max_total_tokens=1050), "max_total_tokens=1050 (1100 tokens in all used)", 1),
        (UsageLimits(max_output_tokens=250), "max_output_tokens=250 (300 output tokens used)", 3),
    ],
)
def test_a_passed_limit_ends_the_run_after_that_round_naming_limit_and_count(agents, caplog, limits, named, rounds):
    """A reply whose tokens go above a limit (known only once it came) ends the run after that round: stop_reason
    "usage_limit", a text and an error_message naming the limit and its count (logged as a WARNING), every call answered."""
    llm = ScriptedLLM(spending(5, ROUND))
    agent = agents(llm, [make_tool("echo")], usage_limits=limits)
    with caplog.at_level(logging.WARNING, logger="yiemagent.run"):
        run_agent(agent, "spend")
        response = take_response(agent, timeout=WAIT)
    why = f"the run passed its usage limit {named} and was stopped; every tool call has its result; call continue_agent to go on"
    assert (response.stop_reason, response.error_message) == ("usage_limit", why)
    assert [(type(b), b.text) for b in response.content] == [(TextContent, f"Stopped: usage limit {named}.")]
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "yiemagent.run"] == [("WARNING", f"run stopped: {why}")]
    assert len(llm.requests) == rounds
    history = agent.history()
    assert complete_tool_calls(history)[1] == [] and isinstance(history[-1], ToolResultMessage)
    assert response not in history


def test_a_run_within_its_limits_ends_as_usual(agents):
    """Reaching a limit exactly is not passing it: the run goes on to the model's final answer."""
    llm = ScriptedLLM(spending(2, ROUND) + [replace(ScriptedLLM(["done"])({}), usage=ROUND)])
    agent = agents(llm, [make_tool("echo")], usage_limits=UsageLimits(max_output_tokens=300, max_tool_calls=4))
    run_agent(agent, "spend")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "stop" and response.error_message is None


def test_usage_limits_stand_beside_max_rounds(agents):
    """max_rounds still stops a run whose usage limits are not reached."""
    llm = ScriptedLLM(spending(5, ROUND))
    agent = agents(llm, [make_tool("echo")], usage_limits=UsageLimits(max_total_tokens=10_000), max_rounds=2)
    run_agent(agent, "spend")
    assert take_response(agent, timeout=WAIT).stop_reason == "max_rounds"


def test_usage_limits_are_per_run_and_continue_agent_goes_on(agents):
    """continue_agent after a stopped run starts with a fresh allowance; the run-end usage is the run's own."""
    llm = ScriptedLLM(spending(4, ROUND))
    agent = agents(llm, [make_tool("echo")], usage_limits=UsageLimits(max_output_tokens=150))
    run_agent(agent, "spend")
    assert take_response(agent, timeout=WAIT).stop_reason == "usage_limit"
    continue_agent(agent)
    assert take_response(agent, timeout=WAIT).stop_reason == "usage_limit"
    assert len(llm.requests) == 4
    ends = [e for e in agent.agent_event_sink.events if isinstance(e, AgentRunEndEvent)]
    assert [e.usage.total_tokens for e in ends] == [2200, 2200]
    assert agent.usage.total_tokens == 4400


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"max_total_tokens": -1}, ValueError), ({"max_tool_calls": True}, TypeError), ({"max_input_tokens": 1.5}, TypeError), ({"max_requests": -1}, ValueError)],
)
def test_bad_limits_are_refused_naming_the_field(kwargs, error):
    """A negative or non-int limit is refused at construction, the field named."""
    with pytest.raises(error, match=next(iter(kwargs))):
        UsageLimits(**kwargs)


def test_usage_limits_must_be_a_usage_limits(agents):
    """YiemAgent(usage_limits=) refuses anything but a UsageLimits or None."""
    with pytest.raises(TypeError, match="usage_limits"):
        agents(ScriptedLLM([]), usage_limits={"max_total_tokens": 5})


def test_max_total_tokens_fires_for_rounds_that_report_no_total(agents):
    """A round reporting LLMUsage(input_tokens=1000, output_tokens=200) without a total counts 1200 (decision 13), so max_total_tokens stops the run."""
    llm = ScriptedLLM(spending(5, LLMUsage(input_tokens=1000, output_tokens=200)))
    agent = agents(llm, [make_tool("echo")], usage_limits=UsageLimits(max_total_tokens=1100))
    run_agent(agent, "spend")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "usage_limit" and "max_total_tokens=1100 (1200 tokens in all used)" in response.error_message
    assert len(llm.requests) == 1
    end = agent.agent_event_sink.of_type(AgentRunEndEvent)[-1]
    assert end.usage == LLMUsage(1000, 200, total_tokens=1200) and agent.usage.total_tokens == 1200
