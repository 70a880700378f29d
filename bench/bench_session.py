"""`make bench`: the cost per message of SQLiteSession.append, and of a session to a whole agent round trip (issue 13).

The issue sets no goal for append; the goals printed are ours: a session must not be what
an agent waits on. With ``synchronous="FULL"`` (the default: each commit fsynced, so a
stored message survives a power cut) the cost is the disk's fsync; with ``"NORMAL"`` (a
killed process loses nothing, a power cut may lose the last commits) it is SQLite's own.
Nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import instant_llm, round_trips  # noqa: E402

from yiemagent import SQLiteSession, TextContent, ToolResultMessage, UserMessage, YiemAgent, shutdown

MESSAGE = UserMessage([TextContent("What's the weather in Paris and the time in Europe/Paris? " * 2)])
RESULT = ToolResultMessage("call_1", "getWeather", [TextContent("Weather in Paris: Sunny, 22°C")], {"city": "Paris", "temperature_c": 22})


def per_append(directory: Path, synchronous: str, count: int) -> list[float]:
    """Seconds per append, one timing per message."""
    timings = []
    with SQLiteSession(directory / f"{synchronous}.db", "bench", synchronous=synchronous) as session:
        for i in range(count):
            message = MESSAGE if i % 2 else RESULT
            start = time.perf_counter()
            session.append(message)
            timings.append(time.perf_counter() - start)
    return timings


def bench_append(directory: Path, count: int = 500) -> None:
    print(f"SQLiteSession.append, {count} messages (a user message and a tool result alternately):")
    for synchronous, goal in (("FULL", "the disk's fsync"), ("NORMAL", "<= 0.2 ms")):
        timings = sorted(per_append(directory, synchronous, count))
        print(
            f"  synchronous={synchronous:<6} median {statistics.median(timings) * 1e3:.3f} ms"
            f"  p90 {timings[int(len(timings) * 0.9)] * 1e3:.3f} ms   goal {goal}"
        )


def bench_load(directory: Path, count: int = 1000) -> None:
    with SQLiteSession(directory / "load.db", "bench", synchronous="OFF") as session:
        for i in range(count):
            session.append(MESSAGE if i % 2 else RESULT)
        start = time.perf_counter()
        loaded = session.messages()
        took = time.perf_counter() - start
    print(f"SQLiteSession.messages() of {len(loaded)} messages: {took * 1e3:.1f} ms ({took / count * 1e6:.1f} us per message)   goal <= 50 us per message")


def bench_agent_round_trip(directory: Path, count: int = 300) -> None:
    """An instant LLM, no tools: each round trip stores two messages (the user's and the reply)."""
    results = {}
    for label, make_session in (
        ("no session", lambda: None),
        ("SQLiteSession NORMAL", lambda: SQLiteSession(directory / "agent-normal.db", "bench", synchronous="NORMAL")),
        ("SQLiteSession FULL", lambda: SQLiteSession(directory / "agent-full.db", "bench")),
    ):
        agent = YiemAgent(llm_call=instant_llm, agent_event_sink=None, session=make_session(), max_rounds=None)
        try:
            results[label] = statistics.median(round_trips(agent, count))
        finally:
            shutdown(agent, timeout=5)
    print(f"round trip run_agent -> take_response, instant LLM, no tools, {count} messages (2 stored per round trip):")
    for label, median in results.items():
        print(f"  {label:<22} median {median * 1e3:.3f} ms")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        directory = Path(tmp)
        bench_append(directory)
        bench_load(directory)
        bench_agent_round_trip(directory)


if __name__ == "__main__":
    main()
