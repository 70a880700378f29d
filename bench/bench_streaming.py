"""`make bench` (docs/streaming.md): what streaming costs the agent per delta.

A streamed reply reaches the sink one ``LLMDeltaEvent`` per fragment, through the relay
and the agent's serialising emitter. The goal: the agent's share per delta stays far
below the gap between two tokens of a fast server (~5 ms at 200 tokens/s), so that the
display never lags the model. Printed beside the goal; nothing asserted.
"""

from __future__ import annotations

import io
import time

from yiemagent import AssistantMessage, TextContent, YiemAgent, run_agent, take_response
from yiemagent.cli.console import ConsolePrinter
from yiemagent.events import emit_delta

DELTAS = 20000


def per_delta_us(sink) -> float:
    """Microseconds per delta for one run whose llm_call emits DELTAS one-word deltas."""
    took = []

    def llm_call(formatted):
        started = time.perf_counter()
        for _ in range(DELTAS):
            emit_delta("text", "word ")
        took.append(time.perf_counter() - started)
        return AssistantMessage([TextContent("word " * DELTAS)], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, agent_event_sink=sink) as agent:
        run_agent(agent, "go")
        take_response(agent, timeout=120)
    return took[0] / DELTAS * 1e6


def main() -> None:
    print("streaming: the agent's cost per delta, goal < 50 µs (a token every ~5 ms at 200 tokens/s)")
    print(f"  no sink:                  {per_delta_us(None):7.2f} µs per delta")
    print(f"  a sink that keeps events: {per_delta_us([].append):7.2f} µs per delta")
    out = io.StringIO()
    print(f"  the console printer:      {per_delta_us(ConsolePrinter(io.StringIO(), color=False, answer=out)):7.2f} µs per delta")


if __name__ == "__main__":
    main()
