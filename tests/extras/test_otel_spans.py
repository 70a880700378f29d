"""OTelSink: a run's events as GenAI semantic-convention spans, read back from the SDK's in-memory exporter (docs/tracing.md)."""

from __future__ import annotations

import gc
import logging
import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from helpers import WAIT, EventRecorder, blocking_tool, make_agent, make_tool, text_result
from otel_support import NamedLLM, Traced
from strategies import json_values
from yiemagent.events import AgentRunEndEvent, AgentRunStartEvent, LLMCallEndEvent, LLMCallStartEvent, ToolExecEndEvent, ToolExecStartEvent
from yiemagent import AssistantMessage, TextContent, abort, run_agent, shutdown, take_response, tee
from yiemagent.llm import OpenAIClient
from yiemagent.types import text_of
from yiemagent.streaming import emit_delta
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.otel import OTelSink
from yiemagent.otel._content import tool_result


@pytest.fixture
def traced():
    return Traced()


def ask(agent, text="go"):
    run_agent(agent, text)
    return take_response(agent, timeout=WAIT)


def test_parallel_tools_are_sibling_spans_with_their_real_times_under_the_run(agents, traced):
    """Two parallel calls that overlap for real are two execute_tool spans under invoke_agent whose times overlap."""
    both = threading.Barrier(2, timeout=WAIT)

    def meet(tool_call_id, args, signal, on_partial_result):
        both.wait()
        return text_result("met")

    tool = make_tool("meet", meet, parallel=True)
    llm = NamedLLM([tool_call_reply(("c1", "meet", {}), ("c2", "meet", {})), AssistantMessage([TextContent("done")], stop_reason="stop")])
    agent = agents(llm, [tool], agent_event_sink=traced.sink(), parallel_tool_execute=True)
    assert ask(agent).stop_reason == "stop"
    shutdown(agent, timeout=WAIT)

    run = traced.one("invoke_agent")
    chats = traced.named("chat test-model")
    calls = traced.named("execute_tool meet")
    assert len(chats) == 2 and len(calls) == 2
    assert run.parent is None and run.status.status_code is StatusCode.UNSET
    for span in chats + calls:
        assert span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id
    first, second = sorted(calls, key=lambda s: s.start_time)
    assert first.start_time < second.end_time and second.start_time < first.end_time  # they ran at once
    assert {c.attributes["gen_ai.tool.call.id"] for c in calls} == {"c1", "c2"}
    for call in calls:
        assert call.attributes["gen_ai.operation.name"] == "execute_tool"
        assert call.attributes["gen_ai.tool.name"] == "meet"
        assert call.status.status_code is StatusCode.UNSET
    chat = min(chats, key=lambda s: s.start_time)
    assert chat.kind is trace.SpanKind.CLIENT
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "test-model"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert chat.end_time <= first.start_time  # the round's call to the model ended before its tools ran
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.response.finish_reasons"] == ("stop",)


def test_a_round_reports_its_token_usage(agents, traced):
    """A reply's usage becomes gen_ai.usage.* (input, output, and their cache and reasoning parts) on its chat span and the run's sum on invoke_agent."""
    from yiemagent import LLMUsage

    usage = LLMUsage(input_tokens=11, output_tokens=7, cache_read_tokens=5, cache_write_tokens=2, total_tokens=18, reasoning_tokens=3)
    reply = AssistantMessage([TextContent("hi")], stop_reason="stop", usage=usage)
    agent = agents(NamedLLM([reply]), agent_event_sink=traced.sink())
    ask(agent)
    shutdown(agent, timeout=WAIT)
    for span in (traced.one("chat test-model"), traced.one("invoke_agent")):
        assert {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.usage.")} == {
            "gen_ai.usage.input_tokens": 11,
            "gen_ai.usage.output_tokens": 7,
            "gen_ai.usage.cache_read.input_tokens": 5,
            "gen_ai.usage.cache_creation.input_tokens": 2,
            "gen_ai.usage.reasoning.output_tokens": 3,
        }


def test_a_failing_tool_is_an_error_span_and_the_run_is_not(agents, traced):
    """A tool that raises gives its execute_tool span status ERROR with error.type; the run, which went on, stays unset."""

    def broken(*args):
        raise RuntimeError("disk on fire")

    llm = NamedLLM([tool_call_reply(("c1", "broken", {})), "I could not do it"])
    agent = agents(llm, [make_tool("broken", broken)], agent_event_sink=traced.sink())
    ask(agent)
    shutdown(agent, timeout=WAIT)
    call = traced.one("execute_tool broken")
    assert call.status.status_code is StatusCode.ERROR
    assert call.attributes["error.type"] == "tool_error"
    assert "disk on fire" not in (call.status.description or "")  # content (an error text) only with capture_content
    assert traced.one("invoke_agent").status.status_code is StatusCode.UNSET


def test_a_failed_llm_round_marks_its_chat_span_and_the_run(agents, traced):
    """An llm_call that raises gives the chat span error.type the exception's type, and the run error.type "error"."""
    agent = agents(NamedLLM([ConnectionResetError("peer went away")]), agent_event_sink=traced.sink())
    assert ask(agent).stop_reason == "error"
    shutdown(agent, timeout=WAIT)
    chat = traced.one("chat test-model")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes["error.type"] == "ConnectionResetError"
    run = traced.one("invoke_agent")
    assert run.status.status_code is StatusCode.ERROR and run.attributes["error.type"] == "error"


def test_an_aborted_run_ends_every_span_marked_aborted(agents, traced):
    """abort() during a tool call ends the call's span and the run's, the run's with error.type "aborted", as the call it skipped."""
    tool, entered, release = blocking_tool("slow")
    llm = NamedLLM([tool_call_reply(("c1", "slow", {}), ("c2", "echo", {}))])
    agent = agents(llm, [tool, make_tool("echo")], agent_event_sink=traced.sink())
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    assert abort(agent)
    release.set()
    assert take_response(agent, timeout=WAIT).stop_reason == "aborted"
    shutdown(agent, timeout=WAIT)
    run = traced.one("invoke_agent")
    assert run.status.status_code is StatusCode.ERROR and run.attributes["error.type"] == "aborted"
    assert traced.one("execute_tool slow").end_time <= run.end_time
    skipped = traced.one("execute_tool echo")  # the call the abort skipped
    assert skipped.status.status_code is StatusCode.ERROR and skipped.attributes["error.type"] == "aborted"
    assert skipped.end_time <= run.end_time


def test_a_run_stopped_by_max_rounds_is_an_error_span(agents, traced):
    """A run that hits max_rounds ends its invoke_agent span with error.type "max_rounds"."""
    llm = NamedLLM([tool_call_reply((f"c{i}", "echo", {})) for i in range(3)])
    agent = agents(llm, [make_tool("echo")], agent_event_sink=traced.sink(), max_rounds=2)
    assert ask(agent).stop_reason == "max_rounds"
    shutdown(agent, timeout=WAIT)
    run = traced.one("invoke_agent")
    assert run.attributes["error.type"] == "max_rounds" and run.status.status_code is StatusCode.ERROR


def test_shutdown_mid_run_ends_every_span(agents, traced):
    """shutdown() while a tool runs still ends the tool's span and the run's."""
    tool, entered, release = blocking_tool("slow")
    agent = agents(NamedLLM([tool_call_reply(("c1", "slow", {}))]), [tool], agent_event_sink=traced.sink())
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    closer = threading.Thread(target=shutdown, args=(agent,), kwargs={"timeout": WAIT})
    closer.start()
    release.set()
    closer.join(WAIT)
    names = [s.name for s in traced.spans()]
    assert "invoke_agent" in names and "execute_tool slow" in names and "chat test-model" in names


def test_content_is_left_out_unless_asked_for(agents, traced):
    """Without capture_content no prompt, reply, argument or result is recorded."""
    llm = NamedLLM([tool_call_reply(("c1", "echo", {"city": "Paris"})), "sunny in Paris"])
    agent = agents(llm, [make_tool("echo")], agent_event_sink=traced.sink())
    ask(agent, "weather in Paris?")
    shutdown(agent, timeout=WAIT)
    for span in traced.spans():
        assert not any("Paris" in str(value) for value in span.attributes.values()), span.name


def test_captured_content_is_masked_with_the_clients_secrets(agents, traced):
    """With capture_content=True the messages, arguments and results are recorded, and a live client's key is ***."""
    key = "sk-test-0123456789abcdefSECRET"
    client = OpenAIClient(base_url="http://127.0.0.1:9/v1", api_key=key, model="m")  # its key is now a known secret
    llm = NamedLLM([tool_call_reply(("c1", "echo", {"token": key})), f"the key is {key}"])
    agent = agents(llm, [make_tool("echo")], agent_event_sink=traced.sink(capture_content=True), system_prompt="be brief")
    ask(agent, f"use {key}")
    shutdown(agent, timeout=WAIT)
    chat = min(traced.named("chat test-model"), key=lambda s: s.start_time)
    call = traced.one("execute_tool echo")
    recorded = [str(v) for s in traced.spans() for v in s.attributes.values()]
    assert not any(key in value for value in recorded)
    assert "***" in chat.attributes["gen_ai.input.messages"] and "be brief" in chat.attributes["gen_ai.system_instructions"]
    assert "***" in call.attributes["gen_ai.tool.call.arguments"] and "***" in call.attributes["gen_ai.tool.call.result"]
    assert "***" in traced.one("invoke_agent").attributes["gen_ai.output.messages"]
    del client


def test_each_round_records_the_whole_conversation_it_sent_in_order(agents, traced):
    """With capture_content=True a later round's gen_ai.input.messages holds every message sent so far, each as the conventions shape it."""
    llm = NamedLLM([tool_call_reply(("c1", "echo", {"city": "Paris"}), ("c2", "echo", {"city": "Rome"})), "sunny"])
    agent = agents(llm, [make_tool("echo")], agent_event_sink=traced.sink(capture_content=True))
    ask(agent, "weather?")
    ask(agent, "and tomorrow?")
    shutdown(agent, timeout=WAIT)
    chats = sorted(traced.named("chat test-model"), key=lambda s: s.start_time)
    sent = [json.loads(chat.attributes["gen_ai.input.messages"]) for chat in chats]
    assert [[m["role"] for m in messages] for messages in sent] == [
        ["user"], ["user", "assistant", "tool", "tool"], ["user", "assistant", "tool", "tool", "assistant", "user"],
    ]
    calls = [p for p in sent[2][1]["parts"] if p["type"] == "tool_call"]
    assert [(p["id"], p["name"], p["arguments"]) for p in calls] == [("c1", "echo", {"city": "Paris"}), ("c2", "echo", {"city": "Rome"})]
    assert [m["parts"][0]["id"] for m in sent[2][2:4]] == ["c1", "c2"] and sent[2][4]["parts"] == [{"type": "text", "content": "sunny"}]
    assert json.loads(chats[0].attributes["gen_ai.output.messages"])[0]["parts"] == sent[1][1]["parts"]


def test_a_key_made_live_after_its_message_was_first_recorded_is_masked_in_later_rounds(agents, traced):
    """A message recorded in one round is masked again in the next: a client made in between has its key masked there too."""
    key = "sk-test-made-mid-run-0123456789SECRET"
    clients = []

    def connect(tool_call_id, args, signal, on_partial_result):
        clients.append(OpenAIClient(base_url="http://127.0.0.1:9/v1", api_key=key, model="m"))  # its key is now a known secret
        return text_result("connected")

    llm = NamedLLM([tool_call_reply(("c1", "connect", {"key": key})), "done"])
    agent = agents(llm, [make_tool("connect", connect)], agent_event_sink=traced.sink(capture_content=True))
    ask(agent)
    shutdown(agent, timeout=WAIT)
    first, second = sorted(traced.named("chat test-model"), key=lambda s: s.start_time)
    assert key in first.attributes["gen_ai.output.messages"]  # recorded before any client held the key
    assert key not in second.attributes["gen_ai.input.messages"] and "***" in second.attributes["gen_ai.input.messages"]
    assert clients


def _parsed_or_text(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


@given(st.one_of(
    st.text(),
    st.tuples(st.sampled_from(["", " ", "\n\t", "\r "]), json_values.map(json.dumps), st.sampled_from(["", " ", "x"])).map("".join),
    st.sampled_from(["NaN", "-Infinity", "Infinity", "\ufeff[1]", "nope", "true", "tru", "-", "\"quoted\"", ""]),
))
def test_a_tool_result_is_recorded_parsed_when_its_text_is_json_and_as_text_otherwise(text):
    """gen_ai.tool.call.result holds what json.loads makes of the result's text, or the text itself where json.loads fails."""
    recorded = tool_result(text_result(text))
    assert recorded == json.dumps(_parsed_or_text(text), ensure_ascii=False, default=repr)


def test_a_run_started_inside_a_users_span_is_its_child(agents, traced):
    """run_agent called with a span current: the invoke_agent span is that span's child, in its trace."""
    agent = agents(NamedLLM(["hello"]), agent_event_sink=traced.sink())
    tracer = traced.provider.get_tracer("the caller")
    with tracer.start_as_current_span("web request") as request:
        run_agent(agent, "hi")
    take_response(agent, timeout=WAIT)
    shutdown(agent, timeout=WAIT)
    run = traced.one("invoke_agent")
    assert run.parent.span_id == request.get_span_context().span_id
    assert run.context.trace_id == request.get_span_context().trace_id


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_a_span_a_tool_starts_is_a_child_of_its_call_span(agents, traced, parallel):
    """A span started inside a tool's execute (an instrumented library) is a child of that call's execute_tool span."""
    tracer = traced.provider.get_tracer("a library")

    def traced_tool(tool_call_id, args, signal, on_partial_result):
        with tracer.start_as_current_span(f"inner work {tool_call_id}"):
            return text_result("ok")

    llm = NamedLLM([tool_call_reply(("c1", "work", {}), ("c2", "work", {})), "done"])
    tool = make_tool("work", traced_tool, parallel=parallel)
    agent = agents(llm, [tool], agent_event_sink=traced.sink(), parallel_tool_execute=parallel)
    ask(agent)
    shutdown(agent, timeout=WAIT)
    calls = {s.attributes["gen_ai.tool.call.id"]: s for s in traced.named("execute_tool work")}
    for call_id in ("c1", "c2"):
        assert traced.one(f"inner work {call_id}").parent.span_id == calls[call_id].context.span_id


def test_a_span_ended_below_another_made_current_leaves_neither_current(agents, traced):
    """Events out of order (a call starting inside a round that has not ended): the round's end makes neither its span nor the call's current."""
    recorder = EventRecorder()
    agent = agents(NamedLLM([tool_call_reply(("c1", "echo", {"city": "Paris"})), "done"]), [make_tool("echo")], agent_event_sink=recorder)
    ask(agent)
    shutdown(agent, timeout=WAIT)
    (start,), (end,) = recorder.of_type(AgentRunStartEvent), recorder.of_type(AgentRunEndEvent)
    round_start, round_end = recorder.of_type(LLMCallStartEvent)[0], recorder.of_type(LLMCallEndEvent)[0]
    (call_start,), (call_end,) = recorder.of_type(ToolExecStartEvent), recorder.of_type(ToolExecEndEvent)
    sink = traced.sink()
    outside = trace.get_current_span()
    sink(start)  # replayed in this thread: the sink makes the run's spans current here
    run_span = trace.get_current_span()
    sink(round_start)
    sink(call_start)
    assert trace.get_current_span().name == "execute_tool echo"
    sink(round_end)
    assert trace.get_current_span() is run_span
    sink(call_end)
    assert trace.get_current_span() is run_span
    sink(end)
    assert trace.get_current_span() is outside
    assert sorted(s.name for s in traced.spans()) == ["chat test-model", "execute_tool echo", "invoke_agent"]


def test_a_sink_that_raises_beside_the_tracer_does_not_stop_a_span(agents, traced):
    """tee(a raising sink, OTelSink): every span still starts and ends."""

    def raising(event):
        raise ValueError("broken printer")

    llm = NamedLLM([tool_call_reply(("c1", "echo", {})), "done"])
    agent = agents(llm, [make_tool("echo")], agent_event_sink=tee(raising, traced.sink()))
    assert ask(agent).stop_reason == "stop"
    shutdown(agent, timeout=WAIT)
    assert sorted(s.name for s in traced.spans()) == ["chat test-model", "chat test-model", "execute_tool echo", "invoke_agent"]


def test_a_span_processor_that_raises_does_not_break_the_run(agents, traced, caplog):
    """A span processor raising on every end is logged with its traceback; the run answers and its other processor sees every span."""

    class Raising(SimpleSpanProcessor):
        def on_end(self, span):
            raise OSError("collector unreachable")

    traced.provider.add_span_processor(Raising(InMemorySpanExporter()))
    agent = agents(NamedLLM([tool_call_reply(("c1", "echo", {})), "done"]), [make_tool("echo")], agent_event_sink=traced.sink())
    with caplog.at_level(logging.WARNING, logger="yiemagent.otel"):
        assert ask(agent).stop_reason == "stop"
        shutdown(agent, timeout=WAIT)
    assert len(traced.spans()) == 4
    logged = [r for r in caplog.records if r.name == "yiemagent.otel"]
    assert len(logged) == 4 and {r.getMessage() for r in logged} == {"a span processor raised while a span ended"}
    assert all(r.levelno == logging.WARNING and r.exc_info[0] is OSError for r in logged)


def test_a_dropped_agent_still_ends_its_runs_spans(traced):
    """An agent its caller dropped mid-run (collected, never shut down) still ends the call's span and the run's."""
    run_ended = threading.Event()

    class WatchRun(SimpleSpanProcessor):
        def on_end(self, span):
            if span.name == "invoke_agent":
                run_ended.set()

    traced.provider.add_span_processor(WatchRun(InMemorySpanExporter()))
    tool, entered, release = blocking_tool("slow")
    agent = make_agent(NamedLLM([tool_call_reply(("c1", "slow", {})), "done"]), tool, sink=traced.sink())
    run_agent(agent, "go")
    assert entered.wait(WAIT)
    with pytest.warns(ResourceWarning):
        del agent
        gc.collect()
    release.set()
    assert run_ended.wait(WAIT)
    assert {s.name for s in traced.spans()} >= {"invoke_agent", "execute_tool slow", "chat test-model"}


def test_an_agent_run_from_inside_a_tool_is_a_child_of_that_call(agents, traced):
    """A sub-agent a tool runs (sharing the sink) has its own invoke_agent span, a child of the tool's execute_tool span."""
    sink = traced.sink()

    def delegate(tool_call_id, args, signal, on_partial_result):
        inner = agents(NamedLLM(["inner answer"]), agent_event_sink=sink)
        return text_result(text_of(ask(inner, "sub-task").content))

    agent = agents(NamedLLM([tool_call_reply(("c1", "delegate", {})), "done"]), [make_tool("delegate", delegate)], agent_event_sink=sink)
    assert ask(agent).stop_reason == "stop"
    shutdown(agent, timeout=WAIT)
    outer, inner = sorted(traced.named("invoke_agent"), key=lambda s: s.start_time)
    call = traced.one("execute_tool delegate")
    assert inner.parent.span_id == call.context.span_id and call.parent.span_id == outer.context.span_id
    assert call.status.status_code is StatusCode.UNSET  # the sub-agent answered
    inner_chat = [c for c in traced.named("chat test-model") if c.parent.span_id == inner.context.span_id]
    assert len(inner_chat) == 1 and len(traced.named("chat test-model")) == 3


def test_a_streamed_round_says_so_with_its_time_to_first_chunk(agents, traced):
    """A round whose llm_call streams deltas has gen_ai.request.stream and the seconds to its first delta on its chat span."""

    def streaming(formatted):
        emit_delta("text", "hel")
        emit_delta("text", "lo")
        return AssistantMessage([TextContent("hello")], stop_reason="stop")

    agent = agents(NamedLLM([streaming]), agent_event_sink=traced.sink())
    ask(agent)
    shutdown(agent, timeout=WAIT)
    chat = traced.one("chat test-model")
    assert chat.attributes["gen_ai.request.stream"] is True
    assert 0 <= chat.attributes["gen_ai.response.time_to_first_chunk"] <= (chat.end_time - chat.start_time) / 1e9


def _specialist(answer: str, started: threading.Barrier | None = None):
    """A make_agent for agent_tool: a sub-agent whose model answers ``answer`` (after ``started``, when given)."""
    from yiemagent import YiemAgent

    def llm(formatted):
        if started is not None:
            started.wait()
        return AssistantMessage([TextContent(answer)], stop_reason="stop", model="sub-model")

    llm.model = "sub-model"
    return lambda: YiemAgent(llm_call=llm, agent_event_sink=None, builtin_tools=False)


def test_a_sub_agents_run_nests_in_the_call_that_ran_it(agents, traced):
    """agent_tool's sub-run is an invoke_agent span under the parent's execute_tool span, its own chat span under it."""
    from yiemagent import agent_tool

    helper = agent_tool(_specialist("sub answer"), name="helper", description="a helper")
    llm = NamedLLM([tool_call_reply(("c1", "helper", {"task": "do it"})), AssistantMessage([TextContent("done")], stop_reason="stop")])
    agent = agents(llm, [helper], agent_event_sink=traced.sink())
    assert ask(agent).stop_reason == "stop"
    shutdown(agent, timeout=WAIT)
    runs = traced.named("invoke_agent")
    parent = next(r for r in runs if r.parent is None)
    call = traced.one("execute_tool helper")
    sub = next(r for r in runs if r is not parent)
    assert call.parent.span_id == parent.context.span_id
    assert sub.parent.span_id == call.context.span_id and sub.context.trace_id == parent.context.trace_id
    sub_chats = [s for s in traced.spans() if s.name.startswith("chat") and s.parent.span_id == sub.context.span_id]
    assert len(sub_chats) == 1 and call.start_time <= sub.start_time <= sub.end_time <= call.end_time


def test_a_sub_agents_spans_capture_content_as_the_parents_sink_does(agents, traced):
    """A sink made with capture_content=True records the sub-agent's messages too (its sink is made like the parent's), and one without records none."""
    from yiemagent import agent_tool

    for capture in (True, False):
        traced.exporter.clear()
        helper = agent_tool(_specialist("sub answer"), name="helper", description="a helper")
        llm = NamedLLM([tool_call_reply(("c1", "helper", {"task": "do it"})), AssistantMessage([TextContent("done")], stop_reason="stop")])
        agent = agents(llm, [helper], agent_event_sink=traced.sink(capture_content=capture))
        assert ask(agent).stop_reason == "stop"
        shutdown(agent, timeout=WAIT)
        sub = next(r for r in traced.named("invoke_agent") if r.parent is not None)
        (sub_chat,) = [s for s in traced.spans() if s.name.startswith("chat") and s.parent.span_id == sub.context.span_id]
        recorded = sub_chat.attributes.get("gen_ai.output.messages")
        assert ("sub answer" in recorded) if capture else recorded is None, recorded


def test_parallel_sub_agents_each_nest_in_their_own_call(agents, traced):
    """Two sub-agents run at once (a Barrier in their models): each sub-run under the call that ran it."""
    from yiemagent import agent_tool

    both = threading.Barrier(2, timeout=WAIT)
    tools = [agent_tool(_specialist(name, both), name=name, description=name) for name in ("left", "right")]
    for one in tools:
        one.parallel_tool_execute = True
    llm = NamedLLM([tool_call_reply(("c1", "left", {"task": "a"}), ("c2", "right", {"task": "b"})), AssistantMessage([TextContent("done")], stop_reason="stop")])
    agent = agents(llm, tools, agent_event_sink=traced.sink(), parallel_tool_execute=True)
    assert ask(agent).stop_reason == "stop"
    shutdown(agent, timeout=WAIT)
    calls = {s.context.span_id: s.name for s in traced.spans() if s.name.startswith("execute_tool")}
    subs = [r for r in traced.named("invoke_agent") if r.parent is not None]
    assert sorted(calls[r.parent.span_id] for r in subs) == ["execute_tool left", "execute_tool right"]


def test_a_sub_run_its_call_outlived_has_its_spans_ended_as_abandoned(agents, traced, caplog):
    """agent_tool's timeout_s ends the call while the sub-agent's model still waits: the sub-run's spans end at that moment, marked abandoned, saying why."""
    from yiemagent import YiemAgent, agent_tool

    release = threading.Event()

    def stuck(formatted):
        release.wait(WAIT)
        return AssistantMessage([TextContent("late")], stop_reason="stop")

    helper = agent_tool(lambda: YiemAgent(llm_call=stuck, agent_event_sink=None, builtin_tools=False), name="helper", description="h", timeout_s=0.2)
    llm = NamedLLM([tool_call_reply(("c1", "helper", {"task": "x"})), AssistantMessage([TextContent("done")], stop_reason="stop")])
    agent = agents(llm, [helper], agent_event_sink=traced.sink())
    try:
        with caplog.at_level(logging.WARNING, logger="yiemagent.otel"):
            assert ask(agent).stop_reason == "stop"
    finally:
        release.set()
    shutdown(agent, timeout=WAIT)
    assert [r for r in caplog.records if r.name == "yiemagent.otel"] == []
    sub = next(r for r in traced.named("invoke_agent") if r.parent is not None)
    assert sub.status.status_code is StatusCode.ERROR and sub.attributes["error.type"] == "abandoned"
    assert sub.status.description == "the call that ran this sub-agent ended before its run did"
    (sub_chat,) = [s for s in traced.spans() if s.name.startswith("chat") and s.parent.span_id == sub.context.span_id]
    assert sub_chat.attributes["error.type"] == "abandoned" and sub_chat.end_time == sub.end_time  # ended together
    assert traced.one("execute_tool helper").status.status_code is StatusCode.ERROR


# --- events replayed by hand: exact times, attributes and statuses -----------------------

T0 = 1_700_000_000_000_000_000  # a time_ns: the replayed events happen at T0 + n microseconds


def at(micros: int) -> int:
    return T0 + micros * 1_000


def run_start(micros, run_id=1):
    return AgentRunStartEvent(run_id, 1, time_ns=at(micros))


def run_end(micros, stop_reason="stop", run_id=1, error_message=None, usage=None):
    from yiemagent import LLMUsage

    reply = AssistantMessage([TextContent("answer")], stop_reason=stop_reason, error_message=error_message)
    return AgentRunEndEvent(run_id, reply, 1, 0.0, usage or LLMUsage(), time_ns=at(micros))


def round_start(micros, round=1, model="gpt-test", provider="openai", run_id=1):
    return LLMCallStartEvent(run_id, round, 1, model, provider, None, time_ns=at(micros))


def round_end(micros, reply=None, round=1, run_id=1, error=None, error_type=None, usage=None):
    return LLMCallEndEvent(run_id, round, 0.0, reply, usage, error, error_type, time_ns=at(micros))


def call_start(micros, call_id="c1", name="echo"):
    return ToolExecStartEvent(call_id, name, {}, time_ns=at(micros))


def call_end(micros, call_id="c1", name="echo", text="ok", is_error=False):
    from yiemagent import AgentToolResult

    return ToolExecEndEvent(call_id, name, AgentToolResult([TextContent(text)]), is_error, time_ns=at(micros))


def replay(sink, *events):
    for event in events:
        sink(event)


def in_one_thread(sink, *events):
    """The events given to ``sink`` one after another in a new thread (a context of its own)."""
    thread = threading.Thread(target=replay, args=(sink, *events))
    thread.start()
    thread.join(WAIT)


def from_another_thread(sink, event):
    """``sink(event)`` in a thread of its own, outside the run's context (as a parallel call's end comes)."""
    thread = threading.Thread(target=sink, args=(event,))
    thread.start()
    thread.join(WAIT)


def test_replayed_events_give_spans_at_their_times_with_the_conventions_attributes(traced, caplog):
    """Each span starts and ends at its events' time_ns, carries exactly the attributes docs/tracing.md lists, and is current while open."""
    from importlib import metadata

    from yiemagent import LLMUsage

    sink = traced.sink()
    outside = trace.get_current_span()
    first = AssistantMessage([TextContent("checking")], stop_reason="tool_use", model="gpt-test-0613", usage=LLMUsage(10, 4, total_tokens=14))
    second = AssistantMessage([TextContent("done")], stop_reason="stop", model="gpt-test-0613", usage=LLMUsage(20, 6, total_tokens=26))
    with caplog.at_level(logging.WARNING):
        sink(run_start(1))
        run_span = trace.get_current_span()
        assert run_span is not outside
        replay(sink, round_start(2, provider="api.openai.com"), round_end(3, first, usage=first.usage))
        assert trace.get_current_span() is run_span
        sink(call_start(4))
        assert trace.get_current_span().name == "execute_tool echo"
        sink(call_end(5))
        assert trace.get_current_span() is run_span
        replay(sink, round_start(6, round=2, model="gpt-other"), round_end(7, second, round=2, usage=second.usage))
        sink(run_end(8, usage=LLMUsage(30, 10, total_tokens=40)))
        assert trace.get_current_span() is outside
    assert [r for r in caplog.records if r.name.startswith(("yiemagent", "opentelemetry"))] == []
    run = traced.one("invoke_agent")
    chat1, chat2 = sorted(traced.named("chat gpt-test") + traced.named("chat gpt-other"), key=lambda s: s.start_time)
    call = traced.one("execute_tool echo")
    assert [(s.start_time, s.end_time) for s in (run, chat1, call, chat2)] == [(at(1), at(8)), (at(2), at(3)), (at(4), at(5)), (at(6), at(7))]
    assert dict(run.attributes) == {
        "gen_ai.operation.name": "invoke_agent", "yiemagent.run.id": 1, "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test",
        "gen_ai.response.finish_reasons": ("stop",), "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 10,
    }
    assert dict(chat1.attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test", "gen_ai.response.model": "gpt-test-0613",
        "gen_ai.response.finish_reasons": ("tool_call",), "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 4,
    }
    assert dict(call.attributes) == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo", "gen_ai.tool.call.id": "c1", "gen_ai.tool.type": "function"}
    assert (run.kind, chat1.kind, call.kind) == (trace.SpanKind.INTERNAL, trace.SpanKind.CLIENT, trace.SpanKind.INTERNAL)
    assert all(s.status.status_code is StatusCode.UNSET for s in (run, chat1, call, chat2))
    try:
        version = metadata.version("yiemagent")
    except metadata.PackageNotFoundError:
        version = "0"
    assert {(s.instrumentation_scope.name, s.instrumentation_scope.version) for s in traced.spans()} == {("yiemagent", version)}


@pytest.mark.parametrize("asked, replied, api, expected", [
    ("api.openai.com", None, None, "openai"),  # the host the client called, in the conventions' words
    (None, "api.anthropic.com", None, "anthropic"),  # the reply tells, by its host
    ("openai", "someone-else", None, "openai"),  # the round's own provider comes first
    (None, "llama-box", "openai-chat", "openai"),  # an unknown server speaking OpenAI's API
    (None, "anthropic", None, "anthropic"),
    ("my-gateway", None, None, "my-gateway"),  # named, but not one the conventions know
    (None, None, None, "unknown"),
], ids=["host", "reply-host", "round-first", "api", "reply-name", "unknown-name", "nothing"])
def test_a_rounds_provider_is_named_from_its_client_else_its_reply(traced, asked, replied, api, expected):
    """gen_ai.provider.name on the chat span and the run: the client's provider or host, else the reply's, else its API's flavour, else "unknown"."""
    sink = traced.sink()
    reply = AssistantMessage([TextContent("hi")], stop_reason="stop", provider=replied, api=api)
    replay(sink, run_start(1), round_start(2, provider=asked), round_end(3, reply), run_end(4))
    assert traced.one("chat gpt-test").attributes["gen_ai.provider.name"] == expected
    assert traced.one("invoke_agent").attributes["gen_ai.provider.name"] == expected


@pytest.mark.parametrize("capture", [True, False], ids=["capture_content", "no-content"])
def test_a_round_and_a_run_that_failed_say_why_in_their_status(traced, capture):
    """A failure is error.type (the exception's type, "_OTHER" without one, "error" for a reply that says so, the run's stop reason); its description is the masked error message with capture_content, else a fixed text naming the cause."""
    key = "sk-test-in-an-error-0123456789SECRET"
    client = OpenAIClient(base_url="http://127.0.0.1:9/v1", api_key=key, model="m")
    sink = traced.sink(capture_content=capture)
    failed = AssistantMessage([], stop_reason="error", error_message="quota exceeded")
    bare = AssistantMessage([], stop_reason="error")
    replay(
        sink, run_start(1),
        round_start(2, round=1), round_end(3, round=1, error=f"refused with {key}"),
        round_start(4, round=2), round_end(5, failed, round=2),
        round_start(6, round=3), round_end(7, bare, round=3),
        round_start(8, round=4), round_end(9, round=4, error="LLM call failed: HTTP 400 echoing the prompt", error_type="LLMError"),
        run_end(10, "error", error_message=f"the model failed ({key})"),
    )
    chats = sorted(traced.named("chat gpt-test"), key=lambda s: s.start_time)
    run = traced.one("invoke_agent")
    got = [(span.attributes["error.type"], span.status.description) for span in chats + [run]]
    assert got == [
        ("_OTHER", "refused with ***" if capture else "the round failed: _OTHER"),
        ("error", "quota exceeded" if capture else "the reply's stop_reason is 'error'"),
        ("error", "the reply's stop_reason is 'error'"),
        ("LLMError", "LLM call failed: HTTP 400 echoing the prompt" if capture else "the round failed: LLMError"),
        ("error", "the model failed (***)" if capture else "the run ended with stop_reason 'error'"),
    ]
    assert all(span.status.status_code is StatusCode.ERROR for span in chats + [run])
    assert run.attributes["gen_ai.response.finish_reasons"] == ("error",)
    replay(sink, run_start(11, run_id=2), run_end(12, "max_rounds", run_id=2))
    stopped = max(traced.named("invoke_agent"), key=lambda s: s.start_time)
    assert stopped.status.status_code is StatusCode.ERROR
    assert (stopped.attributes["error.type"], stopped.status.description) == ("max_rounds", "the run ended with stop_reason 'max_rounds'")
    del client


def test_spans_whose_end_never_came_end_incomplete_at_the_next_round_or_the_runs_end(traced, caplog):
    """A round that never ended ends when the next starts (its late end changes nothing); a round or a call still open ends with the run; each marked "incomplete"."""
    sink = traced.sink()
    with caplog.at_level(logging.WARNING):
        replay(sink, run_start(1), round_start(2, round=1, provider="api.openai.com"), round_start(3, round=2, model=None))
        replay(sink, round_end(3, AssistantMessage([TextContent("late")], stop_reason="stop"), round=1), run_end(4))  # round 1's end, too late
        replay(sink, run_start(10, run_id=2), call_start(11), run_end(12, run_id=2))
    assert [r for r in caplog.records if r.name.startswith(("yiemagent", "opentelemetry"))] == []
    for run in traced.named("invoke_agent"):  # no round ended: nothing told the provider or the usage
        assert run.attributes["gen_ai.provider.name"] == "unknown" and not any(k.startswith("gen_ai.usage.") for k in run.attributes)
    first, second = traced.one("chat gpt-test"), traced.one("chat")
    call = traced.one("execute_tool echo")
    assert [(s.start_time, s.end_time) for s in (first, second, call)] == [(at(2), at(3)), (at(3), at(4)), (at(11), at(12))]
    for span in (first, second, call):
        assert span.status.status_code is StatusCode.ERROR and span.attributes["error.type"] == "incomplete"
        assert span.status.description == "the span's end event never came; it was ended when its run ended (incomplete)"
    assert first.attributes["gen_ai.provider.name"] == "openai"  # what its start said: its end never came
    assert second.attributes["gen_ai.operation.name"] == "chat" and "gen_ai.request.model" not in second.attributes


def test_a_call_id_started_again_ends_the_first_call_incomplete(traced):
    """A second start of the same call id before the first's end ends the first at that moment, marked "incomplete"."""
    sink = traced.sink()
    replay(sink, run_start(1), call_start(2), call_start(3), call_end(4), run_end(5))
    first, second = sorted(traced.named("execute_tool echo"), key=lambda s: s.start_time)
    assert (first.start_time, first.end_time, second.start_time, second.end_time) == (at(2), at(3), at(3), at(4))
    assert first.attributes["error.type"] == "incomplete"
    assert first.status.description == "a call with the same id started before this one ended"
    assert second.status.status_code is StatusCode.UNSET


def test_events_naming_another_run_do_not_touch_the_open_one(traced):
    """A round, a delta or an end naming a run that is not open is ignored: the open run's spans are as its own events made them."""
    from yiemagent.events import LLMDeltaEvent

    sink = traced.sink()
    replay(sink, run_start(1), round_start(2))
    replay(sink, round_start(3, run_id=7), LLMDeltaEvent(7, 1, "text", "x", time_ns=at(4)), round_end(5, run_id=7), run_end(6, "error", run_id=7))
    replay(sink, round_end(8, AssistantMessage([TextContent("hi")], stop_reason="stop")), run_end(9))
    chat, run = traced.one("chat gpt-test"), traced.one("invoke_agent")
    assert (chat.start_time, chat.end_time, run.end_time) == (at(2), at(8), at(9))
    assert "gen_ai.request.stream" not in chat.attributes and run.status.status_code is StatusCode.UNSET


def test_time_to_first_chunk_is_that_of_the_rounds_first_delta(traced):
    """gen_ai.response.time_to_first_chunk: seconds from the round's start to its first delta; later deltas and another round's leave it."""
    from yiemagent.events import LLMDeltaEvent

    sink = traced.sink()
    replay(
        sink, run_start(1), round_start(1_000),
        LLMDeltaEvent(1, 2, "text", "stale", time_ns=at(1_500)),  # another round's
        LLMDeltaEvent(1, 1, "text", "he", time_ns=at(1_001_000)),
        LLMDeltaEvent(1, 1, "text", "llo", time_ns=at(2_001_000)),
        round_end(3_000_000, AssistantMessage([TextContent("hello")], stop_reason="stop")), run_end(3_000_001),
    )
    chat = traced.one("chat gpt-test")
    assert chat.attributes["gen_ai.request.stream"] is True
    assert chat.attributes["gen_ai.response.time_to_first_chunk"] == 1.0


def test_a_call_span_ended_in_another_thread_stops_being_current_in_the_run_thread(traced):
    """A parallel call made current in the run thread but ended in its own: the run thread's next call or round leaves it, and the run's span is current again."""
    sink = traced.sink()
    outside = trace.get_current_span()
    sink(run_start(1))
    run_span = trace.get_current_span()
    sink(call_start(2, "c1"))
    from_another_thread(sink, call_end(3, "c1"))
    sink(call_start(4, "c2"))
    assert trace.get_current_span().attributes["gen_ai.tool.call.id"] == "c2"
    sink(call_end(5, "c2"))
    assert trace.get_current_span() is run_span
    sink(call_start(6, "c3"))
    from_another_thread(sink, call_end(7, "c3"))
    sink(round_start(8))
    assert trace.get_current_span().name == "chat gpt-test"
    sink(round_end(9, AssistantMessage([TextContent("done")], stop_reason="stop")))
    assert trace.get_current_span() is run_span
    sink(run_end(10))
    assert trace.get_current_span() is outside
    assert {s.name: s.end_time for s in traced.spans() if s.name == "invoke_agent"} == {"invoke_agent": at(10)}
    assert sorted((s.attributes["gen_ai.tool.call.id"], s.end_time) for s in traced.named("execute_tool echo")) == [("c1", at(3)), ("c2", at(5)), ("c3", at(7))]


def test_calls_made_outside_any_run_are_spans_of_their_own(traced, caplog):
    """execute_tool_calls called directly (no run open, or after the sink's run ended): each call is a root execute_tool span at its times."""
    sink = traced.sink()
    replay(sink, run_start(1), run_end(2))
    with caplog.at_level(logging.WARNING):
        replay(sink, call_start(3), call_end(4, is_error=True, text="no such city"), call_end(5, "c9"))  # c9 never started
    call = traced.one("execute_tool echo")
    assert call.parent is None and (call.start_time, call.end_time) == (at(3), at(4))
    assert (call.attributes["error.type"], call.status.description) == ("tool_error", "the call's result is an error: tool_error")  # its text is content
    assert [r for r in caplog.records if r.name.startswith("yiemagent")] == []


def test_a_failed_calls_error_text_is_its_status_description_with_capture_content(traced):
    """With capture_content=True a tool's error result is the call span's status description, masked."""
    key = "sk-test-tool-error-0123456789SECRET"
    client = OpenAIClient(base_url="http://127.0.0.1:9/v1", api_key=key, model="m")
    sink = traced.sink(capture_content=True)
    replay(sink, run_start(1), call_start(2), call_end(3, is_error=True, text=f"denied for {key}"), run_end(4))
    call = traced.one("execute_tool echo")
    assert (call.attributes["error.type"], call.status.description) == ("tool_error", "denied for ***")
    del client


def test_sub_agents_and_calls_are_found_by_their_call_whatever_context_their_events_come_in(traced, caplog):
    """With two runs open, each holding a call "c1": a sub-agent's events, in its run's context or in none, nest under the call that ran it; an end finds the run holding its call."""
    from yiemagent.events import SubAgentEvent

    sink = traced.sink()
    sub_run = [run_start(0), round_start(1), round_end(2, AssistantMessage([TextContent("sub")], stop_reason="stop")), run_end(3)]
    with caplog.at_level(logging.WARNING):
        sink(run_start(1))
        in_one_thread(sink, run_start(2, run_id=2), call_start(3, "c1", "other"))  # another run, in a thread of its own
        replay(sink, call_start(4, "c1", "helper"), call_start(5, "c7", "helper"))
        for event in sub_run:  # in the run's context
            sink(SubAgentEvent("c1", event))
        current = trace.get_current_span()  # a sub-agent's spans are never made current: the parent's call still is
        assert current.name == "execute_tool helper" and current.attributes["gen_ai.tool.call.id"] == "c7"
        for event in sub_run:  # in no run's context: found by the call
            from_another_thread(sink, SubAgentEvent("c7", event))
        replay(sink, call_start(6, "c2"), call_end(7, "c2"))  # a call ending while sub-agents' sinks are open
        replay(sink, call_end(8, "c7", "helper"), call_end(9, "c1", "helper"))
        replay(sink, call_end(10, "c1", "other"), run_end(11, run_id=2))  # the other run's call and run, their ends delivered here
        sink(run_end(12))
    assert [r for r in caplog.records if r.name.startswith(("yiemagent", "opentelemetry"))] == []
    outer, other = (next(r for r in traced.named("invoke_agent") if r.attributes["yiemagent.run.id"] == i and r.parent is None) for i in (1, 2))
    calls = {(s.name, s.attributes["gen_ai.tool.call.id"]): s for s in traced.spans() if s.name.startswith("execute_tool")}
    for key, parent, ended in [(("execute_tool helper", "c1"), outer, 9), (("execute_tool helper", "c7"), outer, 8),
                               (("execute_tool echo", "c2"), outer, 7), (("execute_tool other", "c1"), other, 10)]:
        assert calls[key].parent.span_id == parent.context.span_id and calls[key].end_time == at(ended), key
        assert calls[key].status.status_code is StatusCode.UNSET, key
    subs = [r for r in traced.named("invoke_agent") if r.parent is not None and r.parent.span_id != other.context.span_id]
    assert sorted(calls_by_id[0] for calls_by_id in [[k[1] for k, c in calls.items() if c.context.span_id == r.parent.span_id] for r in subs]) == ["c1", "c7"]
    for sub in subs:
        (chat,) = [c for c in traced.named("chat gpt-test") if c.parent.span_id == sub.context.span_id]
        assert (sub.start_time, sub.end_time, chat.start_time, chat.end_time) == (at(0), at(3), at(1), at(2))


class _BrokenSpan(trace.NonRecordingSpan):
    """A span of a tracing backend that raises when given attributes or a status (it still ends)."""

    def __init__(self, ended: list):
        super().__init__(trace.INVALID_SPAN_CONTEXT)
        self._ended = ended

    def set_attribute(self, key, value):
        raise OSError("the backend refused an attribute")

    def set_attributes(self, attributes):
        raise OSError("the backend refused attributes")

    def end(self, end_time=None):
        self._ended.append(end_time)


class _BrokenProvider(trace.TracerProvider):
    def __init__(self):
        self.ended: list = []

    def get_tracer(self, *args, **kwargs):
        provider = self

        class Tracer(trace.Tracer):
            def start_span(self, name, context=None, kind=trace.SpanKind.INTERNAL, attributes=None, links=None, start_time=None, **kw):
                return _BrokenSpan(provider.ended)

            def start_as_current_span(self, *args, **kwargs):  # not used by the sink
                raise NotImplementedError

        return Tracer()


def test_a_backend_that_raises_is_logged_and_every_span_still_ends(caplog):
    """Spans that raise on set_attribute(s): each failure is a yiemagent.otel warning with its traceback, and every span still ends at its time."""
    provider = _BrokenProvider()
    sink = OTelSink(provider)
    with caplog.at_level(logging.WARNING, logger="yiemagent.otel"):
        replay(sink, run_start(1), round_start(2), round_end(3, AssistantMessage([TextContent("hi")], stop_reason="stop")))
        replay(sink, call_start(4), call_end(5, is_error=True), run_end(6))
    assert provider.ended == [at(3), at(5), at(6)]
    logged = [(r.getMessage(), r.exc_info[0] if r.exc_info else None) for r in caplog.records if r.name == "yiemagent.otel"]
    assert logged == [
        ("OTelSink could not record a LLMCallEndEvent; the run's spans still end", OSError),
        ("could not mark a span failed", OSError),
        ("OTelSink could not record a AgentRunEndEvent; the run's spans still end", OSError),
    ]


def test_one_sink_serving_two_agents_at_once_keeps_each_runs_spans_apart(agents, traced):
    """Two agents' runs open together, each with a call "c1" open at once, recorded by the same sinks: each call under its own run, every span ended by its own event."""
    other = Traced()
    sinks = tee(traced.sink(), other.sink())
    both = threading.Barrier(2, timeout=WAIT)
    first_done = threading.Event()

    def meet(tool_call_id, args, signal, on_partial_result):
        both.wait()
        if args.get("wait"):
            first_done.wait(WAIT)  # the second run's call stays open while the first run ends
        return text_result("met")

    runs_open = threading.Barrier(2, timeout=WAIT)

    def both_runs_open(wait):
        def call(formatted):
            runs_open.wait()  # neither call starts before both runs are open
            return tool_call_reply(("c1", "meet", {"wait": wait}))
        return call

    made = {}
    for name, wait in (("first", False), ("second", True)):
        llm = NamedLLM([both_runs_open(wait), f"{name} done"])
        made[name] = agents(llm, [make_tool("meet", meet)], agent_event_sink=sinks)
        run_agent(made[name], name)
    assert take_response(made["first"], timeout=WAIT).stop_reason == "stop"
    first_done.set()
    assert take_response(made["second"], timeout=WAIT).stop_reason == "stop"
    for agent in made.values():
        shutdown(agent, timeout=WAIT)
    for recorded in (traced, other):
        runs = recorded.named("invoke_agent")
        calls = recorded.named("execute_tool meet")
        assert len(runs) == 2 and len(calls) == 2
        assert sorted(c.parent.span_id for c in calls) == sorted(r.context.span_id for r in runs)
        assert all(s.status.status_code is StatusCode.UNSET for s in recorded.spans()), [(s.name, s.attributes.get("error.type")) for s in recorded.spans()]
