"""``make demo`` / ``yiemagent demo``: an offline session that shows the whole tool lifecycle.

No network and no model are needed: ``OfflineLLM`` plans the calls, and the real
``getWeather`` asks a local stand-in for Open-Meteo (``_weather_service.py``, a real HTTP
server on 127.0.0.1) instead of the Internet. The session shows a tool round trip, a
parallel batch, an error fed back to the model and recovered from, ``listTools``, and a
terminating tool (``saveNote``, which really writes a file). The agent asks for the
built-in tools, as every agent must (decision 19).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Optional, TextIO

from ..agent import YiemAgent, run_agent, shutdown, take_response
from .console import ConsolePrinter
from ..errors import ToolError
from ..llm import OfflineLLM
from ..types import AbortSignal, AgentTool, AgentToolResult, TextContent, text_of
from ..tools import BUILTIN_TOOL_NAMES
from ..tools.get_weather import get_weather_tool
from ._weather_service import weather_stand_in

__all__ = ["run_demo", "save_note_tool"]

STEPS = [
    ("a tool round trip", "What time is it in Asia/Tokyo?"),
    ("a parallel batch (three calls at once)", "What's the weather in Tokyo and Paris, and what time is it?"),
    ("an error fed back to the model, which recovers", "What time is it in Mars/Olympus?"),
    ("listTools", "What tools do you have?"),
    ("a terminating tool: the run ends when it asks", 'call saveNote with {"text": "The demo ran every step."}'),
]


def save_note_tool(path: Path) -> AgentTool:
    """``saveNote``: append a note to ``path`` and end the run (spec §10 "Task completion")."""

    def save_note_execute(tool_call_id: str, args: dict[str, Any], signal: Optional[AbortSignal], on_partial_result: Any) -> AgentToolResult:
        try:
            with open(path, "a", encoding="utf-8") as notes:
                notes.write(args["text"] + "\n")
        except OSError as exc:
            raise ToolError(f"could not save the note to {path}: {exc}") from None
        return AgentToolResult([TextContent(f"Saved the note to {path}.")], {"path": str(path)}, None, True)

    return AgentTool(
        name="saveNote",
        label="Save Note",
        description="Append a note to the notes file and finish the task.",
        input_schema={"type": "object", "properties": {"text": {"type": "string", "minLength": 1}}, "required": ["text"]},
        execute=save_note_execute,
    )


def run_demo(out: TextIO, err: TextIO, *, quiet: bool = False, weather_url: Optional[str] = None) -> int:
    """Run the demo session; 0 when every step got its response.

    ``weather_url``: the Open-Meteo base URL (``.../v1``) ``getWeather`` asks; None starts the
    local stand-in for the session.
    """
    with contextlib.ExitStack() as stack:
        err.write("yiemagent demo: offline, with the keyword planner standing in for an LLM\n")
        if weather_url is None:
            weather_url = stack.enter_context(weather_stand_in())
            err.write(f"yiemagent demo: getWeather asks a local stand-in for Open-Meteo at {weather_url} (fixed weather)\n")
        return _run_steps(out, err, quiet, weather_url)


def _run_steps(out: TextIO, err: TextIO, quiet: bool, weather_url: str) -> int:
    notes = Path(tempfile.gettempdir()) / f"yiemagent-demo-notes-{os.getpid()}.txt"
    weather = get_weather_tool(geocoding_url=weather_url, forecast_url=weather_url)
    agent = YiemAgent(
        llm_call=OfflineLLM(),
        agent_event_sink=None if quiet else ConsolePrinter(err),
        system_prompt="You are the yiemagent demo.",
        parallel_tool_execute=True,
        builtin_tools=[name for name in BUILTIN_TOOL_NAMES if name != weather.name],  # the other three built-ins
        tools=[weather, save_note_tool(notes)],
    )
    try:
        for number, (what, question) in enumerate(STEPS, 1):
            out.write(f"\n[{number}/{len(STEPS)}] {what}\nyou> {question}\n")
            out.flush()
            run_agent(agent, question)
            response = take_response(agent, timeout=120)
            out.write(f"agent ({response.stop_reason})> {text_of(response.content)}\n")
            out.flush()
            if response.stop_reason == "error":
                err.write(f"demo step {number} failed: {response.error_message}\n")
                return 1
        calls = sum(1 for m in agent.history() if m.role == "tool")
        out.write(f"\nDone: {len(agent.history())} messages in the history, {calls} tool results, note saved in {notes}.\n")
        return 0
    finally:
        shutdown(agent, timeout=10)
