"""OTelSink against hostile input: no text the model, a tool or the user wrote reaches a span without capture_content (docs/tracing.md)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.trace import StatusCode

from helpers import WAIT, make_agent, make_tool, text_result
from otel_support import NamedLLM, Traced
from yiemagent import UsageLimits, abort, ask, shutdown
from yiemagent.llm.scripted import tool_call_reply

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
        return [ask(agent, text, timeout=WAIT).stop_reason for _ in range(4)]
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
    assert ask(agent, "go", timeout=WAIT).stop_reason == "usage_limit"
    shutdown(agent, timeout=WAIT)
    run = traced.one("invoke_agent")
    assert run.status.status_code is StatusCode.ERROR and run.attributes["error.type"] == "usage_limit"
    assert run.status.description == "the run ended with stop_reason 'usage_limit'"
    assert run.attributes["gen_ai.response.finish_reasons"] == ("usage_limit",)

