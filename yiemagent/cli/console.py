"""A console event sink: shows LLM rounds, each tool call, and a streamed answer live, as an agent CLI does."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from typing import Any, Optional, TextIO

from ..events import (
    AgentRunEndEvent,
    LLMCallEndEvent,
    LLMCallStartEvent,
    LLMDeltaEvent,
    ToolExecEndEvent,
    ToolExecStartEvent,
    ToolExecUpdateEvent,
)
from ..types import AssistantMessage, text_of

__all__ = ["ConsolePrinter", "terminal_safe"]

_COLORS = {"dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36", "bold": "1"}


# C0 controls but tab and newline, DEL, and C1 controls: a terminal obeys them (ESC starts
# sequences that clear the screen, rewrite the title, set the clipboard (OSC 52); CR overwrites a line)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character a terminal would act on shown as ``\\xNN``.

    What a model, a tool or a server wrote is shown, never obeyed: an ESC or a CR in a
    reply cannot clear the screen, hide a line or write the user's clipboard.
    """
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = " ".join(terminal_safe(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ConsolePrinter:
    """An event sink that writes one line per event to ``stream`` (stderr by default).

    Tool calls: ``▸ getWeather {"city": "Tokyo"}``, progress ``· getWeather …``, then
    ``✓ getWeather 0.41s  Weather in Tokyo: …`` or ``✗ … (error)``. LLM rounds:
    ``llm round 1 … 0.32s, 120→30 tokens``. Colours when the stream is a terminal. A name,
    the arguments (as JSON) and a result are each shown on one line, cut to 160 characters.

    A streamed reply (docs/streaming.md) is shown as it is written: text deltas go to ``answer``
    (default: ``stream``; the CLI gives stdout), thinking deltas to ``stream``, dimmed,
    after a ``thinking:`` mark. A line left open by deltas is ended before anything else
    is written, and at the end of the round. ``streamed(response)`` tells whether a
    response's text was already shown that way, so that a caller does not print it twice.
    With ``progress=False`` only the streamed text and thinking are shown.

    Thread safety: the agent calls sinks one at a time; ``_lock`` also guards the start
    times, the open line and the streamed rounds, so a printer may be shared by several
    agents (``streamed`` then knows the last streamed reply only).
    """

    def __init__(self, stream: Optional[TextIO] = None, color: Optional[bool] = None, *, answer: Optional[TextIO] = None, progress: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.answer = answer or self.stream
        self.color = self.stream.isatty() if color is None else color
        self.progress = progress
        self._lock = threading.Lock()  # guards _started, _open, _text_rounds, _last_streamed and writes
        self._started: dict[str, float] = {}
        self._open: Optional[tuple[TextIO, str]] = None  # (stream, kind) of a line deltas left unended
        self._text_rounds: set[tuple[int, int]] = set()  # (run_id, round) whose text deltas were shown
        self._last_streamed: Optional[AssistantMessage] = None

    def _paint(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(_COLORS[s] for s in styles)
        return f"\033[{codes}m{text}\033[0m"

    def _end_open_line(self) -> None:
        if self._open is not None:
            self._open[0].write("\n")
            self._open[0].flush()
            self._open = None

    def _write(self, line: str) -> None:
        self._end_open_line()
        self.stream.write(line + "\n")
        self.stream.flush()

    def streamed(self, response: AssistantMessage) -> bool:
        """True when ``response`` is a reply whose text this printer showed as it streamed."""
        with self._lock:
            return response is self._last_streamed

    def __call__(self, event: Any) -> None:
        with self._lock:
            if isinstance(event, LLMDeltaEvent):
                self._delta(event)
                return
            if isinstance(event, LLMCallEndEvent):
                self._end_open_line()
                if (event.run_id, event.round) in self._text_rounds:
                    self._text_rounds.discard((event.run_id, event.round))
                    self._last_streamed = event.response
            line = self._line(event) if self.progress else None
            if line is not None:
                self._write(line)

    def _delta(self, event: LLMDeltaEvent) -> None:
        target = self.answer if event.kind == "text" else self.stream
        if self._open is not None and self._open != (target, event.kind):
            self._end_open_line()
        if self._open is None and event.kind == "thinking":
            target.write(self._paint("  thinking: ", "dim"))
        text = terminal_safe(event.text) if _is_terminal(target) else event.text  # a file or a pipe gets the text as written
        target.write(self._paint(text, "dim") if event.kind == "thinking" else text)
        target.flush()
        self._open = None if event.text.endswith("\n") else (target, event.kind)
        if event.kind == "text":
            self._text_rounds.add((event.run_id, event.round))

    def _line(self, event: Any) -> Optional[str]:
        if isinstance(event, LLMCallStartEvent):
            return self._paint(f"  llm round {event.round}: thinking over {event.message_count} messages…", "dim")
        if isinstance(event, LLMCallEndEvent):
            if event.error is not None:
                return self._paint(f"  llm round {event.round} failed after {event.duration_s:.2f}s: {terminal_safe(str(event.error))}", "red")
            usage = event.usage
            tokens = f", {usage.input_tokens}→{usage.output_tokens} tokens" if usage and (usage.input_tokens or usage.output_tokens) else ""
            return self._paint(f"  llm round {event.round} done in {event.duration_s:.2f}s{tokens}", "dim")
        if isinstance(event, ToolExecStartEvent):
            self._started[event.tool_call_id] = time.monotonic()
            return "  " + self._paint(f"▸ {_short(event.tool_name)}", "cyan", "bold") + " " + _short(event.arguments)
        if isinstance(event, ToolExecUpdateEvent):
            return self._paint(f"    · {_short(event.tool_name)}: {_short(event.partial_result)}", "dim")
        if isinstance(event, ToolExecEndEvent):
            started = self._started.pop(event.tool_call_id, None)
            elapsed = f" {time.monotonic() - started:.2f}s" if started is not None else ""
            text, name = _short(text_of(event.result.content)), _short(event.tool_name)
            if event.is_error:
                return "  " + self._paint(f"✗ {name}{elapsed} (error)", "red", "bold") + " " + text
            return "  " + self._paint(f"✓ {name}{elapsed}", "green", "bold") + " " + text
        if isinstance(event, AgentRunEndEvent) and event.response.stop_reason in ("error", "aborted"):
            return self._paint(f"  run {event.run_id} ended: {event.response.stop_reason}: {terminal_safe(str(event.response.error_message))}", "yellow")
        return None


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
