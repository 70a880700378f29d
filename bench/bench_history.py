"""`make bench`: what a long history costs per LLM round and per turn (docs/performance.md).

Three figures, each beside its goal:

- the cost the default ``prepare_context`` + ``format_msg_for_llm`` add per LLM round with a
  1,000-message history built by real tool use (per turn: a question, a reply with one tool
  call with JSON-string arguments, its result, the answer), over an empty history; beside
  it the text-only figure ``bench.py`` has always printed, which hides the tool-call work;
- the same two hooks called directly, without the agent around them (where the time goes);
- the turn-cost ratio on the 300-turn workload: one agent, history kept, each turn a user
  message, one tool call, its result and a final answer, with an instant fake LLM; a turn
  at 291-300 against a turn at 1-10.

Nothing is asserted: a benchmark informs, the test suite proves behaviour. The machine may
be shared: every timing is the best (or the median) of several, and the ratio is taken
per turn index over several whole workloads (the least disturbed run of each turn).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from yiemagent import (
    AgentContext,
    AgentState,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    TextContent,
    ToolResultMessage,
    ToolStore,
    UserMessage,
    YiemAgent,
    format_msg_for_llm,
    prepare_context,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent._format_cache import History

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
RESULT = AgentToolResult([TextContent("Sunny, 22 C")])
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def lookup(tool_call_id: str, args: dict[str, Any], signal: Any, on_partial_result: Any) -> AgentToolResult:
    return RESULT


LOOKUP = AgentTool("lookup", "Lookup", "looks a city up", SCHEMA, lookup)


def tool_use_history(messages: int) -> list[Any]:
    """A history as real tool use builds it: question, tool call (JSON-string arguments), result, answer."""
    history: list[Any] = []
    for turn in range(messages // 4):
        at = START + timedelta(seconds=turn)
        call_id = f"call_{turn}"
        history.append(UserMessage([TextContent(f"What is the weather in city {turn}? " + "x" * 40)], at))
        history.append(
            AssistantMessage(
                [{"type": "tool_calls", "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": f'{{"city": "city {turn}"}}'}}
                ]}],
                stop_reason="tool_use",
                timestamp=at,
            )
        )
        history.append(ToolResultMessage(call_id, "lookup", [TextContent(f"Sunny in city {turn}, 22 C")], timestamp=at))
        history.append(AssistantMessage([TextContent(f"It is sunny in city {turn}. " + "y" * 40)], stop_reason="stop", timestamp=at))
    return history


def text_only_history(messages: int) -> list[Any]:
    """The history ``bench.py`` measures: questions and answers, no tool calls."""
    history: list[Any] = []
    for i in range(messages // 2):
        history.append(UserMessage([TextContent(f"question {i} " + "x" * 40)]))
        history.append(AssistantMessage([TextContent(f"answer {i} " + "y" * 40)]))
    return history


def instant_text(formatted: dict[str, Any]) -> AssistantMessage:
    return AssistantMessage([TextContent("ok")], stop_reason="stop")


def round_trip_medians(seeds: dict[str, list[Any]], count: int) -> dict[str, float]:
    """Median of run_agent -> take_response (one LLM round each) for an agent seeded with each history.

    The agents take turns in blocks of 50 round trips, so that a change in the machine's load
    falls on all of them alike; after each block an agent's history goes back to its seed.
    """
    agents = {name: YiemAgent(llm_call=instant_text, agent_event_sink=None, messages=list(seed)) for name, seed in seeds.items()}
    timings: dict[str, list[float]] = {name: [] for name in seeds}
    try:
        for _ in range(count // 50):
            for name, agent in agents.items():
                for i in range(50):
                    start = time.perf_counter()
                    run_agent(agent, f"message {i}")
                    take_response(agent, timeout=10)
                    timings[name].append(time.perf_counter() - start)
                agent.wait_until_idle(10)
                agent.state.messages[len(seeds[name]) :] = []
    finally:
        for agent in agents.values():
            shutdown(agent)
    return {name: statistics.median(values) for name, values in timings.items()}


def bench_round_overhead(history: int = 1000, count: int = 1000) -> None:
    """Per-LLM-round cost of a long history: round trips with ``history`` messages vs an empty one."""
    medians = round_trip_medians({"empty": [], "tool-use": tool_use_history(history), "text-only": text_only_history(history)}, count)
    empty = medians["empty"]
    print(f"per-round overhead of a {history}-message history (default prepare_context + format_msg_for_llm, median of {count} round trips):")
    print(f"  empty history                 {empty * 1e3:7.3f} ms")
    print(f"  tool-use history, added       {(medians['tool-use'] - empty) * 1e3:7.3f} ms   goal <= 0.3 ms")
    print(f"  text-only history, added      {(medians['text-only'] - empty) * 1e3:7.3f} ms   (the figure bench.py prints; its goal <= 1 ms)")


def best_of(repeats: int, run: Callable[[], Any]) -> float:
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    return min(timings)


def bench_hooks(history: int = 1000, repeats: int = 300) -> None:
    """The two default hooks called directly on a tool-use history: where a round's time goes.

    The state holds a ``History``, as an agent's does; the last line is the path taken
    when the formatter cannot know the history only grew (a plain list, a hook that
    changed ``ctx.messages``): each message's own cached wire, looked up one by one.
    """
    store = ToolStore("bench")
    register_tool(store, LOOKUP)
    state = AgentState("You are a bench.", None, store.tools, History(tool_use_history(history)))
    ctx = prepare_context(state, None)
    format_msg_for_llm(ctx, None)  # the first call of a history (fills the caches)
    prepare_s = best_of(repeats, lambda: prepare_context(state, None))
    format_s = best_of(repeats, lambda: format_msg_for_llm(ctx, None))
    plain_ctx = AgentContext(state.system_prompt, list(state.messages), state.tools)
    plain_s = best_of(repeats, lambda: format_msg_for_llm(plain_ctx, None))
    state.messages = History()
    empty_ctx = prepare_context(state, None)
    empty_s = best_of(repeats, lambda: format_msg_for_llm(empty_ctx, None))
    print(f"the default hooks called directly, {history}-message tool-use history (best of {repeats}):")
    print(f"  prepare_context               {prepare_s * 1e6:7.1f} us")
    print(f"  format_msg_for_llm            {format_s * 1e6:7.1f} us   (empty history: {empty_s * 1e6:.1f} us)")
    print(f"  the same from a plain list    {plain_s * 1e6:7.1f} us   (per-message caches: no lineage to go by)")


def tool_then_answer(formatted: dict[str, Any]) -> AssistantMessage:
    """The instant fake LLM of the workload: a tool call after a question, an answer after a result."""
    if formatted["messages"][-1]["role"] == "user":
        call = {"id": f"call_{time.perf_counter_ns()}", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Tokyo"}'}}
        return AssistantMessage([{"type": "tool_calls", "tool_calls": [call]}], stop_reason="tool_use")
    return AssistantMessage([TextContent("It is sunny in Tokyo.")], stop_reason="stop")


def turn_timings(turns: int) -> list[float]:
    """One workload: ``turns`` turns on one agent, history kept; the time of each turn."""
    store = ToolStore("bench-turns")
    register_tool(store, LOOKUP)
    timings = []
    with YiemAgent(llm_call=tool_then_answer, agent_event_sink=None, tool_store=store) as agent:
        for turn in range(turns):
            start = time.perf_counter()
            run_agent(agent, f"What is the weather in Tokyo? ({turn})")
            take_response(agent, timeout=10)
            timings.append(time.perf_counter() - start)
        assert len(agent.state.messages) == 4 * turns, "the workload must build 4 messages per turn"
    return timings


def bench_turns(turns: int = 300, workloads: int = 15) -> None:
    """The 300-turn workload: a turn at 291-300 against a turn at 1-10."""
    runs = [turn_timings(turns) for _ in range(workloads)]
    per_turn = [min(run[i] for run in runs) for i in range(turns)]  # each turn's least disturbed run
    first = statistics.median(per_turn[:10])
    last = statistics.median(per_turn[-10:])
    print(f"{turns}-turn workload (question, tool call, result, answer; instant fake LLM; best of {workloads} workloads per turn):")
    print(f"  turn 1-10 {first * 1e3:.3f} ms, turn {turns - 9}-{turns} {last * 1e3:.3f} ms, ratio {last / first:.2f}   goal <= 1.3")


SECTIONS: dict[str, Callable[[], None]] = {
    "overhead": bench_round_overhead,
    "hooks": bench_hooks,
    "turns": bench_turns,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("only", nargs="*", choices=[*SECTIONS, []], help="run only these sections")
    chosen = parser.parse_args().only or list(SECTIONS)
    for name in chosen:
        SECTIONS[name]()


if __name__ == "__main__":
    main()
