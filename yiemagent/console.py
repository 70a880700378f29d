"""A console event sink: shows LLM rounds and each tool call live, as an agent CLI does."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Optional, TextIO

from .events import (
    AgentRunEndEvent,
    LLMCallEndEvent,
    LLMCallStartEvent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
)
from .messages import text_of

__all__ = ["ConsolePrinter"]

_COLORS = {"dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36", "bold": "1"}


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ConsolePrinter:
    """An event sink that writes one line per event to ``stream`` (stderr by default).

    Tool calls: ``▸ getWeather {"city": "Tokyo"}``, progress ``· getWeather …``, then
    ``✓ getWeather 0.41s  Weather in Tokyo: …`` or ``✗ … (error)``. LLM rounds:
    ``llm round 1 … 0.32s, 120→30 tokens``. Colours when the stream is a terminal.

    Thread safety: the agent calls sinks one at a time; ``_lock`` also guards the start
    times, so a printer may be shared by several agents.
    """

    def __init__(self, stream: Optional[TextIO] = None, color: Optional[bool] = None) -> None:
        self.stream = stream or sys.stderr
        self.color = self.stream.isatty() if color is None else color
        self._lock = threading.Lock()  # guards _started and writes
        self._started: dict[str, float] = {}

    def _paint(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(_COLORS[s] for s in styles)
        return f"\033[{codes}m{text}\033[0m"

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def __call__(self, event: Any) -> None:
        with self._lock:
            line = self._line(event)
            if line is not None:
                self._write(line)

    def _line(self, event: Any) -> Optional[str]:
        if isinstance(event, LLMCallStartEvent):
            return self._paint(f"  llm round {event.round}: thinking over {event.message_count} messages…", "dim")
        if isinstance(event, LLMCallEndEvent):
            if event.error is not None:
                return self._paint(f"  llm round {event.round} failed after {event.duration_s:.2f}s: {event.error}", "red")
            usage = event.usage
            tokens = f", {usage.input_tokens}→{usage.output_tokens} tokens" if usage and (usage.input_tokens or usage.output_tokens) else ""
            return self._paint(f"  llm round {event.round} done in {event.duration_s:.2f}s{tokens}", "dim")
        if isinstance(event, ToolExecStartEvent):
            self._started[event.tool_call_id] = time.monotonic()
            return "  " + self._paint(f"▸ {event.tool_name}", "cyan", "bold") + " " + _short(event.arguments)
        if isinstance(event, ToolExecUpdateEvent):
            return self._paint(f"    · {event.tool_name}: {_short(event.partial_result)}", "dim")
        if isinstance(event, ToolExecEndEvent):
            started = self._started.pop(event.tool_call_id, None)
            elapsed = f" {time.monotonic() - started:.2f}s" if started is not None else ""
            text = _short(text_of(event.result.content))
            if event.is_error:
                return "  " + self._paint(f"✗ {event.tool_name}{elapsed} (error)", "red", "bold") + " " + text
            return "  " + self._paint(f"✓ {event.tool_name}{elapsed}", "green", "bold") + " " + text
        if isinstance(event, AgentRunEndEvent) and event.response.stop_reason in ("error", "aborted"):
            return self._paint(f"  run {event.run_id} ended: {event.response.stop_reason}: {event.response.error_message}", "yellow")
        return None
