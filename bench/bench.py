"""`make bench`: the performance figures docs/performance.md sets goals for, measured on this machine in one run.

Each figure is printed beside its goal. Nothing here is asserted: a benchmark informs, the
test suite proves behaviour.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from yiemagent import (
    AgentContext,
    AgentLoopConfig,
    AgentTool,
    AgentToolCall,
    AgentToolResult,
    AssistantMessage,
    TextContent,
    ToolStore,
    UserMessage,
    YiemAgent,
    execute_tool_calls_parallel,
    execute_tool_calls_sequential,
    register_tool,
    run_agent,
    take_response,
)
from yiemagent.pipeline import compiled_validator

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
RESULT = AgentToolResult([TextContent("ok")])
ASSISTANT = AssistantMessage([TextContent("bench")])


def best_of(repeats: int, run: Callable[[], None]) -> float:
    """The fastest of ``repeats`` timings of ``run``, in seconds (the least disturbed by the machine)."""
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    return min(timings)


def context_of(*tools: AgentTool) -> AgentContext:
    store = ToolStore("bench")
    for tool in tools:
        register_tool(store, tool)
    return AgentContext("bench", [], store.tools)


def bench_pipeline(calls: int = 100, repeats: int = 200) -> None:
    """Sequential pipeline per call vs jsonschema alone on the same arguments."""
    noop = AgentTool("noop", "No-op", "does nothing", SCHEMA, lambda i, a, s, p: RESULT)
    ctx = context_of(noop)
    batch = [AgentToolCall(f"c{i}", "noop", {"city": "Tokyo"}) for i in range(calls)]
    config = AgentLoopConfig()
    sink = lambda event: None  # noqa: E731  a no-op sink: events are built and delivered
    pipeline_s = best_of(repeats, lambda: execute_tool_calls_sequential(ctx, ASSISTANT, batch, config, None, sink))
    validator = compiled_validator(SCHEMA)
    args = [c.arguments for c in batch]

    def validate_only() -> None:
        for a in args:
            for _ in validator.iter_errors(a):
                pass

    validation_s = best_of(repeats, validate_only)
    per_call = pipeline_s / calls * 1e6
    floor = validation_s / calls * 1e6
    print(f"sequential pipeline, {calls} no-op calls, full validation, events to a no-op sink:")
    print(f"  pipeline per call          {per_call:7.2f} us")
    print(f"  jsonschema alone per call  {floor:7.2f} us   (the floor)")
    print(f"  pipeline overhead          {per_call - floor:7.2f} us   goal <= 10 us")


def bench_parallel(width: int = 32, sleep_s: float = 0.1, repeats: int = 5) -> None:
    """Wall time of a parallel batch of sleeping tools, divided by one sleep."""

    def sleeper(tool_call_id, args, signal, on_partial_result):
        time.sleep(sleep_s)
        return RESULT

    tool = AgentTool("sleep", "Sleep", "sleeps", {"type": "object"}, sleeper, parallel_tool_execute=True)
    ctx = context_of(tool)
    batch = [AgentToolCall(f"c{i}", "sleep", {}) for i in range(width)]
    config = AgentLoopConfig(tool_execution="parallel")
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        execute_tool_calls_parallel(ctx, ASSISTANT, batch, config, None, None)
        walls.append(time.perf_counter() - start)
    print(f"parallel batch of {width} tools sleeping {sleep_s * 1000:.0f} ms ({repeats} runs):")
    print(f"  wall / sleep  median {statistics.median(walls) / sleep_s:.3f}  best {min(walls) / sleep_s:.3f}   goal <= 1.05")


def instant_llm(formatted: dict) -> AssistantMessage:
    return AssistantMessage([TextContent("ok")], stop_reason="stop")


def round_trips(agent: YiemAgent, count: int) -> list[float]:
    """Timings of run_agent -> take_response, in seconds."""
    timings = []
    for i in range(count):
        start = time.perf_counter()
        run_agent(agent, f"message {i}")
        take_response(agent, timeout=10)
        timings.append(time.perf_counter() - start)
    return timings


def bench_round_trip(count: int = 2000) -> None:
    """run_agent -> take_response with an instant LLM and no tools."""
    with YiemAgent(llm_call=instant_llm, agent_event_sink=None, system_prompt="") as agent:
        round_trips(agent, 200)  # warm up
        agent.state.messages.clear()
        timings = []
        for _ in range(count // 100):
            timings += round_trips(agent, 100)
            agent.wait_until_idle(10)
            agent.state.messages.clear()  # keep the history short: this measures the loop, not formatting
    timings.sort()
    print(f"round trip run_agent -> take_response, instant LLM, no tools ({count} messages):")
    print(f"  median {statistics.median(timings) * 1e3:.3f} ms  p90 {timings[int(len(timings) * 0.9)] * 1e3:.3f} ms   goal median <= 0.3 ms")


def bench_idle_cpu(seconds: float = 5.0) -> None:
    """CPU used by the whole process while an agent sits idle."""
    with YiemAgent(llm_call=instant_llm, agent_event_sink=None) as agent:
        agent.wait_until_idle(10)
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        time.sleep(seconds)
        cpu, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start
    print(f"idle agent over {wall:.1f} s: {cpu * 1e3:.2f} ms CPU = {cpu / wall * 100:.3f}% of a core   goal <= 0.5%")


def bench_history_overhead(history: int = 1000, count: int = 500) -> None:
    """Per-LLM-round cost of a long history: round trips with 1,000 messages vs an empty one."""
    messages = []
    for i in range(history // 2):
        messages.append(UserMessage([TextContent(f"question {i} " + "x" * 40)]))
        messages.append(AssistantMessage([TextContent(f"answer {i} " + "y" * 40)]))
    medians = {}
    for size, seed in (("empty", []), (f"{history} messages", messages)):
        with YiemAgent(llm_call=instant_llm, agent_event_sink=None, messages=list(seed)) as agent:
            timings = []
            for _ in range(count // 50):
                timings += round_trips(agent, 50)
                agent.wait_until_idle(10)
                agent.state.messages[len(seed):] = []  # back to the seeded size
            medians[size] = statistics.median(timings)
    empty, full = medians.values()
    print(f"per-round overhead of a {history}-message history (default prepare_context + format_msg_for_llm):")
    print(f"  empty {empty * 1e3:.3f} ms, {history} messages {full * 1e3:.3f} ms, added {(full - empty) * 1e3:.3f} ms   goal <= 1 ms")


SECTIONS: dict[str, Callable[[], None]] = {
    "pipeline": bench_pipeline,
    "parallel": bench_parallel,
    "round-trip": bench_round_trip,
    "idle": bench_idle_cpu,
    "history": bench_history_overhead,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("only", nargs="*", choices=[*SECTIONS, []], help="run only these sections")
    chosen = parser.parse_args().only or list(SECTIONS)
    for name in chosen:
        SECTIONS[name]()


if __name__ == "__main__":
    main()
