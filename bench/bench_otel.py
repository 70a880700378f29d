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
(no SDK: the sink's own work) and the SDK's cost of the same number of spans without the
agent. The goal: tracing on costs at most 1.5x W1's time per
call with tracing off. Each figure is the median of the runs, the configurations taking
turns run by run; nothing is asserted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Optional

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

from yiemagent import AgentTool, AgentToolResult, AssistantMessage, TextContent, ToolStore, YiemAgent, register_tool, run_agent, shutdown, take_response
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


def per_call_us(sinks: dict[str, Optional[Callable[[Any], None]]]) -> dict[str, float]:
    """W1 with each of ``sinks``: the median time of one run, per tool call, in microseconds.

    The sinks take turns run by run, so a machine that gets busier or quieter while the
    benchmark runs weighs on every figure alike and the ratios stay fair.
    """
    store = ToolStore("bench")
    register_tool(store, AgentTool("noop", "No-op", "does nothing", SCHEMA, lambda i, a, s, p: RESULT))
    timings: dict[str, list[float]] = {name: [] for name in sinks}
    for _ in range(RUNS):
        for name, sink in sinks.items():
            # a fresh agent and history each run, so every run is the same size
            agent = YiemAgent(llm_call=InstantModel(), agent_event_sink=sink, tool_store=store, builtin_tools=False)
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
    }
    per_call_us({off: sinks[off]})  # warm up: imports, caches, the first threads
    figures = per_call_us(sinks)
    print(f"tracing overhead, W1: a run of {CALLS} sequential no-op tool calls and 2 instant LLM rounds ({RUNS} runs each, median):")
    print(f"  {off:32s} {figures[off]:7.1f} us per call")
    for name, value in figures.items():
        if name != off:
            print(f"  {name:32s} {value:7.1f} us per call = {value / figures[off]:4.2f}x   goal <= 1.50x")
    tracer = batch.get_tracer("bench")
    spans = 1 + 2 + CALLS  # invoke_agent, two chat rounds, the calls
    sdk = min(_time(lambda: [tracer.start_span("s", attributes={"a": "b", "c": "d"}).end() for _ in range(spans)]) for _ in range(RUNS))
    print(f"  of which the SDK alone: {spans} spans started and ended, {sdk / CALLS * 1e6:7.1f} us per call")
    batch.shutdown()
    simple.shutdown()


def _time(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
