"""W1: one tool call per LLM round through an agent, CPU µs per call, beside the plain-loop floor.

docs/performance.md "W1: a tool call per round". An agent (``YiemAgent``) with one registered
tool whose ``input_schema`` is a small JSON Schema, and a scripted ``llm_call`` that answers
each round with one tool call (its arguments JSON text, as a server sends them) for N rounds,
then a final text. Each run is ``run_agent`` -> ``take_response``; the figure is the process's
CPU time (``time.process_time``: every thread, the agent's loop and run threads included)
per tool call. The floor, timed turn about with the agent in the same run, is a plain Python
loop doing the least the same work needs: take the scripted reply, ``json.loads`` its
arguments, call the function, append the reply and the result to a list.

``python bench/bench_w1.py`` prints the figures; ``--profile`` adds a cProfile of the agent's
runs (the functions by their own time, and by cumulative time). Nothing is asserted: a
benchmark informs, the test suite proves behaviour.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tree this file is in, not an installed yiemagent

from yiemagent import AgentTool, AgentToolResult, AssistantMessage, TextContent, YiemAgent, run_agent, take_response  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "units": {"type": "string", "enum": ["metric", "imperial"]}},
    "required": ["city"],
    "additionalProperties": False,
}
ARGUMENTS = '{"city": "Tokyo", "units": "metric"}'
RESULT = AgentToolResult([TextContent("sunny, 21 C")])


def get_weather(tool_call_id: str, args: dict[str, Any], signal: Any, on_partial_result: Any) -> AgentToolResult:
    return RESULT


TOOL = AgentTool("get_weather", "Weather", "The weather in a city.", SCHEMA, get_weather)


class ScriptedLLM:
    """Answers ``calls`` rounds with one tool call each, then a final text; ``reset`` starts again."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.count = 0

    def reset(self) -> None:
        self.count = 0

    def __call__(self, formatted: dict[str, Any]) -> AssistantMessage:
        self.count += 1
        if self.count > self.calls:
            return AssistantMessage([TextContent("done")], stop_reason="stop")
        call = {"id": f"call_{self.count}", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}}
        return AssistantMessage([{"type": "tool_calls", "tool_calls": [call]}], stop_reason="tool_calls")


def agent_run(agent: YiemAgent, llm: ScriptedLLM) -> float:
    """CPU seconds of one run of ``llm.calls`` tool calls (the history cleared first: W1 is not about its length)."""
    agent.state.messages.clear()
    llm.reset()
    start = time.process_time()
    run_agent(agent, "What is the weather in Tokyo?")
    response = take_response(agent, timeout=60)
    cpu = time.process_time() - start
    if response.stop_reason != "stop" or llm.count != llm.calls + 1:
        raise RuntimeError(f"the run ended {response.stop_reason!r} after {llm.count} rounds: {response.error_message}")
    return cpu


def floor_run(calls: int) -> float:
    """CPU seconds of the plain loop: scripted reply, json.loads of the arguments, the call, appended to a list."""
    llm = ScriptedLLM(calls)
    history: list[Any] = []
    start = time.process_time()
    while True:
        reply = llm({})
        history.append(reply)
        block = reply.content[0]
        if not isinstance(block, dict):
            break
        for call in block["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            history.append(get_weather(call["id"], args, None, None))
    return time.process_time() - start


def measure(runs: int, calls: int) -> tuple[list[float], list[float]]:
    """µs per call of the agent and of the floor, ``runs`` of each, turn about."""
    llm = ScriptedLLM(calls)
    agent_us, floor_us = [], []
    with YiemAgent(llm_call=llm, tools=[TOOL], agent_event_sink=None, system_prompt="", max_rounds=None) as agent:
        for _ in range(3):  # warm up: caches, the thread pool, the validator
            agent_run(agent, llm)
            floor_run(calls)
        for _ in range(runs):
            agent_us.append(agent_run(agent, llm) / calls * 1e6)
            floor_us.append(floor_run(calls) / calls * 1e6)
    return agent_us, floor_us


def profile(runs: int, calls: int, top: int) -> None:
    """cProfile of ``runs`` agent runs, in every thread the agent starts (one profiler per thread, merged)."""
    import threading

    profilers: list[cProfile.Profile] = []

    def start_in_thread(*_: Any) -> None:  # the first event of a new thread: give it a profiler of its own
        profiler = cProfile.Profile()
        profilers.append(profiler)
        profiler.enable()

    llm = ScriptedLLM(calls)
    threading.setprofile(start_in_thread)
    try:
        with YiemAgent(llm_call=llm, tools=[TOOL], agent_event_sink=None, system_prompt="", max_rounds=None) as agent:
            for _ in range(runs):
                agent_run(agent, llm)
    finally:
        threading.setprofile(None)
    stats = pstats.Stats(*profilers)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def show(label: str, values: list[float]) -> str:
    return f"{label} {statistics.median(values):6.1f} µs [{min(values):.1f}-{max(values):.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the agent's runs")
    parser.add_argument("--top", type=int, default=40)
    options = parser.parse_args()
    agent_us, floor_us = measure(options.runs, options.calls)
    ratio = statistics.median(agent_us) / statistics.median(floor_us)
    print(f"W1: one tool call per LLM round, CPU per call ({options.runs} runs of {options.calls} calls; median [min-max]):")
    print(f"  {show('agent', agent_us)}")
    print(f"  {show('floor', floor_us)}   (scripted reply, json.loads, the call, a list append)")
    print(f"  agent / floor {ratio:.1f}x   goal <= 4.5x")
    if options.profile:
        profile(options.runs, options.calls, options.top)


if __name__ == "__main__":
    main()
