"""`make bench`: server-sent events parse in linear time (issue 10, class 2).

The old reader rebuilt its line buffer on every 512-byte chunk: one 1 MB event took
0.65 s, 4 MB 11 s, 100 MB never ended. Here one 10 MB event and a 10,000-event stream
are parsed, fed in 512-byte chunks as a slow network would deliver them, and compared
with 1 MB and 1,000 events: linear time means about 10 x. Nothing is asserted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from yiemagent.llm._sse import SSEParser
from yiemagent.llm.openai import OpenAIStream

CHUNK = 512


def best_of(repeats: int, run: Callable[[], None]) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        timings.append(time.perf_counter() - started)
    return min(timings)


def feed(body: bytes, parser: SSEParser) -> int:
    count = 0
    for start in range(0, len(body), CHUNK):
        count += len(parser.feed(body[start : start + CHUNK]))
    return count + len(parser.close())


def one_event(megabytes: int) -> bytes:
    text = "é—x" * (megabytes * 1024 * 1024 // 6)  # multi-byte characters, cut across chunks
    return b"data: " + json.dumps({"choices": [{"delta": {"content": text}}]}, ensure_ascii=False).encode() + b"\n\n"


def many_events(count: int) -> bytes:
    event = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"content": "token "}, "finish_reason": None}]}
    return ("".join(f"data: {json.dumps(event)}\n\n" for _ in range(count)) + "data: [DONE]\n\n").encode()


def accumulate(body: bytes) -> None:
    """The client's path without the socket: SSE parse, JSON, the OpenAI accumulator."""
    parser, stream = SSEParser(), OpenAIStream()
    for start in range(0, len(body), CHUNK):
        for event in parser.feed(body[start : start + CHUNK]):
            if event.data != "[DONE]":
                stream.add(json.loads(event.data))
    stream.finish(done=True)


def report(label: str, small: float, large: float) -> None:
    print(f"{label}: {small * 1000:8.1f} ms -> {large * 1000:8.1f} ms, ratio {large / small:5.1f} x   (goal: about 10 x, linear)")


def main() -> None:
    print("SSE parser (issue 10), fed in 512-byte chunks")
    small, large = one_event(1), one_event(10)
    report("one event,   1 MB vs 10 MB       ", best_of(5, lambda: feed(small, SSEParser(None))), best_of(5, lambda: feed(large, SSEParser(None))))
    few, lots = many_events(1000), many_events(10000)
    report("events,      1,000 vs 10,000     ", best_of(5, lambda: feed(few, SSEParser())), best_of(5, lambda: feed(lots, SSEParser())))
    report("parse+JSON+accumulate, 1k vs 10k", best_of(5, lambda: accumulate(few)), best_of(5, lambda: accumulate(lots)))


if __name__ == "__main__":
    main()
