"""`make bench`: what tracing costs a run (docs/tracing.md "What it costs").

W1 is the workload of a tool-calling run: run_agent -> one round of ``CALLS`` sequential
no-op tool calls -> a final answer -> take_response, with an instant model, so that what
is measured is the agent's own work per tool call (each call is a PREPARE / EXECUTE /
FINALIZE pass and its start and end events; the run adds its two LLM rounds). The same
run is timed with tracing off (a no-op sink) and on: an ``OTelSink`` on the SDK's
``TracerProvider`` with a ``BatchSpanProcessor`` (as a real exporter is set up; spans are
handed to an exporter that drops them, so the export itself, which runs on the SDK's own
thread, is not counted), then with ``capture_content=True``, then with the SDK's
synchronous ``SimpleSpanProcessor``; and, to show where the time goes, with the API alone
(no SDK: the sink's own work), with ``BareSpans`` (the same spans with the same attributes
made from the same events by a sink that does nothing else: the SDK's part inside a run,
the floor of any sink that records them), and the SDK's cost of the same number of spans
in a tight loop outside any run (measured 2-2.5x less than the same spans inside a run,
made one at a time between the run's steps; most likely the run's own work between them
leaves the SDK's code and data out of the CPU's caches). The goal: tracing on costs at
most 1.5x W1's time per call with tracing off. Each figure is the median of the runs, the configurations taking
turns run by run; nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any, Optional

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider, SpanKind, set_span_in_context
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from localserver import LocalServer, Reply, Request  # noqa: E402  the tests' real http.server

from yiemagent import AgentTool, AgentToolResult, AssistantMessage, TextContent, ToolStore, YiemAgent, register_tool, run_agent, shutdown, take_response
from yiemagent.events import AgentRunEndEvent, AgentRunStartEvent, LLMCallEndEvent, LLMCallStartEvent, ToolExecEndEvent, ToolExecStartEvent
from yiemagent.llm import OpenAIClient
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.otel import OTelSink

CALLS = 10
RUNS = 300
RESULT = AgentToolResult([TextContent("ok")])
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class Dropping(SpanExporter):
    """An exporter that takes each batch and keeps nothing (the export is not what is measured)."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class InstantModel:
    """Asks for ``CALLS`` tool calls, then answers; no time of its own."""

    model = "bench-model"
    provider = "openai"

    def __init__(self) -> None:
        self.calls = tool_call_reply(*[(f"c{i}", "noop", {"city": "Tokyo"}) for i in range(CALLS)])
        self.answer = AssistantMessage([TextContent("done")], stop_reason="stop")

    def __call__(self, formatted: dict) -> AssistantMessage:
        last = formatted["messages"][-1]
        return self.answer if last.get("role") == "tool" else self.calls


class BareSpans:
    """The SDK's part alone: W1's 13 spans, with the attributes ``OTelSink`` gives them, nested, at the events' times.

    A sink that does nothing else (no run lookup, no lock, no span made current, no
    failure handling), so the difference between it and ``OTelSink`` is the sink's own work.
    """

    def __init__(self, provider: TracerProvider) -> None:
        self.tracer = provider.get_tracer("bench")
        self.run: Any = None
        self.parent: Any = None
        self.chat: Any = None
        self.tools: dict[str, Any] = {}

    def __call__(self, event: Any) -> None:
        kind = type(event)
        if kind is ToolExecStartEvent:
            self.tools[event.tool_call_id] = self.tracer.start_span(
                f"execute_tool {event.tool_name}", context=self.parent, start_time=event.time_ns,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool_name,
                            "gen_ai.tool.call.id": event.tool_call_id, "gen_ai.tool.type": "function"})
        elif kind is ToolExecEndEvent:
            self.tools.pop(event.tool_call_id).end(end_time=event.time_ns)
        elif kind is LLMCallStartEvent:
            self.chat = self.tracer.start_span(
                f"chat {event.model}", context=self.parent, kind=SpanKind.CLIENT, start_time=event.time_ns,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": event.model})
        elif kind is LLMCallEndEvent:
            reply = event.response
            attributes = {"gen_ai.response.finish_reasons": ("tool_call" if reply.stop_reason == "tool_use" else "stop",), "gen_ai.provider.name": "openai"}
            if reply.model:
                attributes["gen_ai.response.model"] = reply.model
            self.chat.set_attributes(attributes)
            self.chat.end(end_time=event.time_ns)
        elif kind is AgentRunStartEvent:
            self.run = self.tracer.start_span(
                "invoke_agent", start_time=event.time_ns, attributes={"gen_ai.operation.name": "invoke_agent", "yiemagent.run.id": event.run_id})
            self.parent = set_span_in_context(self.run)
        elif kind is AgentRunEndEvent:
            self.run.set_attributes({"gen_ai.provider.name": "openai", "gen_ai.response.finish_reasons": ("stop",), "gen_ai.request.model": "bench-model"})
            self.run.end(end_time=event.time_ns)


def per_call_us(sinks: dict[str, Optional[Callable[[Any], None]]], model: Callable[[], Any] = InstantModel) -> dict[str, float]:
    """W1 with each of ``sinks``: the median time of one run, per tool call, in microseconds.

    The sinks take turns run by run, so a machine that gets busier or quieter while the
    benchmark runs weighs on every figure alike and the ratios stay fair. ``model()``
    makes each run's ``llm_call``.
    """
    store = ToolStore("bench")
    register_tool(store, AgentTool("noop", "No-op", "does nothing", SCHEMA, lambda i, a, s, p: RESULT))
    timings: dict[str, list[float]] = {name: [] for name in sinks}
    for _ in range(RUNS):
        for name, sink in sinks.items():
            # a fresh agent and history each run, so every run is the same size
            agent = YiemAgent(llm_call=model(), agent_event_sink=sink, tool_store=store, builtin_tools=False)
            start = time.perf_counter()
            run_agent(agent, "go")
            take_response(agent, timeout=30)
            timings[name].append(time.perf_counter() - start)
            shutdown(agent, timeout=30)
    return {name: statistics.median(values) / CALLS * 1e6 for name, values in timings.items()}


def main() -> None:
    batch = TracerProvider()
    batch.add_span_processor(BatchSpanProcessor(Dropping(), max_queue_size=1 << 16))
    simple = TracerProvider()
    simple.add_span_processor(SimpleSpanProcessor(Dropping()))
    off = "tracing off (no-op sink)"
    sinks = {
        off: lambda event: None,
        "OTelSink, API only (no SDK)": OTelSink(NoOpTracerProvider()),
        "OTelSink, BatchSpanProcessor": OTelSink(batch),
        "OTelSink, capture_content=True": OTelSink(batch, capture_content=True),
        "OTelSink, SimpleSpanProcessor": OTelSink(simple),
        "the same spans, bare (SDK's part)": BareSpans(batch),
    }
    per_call_us({off: sinks[off]})  # warm up: imports, caches, the first threads
    figures = per_call_us(sinks)
    print(f"tracing overhead, W1: a run of {CALLS} sequential no-op tool calls and 2 instant LLM rounds ({RUNS} runs each, median):")
    print(f"  {off:32s} {figures[off]:7.1f} us per call")
    for name, value in figures.items():
        if name != off:
            print(f"  {name:32s} {value:7.1f} us per call = {value / figures[off]:4.2f}x   goal <= 1.50x")
    over_http(batch, off)
    tracer = batch.get_tracer("bench")
    spans = 1 + 2 + CALLS  # invoke_agent, two chat rounds, the calls
    sdk = min(_time(lambda: [tracer.start_span("s", attributes={"a": "b", "c": "d"}).end() for _ in range(spans)]) for _ in range(RUNS))
    print(f"  the SDK alone, outside a run: {spans} spans started and ended in a tight loop (fastest of {RUNS}), {sdk / CALLS * 1e6:7.1f} us per call")
    batch.shutdown()
    simple.shutdown()


def over_http(batch: TracerProvider, off: str) -> None:
    """W1 with the model behind a real HTTP server on 127.0.0.1 (``OpenAIClient``), for scale:
    the same run as a user's, whose model is never instant. Not the goal's figure."""
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "noop", "arguments": '{"city": "Tokyo"}'}} for i in range(CALLS)]
    asking = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": calls}, "finish_reason": "tool_calls"}]}
    answering = {"choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}

    def reply(request: Request) -> Reply:
        return Reply(body=answering if request.json()["messages"][-1]["role"] == "tool" else asking)

    with LocalServer(reply) as server:
        client = OpenAIClient(server.url, "bench-model", api_key="sk-bench-0123456789abcdefghij", max_retries=0)
        figures = per_call_us({off: lambda event: None, "OTelSink, BatchSpanProcessor": OTelSink(batch)}, lambda: client)
    value = figures["OTelSink, BatchSpanProcessor"]
    print(f"  W1 with the model over HTTP on 127.0.0.1 (for scale, not the goal's figure): off {figures[off]:.1f} us, "
          f"OTelSink {value:.1f} us per call = {value / figures[off]:4.2f}x")


def _time(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
