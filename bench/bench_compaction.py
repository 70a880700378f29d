"""Compaction on the per-round path: what the step costs a round of a 10,000-message history (docs/performance.md "Compaction").

The compaction step (``context/compaction.py``) estimates each request. Its estimate is
incremental: running sums over the history, grown by the messages new since the last
round. This measures, for a history of 10,000 messages (2,500 tool-use turns: a question,
a reply with one call, its result, the answer) growing by one turn per round, the step's
time per round:

- "incremental": one compactor over the growing history, as an agent runs it;
- "rescan": a new compactor every round, which estimates the whole history again (what the
  step would cost without its running sums);
- with a window the whole history fits in (the step hands back the context as it is), and
  with a window of 32,000 tokens that ``TrimHistory`` cuts to (the request is a new list of
  the messages kept).

``python bench/bench_compaction.py`` prints the figures (medians over the rounds). Nothing
is asserted: a benchmark informs, the test suite proves behaviour.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tree this file is in, not an installed yiemagent

from yiemagent import AssistantMessage, LLMUsage, TextContent, ToolResultMessage, TrimHistory, UserMessage  # noqa: E402
from yiemagent._format_cache import History, HistorySnapshot  # noqa: E402
from yiemagent.context import Compactor  # noqa: E402
from yiemagent.types import AgentContext  # noqa: E402

TURNS = 2500
ROUNDS = 200


def turn(i: int) -> list[Any]:
    call = {"type": "tool_calls", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}]}
    return [
        UserMessage([TextContent(f"What is the weather in Tokyo, question {i}?")]),
        AssistantMessage([call], stop_reason="tool_use"),
        ToolResultMessage(f"c{i}", "get_weather", [TextContent("sunny, 21 C, a light breeze from the sea")]),
        AssistantMessage([TextContent(f"It is sunny and 21 C in Tokyo ({i}).")], stop_reason="stop"),
    ]


class Host:
    def __init__(self) -> None:
        self.llm_call = None

    def append(self, message: Any) -> None:  # TrimHistory stores nothing
        raise AssertionError("not called")


class Run:
    usage = LLMUsage()


def measure(window: int, fresh: bool) -> float:
    history = History()
    for i in range(TURNS):
        history.extend(turn(i))
    compactor = Compactor(TrimHistory(16_000), window)
    host, run = Host(), Run()
    compactor.compact(host, run, AgentContext("", HistorySnapshot(history), {}), False)  # the first round reads the whole history
    times = []
    for i in range(ROUNDS):
        history.extend(turn(TURNS + i))
        ctx = AgentContext("", HistorySnapshot(history), {})
        if fresh:
            compactor = Compactor(TrimHistory(16_000), window)
        started = time.perf_counter()
        compactor.compact(host, run, ctx, False)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    print(f"compaction step per round, a history of {TURNS * 4:,} messages growing by 4 a round (median of {ROUNDS} rounds):")
    for label, window in (("all fits (window 10M tokens)", 10_000_000), ("trimmed (window 32,000 tokens)", 32_000)):
        incremental, rescan = measure(window, False), measure(window, True)
        print(f"  {label:32s} incremental {incremental:9.1f} µs   rescan {rescan:9.1f} µs   ({rescan / incremental:.0f}x)")


if __name__ == "__main__":
    main()
