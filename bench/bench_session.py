"""`make bench`: the cost per message of SQLiteSession.append and of reading a session back, and of a session to a whole agent round trip.

No goal is set for append elsewhere; the goals printed are ours: a session must not be what
an agent waits on. With ``synchronous="FULL"`` (the default: each commit fsynced, so a
stored message survives a power cut) the cost is the disk's fsync; with ``"NORMAL"`` (a
killed process loses nothing, a power cut may lose the last commits) it is SQLite's own.
Reading back (docs/performance.md "Reading a session back"): ``messages()`` of a 400-message
tool-use session beside the floor, ``SELECT`` + ``json.loads`` of the same rows, timed turn
about in the same run, and the bytes a row takes per message. Nothing is asserted.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import instant_llm, round_trips  # noqa: E402

from yiemagent import AssistantMessage, LLMUsage, SQLiteSession, TextContent, ToolResultMessage, UserMessage, YiemAgent, shutdown

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


def tool_use_session(count: int) -> list[object]:
    """A conversation as an agent on OpenAIClient stores it: question, a reply calling a tool (its
    arguments the JSON text the server sent, usage and model set), the result, the answer."""
    messages: list[object] = []
    for turn in range(count // 4):
        call = {"id": f"call_{turn:04d}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": f"city {turn}"})}}
        messages += [
            UserMessage([TextContent(f"What is the weather in city {turn}?")]),
            AssistantMessage([{"type": "tool_calls", "tool_calls": [call]}], "openai-completions", "openai", "gpt-4o", LLMUsage(120 + turn, 18), "tool_use"),
            ToolResultMessage(call["id"], "get_weather", [TextContent(f"Sunny in city {turn}, 22 C")]),
            AssistantMessage([TextContent(f"It is sunny in city {turn}, 22 C.")], "openai-completions", "openai", "gpt-4o", LLMUsage(150 + turn, 12), "stop"),
        ]
    return messages


def openai_agents_items(count: int) -> list[dict[str, object]]:
    """The same conversation as openai-agents 0.24 stores it (Responses API input items, one row each)."""
    items: list[dict[str, object]] = []
    for turn in range(count // 4):
        call_id = f"call_{turn:04d}"
        items += [
            {"content": f"What is the weather in city {turn}?", "role": "user"},
            {"arguments": json.dumps({"city": f"city {turn}"}), "call_id": call_id, "name": "get_weather", "type": "function_call", "id": f"fc_{turn:024d}", "status": "completed"},
            {"call_id": call_id, "output": f"Sunny in city {turn}, 22 C", "type": "function_call_output"},
            {"id": f"msg_{turn:024d}", "content": [{"annotations": [], "text": f"It is sunny in city {turn}, 22 C.", "type": "output_text", "logprobs": []}],
             "role": "assistant", "status": "completed", "type": "message"},
        ]
    return items


def bench_read(directory: Path, count: int = 400, runs: int = 201) -> None:
    """``messages()`` of a ``count``-message session against SELECT + json.loads of its rows, turn about.

    Beside them, what openai-agents' ``SQLiteSession.get_items`` does with the same
    conversation in its own rows (``SELECT message_data`` + ``json.loads`` of each, dicts
    returned, nothing built or checked), without its ``asyncio.to_thread`` around it.
    """
    path = directory / "read.db"
    with SQLiteSession(path, "bench", synchronous="OFF") as session, closing(sqlite3.connect(path)) as conn:
        for message in tool_use_session(count):
            session.append(message)
        with conn:
            conn.execute("CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, message_data TEXT NOT NULL)")
            conn.executemany("INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)", [("bench", json.dumps(item)) for item in openai_agents_items(count)])
        query = "SELECT body FROM yiemagent_messages WHERE session_id = ? ORDER BY id"
        theirs = "SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id ASC"
        size = sum(len(body.encode("utf-8")) for (body,) in conn.execute(query, ("bench",)))
        their_size = sum(len(body.encode("utf-8")) for (body,) in conn.execute(theirs, ("bench",)))

        def floor() -> None:
            [json.loads(body) for (body,) in conn.execute(query, ("bench",))]

        def openai_agents() -> None:
            [json.loads(body) for (body,) in conn.execute(theirs, ("bench",))]

        timings: tuple[list[float], list[float], list[float]] = ([], [], [])
        for _ in range(runs):
            for read, spent in zip((session.messages, floor, openai_agents), timings):
                start = time.perf_counter()
                read()
                spent.append(time.perf_counter() - start)
    ours, bare, other = (statistics.median(spent) / count * 1e6 for spent in timings)
    print(f"reading back a {count}-message tool-use session, median of {runs} (the three timed turn about):")
    print(f"  SQLiteSession.messages() {ours:.2f} us per message, SELECT + json.loads of its rows {bare:.2f} us: {ours / bare:.2f}x")
    print(f"  openai-agents' reader of the same conversation (its rows, SELECT + json.loads) {other:.2f} us: ours {ours / other:.2f}x   goal <= 1x")
    print(f"  rows {size / count:.0f} bytes per message (openai-agents' {their_size / count:.0f})")


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
        bench_read(directory)
        bench_agent_round_trip(directory)


if __name__ == "__main__":
    main()
