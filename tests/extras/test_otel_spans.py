"""OTelSink: a run's events as GenAI semantic-convention spans, read back from the SDK's in-memory exporter (docs/tracing.md)."""

from __future__ import annotations

import gc
import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from helpers import WAIT, EventRecorder, blocking_tool, make_agent, make_tool, text_result
from strategies import json_values
from yiemagent.events import AgentRunEndEvent, AgentRunStartEvent, LLMCallEndEvent, LLMCallStartEvent, ToolExecEndEvent, ToolExecStartEvent
from yiemagent import AssistantMessage, TextContent, abort, run_agent, shutdown, take_response, tee
from yiemagent.llm import OpenAIClient, ScriptedLLM
from yiemagent.types import text_of
from yiemagent.streaming import emit_delta
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.otel import OTelSink
from yiemagent.otel._content import tool_result


class Traced:
    """A tracer provider of its own whose ended spans land in memory."""

    def __init__(self):
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def sink(self, **kwargs) -> OTelSink:
        return OTelSink(self.provider, **kwargs)

    def spans(self) -> list:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str):
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]


class NamedLLM(ScriptedLLM):
    """ScriptedLLM that says which model and provider it is, as the HTTP clients do."""

    model = "test-model"
    provider = "openai"


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


def test_a_span_processor_that_raises_does_not_break_the_run(agents, traced):
    """A span processor raising on every end is logged; the run answers and its other processor sees every span."""

    class Raising(SimpleSpanProcessor):
        def on_end(self, span):
            raise OSError("collector unreachable")

    traced.provider.add_span_processor(Raising(InMemorySpanExporter()))
    agent = agents(NamedLLM([tool_call_reply(("c1", "echo", {})), "done"]), [make_tool("echo")], agent_event_sink=traced.sink())
    assert ask(agent).stop_reason == "stop"
    shutdown(agent, timeout=WAIT)
    assert len(traced.spans()) == 4


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


def test_a_sub_run_its_call_outlived_has_its_spans_ended_as_abandoned(agents, traced):
    """agent_tool's timeout_s ends the call while the sub-agent's model still waits: the sub-run's spans end, marked abandoned."""
    from yiemagent import YiemAgent, agent_tool

    release = threading.Event()

    def stuck(formatted):
        release.wait(WAIT)
        return AssistantMessage([TextContent("late")], stop_reason="stop")

    helper = agent_tool(lambda: YiemAgent(llm_call=stuck, agent_event_sink=None, builtin_tools=False), name="helper", description="h", timeout_s=0.2)
    llm = NamedLLM([tool_call_reply(("c1", "helper", {"task": "x"})), AssistantMessage([TextContent("done")], stop_reason="stop")])
    agent = agents(llm, [helper], agent_event_sink=traced.sink())
    try:
        assert ask(agent).stop_reason == "stop"
    finally:
        release.set()
    shutdown(agent, timeout=WAIT)
    sub = next(r for r in traced.named("invoke_agent") if r.parent is not None)
    assert sub.status.status_code is StatusCode.ERROR and sub.attributes["error.type"] == "abandoned"
    assert traced.one("execute_tool helper").status.status_code is StatusCode.ERROR
