"""docs/failures.md: the cost of one hostile reply, and of the normaliser on ordinary replies (decision 15).

Prints each figure beside its goal; no asserts (``make bench``).
"""

from __future__ import annotations

import time
import tracemalloc

from yiemagent import AgentLoopConfig, AssistantMessage, TextContent, ToolStore, execute_tool_calls, register_all_tools
from yiemagent.formatting import prepare_context
from yiemagent.normalize import normalize_reply
from yiemagent.types import AgentState


def reply_with(name: str, arguments: dict) -> AssistantMessage:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return AssistantMessage([{"type": "tool_calls", "tool_calls": [call]}], stop_reason="tool_use")


def cost(reply: AssistantMessage) -> tuple[float, float, int]:
    """Seconds and peak MB to check the reply and answer its calls; characters of the error text."""
    store = ToolStore("bench")
    register_all_tools(store)
    ctx = prepare_context(AgentState(tools=store.tools))
    tracemalloc.start()
    started = time.perf_counter()
    checked = normalize_reply(reply)
    batch = execute_tool_calls(ctx, checked.message, checked.calls, AgentLoopConfig(), None, None)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return seconds, peak, len(batch.messages[0].content[0].text)


def main() -> None:
    name = "getWeather" + "x" * 10_000_000
    seconds, peak, chars = cost(reply_with(name, {}))
    print("unknown tool name of 10 MB (was 0.4-2 GB and seconds):")
    print(f"  {seconds * 1000:.1f} ms, peak {peak:.1f} MB beyond the reply, error text {chars} chars   goal: bounded (< 2.2 KB text)")
    seconds, peak, chars = cost(reply_with("getWeather", {"city": 5, "blob": "y" * 50_000_000}))
    print("argument error with 50 MB of arguments:")
    print(f"  {seconds * 1000:.1f} ms, peak {peak:.1f} MB beyond the reply, error text {chars} chars   goal: text < 2.2 KB")
    plain = reply_with("getWeather", {"city": "Paris", "units": "metric"})
    text = AssistantMessage([TextContent("an ordinary answer")], stop_reason="stop")
    for label, reply in (("a reply with one tool call", plain), ("a text reply", text)):
        n = 20_000
        started = time.perf_counter()
        for _ in range(n):
            normalize_reply(reply)
        per = (time.perf_counter() - started) / n * 1e6
        print(f"normalize_reply, {label}: {per:.1f} us   goal <= 100 us (a real LLM round takes 100s of ms)")


if __name__ == "__main__":
    main()
