"""W1: one tool call per LLM round through an agent, CPU µs per call, beside the plain-loop floor.

docs/performance.md "W1: a tool call per round". An agent (``YiemAgent``) with one registered
tool whose ``input_schema`` is a small JSON Schema, and a scripted ``llm_call`` that answers
each round with one tool call (its arguments JSON text, as a server sends them) for N rounds,
then a final text. Each run is ``run_agent`` -> ``take_response``; the figure is the process's
CPU time (``time.process_time``: every thread, the agent's loop and run threads included)
per tool call. The floor, timed turn about with the agent in the same run, is a plain Python
loop doing the least the same work needs: take the scripted reply, ``json.loads`` its
arguments, call the function, append the reply and the result to a list.

The third figure, "leaves", splits the agent's distance from the floor in two: the round's
own steps, each the library's function for it (step 2's ``prepare_context``, step 3's
``format_msg_for_llm`` and ``relay_deltas`` around the call, ``normalize_reply``, the call's
schema check, its copy of the arguments, its ``RunContext`` scope, ``call_tool`` and the result
message), called in one loop of this file with nothing around them: no run, batch, events,
input channel or session. The agent minus the leaves is what the run's layers cost; the
leaves minus the floor, what the steps themselves cost (docs/performance.md "W1").

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

from yiemagent import AgentTool, AgentToolResult, AbortSignal, AssistantMessage, TextContent, UserMessage, YiemAgent, run_agent, take_response  # noqa: E402
from yiemagent._bounds import json_copy  # noqa: E402
from yiemagent.events import EventEmitter, relay_deltas  # noqa: E402
from yiemagent.formatting import format_msg_for_llm, prepare_context  # noqa: E402
from yiemagent.normalize import normalize_reply, normalize_tool_result  # noqa: E402
from yiemagent.pipeline import call_tool, schema_admits, tool_result_message  # noqa: E402
from yiemagent.types import enter_call_context, leave_run_context  # noqa: E402

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


def leaves_run(agent: YiemAgent, llm: ScriptedLLM) -> float:
    """CPU seconds of the round's own steps, each the library's function, in one loop without the run around them."""
    state, signal, emit = agent.state, AbortSignal(), EventEmitter(None)
    state.messages.clear()
    llm.reset()
    start = time.process_time()
    state.messages.append(UserMessage([TextContent("What is the weather in Tokyo?")]))
    while True:
        formatted = format_msg_for_llm(prepare_context(state))  # steps 2 and 3
        with relay_deltas(emit, 1, 1, signal):  # the round's stream target, made if the call asks (it does not)
            raw = llm(formatted)
        reply, calls, _ = normalize_reply(raw)  # steps 4 and 5
        state.messages.append(reply)
        if not calls:
            break
        for call in calls:  # step 6: the plain call's PREPARE, EXECUTE, FINALIZE
            tool = state.tools[call.name]
            if not schema_admits(call.arguments, tool.input_schema):
                raise RuntimeError(f"the schema refused {call.arguments!r}")
            scope = enter_call_context(call.id)
            try:
                result, is_error = call_tool(tool, call, json_copy(call.arguments), signal, emit)
            finally:
                if scope is not None:
                    leave_run_context(scope)
            state.messages.append(normalize_tool_result(tool_result_message(call, result, is_error)))
    cpu = time.process_time() - start
    if llm.count != llm.calls + 1:
        raise RuntimeError(f"the leaves' loop ended after {llm.count} rounds")
    return cpu


def measure(runs: int, calls: int) -> tuple[list[float], list[float], list[float]]:
    """µs per call of the agent, of the floor and of the leaves, ``runs`` of each, turn about."""
    llm = ScriptedLLM(calls)
    agent_us, floor_us, leaves_us = [], [], []
    with YiemAgent(llm_call=llm, tools=[TOOL], agent_event_sink=None, system_prompt="", max_rounds=None) as agent:
        for _ in range(3):  # warm up: caches, the thread pool, the validator
            agent_run(agent, llm)
            floor_run(calls)
            leaves_run(agent, llm)
        for _ in range(runs):
            agent_us.append(agent_run(agent, llm) / calls * 1e6)
            floor_us.append(floor_run(calls) / calls * 1e6)
            leaves_us.append(leaves_run(agent, llm) / calls * 1e6)
    return agent_us, floor_us, leaves_us


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
    agent_us, floor_us, leaves_us = measure(options.runs, options.calls)
    floor = statistics.median(floor_us)
    print(f"W1: one tool call per LLM round, CPU per call ({options.runs} runs of {options.calls} calls; median [min-max]):")
    print(f"  {show('agent', agent_us)}")
    print(f"  {show('floor', floor_us)}   (scripted reply, json.loads, the call, a list append)")
    print(f"  {show('leaves', leaves_us)}   (the round's steps, the library's functions, without the run around them)")
    print(f"  agent / floor {statistics.median(agent_us) / floor:.1f}x   goal <= 4.5x;   leaves / floor {statistics.median(leaves_us) / floor:.1f}x")
    # bursts of load on a shared machine move a run's median by half; each loop's fastest run is the steadier figure
    fastest = min(floor_us)
    print(f"  fastest runs: agent / floor {min(agent_us) / fastest:.1f}x,   leaves / floor {min(leaves_us) / fastest:.1f}x")
    if options.profile:
        profile(options.runs, options.calls, options.top)


if __name__ == "__main__":
    main()
