"""Behaviours an audit found unguarded: each test here fails under a one-line break of the code it names.

An audit broke the code on purpose, one line at a time, and listed the breaks the suite
let through. Each test below names the break it catches; docs/conformance.md cites them.
Also here: the tests of the decisions docs/conformance.md records where the spec
contradicts itself.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import replace

import pytest

import yiemagent
from helpers import ASSISTANT, SEQUENTIAL, WAIT, EventRecorder, context_with, make_tool, text_result
from yiemagent import (
    AbortSignal,
    AgentLoopConfig,
    AgentState,
    AgentToolCall,
    AgentToolResult,
    LLMModel,
    LLMUsage,
    LoopState,
    TextContent,
    ToolExecEndEvent,
    ToolResultMessage,
    ToolStore,
    UserMessage,
    YiemAgent,
    execute_tool_calls,
    extract_tool_calls,
    format_msg_for_llm,
    prepare_context,
    prepare_tool_call,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply



def run_batch(tool, config, signal=None, recorder=None, assistant=ASSISTANT, call_id="c1"):
    context = context_with(tool)
    batch = execute_tool_calls(context, assistant, [AgentToolCall(call_id, tool.name, {})], config, signal, recorder)
    return context, batch


@pytest.mark.spec("3")
def test_agent_tool_result_fields_in_spec_order_with_their_defaults():
    """§3 agentToolResult(content, details, usage, terminate): positional in that order; details {}, usage None, terminate False."""
    usage = LLMUsage(1, 1, 0, 0, 2)
    full = AgentToolResult([TextContent("x")], {"d": 1}, usage, True)
    assert (full.content, full.details, full.usage, full.terminate) == ([TextContent("x")], {"d": 1}, usage, True)
    bare = AgentToolResult([TextContent("x")])
    assert (bare.details, bare.usage, bare.terminate) == ({}, None, False)
    assert bare.details is not AgentToolResult([]).details, "each result gets its own details dict"


# --- the end event and the after hook (spec §8.3, §13, §14) -------------------------------


@pytest.mark.spec("13")
def test_end_event_comes_after_finalize_and_carries_the_result_as_after_tool_call_left_it():
    """Break caught: the end event built from the executed result instead of the finalized one (an unmasked secret reaches the sink)."""
    recorder = EventRecorder()
    seen_at_hook = []

    def mask(ctx, signal):
        seen_at_hook.append([type(e).__name__ for e in recorder.events])
        return {"content": [TextContent("secret=***")], "is_error": True}

    tool = make_tool("vault", lambda *a: text_result("secret=42"))
    _, batch = run_batch(tool, AgentLoopConfig(after_tool_call=mask), recorder=recorder)
    assert seen_at_hook == [["ToolExecStartEvent"]], "finalize runs before the end event"
    (end,) = recorder.of_type(ToolExecEndEvent)
    assert recorder.events[-1] is end
    assert end.result.content == [TextContent("secret=***")] and end.is_error is True
    assert "secret=42" not in repr(recorder.events[-1])
    assert batch.messages[0].content == [TextContent("secret=***")]


@pytest.mark.spec("14")
@pytest.mark.parametrize("fails", [True, False])
def test_after_hook_dict_replaces_only_the_keys_it_names(fails):
    """Break caught: a dict without "is_error" resetting is_error (or any other part) instead of keeping it."""
    usage = LLMUsage(1, 2, 0, 0, 3)

    def execute(*args):
        if fails:
            raise RuntimeError("boom")
        return AgentToolResult([TextContent("out")], {"k": 1}, usage, True)

    tool = make_tool("t", execute)
    _, batch = run_batch(tool, AgentLoopConfig(after_tool_call=lambda ctx, signal: {"details": {"replaced": True}}))
    message = batch.messages[0]
    assert message.details == {"replaced": True}
    assert message.is_error is fails
    if fails:
        assert message.content == [TextContent("Tool 't' failed: RuntimeError: boom")] and message.usage is None
    else:
        assert (message.content, message.usage, batch.terminate) == ([TextContent("out")], usage, True)


@pytest.mark.spec("14")
def test_after_hook_receives_the_assistant_message_the_context_and_the_signal():
    """Break caught: the after hook's context built with another assistant message, context or signal."""
    seen = []
    signal = AbortSignal()
    assistant = replace(ASSISTANT, model="m-after")
    tool = make_tool("t", schema={"type": "object", "properties": {"q": {"type": "string"}}})

    def after(ctx, hook_signal):
        seen.append((ctx.assistant_message, ctx.context, hook_signal, ctx.tool_call.id, ctx.args, ctx.result.content, ctx.is_error))

    context = context_with(tool)
    execute_tool_calls(context, assistant, [AgentToolCall("c9", "t", {"q": "x"})], AgentLoopConfig(after_tool_call=after), signal, None)
    ((message, hook_context, hook_signal, call_id, args, content, is_error),) = seen
    assert message is assistant and hook_context is context and hook_signal is signal
    assert (call_id, args, is_error) == ("c9", {"q": "x"}, False) and content == [TextContent("t:[('q', 'x')]")]


@pytest.mark.spec("8.1")
def test_abort_is_checked_before_block_in_prepare():
    """Break caught: PREPARE honouring the hook's block before the signal that fired during the hook."""
    signal = AbortSignal()

    def before(ctx, hook_signal):
        hook_signal.abort()
        return {"block": True, "reason": "policy says no"}

    outcome = prepare_tool_call(context_with(make_tool("t")), ASSISTANT, AgentToolCall("c", "t", {}), AgentLoopConfig(before_tool_call=before), signal)
    assert outcome.is_error and outcome.result.content == [TextContent("Operation aborted")]


# --- extraction (spec §7) ------------------------------------------------------------------


@pytest.mark.spec("7")
def test_format_2_call_without_a_name_is_answered_as_an_unknown_tool():
    """Break caught: a format-2 block without "name" dropped, or crashing extraction, instead of getting a result."""
    reply = replace(ASSISTANT, content=[{"type": "tool_call", "id": "x1", "arguments": {"city": "Paris"}}])
    has_calls, calls, _ = extract_tool_calls(reply)
    assert has_calls and [(c.id, c.name, c.arguments) for c in calls] == [("x1", "", {"city": "Paris"})]
    batch = execute_tool_calls(context_with(make_tool("getWeather")), reply, calls, SEQUENTIAL, None, None)
    (message,) = batch.messages
    assert message.is_error and message.tool_call_id == "x1" and message.content[0].text.startswith("Tool '' not found")


# --- the agent (spec §1 step 2.5, §5, §10) ---------------------------------------------------


@pytest.mark.spec("1")
def test_llm_call_and_agent_event_sink_have_no_default():
    """Break caught: a default for llm_call or agent_event_sink (the spec's constructor requires both)."""
    parameters = inspect.signature(YiemAgent).parameters
    assert parameters["llm_call"].default is inspect.Parameter.empty
    assert parameters["agent_event_sink"].default is inspect.Parameter.empty
    with pytest.raises(TypeError):
        YiemAgent(agent_event_sink=None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        YiemAgent(llm_call=ScriptedLLM())  # type: ignore[call-arg]


@pytest.mark.spec("1")
def test_model_and_messages_reach_the_state_and_the_llm(agents):
    """Break caught: model= or messages= not stored in the agent's state (and so not sent)."""
    model = LLMModel("m-1", provider="p")
    earlier = [UserMessage([TextContent("earlier question")]), replace(ASSISTANT, content=[TextContent("earlier answer")])]
    llm = ScriptedLLM(["now"])
    agent = agents(llm, model=model, messages=earlier)
    assert agent.state.model is model
    assert agent.state.messages == earlier and agent.state.messages is not earlier, "the agent keeps its own list"
    run_agent(agent, "next")
    take_response(agent, timeout=WAIT)
    assert [m["content"] for m in llm.requests[0]["messages"][1:]] == ["earlier question", "earlier answer", "next"]


@pytest.mark.spec("5")
def test_active_run_is_true_during_a_run_and_false_after(agents):
    """Break caught: state.active_run not set when a run starts, or not reset when it ends (state 6)."""
    seen = []

    def llm(formatted):
        seen.append((agent.state.active_run, agent.loop_state))
        return replace(ASSISTANT, content=[TextContent("done")], stop_reason="stop")

    agent = agents(llm)
    assert agent.state.active_run is False
    run_agent(agent, "go")
    take_response(agent, timeout=WAIT)
    assert agent.wait_until_idle(timeout=WAIT)
    assert seen == [(True, LoopState.PROCESSING)]
    assert agent.state.active_run is False and agent.loop_state is LoopState.IDLE
    assert list(agent.loop_state_history)[-3:] == [LoopState.PROCESSING, LoopState.COMPLETED, LoopState.IDLE]
    run_agent(agent, "again")  # reset means the next message starts a fresh run
    assert take_response(agent, timeout=WAIT).content == [TextContent("done")]
    assert [s[0] for s in seen] == [True, True]


def terminating(text_blocks):
    return make_tool("stop", lambda *a: AgentToolResult(text_blocks, {}, None, True))


@pytest.mark.spec("10")
def test_tool_use_terminated_keeps_the_replys_api_provider_model_and_usage(agents):
    """Break caught: the "tool_use_terminated" response dropping the reply's api or usage (spec §10 copies them)."""
    usage = LLMUsage(10, 5, 0, 0, 15)
    reply = replace(tool_call_reply(("s1", "stop", {})), api="openai-completions", provider="acme", model="m-2", usage=usage)
    agent = agents(ScriptedLLM([reply]), [terminating([TextContent("stopped")])])
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert response.stop_reason == "tool_use_terminated"
    assert (response.api, response.provider, response.model, response.usage) == ("openai-completions", "acme", "m-2", usage)


@pytest.mark.spec("10")
def test_terminated_response_takes_text_from_dict_blocks_too(agents):
    """Break caught: dict {"type": "text"} blocks of a tool's result left out of the terminated response."""
    blocks = [TextContent("first"), {"type": "text", "text": "from a dict"}]
    agent = agents(ScriptedLLM([tool_call_reply(("s1", "stop", {}))]), [terminating(blocks)])
    run_agent(agent, "go")
    response = take_response(agent, timeout=WAIT)
    assert [b.text for b in response.content] == ["Tool execution completed.", "first", "from a dict"]


# --- decisions where the spec contradicts itself ------------------------------------------


@pytest.mark.spec("11")
def test_tool_message_on_the_wire_has_the_three_spec_keys_plus_name_and_is_error():
    """Decision: §11 shows role, tool_call_id, content; yiemagent also sends name and is_error (docs/conformance.md)."""
    message = ToolResultMessage("call_1", "getWeather", [TextContent("Weather in Tokyo: Sunny, 22°C")], is_error=True)
    context = prepare_context(AgentState("sys", None, {}, [message], set(), False, None), None)
    wire = format_msg_for_llm(context, None)["messages"][1]
    assert wire == {"role": "tool", "tool_call_id": "call_1", "content": "Weather in Tokyo: Sunny, 22°C", "name": "getWeather", "is_error": True}


@pytest.mark.spec("11")
def test_added_tool_names_is_none_not_an_empty_list():
    """Decision: §11's createToolResultMessage passes `nothing`, §16's trace shows `[]`; yiemagent follows §11 (None)."""
    _, batch = run_batch(make_tool("t"), SEQUENTIAL)
    assert batch.messages[0].added_tool_names is None


@pytest.mark.spec("6")
@pytest.mark.parametrize("parallel", [False, True])
def test_parallel_tool_execute_chooses_the_batch_mode_the_spec_hard_codes(agents, parallel):
    """Decision: §6/§16 hard-code "sequential"; the agent passes "parallel" when parallel_tool_execute=True.

    Sequential calls run in the run's own thread (the one that called the LLM); parallel
    ones in the pool's threads.
    """
    threads = {}

    def record(key):
        def execute(*args):
            threads[key] = threading.current_thread()
            return text_result(key)

        return execute

    def first_reply(formatted):
        threads["llm"] = threading.current_thread()
        return tool_call_reply(("a", "a", {}), ("b", "b", {}))

    tools = [make_tool("a", record("a"), parallel=True), make_tool("b", record("b"), parallel=True)]
    agent = agents(ScriptedLLM([first_reply, "done"]), tools, parallel_tool_execute=parallel)
    run_agent(agent, "go")
    take_response(agent, timeout=WAIT)
    in_run_thread = [threads[k] is threads["llm"] for k in ("a", "b")]
    assert in_run_thread == ([False, False] if parallel else [True, True])


@pytest.mark.spec("19")
def test_the_abstract_agent_type_is_served_by_subclassing_yiem_agent(agents):
    """Decision: §19's abstract `agent` has no Python counterpart; a subclass of YiemAgent is what the functions take."""

    class MyAgent(YiemAgent):
        pass

    llm = ScriptedLLM(["hello"])
    agent = MyAgent(llm_call=llm, agent_event_sink=None, tool_store=ToolStore("sub"))
    try:
        run_agent(agent, "hi")
        assert take_response(agent, timeout=WAIT).content == [TextContent("hello")]
    finally:
        shutdown(agent, timeout=WAIT)
    assert not hasattr(yiemagent, "Agent") and YiemAgent.__mro__[1] is object


@pytest.mark.spec("4")
def test_a_store_shows_its_name_and_tool_names_in_order():
    """repr(store) names the store and its tools in registration order, not the tool objects (logs stay short)."""
    store = ToolStore("wine")
    register_tool(store, make_tool("b"))
    register_tool(store, make_tool("a"))
    assert repr(store) == "ToolStore(name='wine', tools=['b', 'a'])"
