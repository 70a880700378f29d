"""The agent: constructor, channels, the message pipeline, termination, failures (spec §1, §5, §6, §10, §16)."""

from __future__ import annotations

import threading
import time

import pytest

from helpers import WAIT, EventRecorder, make_tool, text_result
from yiemagent import (
    AgentClosedError,
    AgentRunEndEvent,
    AgentRunStartEvent,
    AgentTool,
    AssistantMessage,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMUsage,
    MessageFormatError,
    TextContent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolResultMessage,
    ToolStore,
    UserMessage,
    YiemAgent,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply



def weather_tool(text="Weather in Tokyo: Sunny, 22°C", **kwargs):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return make_tool("getWeather", lambda *a: text_result(text), schema=schema, **kwargs)


@pytest.mark.spec("5")
@pytest.mark.spec("1")
def test_constructor_builds_store_state_channels_and_loop_thread():
    """Spec §1 Step 2.5 (built-ins with builtin_tools=True, decision 19): the four registered, state built, channels 16/32/16, a named daemon loop thread."""
    llm = ScriptedLLM()
    with YiemAgent(llm_call=llm, agent_event_sink=None, builtin_tools=True) as agent:
        assert list(agent.tool_store.tools) == ["getWeather", "getTime", "writeTool", "listTools"]
        assert agent.state.tools is agent.tool_store.tools
        assert agent.state.system_prompt == "You are helpful assistant." and agent.state.messages == []
        assert (agent.state.pending_tool_calls, agent.state.active_run, agent.state.error_message) == (set(), False, None)
        assert agent.closing is False and agent.undelivered_responses == [] and agent.session is None
        assert (agent.input_channel.maxsize, agent.follow_up_channel.maxsize, agent.output_channel.maxsize) == (16, 32, 16)
        assert agent._core._thread.daemon and agent._core._thread.name.endswith("-loop") and agent._core._thread.is_alive()
    assert not agent._core._thread.is_alive(), "leaving the with block shuts the agent down"


@pytest.mark.spec("1")
def test_a_given_store_keeps_its_own_tools(agents):
    """A tool registered in the given store before the agent is made is not replaced by a built-in."""
    mine = make_tool("listTools")
    store = ToolStore("mine")
    register_tool(store, mine)
    agent = YiemAgent(llm_call=ScriptedLLM(), agent_event_sink=None, tool_store=store, builtin_tools=True)
    try:
        assert agent.tool_store is store and store.tools["listTools"] is mine and list(store.tools) == ["listTools", "getWeather", "getTime", "writeTool"]
    finally:
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("1")
@pytest.mark.spec("16")
def test_spec_16_end_to_end(agents):
    """§16 as written: one tool round trip, then the final text; history user, assistant, tool, assistant."""
    llm = ScriptedLLM([tool_call_reply(("call_1", "getWeather", {"city": "Tokyo"})), "The weather in Tokyo is sunny, 22°C."])
    agent = agents(llm, [weather_tool()], system_prompt="You are a helpful assistant.")
    run_agent(agent, "What's the weather in Tokyo?")
    response = take_response(agent, timeout=WAIT)
    assert response.content == [TextContent("The weather in Tokyo is sunny, 22°C.")]
    assert [m.role for m in agent.history()] == ["user", "assistant", "tool", "assistant"]
    tool_result = agent.history()[2]
    assert isinstance(tool_result, ToolResultMessage) and tool_result.tool_call_id == "call_1"
    first, second = llm.requests
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert second["messages"][3]["tool_call_id"] == "call_1"
    assert second["messages"][3]["content"] == "Weather in Tokyo: Sunny, 22°C"


@pytest.mark.spec("6")
def test_run_agent_takes_dict_string_or_message(agents):
    """runAgent accepts an OpenAI-style dict, a plain string, or an AgentMessage."""
    agent = agents(ScriptedLLM(["a", "b", "c"]))
    for message in ({"role": "user", "content": "one"}, "two", UserMessage([TextContent("three")])):
        run_agent(agent, message)
        take_response(agent, timeout=WAIT)
    users = [m.content[0].text for m in agent.history() if m.role == "user"]
    assert users == ["one", "two", "three"]


@pytest.mark.spec("6")
def test_invalid_message_raises_in_the_caller_and_nothing_is_queued(agents):
    """A message that cannot be a user message is refused at once, in the caller's thread."""
    agent = agents(ScriptedLLM())
    with pytest.raises(MessageFormatError, match="role 'assistant'"):
        run_agent(agent, {"role": "assistant", "content": "x"})
    assert agent.input_channel.empty()


@pytest.mark.spec("5")
def test_take_response_times_out():
    """takeResponse with a timeout waits that long, then raises TimeoutError naming the timeout, when nothing comes."""
    with YiemAgent(llm_call=ScriptedLLM(), agent_event_sink=None) as agent:
        started = time.monotonic()
        with pytest.raises(TimeoutError) as raised:
            take_response(agent, timeout=0.2)
        assert time.monotonic() >= started + 0.2
    assert str(raised.value) == "no response from the agent within 0.2 s"


@pytest.mark.spec("10")
def test_terminating_batch_ends_the_run_with_tool_texts(agents):
    """Spec §10: when every tool asks to terminate, the run ends without another LLM call."""
    deploy = make_tool("deploy", lambda *a: text_result("deployed v2", terminate=True))
    llm = ScriptedLLM([tool_call_reply(("d1", "deploy", {}), ("d2", "deploy", {}))])
    agent = agents(llm, [deploy])
    run_agent(agent, "ship it")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "tool_use_terminated" and response.error_message is None
    assert [b.text for b in response.content] == ["Tool execution completed.", "deployed v2", "deployed v2"]
    assert response.model == "scripted"
    assert len(llm.requests) == 1
    assert [m.role for m in agent.history()] == ["user", "assistant", "tool", "tool"]


@pytest.mark.spec("10")
def test_terminated_response_reports_failed_calls(agents):
    """A terminating batch in which a call failed carries error_message "One or more tool calls failed"."""
    stop = make_tool("stop", lambda *a: text_result("stopping", terminate=True))
    after = lambda ctx, signal: {"is_error": True} if ctx.tool_call.id == "b" else None  # noqa: E731
    agent = agents(ScriptedLLM([tool_call_reply(("a", "stop", {}), ("b", "stop", {}))]), [stop], after_tool_call=after)
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "tool_use_terminated" and response.error_message == "One or more tool calls failed"


@pytest.mark.spec("6")
@pytest.mark.spec("10")
def test_non_terminating_batch_loops_back_to_the_llm(agents):
    """A batch that does not terminate sends its results to the LLM again."""
    llm = ScriptedLLM([tool_call_reply(("a", "getWeather", {"city": "x"})), tool_call_reply(("b", "getWeather", {"city": "y"})), "done"])
    agent = agents(llm, [weather_tool()])
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).content[0].text == "done"
    assert len(llm.requests) == 3


@pytest.mark.spec("12")
def test_tool_errors_go_back_to_the_llm_which_recovers(agents):
    """An invalid call is answered with an error result; the LLM sees it and retries correctly."""
    llm = ScriptedLLM([tool_call_reply(("a", "getWeather", {})), tool_call_reply(("b", "getWeather", {"city": "Tokyo"})), "sunny"])
    agent = agents(llm, [weather_tool()])
    run_agent(agent, "weather?")
    assert take_response(agent, timeout=WAIT).content[0].text == "sunny"
    error = llm.requests[1]["messages"][-1]
    assert error["role"] == "tool" and error["is_error"] and "'city' is a required property" in error["content"]


@pytest.mark.spec("6")
@pytest.mark.parametrize(
    "failure, fragment",
    [(RuntimeError("server down"), "LLM call failed: RuntimeError: server down"), (lambda f: "text", "llm_call returned str")],
)
def test_llm_failure_ends_the_run_with_an_error_and_the_agent_keeps_serving(agents, failure, fragment):
    """Decision 11: an llm_call that raises or returns a non-AssistantMessage gives stop_reason "error"; the next message works."""
    agent = agents(ScriptedLLM([failure, "back again"]))
    run_agent(agent, "first")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and fragment in response.error_message
    assert agent.state.error_message == response.error_message
    run_agent(agent, "second")
    assert take_response(agent, timeout=WAIT).content[0].text == "back again"
    assert agent.state.error_message is None
    assert [m.role for m in agent.history()] == ["user", "user", "assistant"], "an error response is not added to the history"


@pytest.mark.spec("6")
def test_reply_cut_at_token_limit_does_not_run_its_tool_calls(agents):
    """Decision 10: tool calls in a reply with stop_reason "length" are answered with an error, not run."""
    ran = []
    tool = make_tool("t", lambda *a: ran.append(1) or text_result("ran"))
    cut = AssistantMessage([{"type": "tool_call", "id": "c", "name": "t", "arguments": '{"x": 1'}], stop_reason="length")
    llm = ScriptedLLM([cut, "ok, re-issued"])
    agent = agents(llm, [tool])
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).content[0].text == "ok, re-issued"
    assert ran == []
    result = agent.history()[2]
    assert result.is_error and "cut off by the token limit" in result.content[0].text


@pytest.mark.spec("13")
def test_calls_cut_at_the_token_limit_still_get_their_start_and_end_events(agents):
    """Decision 10 with decision 1: a call answered without running still has a start event
    naming its id, tool and arguments, then an end event carrying the error result."""
    cut = AssistantMessage(
        [
            {"type": "tool_call", "id": "c1", "name": "t", "arguments": {"x": 1}},
            {"type": "tool_call", "id": "c2", "name": "u", "arguments": {"y": [2]}},
        ],
        stop_reason="length",
    )
    recorder = EventRecorder()
    agent = agents(ScriptedLLM([cut, "ok"]), [], agent_event_sink=recorder)
    run_agent(agent, "go")
    take_response(agent, timeout=WAIT)
    starts = recorder.of_type(ToolExecStartEvent)
    assert [(e.tool_call_id, e.tool_name, e.arguments) for e in starts] == [("c1", "t", {"x": 1}), ("c2", "u", {"y": [2]})]
    for call_id in ("c1", "c2"):
        kinds = [type(e) for e in recorder.for_call(call_id)]
        assert kinds == [ToolExecStartEvent, ToolExecEndEvent]
        end = recorder.for_call(call_id)[-1]
        assert end.is_error and "cut off by the token limit" in end.result.content[0].text


@pytest.mark.spec("13")
def test_raising_sink_and_hook_are_contained(agents):
    """A sink that raises on every event and a before hook that raises do not stop the run."""

    def sink(event):
        raise RuntimeError("sink down")

    def before(ctx, signal):
        raise RuntimeError("hook down")

    llm = ScriptedLLM([tool_call_reply(("a", "getWeather", {"city": "x"})), "finished"])
    agent = agents(llm, [weather_tool()], agent_event_sink=sink, before_tool_call=before)
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).content[0].text == "finished"
    assert "before_tool_call hook raised RuntimeError: hook down" in agent.history()[2].content[0].text


@pytest.mark.spec("13")
def test_run_and_llm_round_events(agents):
    """Runs and LLM rounds emit start/end events with duration and usage (beyond the spec)."""
    usage = LLMUsage(10, 5, 0, 0, 15)
    reply = AssistantMessage([TextContent("hi")], usage=usage)
    recorder = EventRecorder()
    agent = agents(ScriptedLLM([reply]), agent_event_sink=recorder)
    run_agent(agent, "hello")
    take_response(agent, timeout=WAIT)
    assert agent.wait_until_idle(WAIT)
    kinds = [type(e) for e in recorder.events]
    assert kinds == [AgentRunStartEvent, LLMCallStartEvent, LLMCallEndEvent, AgentRunEndEvent]
    start, llm_start, llm_end, end = recorder.events
    assert start.run_id == 1 and start.new_messages == 1
    assert (llm_start.round, llm_start.message_count) == (1, 1)
    assert llm_end.usage == usage and llm_end.duration_s >= 0 and llm_end.error is None
    assert end.response.content[0].text == "hi" and end.rounds == 1


@pytest.mark.spec("5")
def test_history_returns_a_copy_that_the_caller_may_change(agents):
    """history() is a copy: clearing or extending it leaves the agent's conversation, and what the next run sends, as it was."""
    llm = ScriptedLLM(["first answer", "second answer"])
    agent = agents(llm)
    run_agent(agent, "first")
    take_response(agent, timeout=WAIT)
    before = list(agent.history())  # the test's own list of the messages
    copy = agent.history()
    copy.clear()
    copy.append(UserMessage([TextContent("smuggled")]))
    assert agent.history() == before
    run_agent(agent, "second")
    assert take_response(agent, timeout=WAIT).content[0].text == "second answer"
    assert [m["content"] for m in llm.requests[1]["messages"] if m["role"] != "system"] == ["first", "first answer", "second"]


@pytest.mark.spec("9")
def test_parallel_tool_execute_runs_the_batch_in_parallel(agents):
    """YiemAgent(parallel_tool_execute=True) runs a batch of parallel tools concurrently."""
    barrier = threading.Barrier(3, timeout=WAIT)
    meet = make_tool("meet", lambda *a: (barrier.wait(), text_result("met"))[1], parallel=True)
    llm = ScriptedLLM([tool_call_reply(*[(f"m{i}", "meet", {}) for i in range(3)]), "all met"])
    agent = agents(llm, [meet], parallel_tool_execute=True)
    run_agent(agent, "meet")
    assert take_response(agent, timeout=WAIT).content[0].text == "all met"
    assert not any(m.is_error for m in agent.history() if m.role == "tool")


@pytest.mark.spec("6")
@pytest.mark.spec("14")
def test_custom_prepare_context_and_format_hooks_are_used(agents):
    """prepareContext and formatMsgForLLM overrides shape what llm_call receives."""
    from yiemagent import AgentContext

    def prepare(state, sink):
        return AgentContext("override prompt", list(state.messages)[-1:], {})

    def fmt(ctx, sink):
        return {"prompt": ctx.system_prompt, "n": len(ctx.messages)}

    llm = ScriptedLLM(["ok"])
    agent = agents(llm, prepare_context=prepare, format_msg_for_llm=fmt)
    run_agent(agent, "x")
    take_response(agent, timeout=WAIT)
    assert llm.requests == [{"prompt": "override prompt", "n": 1}]


@pytest.mark.spec("14")
def test_max_retry_delay_ms_overrides_the_client_cap(agents):
    """YiemAgent(max_retry_delay_ms=N) sets the cap of a client that has one."""
    llm = ScriptedLLM()
    llm.max_retry_delay_ms = 60000
    agents(llm, max_retry_delay_ms=1234)
    assert llm.max_retry_delay_ms == 1234


@pytest.mark.spec("5")
def test_agent_closed_after_shutdown(agents):
    """After shutdown the agent refuses messages with AgentClosedError."""
    agent = agents(ScriptedLLM())
    assert shutdown(agent, timeout=WAIT) == []
    with pytest.raises(AgentClosedError):
        run_agent(agent, "late")
    assert not agent._core._thread.is_alive()


def test_tool_with_state_sees_pending_calls(agents):
    """state.pending_tool_calls holds the ids of the batch while it runs."""
    seen = []
    holder = {}

    def look(tool_call_id, args, signal, on_partial_result):
        seen.append(set(holder["agent"].state.pending_tool_calls))
        return text_result("ok")

    agent = agents(ScriptedLLM([tool_call_reply(("p1", "look", {}), ("p2", "look", {})), "done"]), [make_tool("look", look)])
    holder["agent"] = agent
    run_agent(agent, "go")
    take_response(agent, timeout=WAIT)
    assert seen == [{"p1", "p2"}, {"p1", "p2"}] and agent.state.pending_tool_calls == set()
    assert isinstance(agent.tool_store.tools["look"], AgentTool)
    assert [type(e) for e in agent.agent_event_sink.of_type(ToolExecEndEvent)] == [ToolExecEndEvent] * 2


@pytest.mark.spec("12")
def test_a_tool_that_exits_does_not_strand_the_agent(agents):
    """A tool calling sys.exit() gives an error result; the run completes and the agent keeps serving."""
    import sys

    exits = make_tool("exits", lambda *a: sys.exit(3))
    agent = agents(ScriptedLLM([tool_call_reply(("x", "exits", {})), "recovered"]), [exits])
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).content[0].text == "recovered"
    assert agent.history()[2].is_error and "SystemExit: 3" in agent.history()[2].content[0].text


@pytest.mark.spec("14")
def test_prepare_context_returning_the_wrong_type_ends_the_run_with_an_error(agents):
    """A prepare_context hook that returns something other than an AgentContext is named in the error response."""
    agent = agents(ScriptedLLM(["unused"]), prepare_context=lambda state, sink: {"messages": []})
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and "prepare_context returned dict; expected an AgentContext" in response.error_message


@pytest.mark.spec("6")
def test_even_a_keyboard_interrupt_in_the_run_thread_yields_a_response(agents):
    """Whatever escapes into the run thread, the run ends with an error response and the loop goes on."""

    def llm(formatted):
        raise KeyboardInterrupt

    agent = agents(llm)
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and "KeyboardInterrupt" in response.error_message


@pytest.mark.spec("6")
def test_an_llm_call_that_returns_an_error_message_is_treated_as_a_failure(agents):
    """An AssistantMessage with stop_reason "error" from llm_call ends the run and stays out of the history."""
    failed = AssistantMessage([], stop_reason="error", error_message="quota exhausted")
    agent = agents(ScriptedLLM([failed]))
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "error" and response.error_message == "quota exhausted"
    assert [m.role for m in agent.history()] == ["user"]


@pytest.mark.spec("1")
def test_constructor_defaults_name_the_store_and_threads_after_the_session_id():
    """Without tool_store the agent's own store is named after session_id ("agent" without one), as are its threads;
    the options keep their documented defaults (API.md "Agent options"): sequential tools, no retry cap override."""
    with YiemAgent(llm_call=ScriptedLLM(), agent_event_sink=None, session_id="s1") as named:
        assert named.session_id == "s1" and named.tool_store.name == "s1"
        assert named._core._thread.name == "yiemagent-s1-loop" and named._core._worker.thread.name == "yiemagent-s1-run"
        assert named.parallel_tool_execute is False and named.max_retry_delay_ms is None and named.max_rounds == 50
    with YiemAgent(llm_call=ScriptedLLM(), agent_event_sink=None) as anonymous:
        key = hex(id(anonymous))[2:]
        assert anonymous.session_id is None and anonymous.tool_store.name == "agent"
        assert anonymous._core._thread.name == f"yiemagent-{key}-loop" and anonymous._core._worker.thread.name == f"yiemagent-{key}-run"
    llm = ScriptedLLM()
    llm.max_retry_delay_ms = 60000
    with YiemAgent(llm_call=llm, agent_event_sink=None, max_retry_delay_ms=250) as capped:
        assert capped.max_retry_delay_ms == 250 and llm.max_retry_delay_ms == 250


def test_repr_shows_session_id_loop_state_and_history_length():
    """repr(agent) names the session id, the loop state and how many messages the history holds."""
    with YiemAgent(llm_call=ScriptedLLM(), agent_event_sink=None, session_id="s1", messages=[UserMessage([TextContent("hi")])]) as agent:
        assert repr(agent) == "YiemAgent(session_id='s1', loop_state=IDLE, messages=1)"


WRITABLE = ["llm_call", "agent_event_sink", "prepare_context", "format_msg_for_llm", "before_tool_call", "after_tool_call", "parallel_tool_execute"]
READ_ONLY = [
    "state", "tool_store", "input_channel", "follow_up_channel", "output_channel", "loop_state",
    "loop_state_history", "undelivered_responses", "closing", "session", "max_rounds", "usage",
]


@pytest.mark.spec("14")
def test_hooks_and_llm_call_may_be_replaced_and_the_next_run_uses_them(agents):
    """The writable attributes live on the core: assigning one replaces it there, for the next run (class docstring)."""
    from yiemagent.formatting import format_msg_for_llm, prepare_context

    agent = agents(ScriptedLLM(["first"]))
    for name in WRITABLE:
        value = True if name == "parallel_tool_execute" else (lambda *a: None)
        setattr(agent, name, value)
        assert getattr(agent, name) is value and getattr(agent._core, name) is value
    agent.parallel_tool_execute, agent.before_tool_call, agent.after_tool_call = False, None, None
    agent.prepare_context, agent.format_msg_for_llm = prepare_context, format_msg_for_llm
    replacement, sink = ScriptedLLM(["from the replacement"]), EventRecorder()
    agent.llm_call, agent.agent_event_sink = replacement, sink
    run_agent(agent, "go")
    assert take_response(agent, timeout=WAIT).content == [TextContent("from the replacement")]
    assert len(replacement.requests) == 1 and len(sink.of_type(AgentRunEndEvent)) == 1


@pytest.mark.parametrize("name", READ_ONLY)
def test_the_agents_own_parts_cannot_be_replaced(agents, name):
    """The state, the store, the channels and the loop bookkeeping are read-only: assigning one raises AttributeError."""
    agent = agents(ScriptedLLM())
    before = getattr(agent, name)
    with pytest.raises(AttributeError) as raised:
        setattr(agent, name, object())
    assert str(raised.value) == f"YiemAgent.{name} cannot be replaced"
    assert getattr(agent, name) is before


def test_the_agents_attributes_read_on_the_class_are_their_descriptors_so_help_lists_them():
    """``YiemAgent.state`` (on the class, no agent) is the attribute's descriptor, not an error: ``help(YiemAgent)`` and pydoc read them so."""
    import pydoc

    from yiemagent.agent import _Forward

    assert isinstance(YiemAgent.state, _Forward) and YiemAgent.llm_call.writable and not YiemAgent.tool_store.writable
    assert "input_channel" in pydoc.render_doc(YiemAgent)
