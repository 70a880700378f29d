"""Agent options (docs/api.md "Agent options, history and sessions"): max_rounds (decision 12), builtin_tools, and usage per run and per agent (decision 13)."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import WAIT, EventRecorder, make_tool
from yiemagent import (
    AgentRunEndEvent,
    AssistantMessage,
    LLMCallEndEvent,
    LLMUsage,
    TextContent,
    ToolResultMessage,
    YiemAgent,
    continue_agent,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.history import complete_tool_calls
from yiemagent.history._json import message_from_data, message_to_data
from yiemagent.history._stored import read_stored
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.loop import UsageMeter
from yiemagent.types import add_usage



def calling(n: int, start: int = 0) -> list:
    """n replies that each call the echo tool twice (a model that never stops calling tools)."""
    return [tool_call_reply((f"a{i}", "echo", {"i": i}), (f"b{i}", "echo", {"i": i})) for i in range(start, start + n)]


# --- max_rounds -----------------------------------------------------------------------


def test_max_rounds_stops_the_run_naming_the_limit_with_every_call_answered(agents, caplog):
    """At max_rounds the run ends with stop_reason "max_rounds", a text and an error_message naming the limit (logged
    as a WARNING, docs/tracing.md "Logging"), and every tool call answered."""
    llm = ScriptedLLM(calling(3))
    agent = agents(llm, [make_tool("echo")], max_rounds=3)
    with caplog.at_level(logging.WARNING, logger="yiemagent.run"):
        run_agent(agent, "loop")
        response = take_response(agent, timeout=WAIT)
    why = "the run reached max_rounds=3 LLM rounds and was stopped; every tool call has its result; call continue_agent to go on"
    assert (response.stop_reason, response.error_message) == ("max_rounds", why)
    assert [(type(b), b.text) for b in response.content] == [(TextContent, "Stopped after 3 LLM rounds (max_rounds).")]
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "yiemagent.run"] == [("WARNING", f"run stopped: {why}")]
    assert len(llm.requests) == 3
    history = agent.history()
    assert complete_tool_calls(history)[1] == [] and isinstance(history[-1], ToolResultMessage)
    assert response not in history  # the agent's own response is not part of the conversation


def test_after_max_rounds_continue_agent_goes_on_from_the_history(agents):
    """continue_agent after a capped run sends the whole history (valid: results after calls) and gets a fresh allowance."""
    llm = ScriptedLLM(calling(2) + calling(1, start=2) + ["finally done"])
    agent = agents(llm, [make_tool("echo")], max_rounds=2)
    run_agent(agent, "loop")
    assert take_response(agent, timeout=WAIT).stop_reason == "max_rounds"
    continue_agent(agent)
    assert take_response(agent, timeout=WAIT).content[0].text == "finally done"
    sent = llm.requests[2]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] + ["assistant", "tool", "tool"] * 2
    assert len(llm.requests) == 4


def test_max_rounds_none_means_no_limit(agents):
    """max_rounds=None: a run of 60 tool rounds (beyond the default 50) goes on to the final answer."""
    llm = ScriptedLLM(calling(60) + ["done"], record=False)
    agent = agents(llm, [make_tool("echo")], max_rounds=None)
    run_agent(agent, "loop")
    assert take_response(agent, timeout=WAIT * 3).content[0].text == "done"


def test_the_default_cap_is_50_rounds(agents):
    """Decision 12: without max_rounds a run stops after 50 LLM rounds."""
    llm = ScriptedLLM(calling(51), record=False)
    agent = agents(llm, [make_tool("echo")])
    run_agent(agent, "loop")
    response = take_response(agent, timeout=WAIT * 3)
    assert response.stop_reason == "max_rounds" and "max_rounds=50" in response.error_message
    assert agent.max_rounds == 50


def test_input_arriving_at_the_cap_waits_for_the_next_run(agents):
    """A message sent during the capped run's last round is not swallowed: the next run takes and answers it."""
    in_tool, release = threading.Event(), threading.Event()

    def slow(*args):
        in_tool.set()
        release.wait(WAIT)
        return make_tool("x").execute("c", {}, None, None)

    llm = ScriptedLLM([tool_call_reply(("c1", "slow", {})), "answer to the second"])
    agent = agents(llm, [make_tool("slow", slow)], max_rounds=1)
    run_agent(agent, "first")
    assert in_tool.wait(WAIT)
    run_agent(agent, "second")
    release.set()
    assert take_response(agent, timeout=WAIT).stop_reason == "max_rounds"
    assert take_response(agent, timeout=WAIT).content[0].text == "answer to the second"
    assert llm.requests[1]["messages"][-1] == {"role": "user", "content": "second"}


@pytest.mark.parametrize(
    "value, error, message",
    [
        (0, ValueError, "max_rounds must be at least 1 (or None for no limit), got 0"),
        (-1, ValueError, "max_rounds must be at least 1 (or None for no limit), got -1"),
        (True, TypeError, "max_rounds must be an int or None, got bool"),
        (2.5, TypeError, "max_rounds must be an int or None, got float"),
        ("10", TypeError, "max_rounds must be an int or None, got str"),
    ],
)
def test_bad_max_rounds_is_refused(value, error, message):
    """max_rounds must be None or an int of at least 1; the error names the type or the value given."""
    with pytest.raises(error) as raised:
        YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, max_rounds=value)
    assert str(raised.value) == message


# --- builtin_tools ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, names",
    [
        (True, ["getWeather", "getTime", "writeTool", "listTools"]),
        (False, []),
        (["listTools", "getTime"], ["getTime", "listTools"]),
        ("getTime", ["getTime"]),
        ((), []),
    ],
)
def test_builtin_tools_selects_the_built_ins(option, names):
    """True registers the four built-ins, False none, names only those (in the spec's order)."""
    agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, builtin_tools=option)
    try:
        assert list(agent.tool_store.tools) == names
        assert list(agent.state.tools) == names
    finally:
        shutdown(agent, timeout=WAIT)


def test_an_unknown_built_in_name_is_a_value_error_naming_it():
    """builtin_tools=["getTime", "shell"] raises ValueError naming 'shell' and listing the built-ins."""
    with pytest.raises(ValueError, match=r"'shell'.*getWeather, getTime, writeTool, listTools"):
        YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, builtin_tools=["getTime", "shell"])


@pytest.mark.parametrize("option", [5, [1], ["getTime", None]])
def test_builtin_tools_of_the_wrong_type_is_a_type_error(option):
    """builtin_tools that is neither a bool nor an iterable of names raises TypeError."""
    with pytest.raises(TypeError, match="builtin_tools"):
        YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, builtin_tools=option)


def test_list_tools_without_write_tool_lists_only_what_is_registered(agents):
    """An agent without writeTool offers the model no writeTool: listTools reports the tools really there."""
    llm = ScriptedLLM([tool_call_reply(("c1", "listTools", {})), "ok"])
    agent = agents(llm, builtin_tools=["listTools", "getTime"])
    run_agent(agent, "tools?")
    take_response(agent, timeout=WAIT)
    assert [t["function"]["name"] for t in llm.requests[0]["tools"]] == ["getTime", "listTools"]
    assert agent.history()[2].details["tools"] == ["getTime", "listTools"]


# --- usage ------------------------------------------------------------------------------


def reply(text: str, usage, *calls) -> AssistantMessage:
    base = tool_call_reply(*calls) if calls else AssistantMessage([TextContent(text)], stop_reason="stop")
    return AssistantMessage(base.content, usage=usage, stop_reason=base.stop_reason)


def test_run_end_event_sums_the_runs_rounds_and_agent_usage_sums_the_runs(agents):
    """AgentRunEndEvent.usage is the sum of the run's LLMCallEndEvent usages, every field; agent.usage sums all runs."""
    u1, u2, u3 = LLMUsage(10, 5, 2, 1, 15, 3), LLMUsage(20, 7, 0, 4, 27, 0), LLMUsage(1, 1, 0, 0, 2, 1)
    llm = ScriptedLLM([reply("", u1, ("c1", "echo", {})), reply("", None, ("c2", "echo", {})), reply("one", u2), reply("two", u3)])
    recorder = EventRecorder()
    agent = agents(llm, [make_tool("echo")], agent_event_sink=recorder)
    run_agent(agent, "first")
    take_response(agent, timeout=WAIT)
    run_agent(agent, "second")
    take_response(agent, timeout=WAIT)
    assert agent.wait_until_idle(WAIT)
    ends = [e for e in recorder.events if isinstance(e, AgentRunEndEvent)]
    assert [e.usage for e in ends] == [LLMUsage(30, 12, 2, 5, 42, 3), u3]
    rounds = [e.usage for e in recorder.events if isinstance(e, LLMCallEndEvent)]
    assert rounds == [u1, None, u2, u3]
    assert agent.usage == LLMUsage(31, 13, 2, 5, 44, 4)


def test_a_failed_run_still_counts_its_rounds(agents):
    """A run that ends in an LLM failure counts the usage of the rounds that came back."""
    llm = ScriptedLLM([reply("", LLMUsage(3, 2, total_tokens=5), ("c1", "echo", {})), RuntimeError("server gone")])
    agent = agents(llm, [make_tool("echo")])
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).stop_reason == "error"
    assert agent.usage == LLMUsage(3, 2, total_tokens=5)


class _ProviderUsage(LLMUsage):
    """A client's own usage class, a subclass of LLMUsage."""


def test_a_usage_of_a_subclass_of_llm_usage_counts_as_its_counts(agents):
    """A reply's usage is any LLMUsage, a subclass too: its counts go into the run's and the agent's usage (decision 13)."""
    llm = ScriptedLLM([reply("done", _ProviderUsage(3, 2, total_tokens=5))])
    recorder = EventRecorder()
    agent = agents(llm, agent_event_sink=recorder)
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).stop_reason == "stop"
    assert agent.wait_until_idle(WAIT)
    (end,) = [e for e in recorder.events if isinstance(e, AgentRunEndEvent)]
    assert end.usage == LLMUsage(3, 2, total_tokens=5) and agent.usage == LLMUsage(3, 2, total_tokens=5)


def test_a_round_aborted_during_its_llm_call_still_counts_the_tokens_its_reply_reported(agents):
    """Tokens the server billed for a reply that an abort kept out of the history still count in the run's usage."""
    from yiemagent import abort

    spent = LLMUsage(7, 3, total_tokens=10)
    holder = {}

    def llm_call(formatted):
        abort(holder["agent"], "user pressed stop")  # the abort lands while the reply is in flight
        return reply("partial", spent)

    agent = holder["agent"] = agents(llm_call)
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "aborted"
    assert agent.usage == spent
    assert not any(m.role == "assistant" for m in agent.history())


def test_a_new_agent_has_zero_usage_and_the_event_field_defaults_to_zero():
    """agent.usage starts at zero; AgentRunEndEvent built without usage carries LLMUsage()."""
    agent = YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None)
    try:
        assert agent.usage == LLMUsage()
    finally:
        shutdown(agent, timeout=WAIT)
    assert AgentRunEndEvent(1, AssistantMessage([]), 0, 0.0).usage == LLMUsage()


counts = st.integers(0, 10**9)
usages = st.builds(LLMUsage, counts, counts, counts, counts, counts, counts)


@given(st.lists(usages | st.none(), max_size=8))
def test_summing_is_field_by_field_and_keeps_the_total_identity(parts):
    """Property (decision 13): the sum adds every field, and total == input + output holds for it when it holds for each part."""
    total = LLMUsage()
    for part in parts:
        total = add_usage(total, part)
    given_parts = [p for p in parts if p is not None]
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens", "reasoning_tokens"):
        assert getattr(total, name) == sum(getattr(p, name) for p in given_parts)
    consistent = [LLMUsage(p.input_tokens, p.output_tokens, total_tokens=p.input_tokens + p.output_tokens) for p in given_parts]
    summed = LLMUsage()
    for part in consistent:
        summed = add_usage(summed, part)
    assert summed.total_tokens == summed.input_tokens + summed.output_tokens


@given(counts, counts, counts, counts, counts, st.sampled_from([0, None]))
def test_a_usage_built_without_its_total_gets_input_plus_output_and_keeps_it_through_json(inp, out, cache_read, cache_write, reasoning, unset):
    """Property (decision 13): LLMUsage with total 0 or None has total == input + output; its JSON form, and a stored message holding it, read back equal."""
    usage = LLMUsage(inp, out, cache_read, cache_write, unset, reasoning)  # type: ignore[arg-type]
    assert usage.total_tokens == inp + out
    assert LLMUsage.from_dict(json.loads(json.dumps(usage.to_dict()))) == usage
    stored = {**usage.to_dict(), "total_tokens": 0}  # a history stored before the total was filled in
    assert LLMUsage.from_dict(stored) == usage
    reply = AssistantMessage([TextContent("hi")], stop_reason="stop", usage=usage)
    data = json.loads(json.dumps(message_to_data(reply)))
    assert message_from_data(data, "row 1").usage == usage and read_stored(data).usage == usage
    data["usage"]["total_tokens"] = 0
    assert message_from_data(data, "row 1").usage == usage and read_stored(data).usage == usage



@given(counts, counts, st.integers(1, 10**6))
def test_a_usage_given_its_total_keeps_it_even_when_it_is_not_input_plus_output(inp, out, total):
    """Property (decision 13): a total the provider gave stays as given, whatever the input and output counts; only a missing total (0, None) is filled in."""
    assert LLMUsage(inp, out, 0, 0, total).total_tokens == total
    assert LLMUsage.from_dict({"input_tokens": inp, "output_tokens": out, "total_tokens": total}).total_tokens == total


class _OwnUsage:
    """A client's own usage type: the counts of LLMUsage, no total."""

    def __init__(self, inp: int, out: int) -> None:
        self.input_tokens, self.output_tokens = inp, out


@given(st.lists(st.tuples(counts, counts, st.booleans()), max_size=8))
def test_sums_of_parts_without_totals_keep_the_total_identity(parts):
    """Property (decision 13): summing rounds that set only input and output, as LLMUsage or a client's own type, gives total == input + output."""
    total = LLMUsage()
    for inp, out, own in parts:
        total = add_usage(total, _OwnUsage(inp, out) if own else LLMUsage(input_tokens=inp, output_tokens=out))  # type: ignore[arg-type]
    assert total.total_tokens == total.input_tokens + total.output_tokens == sum(i + o for i, o, _ in parts)
    meter = UsageMeter()
    for inp, out, _own in parts:
        meter.add(LLMUsage(input_tokens=inp, output_tokens=out))
    assert meter.total == total


def test_a_client_that_puts_none_in_a_count_cannot_break_the_sum():
    """A count of None (a careless client) adds 0 instead of raising."""
    assert add_usage(LLMUsage(1), LLMUsage(None, 2)) == LLMUsage(1, 2)  # type: ignore[arg-type]


def test_usage_meter_adds_from_many_threads_without_losing_any():
    """UsageMeter.add from eight threads at once: the total is exact."""
    meter, barrier = UsageMeter(), threading.Barrier(8)

    def add():
        barrier.wait(WAIT)
        for _ in range(500):
            meter.add(LLMUsage(1, 2, total_tokens=3))

    threads = [threading.Thread(target=add) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert meter.total == LLMUsage(4000, 8000, total_tokens=12000)
