"""`make bench`: server-sent events parse in linear time (docs/conformance.md "The LLM clients: decisions 13 and 14"); a reply's size is capped.

The old reader rebuilt its line buffer on every 512-byte chunk: one 1 MB event took
0.65 s, 4 MB 11 s, 100 MB never ended. Here one 10 MB event and a 10,000-event stream
are parsed, fed in 512-byte chunks as a slow network would deliver them, and compared
with 1 MB and 1,000 events: linear time means about 10 x. Nothing is asserted.

Then the cost of a 100 MiB stream (docs/failures.md "A reply too large"): a real
``http.server`` on 127.0.0.1 streams 100 MiB of text deltas to a client in a child
process, once with ``max_reply_bytes=None`` (no cap, as before the cap existed) and once
with the default (64 MiB); the child reports its peak resident memory above its
resident memory before the call (Linux ``VmHWM - VmRSS``) and the time the call took.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from localserver import StreamingServer  # noqa: E402  the tests' real http.server

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


STREAM_MIB = 100


def _stream_events(provider: str, text: str) -> tuple[bytes, bytes, bytes]:
    """(head, one delta event carrying ``text``, tail) of a text stream in the provider's protocol."""
    if provider == "openai":
        delta = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        tail = {"id": "chatcmpl-x", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        return b"", f"data: {json.dumps(delta)}\n\n".encode(), f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode()
    events = [{"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}}, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
    end = [{"type": "content_block_stop", "index": 0}, {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}, {"type": "message_stop"}]
    named = lambda e: f"event: {e['type']}\ndata: {json.dumps(e)}\n\n"  # noqa: E731
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    return "".join(map(named, events)).encode(), named(delta).encode(), "".join(map(named, end)).encode()


def _serve(provider: str, text: str) -> StreamingServer:
    head, delta, tail = _stream_events(provider, text)
    batch = delta * max(1, 65536 // len(delta))
    return StreamingServer(head, batch, STREAM_MIB * 1024 * 1024 // len(batch), tail)


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _client_child(url: str, provider: str, cap: str) -> None:
    """In the child: one streamed call; prints {peak_mib, seconds, outcome} as JSON."""
    from yiemagent import LLMError
    from yiemagent.llm import AnthropicClient, OpenAIClient

    kw = {} if cap == "default" else {"max_reply_bytes": None}
    client = OpenAIClient(url, "m", stream=True, max_retries=0, **kw) if provider == "openai" else AnthropicClient("m", "k", base_url=url, stream=True, max_retries=0, **kw)
    before = _kib("VmRSS")
    started = time.perf_counter()
    try:
        message = client({"messages": [{"role": "user", "content": "hi"}]})
        outcome = f"read, {len(message.content[0].text) / 2**20:.0f} MiB of text"
    except LLMError as exc:
        outcome = "LLMError: " + str(exc).split(": ", 1)[-1][:70]
    seconds = time.perf_counter() - started
    print(json.dumps({"peak_mib": (_kib("VmHWM") - before) / 1024, "seconds": seconds, "outcome": outcome}))


# small deltas as real streams send them (~150 bytes an event); large ones, mostly text, as a hostile server would
DELTAS = (("20-character deltas", "a few words of text "), ("16 KiB deltas", "x" * 16384))


def stream_cost() -> None:
    print(f"\na {STREAM_MIB} MiB stream of text deltas, read by a client in a child process (peak resident memory above the start)")
    for delta_label, text in DELTAS:
        for provider in ("openai", "anthropic"):
            with _serve(provider, text) as server:
                for cap, label in (("none", "max_reply_bytes=None (before)"), ("default", "64 MiB, the default (after)  ")):
                    out = subprocess.run([sys.executable, __file__, "--client", server.url, provider, cap], capture_output=True, text=True, timeout=600)
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    print(f"  {delta_label:19s} {provider:9s} {label}: peak {result['peak_mib']:5.0f} MiB, {result['seconds']:5.2f} s, {result['outcome']}")


def main() -> None:
    print("SSE parser, fed in 512-byte chunks")
    small, large = one_event(1), one_event(10)
    report("one event,   1 MB vs 10 MB       ", best_of(5, lambda: feed(small, SSEParser(None))), best_of(5, lambda: feed(large, SSEParser(None))))
    few, lots = many_events(1000), many_events(10000)
    report("events,      1,000 vs 10,000     ", best_of(5, lambda: feed(few, SSEParser())), best_of(5, lambda: feed(lots, SSEParser())))
    report("parse+JSON+accumulate, 1k vs 10k", best_of(5, lambda: accumulate(few)), best_of(5, lambda: accumulate(lots)))
    stream_cost()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        _client_child(*sys.argv[2:5])
    else:
        main()
