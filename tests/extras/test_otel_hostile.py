"""OTelSink against hostile input and a hostile SDK: no content without capture_content, every span ends (docs/tracing.md)."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler
from opentelemetry.trace import StatusCode

from helpers import WAIT, make_agent, make_tool, text_result
from otel_support import NamedLLM, Traced
from yiemagent import UsageLimits, abort, ask, shutdown
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.otel._spans import start_span

MARK = "\u27e6content\u27e7"  # begins every text the model, a tool or the user writes here: no span may hold it
contents = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).map(lambda text: MARK + text)


def span_texts(span) -> list[str]:
    """Every text a span carries: its name, attribute values, status description, events and links."""
    texts = [span.name, span.status.description or ""] + [str(value) for value in span.attributes.values()]
    for event in span.events:
        texts += [event.name] + [str(value) for value in event.attributes.values()]
    for link in span.links:
        texts += [str(value) for value in (link.attributes or {}).values()]
    return texts


def hostile_runs(traced: Traced, text: str, *, capture_content: bool) -> list[str]:
    """Four runs whose every text is ``text``: user input, arguments, a tool's error, an answer output_type refuses, llm_call's error, an unknown tool's name, an abort's reason; their stop reasons."""
    holder = []

    def fails(*args):
        raise RuntimeError(text)

    def stops(*args):
        abort(holder[0], text)
        return text_result("stopped")

    script = [
        tool_call_reply(("c1", "echo", {"text": text}), ("c2", "fails", {})), json.dumps(text),  # run 1: output_invalid
        RuntimeError(text),  # run 2: llm_call raises
        tool_call_reply(("c3", text, {"text": text})), "7",  # run 3: a tool the model made up
        tool_call_reply(("c4", "stops", {})),  # run 4: aborted, the reason given
    ]
    tools = [make_tool("echo"), make_tool("fails", fails), make_tool("stops", stops)]
    agent = make_agent(NamedLLM(script), *tools, builtin_tools=False, sink=traced.sink(capture_content=capture_content),
                       output_type=int, output_retries=0)
    holder.append(agent)
    try:
        return [ask(agent, text, timeout=WAIT, check=False).stop_reason for _ in range(4)]
    finally:
        shutdown(agent, timeout=WAIT)


@settings(max_examples=25)
@given(contents)
def test_without_capture_content_no_span_holds_what_the_model_a_tool_or_the_user_wrote(text):
    """capture_content=False: whatever the texts of a run, no span's name, attributes, status or events hold them, its failures named by error.type."""
    traced = Traced()
    assert hostile_runs(traced, text, capture_content=False) == ["output_invalid", "error", "stop", "aborted"]
    spans = traced.spans()
    assert len(spans) == 4 + 6 + 4  # runs, rounds, calls
    for span in spans:
        assert not any(MARK in field for field in span_texts(span)), (span.name, span_texts(span))
    runs = sorted(traced.named("invoke_agent"), key=lambda s: s.start_time)
    assert [(s.attributes.get("error.type"), s.status.description) for s in runs] == [
        ("output_invalid", "the run ended with stop_reason 'output_invalid'"),
        ("error", "the run ended with stop_reason 'error'"),
        (None, None),
        ("aborted", "the run ended with stop_reason 'aborted'"),
    ]
    made_up = traced.one("execute_tool")  # the unknown tool's call, its name left out
    assert "gen_ai.tool.name" not in made_up.attributes and made_up.attributes["error.type"] == "tool_error"


def test_with_capture_content_the_failures_say_what_the_model_and_tools_wrote():
    """capture_content=True keeps the content: the refused answer, the tool's error and an unknown tool's name reach their spans."""
    traced = Traced()
    text = MARK + " forty-two"
    assert hostile_runs(traced, text, capture_content=True) == ["output_invalid", "error", "stop", "aborted"]
    first, failed, _, aborted = sorted(traced.named("invoke_agent"), key=lambda s: s.start_time)
    assert text in first.status.description and first.attributes["error.type"] == "output_invalid"
    assert text in failed.status.description and text in aborted.status.description
    assert text in traced.one("execute_tool fails").status.description
    assert traced.one(f"execute_tool {text}").attributes["gen_ai.tool.name"] == text


def test_a_run_stopped_by_a_usage_limit_is_an_error_span(agents):
    """A run that passes its UsageLimits ends its invoke_agent span with status ERROR and error.type "usage_limit"."""
    traced = Traced()
    llm = NamedLLM([tool_call_reply(("c1", "echo", {}), ("c2", "echo", {}))])
    agent = agents(llm, [make_tool("echo")], agent_event_sink=traced.sink(), usage_limits=UsageLimits(max_tool_calls=1))
    assert ask(agent, "go", timeout=WAIT, check=False).stop_reason == "usage_limit"
    shutdown(agent, timeout=WAIT)
    run = traced.one("invoke_agent")
    assert run.status.status_code is StatusCode.ERROR and run.attributes["error.type"] == "usage_limit"
    assert run.status.description == "the run ended with stop_reason 'usage_limit'"
    assert run.attributes["gen_ai.response.finish_reasons"] == ("usage_limit",)


# --- an SDK that raises: every span still ends ---------------------------------------------


class StartRaises(SpanProcessor):
    """A span processor whose on_start raises, on every span or on those whose name starts with ``only``."""

    def __init__(self, only: str = ""):
        self.only = only

    def on_start(self, span, parent_context=None):
        if span.name.startswith(self.only):
            raise OSError("the processor is down")


class Seen(SpanProcessor):
    """A span processor that notes the spans it saw start and end."""

    def __init__(self):
        self.started, self.ended = [], []

    def on_start(self, span, parent_context=None):
        self.started.append(span.context.span_id)

    def on_end(self, span):
        self.ended.append(span.context.span_id)


class SamplerRaises(Sampler):
    """A sampler that raises for spans named ``name``: the SDK makes no span at all."""

    def __init__(self, name: str):
        self.name = name

    def should_sample(self, parent_context, trace_id, name, *args, **kwargs):
        if name == self.name:
            raise OSError("the sampler is down")
        return ALWAYS_ON.should_sample(parent_context, trace_id, name, *args, **kwargs)

    def get_description(self):
        return "SamplerRaises"


def run_with_a_call(traced: Traced, agents, caplog):
    """One run of a call and an answer, traced by a sink of its own; the sink, and the yiemagent.otel records it logged."""
    sink = traced.sink()
    agent = agents(NamedLLM([tool_call_reply(("c1", "echo", {})), "done"]), [make_tool("echo")], agent_event_sink=sink)
    with caplog.at_level(logging.WARNING, logger="yiemagent.otel"):
        assert ask(agent, "go", timeout=WAIT).stop_reason == "stop"
        shutdown(agent, timeout=WAIT)
    return sink, [r for r in caplog.records if r.name == "yiemagent.otel"]


@pytest.mark.parametrize("only", ["", "invoke_agent", "chat", "execute_tool"], ids=["every-span", "run", "rounds", "calls"])
def test_a_processor_raising_in_on_start_leaves_no_span_open(agents, caplog, only):
    """A span processor raising in on_start is logged; every span still starts, nests and ends, and the sink holds no run."""
    traced = Traced()
    seen = Seen()
    traced.provider.add_span_processor(seen)
    traced.provider.add_span_processor(StartRaises(only))
    sink, logged = run_with_a_call(traced, agents, caplog)
    spans = traced.spans()
    assert sorted(s.name for s in spans) == ["chat test-model", "chat test-model", "execute_tool echo", "invoke_agent"]
    run = traced.one("invoke_agent")
    assert all(s.parent.span_id == run.context.span_id for s in spans if s is not run)
    assert sorted(seen.started) == sorted(seen.ended) == sorted(s.context.span_id for s in spans)
    assert [r.getMessage() for r in logged] == ["the tracing SDK raised while a span started"] * sum(s.name.startswith(only) for s in spans)
    assert all(r.exc_info[0] is OSError for r in logged)
    assert not sink._open


def test_a_run_whose_span_the_sdk_could_not_make_still_traces_its_rounds_and_calls(agents, caplog):
    """A sampler raising for invoke_agent: the run goes on, its rounds and calls are spans under the caller's span, and the sink holds no run."""
    traced = Traced(sampler=SamplerRaises("invoke_agent"))
    with trace.get_tracer("test", tracer_provider=traced.provider).start_as_current_span("request") as request:
        sink, logged = run_with_a_call(traced, agents, caplog)
    spans = traced.spans()
    assert sorted(s.name for s in spans) == ["chat test-model", "chat test-model", "execute_tool echo", "request"]
    assert all(s.parent.span_id == request.get_span_context().span_id for s in spans if s.name != "request")
    assert [r.getMessage() for r in logged] == ["the tracing SDK raised while a span started"]
    assert not sink._open


def test_a_span_the_sdk_could_not_make_stands_in_under_the_parent_it_was_given():
    """start_span, when the sampler raises, returns a non-recording span carrying the parent context it was given,
    not the thread's current span's, so a run's rounds and calls stay under that parent (docs/tracing.md "Every span ends")."""
    traced = Traced(sampler=SamplerRaises("x"))
    tracer = trace.get_tracer("test", tracer_provider=traced.provider)
    with tracer.start_as_current_span("current"):
        parent = tracer.start_span("parent")
        made = start_span(tracer, "x", trace.set_span_in_context(parent))
    parent.end()
    assert not made.is_recording() and made.get_span_context() == parent.get_span_context()
